"""The order of the analyzer list changes nothing: every permutation of ``ANALYZERS`` gives the
same snapshots, steps and report bytes.

The image makes the analyzers depend on each other in one state: the native analyzer joins
libraries to a wheel's RECORD (Python) and to dpkg's file lists (dpkg), and its loader
resolutions need both; Python, native and conda each contribute to the same state (an
unreadable dist-info, a truncated shared object, a conda record). The shared objects are the
host's own zlib and libpng (real ELF files: libpng's NEEDED names libz.so.1).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from pinguard.audit.options import AuditOptions
from pinguard.audit.steps import build_result
from pinguard.audit.workers import analyze_one
from pinguard.catalog import AnalyzerOptions, Analyzers
from pinguard.catalog.registry import ANALYZERS
from pinguard.layers.analysis import LayerAnalysis
from pinguard.models import AuditResult
from pinguard.report.json import render
from pinguard.sources import open_source
from pinguard.testing.images import ImageWriter, layer_tar

MULTIARCH = "/usr/lib/x86_64-linux-gnu"
LIBZ = Path(f"{MULTIARCH}/libz.so.1.2.13")
LIBPNG = Path(f"{MULTIARCH}/libpng16.so.16.39.0")
SITE = "/usr/local/lib/python3.12/site-packages"
CONDA = Path(__file__).parents[1] / "data/conda-meta/zlib-1.2.11-h90dfc92_1014.json"

STATUS = """\
Package: zlib1g
Status: install ok installed
Architecture: amd64
Version: 1:1.2.13.dfsg-1

Package: libpng16-16
Status: install ok installed
Architecture: amd64
Version: 1.6.39-2

"""


def _layout(path: Path) -> str:
    if not (LIBZ.is_file() and LIBPNG.is_file()):
        pytest.fail(f"this test reads the host's {LIBZ} and {LIBPNG}")
    libz, libpng = LIBZ.read_bytes(), LIBPNG.read_bytes()
    apt = {
        "var/lib/dpkg/status": STATUS.encode(),
        "var/lib/dpkg/info/zlib1g:amd64.list": f"{LIBZ}\n{MULTIARCH}/libz.so.1\n".encode(),
        "var/lib/dpkg/info/libpng16-16:amd64.list": f"{LIBPNG}\n".encode(),
        f"{LIBZ}".lstrip("/"): libz,
        f"{LIBPNG}".lstrip("/"): libpng,
        "etc/os-release": b'ID=debian\nVERSION_ID="12"\n',
    }
    links = {
        f"{MULTIARCH}/libz.so.1".lstrip("/"): LIBZ.name,
        f"{MULTIARCH}/libpng16.so.16".lstrip("/"): LIBPNG.name,
    }
    ext = "zwheel/_png.cpython-312-x86_64-linux-gnu.so"
    record = f"zwheel/libs/libz.so.1,,\n{ext},,\nzwheel-1.0.dist-info/METADATA,,\n"
    pip = {
        f"{SITE}/zwheel-1.0.dist-info/METADATA".lstrip("/"): (
            b"Metadata-Version: 2.1\nName: zwheel\nVersion: 1.0\n\n"
        ),
        f"{SITE}/zwheel-1.0.dist-info/RECORD".lstrip("/"): record.encode(),
        f"{SITE}/zwheel-1.0.dist-info/INSTALLER".lstrip("/"): b"pip\n",
        f"{SITE}/zwheel/libs/libz.so.1".lstrip("/"): libz,
        f"{SITE}/{ext}".lstrip("/"): libpng,
        f"{SITE}/bad-1.0.dist-info/METADATA".lstrip("/"): b"Metadata-Version: 2.1\n\n",
        f"{MULTIARCH}/libbroken.so.1".lstrip("/"): libz[:3000],
        "etc/ld.so.conf": b"include /etc/ld.so.conf.d/*.conf\n",
        "etc/ld.so.conf.d/zwheel.conf": f"{SITE}/zwheel/libs\n".encode(),
        f"opt/conda/conda-meta/{CONDA.name}": CONDA.read_bytes(),
    }
    w = ImageWriter(path)
    layers = [
        w.layer(layer_tar(apt, parents=True, symlinks=links)),
        w.layer(layer_tar(pip, parents=True)),
    ]
    history = [{"created_by": "RUN apt-get install zlib1g libpng16-16"}, {"created_by": "RUN pip"}]
    img = w.image(layers, history, platform="linux/amd64")
    w.write_layout(w.index([img], tag="v1")[0])
    return f"oci:{path}:v1"


def _audit(ref: str, order: tuple[int, ...]) -> AuditResult:
    options = AuditOptions()
    analyzers = Analyzers.for_options(AnalyzerOptions(), tuple(ANALYZERS[i] for i in order))
    with open_source(ref, options.source) as source:
        resolved = source.resolve()
        analyses: dict[str, LayerAnalysis] = {}
        for layer in resolved.layers:
            analysis = analyze_one(source, layer, analyzers, None, options.limits)
            assert isinstance(analysis, LayerAnalysis), analysis
            analyses[layer.digest] = analysis
    return build_result(resolved, analyses, analyzers)


def test_shuffling_the_analyzers_changes_no_snapshot_and_no_report_byte(tmp_path: Path) -> None:
    ref = _layout(tmp_path / "img")
    orders = list(itertools.permutations(range(len(ANALYZERS))))
    first = _audit(ref, orders[0])
    final = first.final
    # the state the order could break: libraries joined to both kinds of owner, the loader
    # run over them, and one state's problems from two analyzers
    owners = {lib.path: (lib.owner_kind, lib.owner) for lib in final.native}
    assert owners[str(LIBZ)] == ("deb", "zlib1g")
    assert owners[f"{SITE}/zwheel/libs/libz.so.1"] == ("wheel", "zwheel")
    assert {(r.consumer, r.needed, r.via) for r in final.resolutions} >= {
        (str(LIBPNG), "libz.so.1", "ld.so.conf"),
        (f"{SITE}/zwheel/_png.cpython-312-x86_64-linux-gnu.so", "libz.so.1", "ld.so.conf"),
    }
    assert len({lib.layer for lib in final.native}) == 2  # each library's own layer
    whats = {item.what for item in final.incomplete}
    assert {f"{SITE}/bad-1.0.dist-info", f"{MULTIARCH}/libbroken.so.1"} <= whats
    assert sorted((p.kind, p.name) for p in final.packages) == [
        ("conda", "zlib"),
        ("deb", "libpng16-16"),
        ("deb", "zlib1g"),
        ("python", "zwheel"),  # the environment's distribution, as a generic record too
    ]
    report = render(first)
    for order in orders[1:]:
        shuffled = _audit(ref, order)
        assert shuffled.snapshots == first.snapshots, order
        assert shuffled == first, order
        assert render(shuffled) == report, order
