"""Real shared objects for the native-library tests: gcc builds them, readelf reads them.

:func:`build_so` compiles a C source with the system ``gcc`` into a shared object with a
soname, an optional banner string in read-only data, ``DT_NEEDED`` entries (libraries it
links against) and an RPATH or RUNPATH (``--disable-new-dtags`` / ``--enable-new-dtags``).
:func:`readelf_dynamic` is the independent expectation: binutils' ``readelf -d`` parsed
into the same four facts pinguard reports.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.infra.tools import require_tool


def build_so(
    out: Path,
    *,
    soname: str,
    banner: str = "",
    needed: Sequence[Path] = (),
    rpath: Sequence[str] = (),
    runpath: bool = False,
    rodata_bytes: int = 0,
    symbol: str = "",
    exports: int = 0,
) -> Path:
    """Compile a shared object at ``out`` (see the module docstring)."""
    gcc = require_tool("gcc")
    src = out.with_suffix(out.suffix + ".c")
    body = [f'const char pg_banner[] = "{banner}";' if banner else ""]
    if rodata_bytes:
        body.append(f"const char pg_padding[{rodata_bytes}] = {{1}};")
    # many exported symbols with long names: a .dynstr far larger than one read
    body += [
        f"int pg_exported_symbol_with_a_long_name_{i:06d}(void) {{ return {i}; }}"
        for i in range(exports)
    ]
    body.append(
        f"int {symbol or 'pg_' + re.sub(r'[^A-Za-z0-9]', '_', soname)}(void) {{ return 1; }}"
    )
    src.write_text("\n".join(body) + "\n")
    argv = [gcc, "-shared", "-fPIC", "-o", str(out), str(src), f"-Wl,-soname,{soname}"]
    if rpath:
        argv.append("-Wl,--enable-new-dtags" if runpath else "-Wl,--disable-new-dtags")
        argv.append("-Wl,-rpath," + ":".join(rpath))
    # each library by path: its soname becomes the NEEDED entry (kept even though unused)
    argv += ["-Wl,--no-as-needed", *map(str, needed)]
    subprocess.run(argv, check=True, capture_output=True, text=True)
    return out


def build_exe(
    out: Path, needed: Sequence[Path], *, rpath: Sequence[str] = (), runpath: bool = False
) -> Path:
    """A tiny program that NEEDs ``needed`` (for running the real loader on it)."""
    gcc = require_tool("gcc")
    src = out.with_suffix(".c")
    src.write_text("int main(void) { return 0; }\n")
    argv = [gcc, "-o", str(out), str(src), "-Wl,--no-as-needed", *map(str, needed)]
    if rpath:
        argv.append("-Wl,--enable-new-dtags" if runpath else "-Wl,--disable-new-dtags")
        argv.append("-Wl,-rpath," + ":".join(rpath))
    subprocess.run(argv, check=True, capture_output=True, text=True)
    return out


@dataclass(frozen=True, slots=True)
class Dynamic:
    soname: str | None
    needed: tuple[str, ...]
    rpath: tuple[str, ...]
    runpath: tuple[str, ...]


_LINE = re.compile(r"\((NEEDED|SONAME|RPATH|RUNPATH)\)\s+[^\[]*\[(.*)\]")


def readelf_dynamic(path: Path) -> Dynamic:
    """``readelf -d`` (binutils) parsed: the independent expectation for pinguard's reader."""
    readelf = require_tool("readelf")
    out = subprocess.run(
        [readelf, "-d", "-W", str(path)], check=True, capture_output=True, text=True
    ).stdout
    soname: str | None = None
    needed: list[str] = []
    rpath: list[str] = []
    runpath: list[str] = []
    for kind, value in _LINE.findall(out):
        if kind == "NEEDED":
            needed.append(value)
        elif kind == "SONAME":
            soname = value
        elif kind == "RPATH":
            rpath.extend(p for p in value.split(":") if p)
        else:
            runpath.extend(p for p in value.split(":") if p)
    return Dynamic(soname, tuple(needed), tuple(rpath), tuple(runpath))


def build_deb(
    out_dir: Path,
    package: str,
    version: str,
    files: dict[str, Path],
    links: dict[str, str] | None = None,
    *,
    architecture: str = "amd64",
) -> Path:
    """A real .deb from ``dpkg-deb --build``: ``files`` maps install paths to sources,
    ``links`` symlinks to their targets; it activates the ``ldconfig`` trigger as
    debhelper's packages of shared libraries do."""
    import shutil

    dpkg_deb = require_tool("dpkg-deb")
    root = out_dir / f"{package}-root"
    if root.exists():
        shutil.rmtree(root)
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(
        f"Package: {package}\nVersion: {version}\nArchitecture: {architecture}\n"
        "Maintainer: pinguard tests <tests@example.invalid>\nSection: libs\nPriority: optional\n"
        f"Description: pinguard test fixture {package}\n"
    )
    (root / "DEBIAN" / "triggers").write_text("activate-noawait ldconfig\n")
    for dest, src in files.items():
        target = root / dest.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, target)
        target.chmod(0o644)
    for dest, link in (links or {}).items():
        target = root / dest.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(link)
    deb = out_dir / f"{package}_{version}_{architecture}.deb"
    subprocess.run(
        [dpkg_deb, "--root-owner-group", "--build", str(root), str(deb)],
        check=True,
        capture_output=True,
        text=True,
    )
    return deb


_LIST_LINE = re.compile(r"^\s*(\S+) => (\S+) \(0x[0-9a-f]+\)$", re.MULTILINE)


def parse_ld_list(output: str) -> dict[str, str]:
    """``ld.so --list`` output as {NEEDED name: path the loader opened} (paths normalised)."""
    import posixpath

    return {name: posixpath.normpath(path) for name, path in _LIST_LINE.findall(output)}


# --------------------------------------------------------------------------- the image story

SITE = "/usr/local/lib/python3.11/dist-packages"  # the base image's pip target (as root)
MULTIARCH = "/usr/lib/x86_64-linux-gnu"
TORCH_CUDA = f"{SITE}/torch/lib/libtorch_cuda.so"  # DT_RPATH $ORIGIN/../../nvidia/nccl/lib
TORCH_PROBE = f"{SITE}/torch/lib/libtorch_probe.so"  # the same entry as DT_RUNPATH
WHEEL_NCCL = f"{SITE}/nvidia/nccl/lib/libnccl.so.2"
DEB_NCCL = f"{MULTIARCH}/libnccl.so.2.28.9"
APP = "/opt/app/lib/libapp.so"  # no search path of its own: ld.so.conf decides


@dataclass(frozen=True, slots=True)
class NativeImages:
    """Two images sharing every layer but the last: the two-NCCL image, and the same image
    after a ``COPY`` of a 2.29.7 libnccl.so.2 over the 2.30.3 wheel's file."""

    two_nccl: str
    mismatched: str
    steps: tuple[str, ...]  # the Dockerfile instructions after FROM, in order


def native_wheels(work: Path, out: Path) -> list[Path]:
    """The wheels of the story: nvidia-nccl-cu13 2.30.3 (a real libnccl.so.2 with its
    banner), a torch-like 2.12.1+cu130 whose libs NEED libnccl.so.2, and torchvision in a
    +cu130 and a +cpu build."""
    from tests.infra.wheels import WheelSpec, build_wheels

    work.mkdir(parents=True, exist_ok=True)
    nccl = build_so(
        work / "libnccl.so.2", soname="libnccl.so.2", banner="NCCL version 2.30.3+cuda13.0"
    )
    origin = ["$ORIGIN/../../nvidia/nccl/lib"]
    torch_cuda = build_so(
        work / "libtorch_cuda.so", soname="libtorch_cuda.so", needed=[nccl], rpath=origin
    )
    probe = build_so(
        work / "libtorch_probe.so",
        soname="libtorch_probe.so",
        needed=[nccl],
        rpath=origin,
        runpath=True,
    )
    specs = [
        WheelSpec(
            "nvidia-nccl-cu13",
            "2.30.3",
            files={
                "nvidia/nccl/lib/libnccl.so.2": nccl.read_bytes(),
                "nvidia/nccl/__init__.py": b"",
            },
        ),
        WheelSpec(
            "torch",
            "2.12.1+cu130",
            requires_dist=("nvidia-nccl-cu13==2.30.3",),
            files={
                "torch/__init__.py": b"__version__ = '2.12.1+cu130'\n",
                "torch/lib/libtorch_cuda.so": torch_cuda.read_bytes(),
                "torch/lib/libtorch_probe.so": probe.read_bytes(),
            },
        ),
        WheelSpec("torchvision", "0.27.0+cu130", files={"torchvision/__init__.py": b""}),
        WheelSpec("torchvision", "0.27.0+cpu", files={"torchvision/__init__.py": b""}),
    ]
    return build_wheels(specs, out)


def native_context(context: Path) -> None:
    """The build context: the libnccl2 .deb, the ld.so.conf story and the mismatched copy."""
    work = context / "build"
    work.mkdir(parents=True, exist_ok=True)
    deb_so = build_so(
        work / "libnccl.so.2.28.9", soname="libnccl.so.2", banner="NCCL version 2.28.9+cuda13.0"
    )
    build_deb(
        context,
        "libnccl2",
        "2.28.9-1+cuda13.0",
        {DEB_NCCL: deb_so},
        {f"{MULTIARCH}/libnccl.so.2": "libnccl.so.2.28.9"},
    )
    opt = context / "opt"
    for d in ("a", "b"):
        (opt / d).mkdir(parents=True, exist_ok=True)
        build_so(opt / d / "libfoo.so.1", soname="libfoo.so.1", symbol=f"foo_{d}")
    (opt / "app" / "lib").mkdir(parents=True, exist_ok=True)
    build_so(
        opt / "app" / "lib" / "libapp.so", soname="libapp.so", needed=[opt / "a" / "libfoo.so.1"]
    )
    for leftover in opt.rglob("*.c"):
        leftover.unlink()
    conf = context / "ld.so.conf.d"
    conf.mkdir(exist_ok=True)
    # b before a: ld.so.conf order, not directory names, decides
    (conf / "00-b.conf").write_text("/opt/b\n")
    (conf / "01-a.conf").write_text("/opt/a\n")
    (context / "mismatch").mkdir(exist_ok=True)
    build_so(
        context / "mismatch" / "libnccl.so.2",
        soname="libnccl.so.2",
        banner="NCCL version 2.29.7+cuda13.2",
    )
    for leftover in (context / "mismatch").glob("*.c"):
        leftover.unlink()


def native_steps(index_url: str) -> tuple[str, ...]:
    pip = f"pip install --no-cache-dir --index-url {index_url}"
    return (
        "COPY libnccl2_2.28.9-1+cuda13.0_amd64.deb /tmp/",
        "RUN dpkg -i /tmp/libnccl2_2.28.9-1+cuda13.0_amd64.deb && rm /tmp/*.deb",
        f"RUN {pip} torch==2.12.1+cu130 torchvision==0.27.0+cu130",
        f"ENV LD_LIBRARY_PATH={MULTIARCH}",
        "COPY opt/ /opt/",
        "COPY ld.so.conf.d/ /etc/ld.so.conf.d/",
        "RUN ldconfig",
        f"RUN {pip} torchvision==0.27.0+cpu",
    )


MISMATCH_STEP = f"COPY mismatch/libnccl.so.2 {WHEEL_NCCL}"


def build_native_images(work: Path, base_image: str, index_url: str, tag: str) -> NativeImages:
    """Build both images with ``buildah bud --layers`` (the second reuses the first's layers)."""
    from tests.infra.build import build_image

    context = work / "context"
    native_context(context)
    steps = native_steps(index_url)
    head = f"FROM {base_image}\n" + "\n".join(steps) + "\n"
    build_image(context, head, f"{tag}:two-nccl").check()
    build_image(context, head + MISMATCH_STEP + "\n", f"{tag}:mismatched").check()
    return NativeImages(f"{tag}:two-nccl", f"{tag}:mismatched", (*steps, MISMATCH_STEP))


def loader_list(image: str, target: str, *, missing_ok: bool = False) -> dict[str, str]:
    """Run the image's own loader on ``target`` (``ld.so --list``) inside a container of
    ``image`` (``buildah run``, so the image config's Env applies); {NEEDED: path}.

    ``ld.so --list`` stops at a library it cannot find; with ``missing_ok`` the image's
    ``ldd`` runs the same loader in its trace mode, which lists what it found and prints
    ``not found`` for the rest (``libcuda.so.1``: the driver, which a GPU runtime mounts into
    the container; no image carries it)."""
    buildah = require_tool("buildah")
    container = (
        subprocess.run(
            [buildah, "from", "--pull=never", image], check=True, capture_output=True, text=True
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    try:
        done = subprocess.run(
            [
                buildah,
                "run",
                "--isolation",
                "chroot",
                container,
                "--",
                *(["ldd"] if missing_ok else ["/lib64/ld-linux-x86-64.so.2", "--list"]),
                target,
            ],
            check=False,
            capture_output=True,
            text=True,
        )
    finally:
        subprocess.run([buildah, "rm", container], capture_output=True, check=False)
    if done.returncode != 0:  # say what the loader said: a missing library shows on stdout
        raise RuntimeError(
            f"ld.so --list {target} in {image} exited {done.returncode}:\n"
            f"{done.stdout}{done.stderr}"
        )
    return parse_ld_list(done.stdout)
