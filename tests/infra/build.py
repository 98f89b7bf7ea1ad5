"""Building real images for the tests: a cached Debian base with Python, and buildah builds.

:func:`ensure_base_image` gives a ``localhost/pinguard-test/python-base`` image with Debian
bookworm's own ``python3``/``pip``/``venv``: the first run bootstraps it with
``debootstrap --variant=minbase`` (about a minute), keeps the root filesystem as a tarball
under the test cache (``$PINGUARD_TEST_CACHE``, default ``~/.cache/pinguard-tests``) and
imports it into containers-storage; later runs reuse the image, or re-import the tarball.
:func:`build_image` runs ``buildah bud --isolation chroot --layers`` (chroot isolation shares
the host network namespace, so ``RUN pip install --index-url http://127.0.0.1:PORT/simple``
reaches an index served by the test process) and returns the outcome with the whole log
instead of raising, because some tests want a build to fail at a given step.
:func:`ensure_plain_image` does the same for a plain Debian base without any Python (the
image a Python drift gate should refuse). :func:`build_scratch_image` is the fast,
Python-less path: ``FROM scratch`` plus one ``COPY`` of a site-packages tree per step.
:func:`mounted_image` and :func:`image_config` let tests look inside what they built without
running a container.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOTFS_VERSION = "v1"  # bump when the debootstrap tree changes
BASE_IMAGE_VERSION = "v2"  # bump when the import (config) changes
BASE_IMAGE = f"localhost/pinguard-test/python-base:bookworm-{BASE_IMAGE_VERSION}"
#: Where Debian's pip installs as root in the base image (PEP 668 lifted by pip.conf/ENV).
BASE_SITE_PACKAGES = "/usr/local/lib/python3.11/dist-packages"
DEBIAN_SUITE = "bookworm"
DEBIAN_PACKAGES = ("python3", "python3-pip", "python3-venv")
#: A plain Debian base without any Python (``debootstrap --variant=minbase``, nothing added):
#: the image a Python drift gate should refuse unless told it is audited on purpose.
PLAIN_ROOTFS_VERSION = "v1"
PLAIN_IMAGE = f"localhost/pinguard-test/debian-plain:bookworm-{PLAIN_ROOTFS_VERSION}"
BASE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "PIP_BREAK_SYSTEM_PACKAGES": "1",
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    "PIP_NO_CACHE_DIR": "1",
    "PIP_ROOT_USER_ACTION": "ignore",
    "PYTHONDONTWRITEBYTECODE": "1",
}
PIP_CONF = (
    "[global]\nbreak-system-packages = true\ndisable-pip-version-check = true\n"
    "no-cache-dir = true\nroot-user-action = ignore\n"
)
STEP_LINE = re.compile(r"^STEP (\d+)/(\d+): (.*)$", re.MULTILINE)


class BuildError(RuntimeError):
    """An image could not be built or prepared; carries the tool's output."""


def cache_dir() -> Path:
    """The persistent test cache: ``$PINGUARD_TEST_CACHE`` or ``~/.cache/pinguard-tests``."""
    raw = os.environ.get("PINGUARD_TEST_CACHE") or str(Path.home() / ".cache" / "pinguard-tests")
    path = Path(raw)
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path``, so concurrent test runs prepare things once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _run(argv: Sequence[str], timeout: float = 900, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(argv), capture_output=True, text=True, timeout=timeout, check=False, **kw
    )


def _checked(argv: Sequence[str], timeout: float = 900, **kw: Any) -> str:
    proc = _run(argv, timeout=timeout, **kw)
    if proc.returncode != 0:
        output = proc.stdout[-4000:] + proc.stderr[-4000:]
        raise BuildError(f"{' '.join(argv)!r} exited {proc.returncode}\n{output}")
    return proc.stdout


def image_exists(ref: str) -> bool:
    """True when ``ref`` names an image in the local containers-storage."""
    return _run(["buildah", "inspect", "--type", "image", ref], timeout=60).returncode == 0


def image_id(ref: str) -> str:
    """The image ID (``.FromImageID``) of a stored image, which changes when any layer does."""
    argv = ["buildah", "inspect", "--type", "image", "--format", "{{.FromImageID}}", ref]
    return _checked(argv, timeout=60).strip()


def image_config(ref: str) -> dict[str, Any]:
    """The OCI image config (``history``, ``rootfs.diff_ids``, ``config``) of a stored image."""
    out = _checked(["skopeo", "inspect", "--config", f"containers-storage:{ref}"], timeout=120)
    config: dict[str, Any] = json.loads(out)
    return config


def image_labels(ref: str) -> dict[str, str]:
    labels = image_config(ref).get("config", {}).get("Labels") or {}
    return {str(k): str(v) for k, v in labels.items()}


def remove_image(ref: str) -> None:
    """Remove ``ref`` from containers-storage if it is there (other tags keep their layers)."""
    _run(["buildah", "rmi", ref], timeout=120)


# --------------------------------------------------------------------------- base image


def base_rootfs_tarball() -> Path:
    return cache_dir() / f"rootfs-{DEBIAN_SUITE}-python-{ROOTFS_VERSION}.tar"


def _ensure_image(
    tag: str, lock: str, tarball: Path, packages: Sequence[str], mirror: str | None
) -> str:
    """``tag`` in storage: imported from ``tarball``, debootstrapped first if need be."""
    with file_lock(cache_dir() / lock):
        if image_exists(tag):
            return tag
        if not tarball.exists():
            make_rootfs_tarball(tarball, mirror=mirror, packages=packages)
        import_rootfs(tarball, tag, python=bool(packages))
    return tag


def ensure_base_image(tag: str = BASE_IMAGE, mirror: str | None = None) -> str:
    """Return ``tag`` after making sure the Debian+Python base image is in storage."""
    return _ensure_image(tag, "base-image.lock", base_rootfs_tarball(), DEBIAN_PACKAGES, mirror)


def plain_rootfs_tarball() -> Path:
    return cache_dir() / f"rootfs-{DEBIAN_SUITE}-plain-{PLAIN_ROOTFS_VERSION}.tar"


def ensure_plain_image(tag: str = PLAIN_IMAGE, mirror: str | None = None) -> str:
    """Return ``tag`` after making sure the plain Debian image (no Python) is in storage."""
    return _ensure_image(tag, "plain-image.lock", plain_rootfs_tarball(), (), mirror)


def make_rootfs_tarball(
    tarball: Path, mirror: str | None = None, packages: Sequence[str] = DEBIAN_PACKAGES
) -> None:
    """debootstrap a minimal bookworm (with ``packages``: Python by default) into a
    temporary dir and tar it up."""
    mirror = mirror or os.environ.get("PINGUARD_DEBIAN_MIRROR") or "http://deb.debian.org/debian"
    rootfs = tarball.with_name(tarball.name + ".rootfs")
    if rootfs.exists():
        shutil.rmtree(rootfs)
    argv = [
        "debootstrap",
        "--variant=minbase",
        *([f"--include={','.join(packages)}"] if packages else []),
        DEBIAN_SUITE,
        str(rootfs),
        mirror,
    ]
    proc = _run(argv, timeout=1800)
    if proc.returncode != 0:
        log = rootfs / "debootstrap" / "debootstrap.log"
        detail = log.read_text(errors="replace")[-4000:] if log.exists() else ""
        shutil.rmtree(rootfs, ignore_errors=True)
        raise BuildError(f"debootstrap failed ({proc.returncode}):\n{proc.stderr[-4000:]}{detail}")
    finish_rootfs(rootfs, pip=bool(packages))
    tar_rootfs(rootfs, tarball)
    shutil.rmtree(rootfs)


def finish_rootfs(rootfs: Path, *, pip: bool = True) -> None:
    """Trim a fresh debootstrap tree and (``pip``) configure pip for use as root in builds."""
    for sub in ("var/cache/apt/archives", "var/lib/apt/lists"):
        d = rootfs / sub
        if d.is_dir():
            for entry in d.iterdir():
                if entry.is_file() and entry.name not in {"lock"}:
                    entry.unlink()
    if pip:
        (rootfs / "etc" / "pip.conf").write_text(PIP_CONF)


def tar_rootfs(rootfs: Path, tarball: Path) -> None:
    tmp = tarball.with_name(tarball.name + ".tmp")
    _checked(
        [
            "tar",
            "--numeric-owner",
            "--xattrs",
            "--exclude=./dev/*",
            "--exclude=./proc/*",
            "--exclude=./sys/*",
            "--exclude=./debootstrap",
            "-C",
            str(rootfs),
            "-cf",
            str(tmp),
            ".",
        ],
        timeout=600,
    )
    tmp.replace(tarball)


def import_rootfs(tarball: Path, tag: str, *, python: bool = True) -> None:
    """Import a rootfs tarball as ``tag``; with ``python``, the pip environment baked into
    its config."""
    argv = ["podman", "import"]
    if python:
        for key, value in sorted(BASE_ENV.items()):
            argv += ["--change", f"ENV {key}={value}"]
        argv += ["--change", 'CMD ["python3"]']
    message = "debian bookworm + python3" if python else "plain debian bookworm"
    argv += ["--message", f"pinguard test base: {message}"]
    argv += [str(tarball), tag]
    _checked(argv, timeout=600)


# --------------------------------------------------------------------------- builds


@dataclass(frozen=True)
class BuildResult:
    """The outcome of one ``buildah bud``: never raises, so a test can expect a failure."""

    tag: str
    returncode: int
    log: str
    image_id: str | None

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def steps(self) -> list[tuple[int, str]]:
        """``(number, instruction)`` for every ``STEP n/m:`` line buildah printed."""
        return [(int(m.group(1)), m.group(3)) for m in STEP_LINE.finditer(self.log)]

    @property
    def failed_step(self) -> int | None:
        """The Dockerfile step (1-based) the build stopped at, or None when it succeeded."""
        if self.ok:
            return None
        steps = self.steps
        return steps[-1][0] if steps else None

    def check(self) -> BuildResult:
        """Return self, or raise :class:`BuildError` with the log tail when the build failed."""
        if not self.ok:
            raise BuildError(f"build of {self.tag} failed ({self.returncode}):\n{self.log[-6000:]}")
        return self


#: What buildah's chroot isolation prints when sealing the memfd copy of itself that it runs
#: a RUN step through fails (EBUSY: a transient race in its setup, before the step's command
#: starts; seen in a CI run of this suite). Only a build that failed so is run again.
SETUP_RACE = "sealing memfd copy: Device or resource busy"
SETUP_RACE_TRIES = 3


def _bud(argv: Sequence[str], env: Mapping[str, str], timeout: float) -> tuple[int, str]:
    """One ``buildah bud``: its exit code and its output (a timeout is -1, with a note)."""
    try:
        proc = subprocess.run(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
            env=env,
            check=False,
        )
        return proc.returncode, proc.stdout
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout
        text = out.decode(errors="replace") if isinstance(out, bytes) else (out or "")
        return -1, text + f"\n[pinguard-tests] build timed out after {timeout}s\n"


def build_image(
    context_dir: Path,
    dockerfile_text: str,
    tag: str,
    build_args: Mapping[str, str] | None = None,
    *,
    layers: bool = True,
    pull: str = "never",
    extra_args: Sequence[str] = (),
    timeout: float = 900,
) -> BuildResult:
    """``buildah bud --isolation chroot [--layers] -t TAG`` over ``context_dir``.

    The Dockerfile is written outside the context so ``COPY .`` does not pick it up.
    ``pull="never"`` keeps builds offline: a base that is not in storage fails fast.
    """
    context_dir.mkdir(parents=True, exist_ok=True)
    fd, dockerfile = tempfile.mkstemp(prefix="pinguard-", suffix=".Dockerfile")
    iid_fd, iidfile = tempfile.mkstemp(prefix="pinguard-", suffix=".iid")
    os.close(iid_fd)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(dockerfile_text)
        argv = [
            "buildah",
            "bud",
            "--isolation",
            "chroot",
            f"--layers={'true' if layers else 'false'}",
            "--force-rm",
            f"--pull={pull}",
            "--iidfile",
            iidfile,
            "-f",
            dockerfile,
            "-t",
            tag,
        ]
        for key, value in sorted((build_args or {}).items()):
            argv += ["--build-arg", f"{key}={value}"]
        argv += [*extra_args, str(context_dir)]
        env = {**os.environ, "BUILDAH_ISOLATION": "chroot"}
        for attempt in range(1, SETUP_RACE_TRIES + 1):
            returncode, log = _bud(argv, env, timeout)
            if returncode == 0 or SETUP_RACE not in log or attempt == SETUP_RACE_TRIES:
                break
            # buildah failed to set up a RUN step, before the step's command ran: build again
            # (with --layers the steps already built come from the cache)
        image_id = Path(iidfile).read_text().strip() or None if returncode == 0 else None
        return BuildResult(tag=tag, returncode=returncode, log=log, image_id=image_id)
    finally:
        for path in (dockerfile, iidfile):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def install_tree(wheels: Sequence[Path], target: Path) -> Path:
    """Install ``wheels`` (no dependencies, no index) into the directory ``target`` with the
    test interpreter's pip, laid out like site-packages (dist-info with INSTALLER, RECORD)."""
    target.mkdir(parents=True, exist_ok=True)
    if wheels:
        _checked(
            [
                sys.executable,
                "-m",
                "pip",
                "--isolated",
                "install",
                "--no-deps",
                "--no-index",
                "--no-compile",
                "--no-cache-dir",
                "--disable-pip-version-check",
                "--target",
                str(target),
                *map(str, wheels),
            ],
            timeout=300,
        )
    return target


def build_scratch_image(
    workdir: Path,
    tag: str,
    steps: Sequence[Sequence[Path]],
    site_packages: str = "/usr/local/lib/python3.11/site-packages",
) -> BuildResult:
    """``FROM scratch`` and one ``COPY`` per step of the wheels of that step, installed as a
    site-packages tree at ``site_packages``. No Python runs inside the image; COPY can only
    add, so a step may add distributions but not remove older ones."""
    context = workdir / "context"
    lines = ["FROM scratch"]
    for i, wheels in enumerate(steps, start=1):
        tree = context / f"step{i}"
        if tree.exists():
            shutil.rmtree(tree)
        install_tree(wheels, tree)
        lines.append(f"COPY step{i}/ {site_packages}/")
    return build_image(context, "\n".join(lines) + "\n", tag)


@contextlib.contextmanager
def mounted_image(ref: str) -> Iterator[Path]:
    """Mount a stored image's root filesystem read-only-by-convention; yields its path."""
    container = (
        _checked(["buildah", "from", "--pull=never", ref], timeout=120).strip().splitlines()[-1]
    )
    try:
        mountpoint = _checked(["buildah", "mount", container], timeout=120).strip()
        try:
            yield Path(mountpoint)
        finally:
            _run(["buildah", "umount", container], timeout=120)
    finally:
        _run(["buildah", "rm", container], timeout=120)


def build_zipapp(directory: Path) -> Path:
    """``directory/pinguard.pyz``: the zipapp of this checkout (scripts/build_zipapp.py), as
    an in-build guard copies it into an image."""
    out = directory / "pinguard.pyz"
    script = Path(__file__).resolve().parents[2] / "scripts" / "build_zipapp.py"
    subprocess.run(
        [sys.executable, str(script), "-o", str(out)], check=True, capture_output=True, timeout=300
    )
    return out
