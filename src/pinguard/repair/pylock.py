"""PEP 751 ``pylock.toml`` files for the known-good set, and reading their pins back.

:func:`build_lock` takes the same :class:`~pinguard.repair.constraints.ConstraintSet` the
constraints file pins and, for the image's own Python and platform, finds each package's wheel
files on the given index (tag compatibility with ``packaging.tags``: CPython tags for that
Python, ``manylinux_2_x`` up to the image's glibc (its ``libc6`` package, or given; 2.17, the
oldest manylinux, when unknown), then pure-Python tags), with their URLs and sha256 as the
index gives them (or as hashed from a local ``--find-links`` directory). Every package the
index lacks for that target is named in one :class:`LockError`, with the wheels of the wanted
version that are there and what they need (a newer glibc than the one assumed, another
Python); the lock is never silently shorter than the set. :func:`render_pylock`
writes the TOML with tomlkit: ``lock-version``, ``environments`` (the target as a marker),
``requires-python``, ``created-by``, then sorted ``[[packages]]`` with ``[[packages.wheels]]``.
:func:`read_pylock` returns ``(line, "name==version")`` pairs for ``constraints check``.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomlkit
import tomlkit.exceptions
from packaging import tags
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import InvalidWheelFilename, NormalizedName, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from pinguard.errors import ConfigError, ResolveError, UsageError
from pinguard.models import DebPackage
from pinguard.repair.constraints import ConstraintSet, header
from pinguard.repair.resolve.index import IndexFetchError, IndexFile, SimpleIndex, TargetEnvironment
from pinguard.target import platform_machine

LOCK_VERSION = "1.0"
DEFAULT_GLIBC = (2, 17)  # manylinux2014's baseline, when the image's glibc is unknown
_LIBC6 = re.compile(r"^(?:\d+:)?(\d+)\.(\d+)")
_PYLOCK_NAME = re.compile(r"^pylock\.([^.]+\.)?toml$")
_MANYLINUX = re.compile(
    r"^(?:manylinux_(?P<major>\d+)_(?P<minor>\d+)|(?P<legacy>manylinux(?:2014|2010|1)))_(?P<arch>.+)$"
)
_LEGACY = {"manylinux2014": (2, 17), "manylinux2010": (2, 12), "manylinux1": (2, 5)}
_ANY_GLIBC = (2, 99)  # wide enough for any manylinux tag: which wheels fit but for the glibc


class LockError(ResolveError):
    """A pylock.toml could not be built: packages without a file for the target."""


@dataclass(frozen=True, slots=True)
class LockedWheel:
    """One wheel file of a locked package."""

    filename: str
    url: str
    sha256: str


@dataclass(frozen=True, slots=True)
class LockedPackage:
    """One package of the lock: its exact version and the wheels that fit the target."""

    name: NormalizedName
    version: str
    wheels: tuple[LockedWheel, ...]
    requires_python: str | None = None


@dataclass(frozen=True, slots=True)
class Lock:
    """A whole pylock.toml: the packages and the target they were chosen for."""

    packages: tuple[LockedPackage, ...]
    environment_marker: str
    requires_python: str | None
    comments: tuple[str, ...] = ()


def is_pylock(path: str | os.PathLike[str]) -> bool:
    """PEP 751 names: ``pylock.toml`` or ``pylock.<name>.toml``."""
    return _PYLOCK_NAME.match(Path(path).name) is not None


def glibc_of(debs: Sequence[DebPackage]) -> tuple[int, int] | None:
    """The image's glibc (major, minor) from its ``libc6`` package's version, if any."""
    for deb in debs:
        if deb.name == "libc6":
            m = _LIBC6.match(deb.version)
            if m:
                return int(m.group(1)), int(m.group(2))
    return None


def _glibc_text(glibc: tuple[int, int]) -> str:
    return f"{glibc[0]}.{glibc[1]}"


def _platforms(machine: str, glibc: tuple[int, int]) -> list[str]:
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    out: list[str] = []
    major, minor = glibc
    for m in range(minor, 4, -1):
        out.append(f"manylinux_{major}_{m}_{machine}")
        if m in legacy and (m == 17 or machine in {"x86_64", "i686"}):
            out.append(f"{legacy[m]}_{machine}")
    out.append(f"linux_{machine}")
    return out


def target_tags(target: TargetEnvironment, glibc: tuple[int, int] | None) -> tuple[tags.Tag, ...]:
    """The wheel tags a CPython of ``target`` accepts, most preferred first."""
    mm = target.major_minor
    if not mm:
        raise UsageError(
            "the environment's Python version is unknown; a pylock.toml needs it "
            "(audit an image, not a bare directory, or pick another --environment)"
        )
    try:
        version = tuple(int(p) for p in mm.split("."))
    except ValueError as exc:
        raise UsageError(f"cannot read the Python version {mm!r}") from exc
    platform = target.platform
    if platform is None:
        raise UsageError(
            "a pylock.toml is for one platform, and the image's is unknown "
            "(a dir: source has none): give --platform linux/ARCH, e.g. linux/amd64"
        )
    if platform.os != "linux":
        raise UsageError(
            f"pinguard locks for linux targets only, and the platform is {platform} "
            "(--platform linux/ARCH to lock for a Linux image)"
        )
    platforms = _platforms(platform_machine(platform), glibc or target.glibc or DEFAULT_GLIBC)
    interpreter = f"cp{version[0]}{version[1]}"
    return (
        *tags.cpython_tags(version, platforms=platforms),
        *tags.compatible_tags(version, interpreter=interpreter, platforms=platforms),
    )


def environment_marker(target: TargetEnvironment) -> str:
    """The PEP 508 marker naming the target (for ``environments``)."""
    markers = target.markers()
    return (
        f"python_version == {markers['python_version']!r} and "
        f"sys_platform == {markers['sys_platform']!r} and "
        f"platform_machine == {markers['platform_machine']!r} and "
        f"implementation_name == 'cpython'"
    ).replace("'", '"')


def _fits(file: IndexFile, supported: frozenset[tags.Tag]) -> bool:
    try:
        _n, _v, _b, file_tags = parse_wheel_filename(file.filename)
    except InvalidWheelFilename:
        return False
    return not supported.isdisjoint(file_tags)


def _sha256(file: IndexFile) -> str | None:
    if file.sha256:
        return file.sha256
    if file.local_path:
        h = hashlib.sha256()
        with open(file.local_path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        return h.hexdigest()
    return None


def _python_ok(file: IndexFile, python: Version) -> bool:
    if not file.requires_python:
        return True
    try:
        return SpecifierSet(file.requires_python).contains(python, prereleases=True)
    except InvalidSpecifier:
        return True


def _glibc_needed(filename: str, machine: str) -> tuple[int, int] | None:
    """The oldest glibc one of a wheel's ``manylinux`` tags for ``machine`` asks for."""
    try:
        _n, _v, _b, file_tags = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return None
    found: list[tuple[int, int]] = []
    for tag in file_tags:
        m = _MANYLINUX.match(tag.platform)
        if m and m.group("arch") == machine:
            if m.group("legacy"):
                found.append(_LEGACY[m.group("legacy")])
            else:
                found.append((int(m.group("major")), int(m.group("minor"))))
    return min(found) if found else None


def _missing(
    entry_line: str,
    spec: SpecifierSet,
    files: Sequence[IndexFile],
    target: TargetEnvironment,
    glibc: tuple[int, int],
    needs: list[tuple[int, int]],
) -> str:
    """Why no wheel of ``entry_line`` fits: what the index has, and, when it has the wanted
    version, its wheels and what they need (a newer glibc goes to ``needs``)."""
    have = sorted({str(f.version) for f in files}, key=Version, reverse=True)[:6]
    listed = ", ".join(have) if have else "no wheels of it"
    text = f"{entry_line}: no wheel for this target on the index (it has {listed})"
    wanted = sorted(
        (f for f in files if spec.contains(f.version, prereleases=True)),
        key=lambda f: f.filename,
    )
    if not wanted:
        return text
    # with any glibc, which of the wanted version's wheels would fit: those need a newer one
    wide = frozenset(target_tags(target, _ANY_GLIBC))
    python = Version(target.python_version or target.major_minor or "0")
    machine = platform_machine(target.platform) if target.platform else ""
    newer = [
        (need, f)
        for f in wanted
        if _fits(f, wide)
        and _python_ok(f, python)
        and (need := _glibc_needed(f.filename, machine)) is not None
        and need > glibc
    ]

    def names(shown: Sequence[IndexFile]) -> str:
        return ", ".join(f.filename for f in shown[:3]) + (
            f" and {len(shown) - 3} more" if len(shown) > 3 else ""
        )

    if newer:
        need = min(n for n, _ in newer)
        needs.append(need)
        # the wheels that would fit with that glibc, not the other platforms' (macOS, arm64)
        fitting = [f for _, f in newer]
        return f"{text}; its wheels need glibc {_glibc_text(need)} or newer: {names(fitting)}"
    return f"{text}; its wheels are for other targets (Python, machine or OS): {names(wanted)}"


def _glibc_hint(glibc: tuple[int, int], source: str, need: tuple[int, int]) -> str:
    """The line under a lock error that says which glibc was used, why, and how to change it."""
    why = (
        f"the image's glibc, {_glibc_text(glibc)} ({source})"
        if source
        else f"glibc {_glibc_text(glibc)}, assumed since the image's glibc is unknown (it has "
        "no libc6 package): manylinux2014, the oldest manylinux, which any glibc image runs"
    )
    return (
        f"wheels were chosen for {why}; if the image's glibc is {_glibc_text(need)} or newer "
        f"(`ldd --version` in the image), give it with --glibc {_glibc_text(need)}"
    )


def build_lock(
    cs: ConstraintSet,
    *,
    client: SimpleIndex,
    target: TargetEnvironment,
    glibc: tuple[int, int] | None = None,
    glibc_source: str = "",
) -> Lock:
    """The lock of ``cs`` for ``target`` from ``client``'s indexes (see the module docstring).

    Exact pins lock that version; a policy range (a pinned package whose known-good version
    fell outside the policy) locks the newest version in the range with a fitting wheel;
    policy pins on packages the known-good state lacks are not installed, so not locked.
    The glibc is ``glibc``, else ``target.glibc``, else :data:`DEFAULT_GLIBC`, assumed;
    ``glibc_source`` says where a known one came from (``"the image's libc6 2.36-9"``), for
    the lock's header and its errors.
    """
    known = glibc or target.glibc
    used = known or DEFAULT_GLIBC
    source = (glibc_source or "given") if known else ""
    supported = frozenset(target_tags(target, used))
    needs: list[tuple[int, int]] = []
    python = Version(target.python_version or target.major_minor or "0")
    packages: list[LockedPackage] = []
    problems: list[str] = []
    for entry in cs.entries:
        if entry.source == "policy" and entry.note.startswith("not installed"):
            continue
        if entry.specifier.startswith("==="):
            problems.append(f"{entry.line}: a version that is not PEP 440 cannot be locked")
            continue
        spec = SpecifierSet(entry.specifier)
        try:
            files = [f for f in client.files(entry.name) if f.is_wheel and not f.yanked]
        except IndexFetchError as exc:
            problems.append(f"{entry.line}: {exc}")
            continue
        fitting = [f for f in files if _fits(f, supported) and _python_ok(f, python)]
        wanted = sorted(
            {f.version for f in fitting if spec.contains(f.version, prereleases=True)},
            reverse=True,
        )
        if not wanted:
            problems.append(_missing(entry.line, spec, files, target, used, needs))
            continue
        version = wanted[0]
        chosen = sorted((f for f in fitting if f.version == version), key=lambda f: f.filename)
        wheels: list[LockedWheel] = []
        for f in chosen:
            digest = _sha256(f)
            if digest is None:
                problems.append(
                    f"{entry.line}: the index gives no sha256 for {f.filename!r} "
                    "(pinguard does not download wheels to hash them)"
                )
                continue
            wheels.append(LockedWheel(f.filename, f.url, digest))
        if wheels:
            rp = sorted({f.requires_python for f in chosen if f.requires_python})
            packages.append(
                LockedPackage(
                    entry.name, str(version), tuple(wheels), rp[0] if len(rp) == 1 else None
                )
            )
    origin = source or "assumed: the image has no libc6 package"
    if problems:
        where = ", ".join(client.index_urls + client.find_links) or "no index"
        hint = [_glibc_hint(used, source, max(needs))] if needs else []
        raise LockError(
            f"cannot lock {len(problems)} of {len(cs.entries)} packages for CPython "
            f"{target.major_minor} on {target.platform} with glibc {_glibc_text(used)} "
            f"({origin}) from {where}:\n  " + "\n  ".join(problems + hint)
        )
    mm = target.major_minor
    glibc_line = f"glibc: {_glibc_text(used)} ({origin}{'' if source else '; --glibc X.Y'})"
    return Lock(
        packages=tuple(sorted(packages, key=lambda p: p.name)),
        environment_marker=environment_marker(target),
        requires_python=f"=={mm}.*" if mm else None,
        comments=(*header(cs)[:-1], glibc_line),
    )


def render_pylock(lock: Lock) -> str:
    """The pylock.toml text (deterministic: sorted, no timestamps)."""
    doc = tomlkit.document()
    for line in lock.comments:
        doc.add(tomlkit.comment(line))
    doc.add(tomlkit.comment("install: uv pip install -r pylock.toml | uv pip sync pylock.toml"))
    doc.add(tomlkit.nl())
    doc["lock-version"] = LOCK_VERSION
    doc["environments"] = [lock.environment_marker]
    if lock.requires_python:
        doc["requires-python"] = lock.requires_python
    doc["created-by"] = "pinguard"
    packages = tomlkit.aot()
    for pkg in lock.packages:
        table = tomlkit.table()
        table["name"] = str(pkg.name)
        table["version"] = pkg.version
        if pkg.requires_python:
            table["requires-python"] = pkg.requires_python
        wheels = tomlkit.aot()
        for w in pkg.wheels:
            wt = tomlkit.table()
            wt["name"] = w.filename
            wt["url"] = w.url
            hashes = tomlkit.inline_table()
            hashes["sha256"] = w.sha256
            wt["hashes"] = hashes
            wheels.append(wt)
        table["wheels"] = wheels
        packages.append(table)
    doc["packages"] = packages
    return tomlkit.dumps(doc)


def read_pylock(path: str | os.PathLike[str]) -> list[tuple[int, str]]:
    """``(line number, "name==version")`` for each ``[[packages]]`` entry of a pylock.toml."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {str(p)!r}: {exc.strerror or exc}") from exc
    try:
        doc = tomlkit.parse(text).unwrap()
    except tomlkit.exceptions.ParseError as exc:
        raise ConfigError(f"{str(p)!r} is not valid TOML: {exc}") from exc
    return pylock_entries(doc, text, str(p))


def looks_like_pylock(doc: dict[str, Any]) -> bool:
    """A parsed TOML document that is a PEP 751 lock by its content (``lock-version`` or a
    ``[[packages]]`` array), whatever the file is called."""
    return "lock-version" in doc or isinstance(doc.get("packages"), list)


def pylock_entries(doc: dict[str, Any], text: str, label: str) -> list[tuple[int, str]]:
    """``(line number, "name==version")`` for each ``[[packages]]`` entry of a parsed lock
    (``text`` its source, for the line numbers; ``label`` names the file in errors)."""
    packages = doc.get("packages")
    if not isinstance(packages, list):
        raise ConfigError(f"{label!r} has no [[packages]] array: not a PEP 751 lock file")
    lines = text.splitlines()
    out: list[tuple[int, str]] = []
    cursor = 0
    for entry in packages:
        if not isinstance(entry, dict) or "name" not in entry:
            raise ConfigError(f"{label!r}: a [[packages]] entry has no name")
        name = str(entry["name"])
        number = 0
        for i in range(cursor, len(lines)):
            if re.match(rf'^\s*name\s*=\s*"{re.escape(name)}"', lines[i]):
                number, cursor = i + 1, i + 1
                break
        version = entry.get("version")
        if version is None:
            out.append((number, name))  # no version: check reports a pinned package unpinned
            continue
        try:
            Version(str(version))
            out.append((number, f"{name}=={version}"))
        except InvalidVersion:
            out.append((number, f"{name}==={version}"))
    return out
