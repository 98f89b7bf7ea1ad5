"""Links through the tar walk and the state: kept when flagged LINK, whited out, replaced."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from pinguard.audit.state import State
from pinguard.catalog import AnalyzerOptions, Analyzers
from pinguard.catalog.interface import Analyzer
from pinguard.catalog.native import analyzer as native
from pinguard.catalog.native.analyzer import NativeAnalyzer
from pinguard.catalog.native.loader import FileView
from pinguard.catalog.registry import ANALYZERS
from pinguard.layers.analysis import LayerAnalysis, analyze_stream
from pinguard.layers.tar import LINK, STREAM


def layer(*members: tuple[str, str, bytes | str]) -> bytes:
    """An uncompressed layer tar: (kind, path, data or link target) with kind file/sym/hard."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for kind, path, payload in members:
            info = tarfile.TarInfo(path)
            if kind == "file":
                assert isinstance(payload, bytes)
                info.size = len(payload)
                tf.addfile(info, io.BytesIO(payload))
                continue
            info.type = tarfile.SYMTYPE if kind == "sym" else tarfile.LNKTYPE
            assert isinstance(payload, str)
            info.linkname = payload
            tf.addfile(info)
    return buf.getvalue()


def analyze(data: bytes, classes: tuple[type[Analyzer], ...] = ANALYZERS) -> LayerAnalysis:
    """The layer as an audit analyses it: every registered analyzer (or only ``classes``)."""
    analyzer = Analyzers.for_options(AnalyzerOptions(), classes)
    return analyze_stream(
        io.BytesIO(data),
        digest=None,
        size=None,
        select=analyzer.selector(),
        open_stream=analyzer.open_stream,
        prefetch=False,
    )


def test_links_kept_only_when_flagged() -> None:
    """The native analyzer keeps library-name and short directory links (as stored), not
    others; the Python analyzer keeps every link (any directory link may lead to an
    environment)."""
    tar = layer(
        ("sym", "lib", "usr/lib"),
        ("sym", "usr/lib/x86_64-linux-gnu/libnccl.so.2", "libnccl.so.2.28.9"),
        ("hard", "usr/lib/x86_64-linux-gnu/libz.so.1", "usr/lib/x86_64-linux-gnu/libz.so.1.2"),
        ("sym", "usr/share/doc/pkg/changelog.gz", "../other/changelog.gz"),
        ("file", "usr/lib/x86_64-linux-gnu/libz.so.1.2", b"not elf"),
    )
    assert analyze(tar).links["/usr/share/doc/pkg/changelog.gz"] == "../other/changelog.gz"
    got = analyze(tar, (NativeAnalyzer,))
    assert got.links == {
        "/lib": "usr/lib",
        "/usr/lib/x86_64-linux-gnu/libnccl.so.2": "libnccl.so.2.28.9",
        "/usr/lib/x86_64-linux-gnu/libz.so.1": "/usr/lib/x86_64-linux-gnu/libz.so.1.2",
    }
    # the non-ELF .so was streamed and found not to be ELF
    assert got.streamed["/usr/lib/x86_64-linux-gnu/libz.so.1.2"] == {"native": None}
    assert LINK & STREAM == 0


def test_state_whiteouts_and_replacements() -> None:
    """A whiteout removes a link; a file replacing a link (or the reverse) drops the other."""
    state = State()
    first = analyze(
        layer(("sym", "opt/x/libfoo.so.1", "libfoo.so.1.0"), ("sym", "lib64", "usr/lib64"))
    )
    state.apply(first)
    assert set(state.links) == {"/opt/x/libfoo.so.1", "/lib64"}
    second = analyze(layer(("file", "opt/x/.wh.libfoo.so.1", b"")))
    state.apply(second)
    assert set(state.links) == {"/lib64"}
    elf = native_so()
    third = analyze(layer(("file", "opt/x/libbar.so.1", elf), ("sym", "opt/y/libbaz.so", "x")))
    state.apply(
        analyze(layer(("sym", "opt/x/libbar.so.1", "elsewhere"), ("file", "opt/y/libbaz.so", elf)))
    )
    assert "/opt/x/libbar.so.1" in state.links
    assert "/opt/y/libbaz.so" in state.streamed
    state.apply(third)
    assert "/opt/x/libbar.so.1" not in state.links  # a file replaced the link
    assert "/opt/x/libbar.so.1" in state.streamed
    assert "/opt/y/libbaz.so" not in state.streamed  # a link replaced the file
    view = native.state_view(state)
    assert view.resolve("/lib64/libc.so.6") == "/usr/lib64/libc.so.6"
    assert view.real_file("/opt/x/libbar.so.1") == "/opt/x/libbar.so.1"


def native_so() -> bytes:
    """A real shared object from gcc (any will do)."""
    import tempfile

    from tests.infra.native import build_so

    with tempfile.TemporaryDirectory() as tmp:
        return build_so(Path(tmp) / "libx.so", soname="libx.so").read_bytes()


def test_directory_audit_sees_libraries_links_and_resolutions(tmp_path: Path) -> None:
    """dir: reads shared objects, symlinks (never followed) and ld.so.conf like a layer."""
    from pinguard.audit.pipeline import audit_image
    from tests.infra.native import build_so

    root = tmp_path / "root"
    multiarch = root / "usr/lib/x86_64-linux-gnu"
    multiarch.mkdir(parents=True)
    nccl = build_so(
        multiarch / "libnccl.so.2.28.9",
        soname="libnccl.so.2",
        banner="NCCL version 2.28.9+cuda13.0",
    )
    (multiarch / "libnccl.so.2").symlink_to("libnccl.so.2.28.9")
    (root / "lib").symlink_to("usr/lib")
    app = root / "opt/app/lib"
    app.mkdir(parents=True)
    build_so(app / "libapp.so", soname="libapp.so", needed=[nccl])
    for leftover in root.rglob("*.c"):
        leftover.unlink()
    (root / "var/lib/dpkg").mkdir(parents=True)
    (root / "var/lib/dpkg/status").write_text("")  # a Debian tree: multiarch defaults
    result = audit_image(f"dir:{root}")
    libs = {lib.path: lib for lib in result.final.native}
    assert libs["/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.9"].version == "2.28.9+cuda13.0"
    assert libs["/opt/app/lib/libapp.so"].needed == ("libnccl.so.2", "libc.so.6")
    (res,) = [r for r in result.final.resolutions if r.needed == "libnccl.so.2"]
    assert (res.path, res.real, res.via) == (
        "/lib/x86_64-linux-gnu/libnccl.so.2",
        "/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.9",
        "default",
    )


def test_libraries_resolve_each_directory_once_as_resolve_does() -> None:
    """The resolver ``libraries`` uses (each directory resolved once) gives what
    ``FileView.resolve`` gives for every path: through directory links, a link as the last
    component, a chain of them, '..' after a link, a loop, relative and absolute targets."""
    links = {
        "/lib": "usr/lib",
        "/usr/lib/cuda": "/opt/cuda-12",
        "/opt/cuda-12/lib64/libcudart.so.12": "libcudart.so.12.4",
        "/opt/cuda-12/lib64/libcudart.so": "libcudart.so.12",
        "/usr/lib/up": "../share",
        "/loop/a": "b",
        "/loop/b": "a",
        "/usr/lib/x/back": "..",
    }
    view = FileView(frozenset(), links)
    real = native._resolver(view)
    paths = [
        "/lib/libc.so.6",
        "/lib/cuda/lib64/libcudart.so",
        "/lib/cuda/lib64/libcudart.so.12.4",
        "/lib/up/doc/libx.so",
        "/loop/a/libz.so",
        "/loop/a",
        "/usr/lib/x/back/libm.so.6",
        "/usr/lib/x/../libm.so.6",
        "/usr/lib/..",
        "/usr/lib/.",
        "/libtop.so",
        "relative/lib/libr.so",
        "/lib/",
    ]
    for path in paths * 2:  # the second time from the directories already resolved
        assert real(path) == view.resolve(path), path
