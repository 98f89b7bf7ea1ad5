"""What a warm audit imports: the modules it uses, not every renderer and the worker pool.

A warm audit spends most of its time starting Python and importing. Answered from its result
entry (``cli/warm.py``: the same command line, image and policy as a cold audit before it),
it imports no more than resolving the image and reading one entry takes: not the pipeline,
the values, the policy engine or any renderer. Answered from the replay entry (the result
entry gone, or another format), the renderers of other formats, rich's progress bars and the
process pool are imported only when they are used. Each case runs the real CLI in a fresh
interpreter on a real image archive and lists ``sys.modules`` after it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from pinguard.testing.demo import build_demo
from tests.infra.registry import build_oci_layout

#: Modules a warm JSON audit must not import: rich (table and progress bars), the worker
#: pool, the renderers of the formats not asked for, and what only reading a layer needs.
NOT_WARM = (
    "rich",
    "multiprocessing",
    "concurrent.futures.process",
    "pinguard.report.table",
    "pinguard.report.sarif",
    "pinguard.report.html",
    "pinguard.report.compare",
    "pinguard.report.cyclonedx",
    "jinja2",
    "ctypes",  # glibc's malloc settings, for inflating
    "packaging.metadata",  # METADATA parsing, for reading a layer
    "tomlkit",  # policy files: none in the directory the audit runs in
)

#: Modules an audit answered from its result entry must not import either: it resolves the
#: image, reads one entry and writes the report, and does nothing else.
NOT_WARM_RESULT = (
    *NOT_WARM,
    "pinguard.audit",
    "pinguard.catalog",
    "pinguard.layers.analysis",
    "pinguard.cache.store",
    "pinguard.models",
    "pinguard.policy.load",
    "pinguard.policy.engine",
    "pinguard.report",
    "packaging",
)

_RUN = """
import json, sys
from pinguard.cli import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def _audit(ref: str, cache: Path, fmt: str) -> tuple[int, set[str]]:
    proc = subprocess.run(
        [sys.executable, "-c", _RUN, "audit", ref, "--format", fmt, "--cache-dir", str(cache)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=cache.parent,  # no policy file to discover there
    )
    got = json.loads(proc.stderr.strip().splitlines()[-1])
    return int(got["code"]), set(got["modules"])


def _imported(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


def test_a_warm_json_audit_answered_by_its_result_imports_no_audit_nor_report(
    tmp_path: Path,
) -> None:
    archive = tmp_path / "demo.tar"
    build_demo(archive, tag="t")
    ref = f"oci-archive:{archive}:t"
    cache = tmp_path / "cache"
    assert not cache.exists()
    cold_code, _ = _audit(ref, cache, "json")
    assert list(cache.glob("result-*.json")), "the cold audit wrote no result entry"
    warm_code, warm = _audit(ref, cache, "json")
    assert warm_code == cold_code
    assert "pinguard.cli.warm" in warm
    assert _imported(warm, NOT_WARM_RESULT) == []


def test_a_warm_json_audit_from_the_replay_imports_neither_rich_nor_the_pool_nor_other_renderers(
    tmp_path: Path,
) -> None:
    archive = tmp_path / "demo.tar"
    build_demo(archive, tag="t")
    ref = f"oci-archive:{archive}:t"
    cache = tmp_path / "cache"
    assert not cache.exists()
    cold_code, _ = _audit(ref, cache, "json")
    assert list(cache.glob("replay-*.json")), "the cold audit wrote no replay entry"
    for entry in cache.glob("result-*.json"):  # answered by the replay entry, not the result
        entry.unlink()
    warm_code, warm = _audit(ref, cache, "json")
    assert warm_code == cold_code
    assert "pinguard.report.json" in warm
    assert _imported(warm, NOT_WARM) == []


def test_the_table_format_still_imports_its_renderer(tmp_path: Path) -> None:
    """The other side: asking for the table brings rich and the table renderer in."""
    archive = tmp_path / "demo.tar"
    build_demo(archive, tag="t")
    _, modules = _audit(f"oci-archive:{archive}:t", tmp_path / "cache", "table")
    assert {"rich", "pinguard.report.table"} <= modules
    assert "pinguard.report.sarif" not in modules


#: Nor, for an ``oci:`` layout on disk, answered before parsing (``warm.answer``): the
#: parser, the sources (the files it was resolved from are checked by digest instead),
#: ``dataclasses`` and ``typing``, the tar reader, ``zipfile`` (``importlib.resources``, for
#: a package inside a zipapp), ``tempfile`` (writing an entry or an output file) and
#: ``platform`` (``uname``).
NOT_WARM_LAYOUT = (
    *NOT_WARM_RESULT,
    "argparse",
    "pinguard.sources",
    "dataclasses",
    "typing",
    "tarfile",
    "zipfile",
    "importlib.resources",
    "tempfile",
    "platform",
)


def test_a_warm_json_audit_of_a_layout_imports_no_tar_reader_nor_zipfile(tmp_path: Path) -> None:
    layout = build_oci_layout(
        tmp_path / "layout", tag="t", layers=[{"etc/os-release": b"ID=debian\n"}]
    )
    cache = tmp_path / "cache"
    cold_code, _ = _audit(layout.source, cache, "json")
    assert list(cache.glob("result-*.json")), "the cold audit wrote no result entry"
    warm_code, warm = _audit(layout.source, cache, "json")
    assert warm_code == cold_code
    assert "pinguard.cli.warm" in warm
    assert _imported(warm, NOT_WARM_LAYOUT) == []
