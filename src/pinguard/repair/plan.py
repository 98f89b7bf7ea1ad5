"""Predicting what one install step would do to an image's environment, before it runs.

:func:`plan_install` builds a throwaway virtual environment (``uv venv`` with this machine's
Python) whose site-packages holds only the dist-info metadata of the image's installed
distributions (METADATA with Requires-Dist, INSTALLER, REQUESTED, a RECORD listing just those
files), then asks ``uv pip install --dry-run`` what the step's arguments would install and
uninstall there, for the image's Python version and platform (``--python-version``,
``--python-platform``). The new distributions' Requires-Dist come from the index's PEP 658
metadata (no wheel downloads), so :func:`pinguard.audit.diff.diff_environments` can name the change
kinds and causes exactly as the audit does. A pip command line is replayed with pip's index
semantics (``--index-strategy unsafe-best-match``) unless it says otherwise.
"""

from __future__ import annotations

import re
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import InvalidName, NormalizedName, canonicalize_name
from packaging.version import InvalidVersion, Version

from pinguard.errors import ResolveError, UsageError
from pinguard.models import Change, Distribution, Environment, Platform, Unmet
from pinguard.repair.resolve.command import InstallReplay
from pinguard.repair.resolve.index import IndexFetchError, SimpleIndex, TargetEnvironment
from pinguard.repair.resolve.uv import IndexOptions, network_failure, run, uv_bin

_LINE = re.compile(r"^\s*([+\-~])\s+([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==(\S+)")


@dataclass(frozen=True, slots=True)
class Plan:
    """What an install step would change in one environment."""

    environment: str
    command: InstallReplay
    install: tuple[tuple[NormalizedName, str], ...]
    uninstall: tuple[tuple[NormalizedName, str], ...]
    changes: tuple[Change, ...]
    unmet: tuple[Unmet, ...]
    after: Environment
    output: str = ""
    notes: tuple[str, ...] = ()


def parse_dry_run(text: str) -> tuple[list[tuple[str, str, str]], str]:
    """(sign, name, version) lines of ``uv pip install --dry-run`` output."""
    found = [
        (m.group(1), m.group(2), m.group(3))
        for m in map(_LINE.match, text.splitlines())
        if m is not None
    ]
    return found, text


def _stem(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def seed_site_packages(site: Path, env: Environment) -> list[str]:
    """Write dist-info metadata for every distribution of ``env`` into ``site``.

    The values come from the image, so nothing unchecked reaches a path or a header: a
    distribution whose name is not a valid project name, or whose version is not PEP 440
    (uv could not read it anyway), is left out with a note, never written where its
    name or version would put it (``../../x`` as a version would otherwise escape ``site``);
    a header value holding a line break is dropped the same way."""
    notes: list[str] = []
    for dist in env.distributions:
        shown = dist.display_name or dist.name
        try:
            canonicalize_name(shown, validate=True)
            version = str(Version(dist.raw_version))
        except InvalidName:
            notes.append(f"{shown!r} is not a valid project name; not seeded for uv")
            continue
        except InvalidVersion:
            notes.append(f"{dist.name} {dist.raw_version!r} is not PEP 440; not seeded for uv")
            continue
        info = site / f"{_stem(dist.name)}-{version}.dist-info"
        info.mkdir(parents=True, exist_ok=True)
        meta = ["Metadata-Version: 2.1", f"Name: {shown}", f"Version: {version}"]
        headers = [("Requires-Dist", r) for r in dist.requires_dist]
        if dist.requires_python:
            headers.insert(0, ("Requires-Python", dist.requires_python))
        for key, value in headers:
            if "\n" in value or "\r" in value:
                notes.append(f"{dist.name}: {key} {value!r} holds a line break; left out")
            else:
                meta.append(f"{key}: {value}")
        files = {
            "METADATA": "\n".join(meta) + "\n\n",
            "INSTALLER": f"{dist.installer or 'pip'}\n",
        }
        if dist.requested:
            files["REQUESTED"] = ""
        for fname, content in files.items():
            (info / fname).write_text(content, encoding="utf-8")
        record = [f"{info.name}/{f},," for f in [*files, "RECORD"]]
        (info / "RECORD").write_text("\n".join(record) + "\n", encoding="utf-8")
    return notes


def seeded_venv(
    tmp: Path, env: Environment, also_installed: Sequence[Environment] = (), *, timeout: float
) -> tuple[Path, list[str]]:
    """A throwaway virtual environment in ``tmp/venv`` (``uv venv`` with this machine's
    Python) whose site-packages holds the metadata of ``env``'s distributions and of those of
    ``also_installed`` that ``env`` lacks (``seed_site_packages``): its interpreter and the
    seeding's notes. The installer asked about it (uv here, pip in ``predict/pipcheck.py``)
    sees the image's environment as installed. ResolveError when uv cannot make it."""
    venv = tmp / "venv"
    made = run(
        [uv_bin(), "venv", str(venv), "--python", sys.executable, "--no-config", "-q"],
        timeout=timeout,
        cwd=str(tmp),
    )
    if made.returncode != 0:
        raise ResolveError(f"uv venv failed: {made.stderr.strip()}")
    sites = sorted(venv.glob("lib/python*/site-packages"))
    if not sites:
        raise ResolveError("uv venv made no site-packages directory")
    names = {d.name for d in env.distributions}
    others = [d for e in also_installed for d in e.distributions if d.name not in names]
    seeded = Environment(env.path, env.python, (*env.distributions, *others), env.real_path)
    return venv / "bin" / "python", seed_site_packages(sites[0], seeded)


def uv_install_args(command: InstallReplay, index: IndexOptions) -> list[str]:
    """uv flags replaying ``command`` with ``index`` added.

    pip's ``-U`` upgrades with ``--upgrade-strategy only-if-needed`` (its default): the
    named requirements move to their newest version and a dependency only when its
    installed version no longer fits; uv's ``--upgrade`` is eager (every package of the
    resolution moves), so a pip ``-U`` is replayed as ``--upgrade-package`` for each named
    requirement, and as ``--upgrade`` only with ``--upgrade-strategy eager``."""
    parsed = command.command
    opts = index.merged(command.index).for_tool(parsed.tool)
    args = opts.uv_args()
    if parsed.upgrade:
        if parsed.tool == "pip" and parsed.upgrade_strategy != "eager":
            for named in dict.fromkeys(_req_name(r) for r in command.requirements):
                args += ["--upgrade-package", named]
        else:
            args.append("--upgrade")
    for name in parsed.upgrade_packages:
        args += ["--upgrade-package", name]
    if parsed.no_deps:
        args.append("--no-deps")
    if parsed.force_reinstall:
        args.append("--reinstall")
    for c in command.constraint_files:
        args += ["--constraint", c]
    return [*args, *command.requirements]


def plan_install(
    env: Environment,
    command: InstallReplay,
    *,
    index: IndexOptions | None = None,
    platform: Platform | None = None,
    index_client: SimpleIndex | None = None,
    timeout: float = 300.0,
    also_installed: Sequence[Environment] = (),
    cache_dir: Path | None = None,
    glibc: tuple[int, int] | None = None,
) -> Plan:
    """Predict ``command`` on ``env`` (see the module docstring).

    ``also_installed``: the other environments the same interpreter imports from (Debian's
    ``/usr/lib/python3/dist-packages``), seeded too, since the installer sees what they hold
    as installed; they are never changed (a distribution the resolver would replace there is
    installed anew into ``env``, as Debian's pip does). ``cache_dir``: uv's cache (index
    pages and metadata kept between runs); None: a throwaway one. ``glibc``: the image's,
    so wheels for a newer manylinux than uv's default (2.17) are candidates."""
    if not command.requirements:
        raise UsageError("the install command names no requirement pinguard can replay")
    index = index or IndexOptions()
    target = TargetEnvironment(env.python, platform, glibc)
    notes = [f"not replayed: {s}" for s in command.skipped]
    with tempfile.TemporaryDirectory(prefix="pinguard-plan-") as tmp:
        python, seeded = seeded_venv(Path(tmp), env, also_installed, timeout=timeout)
        notes += seeded
        cmd = [
            uv_bin(),
            "pip",
            "install",
            "--dry-run",
            "--python",
            str(python),
            "--no-config",
            "--color",
            "never",
            "--cache-dir",
            str(cache_dir or Path(tmp, "cache")),
        ]
        if target.python_version:
            cmd += ["--python-version", target.python_version]
        if target.python_platform:
            cmd += ["--python-platform", target.python_platform]
        cmd += uv_install_args(command, index)
        proc = run(cmd, timeout=timeout, cwd=tmp)
    output = proc.stderr + proc.stdout
    if proc.returncode != 0:
        unreachable = network_failure(output)
        if unreachable is not None:
            raise unreachable
        raise ResolveError(f"uv could not resolve the step: {output.strip()}")
    lines, _ = parse_dry_run(output)
    install = sorted((canonicalize_name(n), v) for s, n, v in lines if s in "+~")
    uninstall = sorted((canonicalize_name(n), v) for s, n, v in lines if s in "-~")

    opts = index.merged(command.index)
    client = index_client or SimpleIndex(opts.index_urls, opts.find_links)
    removed = {n for n, _ in uninstall}
    kept = [d for d in env.distributions if d.name not in removed]
    requested = {_req_name(r) for r in command.requirements}

    def read(name: NormalizedName, version: str) -> tuple[Distribution, str | None]:
        requires: tuple[str, ...] = ()
        # the file installed names the install: the same wheel again is the same files (the
        # audit's RECORD fingerprint sees no reinstall), another build of the version is not
        fingerprint = f"planned:{name}=={version}"
        note = None
        try:
            pip = command.command.tool == "pip"
            file = client.best_file(name, Version(version), target, prefer_last=pip)
            if file is not None:
                requires = client.metadata(file).requires_dist
                fingerprint += f":{file.sha256 or file.url}"
            else:
                note = f"no wheel of {name} {version} on the index to read its metadata"
        except (IndexFetchError, InvalidVersion) as exc:
            note = f"could not read the metadata of {name} {version}: {exc}"
        dist = Distribution(
            name=name,
            raw_version=version,
            metadata_path=f"{env.path.rstrip('/')}/{_stem(name)}-{version}.dist-info",
            requires_dist=requires,
            installer="uv" if command.command.tool == "uv" else "pip",
            requested=name in requested,
            fingerprint=fingerprint,
        )
        return dist, note

    # one index page and one metadata file per distribution: fetched side by side
    with ThreadPoolExecutor(max_workers=8) as pool:
        read_back = list(pool.map(lambda item: read(*item), install))
    added = [dist for dist, _ in read_back]
    notes += [note for _, note in read_back if note is not None]
    after = Environment(
        path=env.path,
        python=env.python,
        distributions=tuple(sorted([*kept, *added], key=lambda d: d.name)),
        real_path=env.real_path,
    )
    from pinguard.audit.diff import diff_environments

    changes, unmet = diff_environments(env, after, platform=platform)
    return Plan(
        environment=env.path,
        command=command,
        install=tuple(install),
        uninstall=tuple(uninstall),
        changes=changes,
        unmet=unmet,
        after=after,
        output=output,
        notes=tuple(notes),
    )


def _req_name(raw: str) -> NormalizedName:
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        return canonicalize_name(Requirement(raw).name)
    except InvalidRequirement:
        return canonicalize_name(raw)


def choose_plan_environment(
    environments: Sequence[Environment], wanted: str | None = None
) -> Environment:
    """``wanted``, else the environment holding the most distributions."""
    if wanted is not None:
        for env in environments:
            if env.path == wanted:
                return env
        raise UsageError(f"no environment {wanted!r} in the image")
    if not environments:
        raise UsageError("the image has no Python environment to plan against")
    return max(environments, key=lambda e: (len(e.distributions), e.path))
