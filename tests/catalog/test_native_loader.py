"""The ld.so search order as a pure function, on hand-made file views (expected by hand)."""

from __future__ import annotations

import dataclasses

import pytest

from pinguard.catalog.native.loader import (
    FileView,
    LoaderConfig,
    StepResolver,
    expand,
    resolve_needed,
)
from pinguard.models import NativeLibrary

SITE = "/usr/local/lib/python3.11/dist-packages"
TORCH = f"{SITE}/torch/lib/libtorch_cuda.so"
WHEEL_NCCL = f"{SITE}/nvidia/nccl/lib/libnccl.so.2"
DEB_NCCL = "/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.9"
LLP_NCCL = "/opt/llp/libnccl.so.2"
CONF_NCCL = "/opt/conf/libnccl.so.2"

VIEW = FileView(
    files=frozenset(
        {TORCH, WHEEL_NCCL, DEB_NCCL, LLP_NCCL, CONF_NCCL, "/usr/lib/x86_64-linux-gnu/libc.so.6"}
    ),
    links={
        "/lib": "usr/lib",
        "/usr/lib/x86_64-linux-gnu/libnccl.so.2": "libnccl.so.2.28.9",
    },
)
DEBIAN = LoaderConfig.of([], [], machine="x86_64", debian=True)


def lib(rpath: tuple[str, ...] = (), runpath: tuple[str, ...] = ()) -> NativeLibrary:
    return NativeLibrary(
        path=TORCH,
        digest="sha256=x",
        size=1,
        layer="sha256:l",
        needed=("libnccl.so.2", "libc.so.6", "libmissing.so.1"),
        rpath=rpath,
        runpath=runpath,
    )


@pytest.mark.parametrize(
    ("rpath", "runpath", "llp", "conf", "want_path", "want_via"),
    [
        # RPATH ($ORIGIN) beats LD_LIBRARY_PATH
        (("$ORIGIN/../../nvidia/nccl/lib",), (), "/opt/llp", (), WHEEL_NCCL, "DT_RPATH"),
        # RUNPATH does not: LD_LIBRARY_PATH comes first
        ((), ("$ORIGIN/../../nvidia/nccl/lib",), "/opt/llp", (), LLP_NCCL, "LD_LIBRARY_PATH"),
        # RPATH is ignored entirely when RUNPATH is present
        (("/opt/llp",), ("${ORIGIN}/../../nvidia/nccl/lib",), "", (), WHEEL_NCCL, "DT_RUNPATH"),
        # nothing on the object: ld.so.conf before the defaults
        ((), (), "", ("/opt/conf",), CONF_NCCL, "ld.so.conf"),
        # then the default directories (through the deb's symlink)
        ((), (), "", (), "/lib/x86_64-linux-gnu/libnccl.so.2", "default"),
        # an empty LD_LIBRARY_PATH element and a missing dir change nothing
        ((), (), "::/nowhere", (), "/lib/x86_64-linux-gnu/libnccl.so.2", "default"),
    ],
)
def test_search_order(
    rpath: tuple[str, ...],
    runpath: tuple[str, ...],
    llp: str,
    conf: tuple[str, ...],
    want_path: str,
    want_via: str,
) -> None:
    """glibc's order: RPATH (no RUNPATH), LD_LIBRARY_PATH, RUNPATH, ld.so.conf, defaults."""
    env = [f"LD_LIBRARY_PATH={llp}"] if llp else ["PATH=/usr/bin"]
    config = LoaderConfig.of(env, conf, machine="x86_64", debian=True)
    nccl, libc, missing = resolve_needed(lib(rpath, runpath), VIEW, config, {})
    assert (nccl.path, nccl.via) == (want_path, want_via)
    assert libc.path == "/lib/x86_64-linux-gnu/libc.so.6"
    assert libc.real == "/usr/lib/x86_64-linux-gnu/libc.so.6"
    assert (missing.path, missing.real, missing.via) == (None, None, "")


def test_symlinked_file_resolves_to_its_target() -> None:
    """A soname symlink is found by name and attributed to the file it points at."""
    (nccl, *_) = resolve_needed(lib(), VIEW, DEBIAN, {})
    assert nccl.real == DEB_NCCL


def test_ld_so_conf_soname_without_link() -> None:
    """In an ld.so.conf dir, a library whose SONAME matches is found as ldconfig links it."""
    view = FileView(files=frozenset({TORCH, "/opt/conf/libnccl.so.2.30.3"}), links={})
    config = LoaderConfig.of([], ["/opt/conf"], debian=True)
    (nccl, *_) = resolve_needed(
        lib(), view, config, {"libnccl.so.2": ["/opt/conf/libnccl.so.2.30.3"]}
    )
    assert (nccl.path, nccl.real, nccl.via) == (
        "/opt/conf/libnccl.so.2",
        "/opt/conf/libnccl.so.2.30.3",
        "ld.so.conf (soname)",
    )


def test_non_debian_defaults() -> None:
    """Without a dpkg database the defaults are /lib64, /usr/lib64, /lib, /usr/lib."""
    assert LoaderConfig.of([], []).default_dirs == ("/lib64", "/usr/lib64", "/lib", "/usr/lib")
    assert LoaderConfig.of([], [], machine="aarch64", debian=True).default_dirs[:2] == (
        "/lib/aarch64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
    )


@pytest.mark.parametrize(
    ("entry", "want"),
    [
        ("$ORIGIN/../lib", "/a/lib"),
        ("${ORIGIN}", "/a/b"),
        ("/opt/$LIB", "/opt/lib/x86_64-linux-gnu"),
        ("/p/$PLATFORM", "/p/x86_64"),
        ("relative", "relative"),
    ],
)
def test_expand(entry: str, want: str) -> None:
    """Dynamic string tokens expand as ld.so expands them."""
    assert expand(entry, "/a/b", DEBIAN) == want


def test_symlink_loop_is_not_found() -> None:
    """A symlink loop ends the lookup (ELOOP), it does not hang."""
    view = FileView(files=frozenset(), links={"/opt/a": "/opt/b", "/opt/b": "/opt/a"})
    assert view.real_file("/opt/a/libx.so") is None


def test_step_resolver_reuses_an_unchanged_state_and_only_that() -> None:
    """A state with the inputs of the one before gets the same answer object (no search);
    a new file on the search path, a changed link, another Env or changed libraries give
    what a fresh search gives."""
    deb = dataclasses.replace(lib(), path=DEB_NCCL, needed=(), soname="libnccl.so.2")
    wheel = dataclasses.replace(lib(), path=WHEEL_NCCL, needed=(), soname="libnccl.so.2")
    libs = (lib(runpath=("/opt/llp",)), deb, wheel)
    steps = StepResolver()

    def fresh(view: FileView, env: tuple[str, ...], libs: tuple[NativeLibrary, ...]) -> object:
        return StepResolver().resolve(libs, view, {}, (), env, "x86_64")

    first = steps.resolve(libs, VIEW, {}, (), (), "x86_64")
    assert {(r.needed, r.real) for r in first} >= {("libnccl.so.2", LLP_NCCL)}
    assert steps.resolve(libs, dataclasses.replace(VIEW), {}, (), (), "x86_64") is first
    moved = FileView(VIEW.files - {LLP_NCCL}, VIEW.links)  # the RUNPATH's file is gone
    for view, env, these in (
        (moved, (), libs),
        (FileView(VIEW.files, {**VIEW.links, "/opt/llp": "/opt/conf"}), (), libs),
        (VIEW, ("LD_LIBRARY_PATH=/opt/conf",), libs),
        (VIEW, (), (lib(runpath=("/opt/conf",)), deb, wheel)),
    ):
        again = steps.resolve(these, view, {}, (), env, "x86_64")
        assert again == fresh(view, env, these)
        assert again != first
