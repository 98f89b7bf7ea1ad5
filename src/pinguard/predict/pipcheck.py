"""pip's own resolver asked the same question uv answered, so a pip step's prediction is never
silently uv's opinion where pip's would differ.

uv models pip well where their rules are the same, and the prediction replays the rules that
differ in spelling (``-U`` as ``--upgrade-package``, several indexes as
``unsafe-best-match``). Where two resolutions satisfy every requirement, the resolvers may
still pick different ones: pip takes the dependencies a package names in alphabetical order
when nothing else ranks them, uv in the order they are written, so ``top`` requiring ``yy``
and ``xx`` that each pin ``zz`` differently ends in opposite answers. `check_with_pip` runs
``pip install --dry-run --report -`` (the pip that runs pinguard, ``--python`` pointed at a
throwaway virtual environment seeded with the same metadata) for the target Python and
platform (``--python-version``, ``--platform`` manylinux tags up to the image's glibc,
``--only-binary :all:``) with the step's arguments, and returns what pip would install, or
why it could not say. The caller compares that with uv's answer.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import InvalidVersion, Version

from pinguard.errors import ResolveError
from pinguard.models import Environment, Platform
from pinguard.repair.plan import seeded_venv
from pinguard.repair.resolve import InstallReplay
from pinguard.repair.resolve.uv import network_failure, uv_env
from pinguard.target import platform_machine


@dataclass(frozen=True, slots=True)
class PipAnswer:
    """What pip's resolver said: the distributions it would install, or that it refuses."""

    version: str  # the pip that answered
    install: tuple[tuple[NormalizedName, str], ...] = ()
    refused: str = ""  # pip's error when it finds no solution
    unavailable: str = ""  # why pip could not be asked at all


def pip_version() -> str | None:
    """The version of the pip that runs beside pinguard, or None when there is none."""
    try:
        from importlib.metadata import version

        return version("pip")
    except Exception:
        return None


def _pip_package() -> Path:
    import pip

    return Path(pip.__file__).resolve().parent


def platform_tags(platform: Platform | None, glibc: tuple[int, int] | None) -> list[str]:
    """pip's ``--platform`` values for a Linux image: manylinux up to its glibc (2.17 when
    not known, as uv's plain linux target assumes), the legacy aliases, and ``linux``."""
    if platform is None or platform.os != "linux":
        return []
    machine = platform_machine(platform)
    top = glibc[1] if glibc is not None and glibc[0] == 2 else 17
    tags = [f"manylinux_2_{minor}_{machine}" for minor in range(top, 16, -1)]
    if machine in ("x86_64", "i686"):
        tags += [f"manylinux2014_{machine}", f"manylinux2010_{machine}", f"manylinux1_{machine}"]
    elif top >= 17:
        tags.append(f"manylinux2014_{machine}")
    return [*tags, f"linux_{machine}"]


def _pip_args(replay: InstallReplay) -> list[str]:
    cmd = replay.command
    index = replay.index
    args: list[str] = []
    if index.no_index:
        args.append("--no-index")
    elif index.index_url:
        args += ["--index-url", index.index_url]
    if not index.no_index:
        for url in index.extra_index_urls:
            args += ["--extra-index-url", url]
    for link in index.find_links:
        args += ["--find-links", link]
    if index.prerelease:
        args.append("--pre")
    if cmd.upgrade:
        args.append("--upgrade")
        if cmd.upgrade_strategy:
            args += ["--upgrade-strategy", cmd.upgrade_strategy]
    if cmd.no_deps:
        args.append("--no-deps")
    if cmd.force_reinstall:
        args.append("--force-reinstall")
    for path in replay.constraint_files:
        args += ["--constraint", path]
    return [*args, *replay.requirements]


def check_with_pip(
    env: Environment,
    replay: InstallReplay,
    *,
    platform: Platform | None,
    glibc: tuple[int, int] | None,
    also_installed: Sequence[Environment] = (),
    timeout: float = 300.0,
) -> PipAnswer:
    """Ask pip what ``replay`` would install into ``env`` (see the module docstring)."""
    version = pip_version()
    if version is None:
        return PipAnswer("", unavailable="pip is not installed beside pinguard")
    with tempfile.TemporaryDirectory(prefix="pinguard-pipcheck-") as tmp:
        try:
            python, _notes = seeded_venv(Path(tmp), env, also_installed, timeout=timeout)
        except ResolveError as exc:
            return PipAnswer(version, unavailable=f"no virtual environment: {exc}")
        # pip runs inside the throwaway environment's interpreter, imported from a directory
        # holding only the pip package (a link to this machine's): the environment then sees
        # only the seeded metadata as installed, and one interpreter starts, not two
        only_pip = Path(tmp, "pip-only")
        only_pip.mkdir()
        (only_pip / "pip").symlink_to(_pip_package())
        cmd = [
            str(python),
            "-m",
            "pip",
            "--isolated",
            "--disable-pip-version-check",
            "--no-input",
            "--cache-dir",
            str(Path(tmp, "cache")),
            "install",
            "--dry-run",
            "--quiet",
            "--report",
            "-",
            "--only-binary",
            ":all:",
        ]
        if env.python:
            cmd += ["--python-version", ".".join(env.python.split(".")[:2])]
        for tag in platform_tags(platform, glibc):
            cmd += ["--platform", tag]
        cmd += _pip_args(replay)
        env_vars = uv_env({"PYTHONPATH": str(only_pip), "PYTHONNOUSERSITE": "1"})
        try:
            proc = subprocess.run(
                cmd,
                capture_output=True,
                text=True,
                timeout=timeout,
                env=env_vars,
                cwd=tmp,
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as exc:  # pip could not answer
            return PipAnswer(version, unavailable=str(exc))
    if proc.returncode != 0:
        text = " ".join(proc.stderr.split())
        if network_failure(proc.stderr) is not None:
            return PipAnswer(version, unavailable=f"pip could not reach the index: {text[:300]}")
        return PipAnswer(version, refused=text[:600] or f"pip exited {proc.returncode}")
    try:
        report = json.loads(proc.stdout)
        install = sorted(
            (canonicalize_name(item["metadata"]["name"]), str(item["metadata"]["version"]))
            for item in report.get("install", [])
        )
    except (ValueError, KeyError, TypeError) as exc:
        return PipAnswer(version, unavailable=f"pip's report could not be read: {exc}")
    return PipAnswer(version, tuple(install))


def same_install(
    pip: Sequence[tuple[NormalizedName, str]], uv: Sequence[tuple[NormalizedName, str]]
) -> bool:
    """Whether two install lists name the same distributions at the same versions."""

    def key(items: Sequence[tuple[NormalizedName, str]]) -> set[tuple[str, object]]:
        out: set[tuple[str, object]] = set()
        for name, raw in items:
            try:
                out.add((name, Version(raw)))
            except InvalidVersion:
                out.add((name, raw))
        return out

    return key(pip) == key(uv)
