"""Changes between two states of an environment, with the requirements that caused them.

Owns three judgements that need no policy: the kind of each change (PEP 440 order, so
local labels such as ``+cu130`` and dev/pre releases sort as pip sorts them; a change with
a legacy, non-PEP 440 version on either side is ``changed``, order unknown), the chain of
installed requirements that admit a new version and exclude the old one (markers evaluated
for that environment's Python and the image platform), and the requirements left unmet
after a step (what ``pip check`` would say, computed offline: against every environment the
same interpreter imports from, ``catalog.python.interpreter_path``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

from pinguard.catalog.python import interpreter_path
from pinguard.models import (
    Cause,
    Change,
    ChangeKind,
    Distribution,
    Environment,
    Platform,
    Snapshot,
    Unmet,
)
from pinguard.target import REQUIREMENT_CACHE, cached_requirement, marker_environment

MAX_CHAIN = 8
_MOVES = frozenset(
    {ChangeKind.ADDED, ChangeKind.UPGRADED, ChangeKind.DOWNGRADED, ChangeKind.CHANGED}
)
PARSE_CACHE = REQUIREMENT_CACHE  # distinct Requires-Dist strings kept parsed (bounded LRU)


@dataclass(frozen=True, slots=True)
class _Parsed:
    """One Requires-Dist line parsed once: the requirement, its canonical name, its text."""

    req: Requirement
    name: NormalizedName
    shown: str  # str(req): how a cause or an unmet requirement quotes it
    marker: str | None


@lru_cache(maxsize=PARSE_CACHE)
def _parse(text: str) -> _Parsed | None:
    req = cached_requirement(text)
    if req is None:
        return None
    marker = str(req.marker) if req.marker is not None else None
    return _Parsed(req, canonicalize_name(req.name), str(req), marker)


@lru_cache(maxsize=PARSE_CACHE)
def _marker_true(text: str, menv: tuple[tuple[str, str], ...]) -> bool:
    parsed = _parse(text)
    if parsed is None or parsed.req.marker is None:
        return parsed is not None
    try:
        return parsed.req.marker.evaluate(dict(menv))
    except Exception:
        return False


def _requirements(
    dist: Distribution, menv: tuple[tuple[str, str], ...]
) -> Iterator[tuple[_Parsed, str]]:
    """``dist``'s requirements that parse and whose marker holds in ``menv``, in file order."""
    for text in dist.requires_dist:
        parsed = _parse(text)
        if parsed is None:
            continue
        if parsed.marker is not None and not _marker_true(text, menv):
            continue
        yield parsed, text


def _requirers(
    installed: Mapping[NormalizedName, Distribution], menv: tuple[tuple[str, str], ...]
) -> dict[NormalizedName, list[tuple[Distribution, _Parsed, str]]]:
    """Who requires each name, in the order a scan of ``installed`` would meet them."""
    out: dict[NormalizedName, list[tuple[Distribution, _Parsed, str]]] = {}
    for dist in installed.values():
        for parsed, text in _requirements(dist, menv):
            out.setdefault(parsed.name, []).append((dist, parsed, text))
    return out


def _menv_key(menv: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(menv.items()))


def _admits(req: Requirement, version: Version | None) -> bool:
    """Whether ``req`` accepts an installed ``version``, pre-releases included, as pip check does.

    ``prereleases=True`` is passed on purpose: packaging's default (``None``) changed meaning
    in 26.0 (pypa/packaging#897) and pyproject allows packaging>=24, so relying on it would
    judge an installed nightly differently depending on the packaging version.
    """
    if version is None:
        return False
    return req.specifier.contains(version, prereleases=True)


def _pick(env: Environment | None) -> dict[NormalizedName, Distribution]:
    return env.by_name() if env is not None else {}


def _kind(before: Distribution, after: Distribution) -> ChangeKind | None:
    bv, av = before.version, after.version
    if bv is not None and av is not None:
        if av > bv:
            return ChangeKind.UPGRADED
        if av < bv:
            return ChangeKind.DOWNGRADED
        if before.raw_version != after.raw_version or before.fingerprint != after.fingerprint:
            return ChangeKind.REINSTALLED
        return None
    if before.raw_version != after.raw_version:
        return ChangeKind.CHANGED  # not PEP 440: order unknown
    if before.fingerprint != after.fingerprint:
        return ChangeKind.REINSTALLED
    return None


def diff_environments(
    before: Environment | None,
    after: Environment | None,
    *,
    platform: Platform | None,
    before_all: Sequence[Environment] = (),
    after_all: Sequence[Environment] = (),
) -> tuple[tuple[Change, ...], tuple[Unmet, ...]]:
    """Changes from ``before`` to ``after`` (one environment) and newly unmet requirements
    (``before_all``/``after_all``: every environment of each state, for what the same
    interpreter imports from other directories)."""
    either = after if after is not None else before
    path = either.path if either is not None else ""
    old = _pick(before)
    new = _pick(after)
    python = (after.python if after else None) or (before.python if before else None)
    menv = _menv_key(marker_environment(python, platform))
    requirers = _requirers(new, menv)
    raw: dict[NormalizedName, tuple[ChangeKind, Distribution | None, Distribution | None]] = {}
    for name in sorted(set(old) | set(new)):
        b, a = old.get(name), new.get(name)
        if b is None and a is not None:
            raw[name] = (ChangeKind.ADDED, None, a)
        elif a is None and b is not None:
            raw[name] = (ChangeKind.REMOVED, b, None)
        elif a is not None and b is not None:
            kind = _kind(b, a)
            if kind is not None:
                raw[name] = (kind, b, a)
    changes = []
    for name, (kind, b, a) in raw.items():
        causes: tuple[Cause, ...] = ()
        if kind in _MOVES and a is not None:
            causes = _cause_chain(name, b, a, requirers, raw)
        changes.append(
            Change(
                environment=path,
                name=name,
                kind=kind,
                before=b.raw_version if b else None,
                after=a.raw_version if a else None,
                causes=causes,
            )
        )
    unmet_before = {
        (u.package, u.requirement) for u in unmet_requirements(before, platform, before_all)
    }
    unmet = tuple(
        u
        for u in unmet_requirements(after, platform, after_all)
        if (u.package, u.requirement) not in unmet_before
    )
    return tuple(changes), unmet


def diff_snapshots(
    before: Snapshot, after: Snapshot, platform: Platform | None
) -> tuple[tuple[Change, ...], tuple[Unmet, ...]]:
    """Changes and newly unmet requirements of every environment from one state to the next."""
    changes: list[Change] = []
    unmet: list[Unmet] = []
    paths = sorted({e.path for e in before.environments} | {e.path for e in after.environments})
    for path in paths:
        c, u = diff_environments(
            before.environment(path),
            after.environment(path),
            platform=platform,
            before_all=before.environments,
            after_all=after.environments,
        )
        changes.extend(c)
        unmet.extend(u)
    return tuple(changes), tuple(unmet)


def _direct_causes(
    name: NormalizedName,
    before: Distribution | None,
    after: Distribution,
    requirers: Mapping[NormalizedName, list[tuple[Distribution, _Parsed, str]]],
) -> list[tuple[Distribution, _Parsed, str]]:
    found = []
    after_version = after.version
    before_version = before.version if before is not None else None
    for dist, parsed, text in requirers.get(name, ()):
        if dist.name == name or not _admits(parsed.req, after_version):
            continue
        if before is not None and (not parsed.req.specifier or _admits(parsed.req, before_version)):
            continue  # admits the old version too: not why it moved
        found.append((dist, parsed, text))
    return found


def _cause_chain(
    name: NormalizedName,
    before: Distribution | None,
    after: Distribution,
    requirers: Mapping[NormalizedName, list[tuple[Distribution, _Parsed, str]]],
    changed: Mapping[NormalizedName, tuple[ChangeKind, Distribution | None, Distribution | None]],
) -> tuple[Cause, ...]:
    """Who pulled ``name`` to its new version, nearest first: one index lookup per link."""
    chain: list[Cause] = []
    seen = {name}
    current, cur_before, cur_after = name, before, after
    for _ in range(MAX_CHAIN):
        candidates = _direct_causes(current, cur_before, cur_after, requirers)
        if not candidates:
            break
        # Prefer a dependant that this step changed too (it drove the move), then by name.
        candidates.sort(key=lambda c: (c[0].name not in changed, c[0].name))
        dist, parsed, _text = candidates[0]
        chain.append(Cause(package=dist.name, version=dist.raw_version, requirement=parsed.shown))
        if dist.name in seen or dist.name not in changed:
            break
        seen.add(dist.name)
        kind, b, a = changed[dist.name]
        if a is None or kind not in {ChangeKind.ADDED, ChangeKind.UPGRADED, ChangeKind.DOWNGRADED}:
            break
        current, cur_before, cur_after = dist.name, b, a
    return tuple(chain)


def unmet_requirements(
    env: Environment | None, platform: Platform | None, envs: Sequence[Environment] = ()
) -> tuple[Unmet, ...]:
    """Every requirement of a distribution in ``env`` that its interpreter does not meet:
    looked up in the environments of ``envs`` on the same import path, the first on the path
    winning (a distribution shadowed by an earlier directory is not the one imported, and is
    not judged), as ``pip check`` does."""
    if env is None:
        return ()
    installed: dict[NormalizedName, Distribution] = {}
    for visible in interpreter_path(env, envs):
        for name, found in _pick(visible).items():
            installed.setdefault(name, found)
    menv = _menv_key(marker_environment(env.python, platform))
    out: list[Unmet] = []
    for dist in _pick(env).values():
        if installed[dist.name] is not dist:
            continue
        for parsed, _text in _requirements(dist, menv):
            req = parsed.req
            dep = installed.get(parsed.name)
            if dep is not None and (
                not req.specifier
                or (dep.version is not None and _admits(req, dep.version))
                or (dep.version is None and dep.raw_version in {s.version for s in req.specifier})
            ):
                continue
            out.append(
                Unmet(
                    environment=env.path,
                    package=dist.name,
                    version=dist.raw_version,
                    requirement=parsed.shown,
                    installed=dep.raw_version if dep else None,
                )
            )
    return tuple(sorted(out, key=lambda u: (u.package, u.requirement)))
