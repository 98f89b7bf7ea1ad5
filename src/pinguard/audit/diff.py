"""Changes between two states of an environment, with the requirements that caused them.

Owns three judgements that need no policy: the kind of each change (PEP 440 order, so
local labels such as ``+cu130`` and dev/pre releases sort as pip sorts them; a change with
a legacy, non-PEP 440 version on either side is ``changed``, order unknown), the chain of
installed requirements that admit a new version and exclude the old one (markers evaluated
for that environment's Python and the image platform), and the requirements left unmet
after a step (what ``pip check`` would say, computed offline: against every environment the
same interpreter imports from, ``models.interpreter_path``).

A ``Differ`` diffs one audit's steps in turn and carries from each step to the next what
does not change with it: the catalog keeps a distribution object for as long as its
metadata is unchanged, so each distribution's requirements are read once per audit, and a
distribution's unmet requirements are checked again only when it, or an installed
distribution it requires, is another object than at the last check. A step's work is then
in proportion to what it changed, beside a pass over names and identities.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

from pinguard.models import (
    Cause,
    Change,
    ChangeKind,
    Distribution,
    Environment,
    Platform,
    Snapshot,
    Unmet,
    interpreter_path,
    parse_version,
)
from pinguard.target import REQUIREMENT_CACHE, cached_requirement, marker_environment

MAX_CHAIN = 8
_MOVES = frozenset(
    {ChangeKind.ADDED, ChangeKind.UPGRADED, ChangeKind.DOWNGRADED, ChangeKind.CHANGED}
)
PARSE_CACHE = REQUIREMENT_CACHE  # distinct Requires-Dist strings kept parsed (bounded LRU)
_Menv = tuple[tuple[str, str], ...]  # a marker environment, as a key


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
def _marker_true(text: str, menv: _Menv) -> bool:
    parsed = _parse(text)
    if parsed is None or parsed.req.marker is None:
        return parsed is not None
    try:
        return parsed.req.marker.evaluate(dict(menv))
    except Exception:
        return False


def _requirements(dist: Distribution, menv: _Menv) -> Iterator[tuple[_Parsed, str]]:
    """``dist``'s requirements that parse and whose marker holds in ``menv``, in file order."""
    for text in dist.requires_dist:
        parsed = _parse(text)
        if parsed is None:
            continue
        if parsed.marker is not None and not _marker_true(text, menv):
            continue
        yield parsed, text


def _menv_key(menv: Mapping[str, str]) -> _Menv:
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


#: One distribution's unmet requirements as last checked: it, what each of its requirements
#: found installed then, and what was unmet.
_Checked = tuple[Distribution, tuple[Distribution | None, ...], list[Unmet]]


class Differ:
    """Diffs that share what earlier ones computed (module docstring): made once per audit
    and handed every step's snapshots in order; a fresh one gives the same answers."""

    def __init__(self) -> None:
        # (id of a distribution, marker environment) -> (the distribution, its requirements
        # that hold there); the distribution is kept so that its id is not reused
        self._reqs: dict[tuple[int, _Menv], tuple[Distribution, list[tuple[_Parsed, str]]]] = {}
        # (environment path, marker environment) -> {id of a distribution: (it, what each of
        # its requirements found installed, its unmet requirements)}: the distributions of
        # the environment as last checked
        self._unmet: dict[tuple[str, _Menv], dict[int, _Checked]] = {}
        # id of an environment -> (it, its distributions by name), for the last two states
        self._names: dict[int, tuple[Environment, dict[NormalizedName, Distribution]]] = {}

    def requirements(self, dist: Distribution, menv: _Menv) -> list[tuple[_Parsed, str]]:
        """``dist``'s requirements that parse and hold in ``menv``, in file order."""
        key = (id(dist), menv)
        hit = self._reqs.get(key)
        if hit is not None and hit[0] is dist:
            return hit[1]
        reqs = list(_requirements(dist, menv))
        self._reqs[key] = (dist, reqs)
        return reqs

    def by_name(self, env: Environment | None) -> dict[NormalizedName, Distribution]:
        """``env.by_name()``, computed once per environment object."""
        if env is None:
            return {}
        hit = self._names.get(id(env))
        if hit is not None and hit[0] is env:
            return hit[1]
        names = env.by_name()
        self._names[id(env)] = (env, names)
        return names

    def environments(
        self,
        before: Environment | None,
        after: Environment | None,
        *,
        platform: Platform | None,
        before_all: Sequence[Environment] = (),
        after_all: Sequence[Environment] = (),
    ) -> tuple[tuple[Change, ...], tuple[Unmet, ...]]:
        """``diff_environments``, with what earlier diffs computed."""
        either = after if after is not None else before
        path = either.path if either is not None else ""
        old = self.by_name(before)
        new = self.by_name(after)
        raw: dict[NormalizedName, tuple[ChangeKind, Distribution | None, Distribution | None]] = {}
        for name in sorted(old.keys() | new.keys()):
            b, a = old.get(name), new.get(name)
            if a is b:
                continue  # the very same distribution: nothing changed
            if b is None and a is not None:
                raw[name] = (ChangeKind.ADDED, None, a)
            elif a is None and b is not None:
                raw[name] = (ChangeKind.REMOVED, b, None)
            elif a is not None and b is not None:
                kind = _kind(b, a)
                if kind is not None:
                    raw[name] = (kind, b, a)
        requirers: dict[NormalizedName, list[tuple[Distribution, _Parsed, str]]] = {}
        if any(kind in _MOVES and a is not None for kind, _, a in raw.values()):
            python = (after.python if after else None) or (before.python if before else None)
            menv = _menv_key(marker_environment(python, platform))
            for dist in new.values():  # who requires each name, in the order of ``new``
                for parsed, text in self.requirements(dist, menv):
                    requirers.setdefault(parsed.name, []).append((dist, parsed, text))
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
            (u.package, u.requirement) for u in self.unmet(before, platform, before_all)
        }
        unmet = tuple(
            u
            for u in self.unmet(after, platform, after_all)
            if (u.package, u.requirement) not in unmet_before
        )
        return tuple(changes), unmet

    def snapshots(
        self, before: Snapshot, after: Snapshot, platform: Platform | None
    ) -> tuple[tuple[Change, ...], tuple[Unmet, ...]]:
        """``diff_snapshots``, with what earlier diffs computed."""
        live = {id(e) for e in (*before.environments, *after.environments)}
        self._names = {k: v for k, v in self._names.items() if k in live}
        changes: list[Change] = []
        unmet: list[Unmet] = []
        paths = sorted({e.path for e in before.environments} | {e.path for e in after.environments})
        for path in paths:
            c, u = self.environments(
                before.environment(path),
                after.environment(path),
                platform=platform,
                before_all=before.environments,
                after_all=after.environments,
            )
            changes.extend(c)
            unmet.extend(u)
        return tuple(changes), tuple(unmet)

    def unmet(
        self, env: Environment | None, platform: Platform | None, envs: Sequence[Environment] = ()
    ) -> tuple[Unmet, ...]:
        """``unmet_requirements``; a distribution is checked again only when it, or what one
        of its requirements finds installed, is not the object it was at the last check."""
        if env is None:
            return ()
        installed: dict[NormalizedName, Distribution] = {}
        for visible in interpreter_path(env, envs):
            for name, found in self.by_name(visible).items():
                installed.setdefault(name, found)
        menv = _menv_key(marker_environment(env.python, platform))
        last = self._unmet.get((env.path, menv), {})
        checked: dict[int, _Checked] = {}
        out: list[Unmet] = []
        for dist in self.by_name(env).values():
            if installed[dist.name] is not dist:
                continue
            reqs = self.requirements(dist, menv)
            deps = tuple(installed.get(parsed.name) for parsed, _ in reqs)
            hit = last.get(id(dist))
            if (
                hit is not None
                and hit[0] is dist
                and all(x is y for x, y in zip(hit[1], deps, strict=True))
            ):
                checked[id(dist)] = hit
                out.extend(hit[2])
                continue
            mine = [
                Unmet(
                    environment=env.path,
                    package=dist.name,
                    version=dist.raw_version,
                    requirement=parsed.shown,
                    installed=dep.raw_version if dep else None,
                )
                for (parsed, text), dep in zip(reqs, deps, strict=True)
                if not _met(parsed, text, dep)
            ]
            checked[id(dist)] = (dist, deps, mine)
            out.extend(mine)
        self._unmet[(env.path, menv)] = checked
        return tuple(sorted(out, key=lambda u: (u.package, u.requirement)))


def _met(parsed: _Parsed, text: str, dep: Distribution | None) -> bool:
    """Whether the installed ``dep`` meets ``parsed`` (the line ``text``), as ``pip check``
    judges it."""
    req = parsed.req
    return dep is not None and (
        not req.specifier
        or (dep.version is not None and _admits_version(text, dep.raw_version))
        or (dep.version is None and dep.raw_version in {s.version for s in req.specifier})
    )


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
    return Differ().environments(
        before, after, platform=platform, before_all=before_all, after_all=after_all
    )


def diff_snapshots(
    before: Snapshot, after: Snapshot, platform: Platform | None
) -> tuple[tuple[Change, ...], tuple[Unmet, ...]]:
    """Changes and newly unmet requirements of every environment from one state to the next."""
    return Differ().snapshots(before, after, platform)


@lru_cache(maxsize=PARSE_CACHE)
def _admits_version(text: str, raw_version: str) -> bool:
    """``_admits`` for the Requires-Dist line ``text`` and an installed ``raw_version``, kept
    (bounded LRU): a step's cause chains and its unmet requirements ask the same questions."""
    parsed = _parse(text)
    return parsed is not None and _admits(parsed.req, parse_version(raw_version))


def _direct_causes(
    name: NormalizedName,
    before: Distribution | None,
    after: Distribution,
    requirers: Mapping[NormalizedName, list[tuple[Distribution, _Parsed, str]]],
) -> list[tuple[Distribution, _Parsed, str]]:
    found = []
    for dist, parsed, text in requirers.get(name, ()):
        if dist.name == name or not _admits_version(text, after.raw_version):
            continue
        if before is not None and (
            not parsed.req.specifier or _admits_version(text, before.raw_version)
        ):
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
    return Differ().unmet(env, platform, envs)
