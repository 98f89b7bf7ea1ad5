"""The native-library and variant rules: small functions from audit facts to hits.

``native_duplicate``, ``native_mismatch`` and ``native_pin`` read the native libraries and
loader resolutions of the final state (``Snapshot.native``, ``Snapshot.resolutions``);
``variant_change`` reads each step's changes and the final environments. They follow
``policy/rules.py``'s contract: yield ``Hit``s, leave severity defaults, rule scope and
waivers to ``engine.evaluate``. A native hit's waivable ``packages`` are its owners'
names and the soname in normalized form (``libnccl-so-2``), so a waiver may name either.
"""

from __future__ import annotations

import fnmatch
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from pinguard.models import ChangeKind, NativeLibrary, Resolution, Snapshot
from pinguard.policy.model import NativePin
from pinguard.policy.rules import Facts, Hit, _why

_CU_SUFFIX = re.compile(r"^(?P<family>[a-z0-9]+)-.*-cu(?P<major>\d+)$")
_CU_LOCAL = re.compile(r"^cu(?P<digits>\d{2,4})$")


def soname_of(lib: NativeLibrary) -> str:
    """The name consumers ask for: ``DT_SONAME``, else the file name."""
    return lib.soname or lib.path.rsplit("/", 1)[-1]


def _owner_label(lib: NativeLibrary | None) -> str:
    if lib is None:
        return "nothing"
    if lib.owner_kind is None:
        return f"{lib.path} (no owner)"
    kind = "wheel" if lib.owner_kind == "wheel" else "deb"
    return f"{lib.path} ({kind} {lib.owner} {lib.owner_version})"


def _stated(lib: NativeLibrary) -> str:
    return lib.version or lib.owner_version or "version unknown"


def _key(lib: NativeLibrary) -> tuple[str, str, str]:
    return (lib.owner_kind or "", lib.owner or "", lib.owner_environment or "")


def _packages(libs: Iterable[NativeLibrary], soname: str) -> frozenset[str]:
    names = {canonicalize_name(lib.owner) for lib in libs if lib.owner}
    return frozenset({*names, canonicalize_name(soname)})


def _writers(facts: Facts) -> dict[str, int]:
    """Library path -> the last step whose own layer wrote it."""
    out: dict[str, int] = {}
    for step, snap in zip(facts.result.steps, facts.result.snapshots, strict=False):
        if step.layer_digest is None:
            continue
        for lib in snap.native:
            if lib.layer == step.layer_digest:
                out[lib.path] = step.index
    return out


def _by_real(final: Snapshot) -> dict[str, NativeLibrary]:
    return {lib.path: lib for lib in final.native}


def python_loads(final: Snapshot) -> dict[str, set[str]]:
    """soname -> the files Python's processes can load for it: what the resolutions of
    consumers inside a Python environment give, followed through what those files need in
    turn (one process's dependency closure, as far as resolutions were computed)."""
    roots = tuple(
        (env.real_path or env.path).rstrip("/") + "/" for env in final.environments
    ) + tuple(env.path.rstrip("/") + "/" for env in final.environments)
    inside = {lib.path for lib in final.native if lib.path.startswith(roots)}
    loads: dict[str, set[str]] = defaultdict(set)
    grew = True
    while grew:
        grew = False
        for res in final.resolutions:
            if res.consumer in inside and res.real is not None:
                loads[res.needed].add(res.real)
                if res.real not in inside:
                    inside.add(res.real)
                    grew = True
    return loads


def native_duplicate(facts: Facts) -> Iterator[Hit]:
    """Sonames of which Python's processes can load two different copies, with who loads
    which. Identical copies, copies no Python consumer reaches and system copies outside
    every Python consumer's closure are inventory (JSON, SBOM), not findings."""
    final = facts.result.final
    groups: dict[str, list[NativeLibrary]] = defaultdict(list)
    for lib in final.native:
        name = soname_of(lib)
        if lib.soname and name.startswith("lib"):
            groups[name].append(lib)
    libs_by_path = _by_real(final)
    writers = _writers(facts)
    reachable = python_loads(final)
    for soname, libs in sorted(groups.items()):
        owners = {_key(lib) for lib in libs}
        if len(owners) < 2:
            continue
        loaded = reachable.get(soname, set())
        if len({libs_by_path[p].digest for p in loaded if p in libs_by_path}) < 2:
            continue  # one copy (or identical copies) is all Python can load
        libs.sort(key=lambda lib: lib.path)
        loads: list[str] = []
        for res in final.resolutions:
            if res.needed != soname:
                continue
            got = libs_by_path.get(res.real) if res.real else None
            where = (
                f"{res.path} ({_stated(got) if got else 'not cataloged'}, via {res.via})"
                if res.path
                else "nothing"
            )
            loads.append(f"{res.consumer} loads {where}")
        provided = "; ".join(f"{_owner_label(lib)} says {_stated(lib)}" for lib in libs)
        consumers = f"; {'; '.join(loads)}" if loads else "; no cataloged consumer needs it"
        yield Hit(
            "native-duplicate",
            f"{soname} is provided {len(libs)} times: {provided}{consumers}",
            soname,
            libs[0].owner_environment,
            max((writers[lib.path] for lib in libs if lib.path in writers), default=None),
            tuple(_stated(lib) for lib in libs),
            _packages(libs, soname),
        )


def _release(raw: str) -> tuple[int, ...] | None:
    """The leading release numbers of a PEP 440 or Debian version ("2.28.9-1+cuda13.0")."""
    m = re.match(r"^(?:\d+:)?(\d+(?:\.\d+)*)", raw)
    return tuple(int(x) for x in m.group(1).split(".")) if m else None


def native_mismatch(facts: Facts) -> Iterator[Hit]:
    """Banners that contradict the owner's version; wheel files that differ from RECORD."""
    writers = _writers(facts)
    # A distribution with no INSTALLER was not installed from a wheel by an installer:
    # Debian's python3-* packages are built with pybuild, and dh_strip rewrites their
    # shared objects after RECORD was written, so RECORD's hash cannot match and says
    # nothing (checked on Debian 12's python3-cryptography and python3-yaml).
    installed = {
        (env.path, str(d.name))
        for env in facts.result.final.environments
        for d in env.distributions
        if d.installer
    }
    for lib in facts.result.final.native:
        if lib.owner is None:
            continue
        soname = soname_of(lib)
        problems: list[str] = []
        versions: tuple[str, ...] = ()
        # compare only when the owner is that library's own package (nvidia-nccl-cu13,
        # libnccl2), not a wheel that bundles someone else's copy under its own version
        if (
            lib.version is not None
            and lib.library is not None
            and lib.owner_version
            and lib.library in lib.owner.lower()
        ):
            have, want = _release(lib.version), _release(lib.owner_version)
            if have is not None and want is not None and have != want[: len(have)]:
                problems.append(f"the library says {lib.version}, its owner is {lib.owner_version}")
                versions = (lib.owner_version, lib.version)
        digest = lib.record_digest or ""
        by_installer = (lib.owner_environment, str(canonicalize_name(lib.owner))) in installed
        if (
            by_installer
            and digest.startswith("sha256=")
            and digest.rstrip("=") != lib.digest.rstrip("=")
        ):
            problems.append("its content differs from the hash in the wheel's RECORD")
            versions = versions or ((lib.owner_version or "",))
        if not problems:
            continue
        kind = "wheel" if lib.owner_kind == "wheel" else "deb"
        yield Hit(
            "native-mismatch",
            f"{lib.path} ({soname}) of {kind} {lib.owner} {lib.owner_version}: "
            + "; ".join(problems),
            lib.owner,
            lib.owner_environment,
            writers.get(lib.path),
            versions,
            _packages((lib,), soname),
        )


def _local(raw: str | None) -> str | None:
    if raw is None:
        return None
    try:
        return Version(raw).local
    except InvalidVersion:
        return None


def _cuda_major_of_local(local: str | None) -> int | None:
    m = _CU_LOCAL.match(local or "")
    return int(m.group("digits")[:-1]) if m else None


def variant_change(facts: Facts) -> Iterator[Hit]:
    """Local labels a step changed (+cu130 -> +cpu), and CUDA majors mixed in one env."""
    for step in facts.result.steps:
        for change in step.changes:
            if change.kind is ChangeKind.ADDED or change.kind is ChangeKind.REMOVED:
                continue
            before, after = _local(change.before), _local(change.after)
            if before == after:
                continue
            yield Hit(
                "variant-change",
                f"{change.name} {change.before} -> {change.after}: the build variant changed "
                f"from {'+' + before if before else 'none'} to {'+' + after if after else 'none'}",
                change.name,
                change.environment,
                step.index,
                tuple(v for v in (change.before, change.after) if v),
                frozenset({change.name}),
            )
    for env in facts.environments:
        majors: dict[str, dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
        for dist in env.distributions:
            m = _CU_SUFFIX.match(dist.name)
            if m is not None:
                majors[m.group("family")][int(m.group("major"))].append(
                    f"{dist.name} {dist.raw_version}"
                )
            major = _cuda_major_of_local(_local(dist.raw_version))
            if major is not None:
                majors["nvidia"][major].append(f"{dist.name} {dist.raw_version}")
        for family, by_major in sorted(majors.items()):
            if len(by_major) < 2:
                continue
            parts = [
                f"CUDA {major}: {', '.join(sorted(names))}"
                for major, names in sorted(by_major.items())
            ]
            names = sorted({n.split(" ")[0] for ns in by_major.values() for n in ns})
            yield Hit(
                "variant-change",
                f"{family} CUDA variants are mixed in one environment: {'; '.join(parts)}",
                names[0],
                env.path,
                None,
                tuple(v.split(" ", 1)[1] for ns in sorted(by_major.values()) for v in sorted(ns)),
                frozenset(canonicalize_name(n) for n in names),
            )


def _consumer_matches(pattern: str, res: Resolution, libs: dict[str, NativeLibrary]) -> bool:
    if not pattern:
        return True
    if fnmatch.fnmatchcase(res.consumer, pattern):
        return True
    owner = libs.get(res.consumer)
    return bool(
        owner and owner.owner and canonicalize_name(owner.owner) == canonicalize_name(pattern)
    )


def native_pin(facts: Facts, pins: Iterable[NativePin]) -> Iterator[Hit]:
    """Libraries loaded for (or providing) a pinned soname whose stated version is outside it."""
    final = facts.result.final
    libs = _by_real(final)
    writers = _writers(facts)
    for pin in pins:
        if not pin.scope.matches_run(facts.platform, facts.targets):
            continue
        judged: list[tuple[str, NativeLibrary | None, str]] = []  # (who, library, how)
        consumers = [
            r
            for r in final.resolutions
            if r.needed == pin.soname and _consumer_matches(pin.consumer, r, libs)
        ]
        if consumers:
            for res in consumers:
                lib = libs.get(res.real) if res.real else None
                judged.append((f"{res.consumer} loads", lib, res.path or "nothing"))
        elif not any(r.needed == pin.soname for r in final.resolutions):
            # nobody's lookup of it was resolved: judge every provider (fail closed)
            for lib in final.native:
                if soname_of(lib) == pin.soname:
                    judged.append(("provided by", lib, lib.path))
        else:
            continue  # others load it, the named consumer is not in the image
        for who, lib, where in judged:
            stated: tuple[str, ...] = ()
            if lib is None:
                message = f"{pin.soname}: {who} {where}, so its version cannot be judged"
            elif lib.version is None:
                message = (
                    f"{pin.soname}: {who} {where}, which states no version "
                    f"(pinned {pin.specifier}); it cannot be judged"
                )
            else:
                try:
                    ok = pin.specifier.contains(Version(lib.version).public, prereleases=True)
                except InvalidVersion:
                    ok = False
                if ok:
                    continue
                message = (
                    f"{pin.soname}: {who} {where}, version {lib.version}, outside the pin "
                    f"{pin.specifier}"
                )
                stated = (lib.version,)
            yield Hit(
                "native-pin",
                message + _why(pin.reason, pin.link),
                lib.owner if lib is not None and lib.owner else pin.soname,
                lib.owner_environment if lib is not None else None,
                writers.get(lib.path) if lib is not None else None,
                stated,
                _packages((lib,) if lib is not None else (), pin.soname),
                pin.severity,
                pin.origin,
            )
