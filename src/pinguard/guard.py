"""The in-build guard: judge what the install step just run did to the image's environments.

`run_guard` audits a live filesystem (``/`` inside a ``RUN`` step) as one state, compares it
with the state the previous guard call recorded in a small JSON file inside the image
(`DEFAULT_STATE`), and builds an `AuditResult` whose single step is "this install step": its
changes with their causes (`pinguard.audit.diff.diff_snapshots`) and the requirements it newly
left unmet. The policy judges that result as it judges an image audit, so a downgrade, a
forbidden version or a broken pin fails the ``RUN`` step that caused it. The first call has
nothing to compare with: it records the baseline (which may have no Python environment yet:
that alone never fails a baseline, while a later call without one does unless
``allow_no_python``) and judges only the state itself (pins,
forbidden versions, every unmet requirement, duplicates, collisions). The state file is
written atomically and, by default, only when the verdict passes, so drift that was let
through (``|| true``) is reported again by every later guard until it is fixed or accepted
with ``update="always"``; it holds no timestamps, so identical builds give identical layers.
pinguard's own files (the zipapp, its package and dist-info, a venv holding only pinguard
and its requirements) are never part of the audited environments.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pinguard.audit.diff import diff_snapshots
from pinguard.audit.pipeline import audit_directory
from pinguard.buildfile.pipcli import is_guard_call
from pinguard.buildfile.shell import (
    LIST_SEPARATORS,
    SHELLS,
    SimpleCommand,
    simple_commands,
    tokenize,
)
from pinguard.errors import ConfigError, UsageError
from pinguard.fileio import atomic_write
from pinguard.models import (
    AuditResult,
    Change,
    Distribution,
    Environment,
    ImageInfo,
    Platform,
    Severity,
    Snapshot,
    Step,
    Unmet,
)
from pinguard.policy.model import Policy
from pinguard.target import host_platform, parse_requirement

STATE_SCHEMA = "pinguard/guard-state/v1"
DEFAULT_STATE = "/var/lib/pinguard/state.json"
UPDATE_MODES = ("pass", "always", "never")
#: Installed next to pinguard in a dedicated venv without being its requirements.
_TOOLING = frozenset({"pip", "setuptools", "wheel"})
_MAX_NAME = 300


class InvalidState(ConfigError):
    """The guard state file exists but cannot be read as a pinguard guard state."""


@dataclass(frozen=True, slots=True)
class GuardStep:
    """One guard call the state file remembers."""

    index: int
    name: str
    verdict: str


@dataclass(frozen=True, slots=True)
class GuardState:
    """What the previous recorded guard call saw: its environments and their unmet needs."""

    steps: tuple[GuardStep, ...]
    environments: tuple[Environment, ...]
    # (environment, package, requirement) unmet when the state was recorded
    unmet: frozenset[tuple[str, str, str]] = frozenset()


@dataclass(frozen=True, slots=True)
class GuardOutcome:
    """The judged result of one guard call and what happened to the state file."""

    result: AuditResult
    step: GuardStep
    baseline: bool
    state_path: Path  # on the host (root joined with the in-image path)
    recorded: bool
    previous: GuardStep | None  # the last step the state held before this call


# --------------------------------------------------------------------------- paths


def in_image(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> str | None:
    """The absolute in-image path of host ``path`` under ``root`` (None when outside it)."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    if real_root == os.sep:
        return real
    rel = os.path.relpath(real, real_root)
    if rel == os.curdir:
        return "/"
    if rel.startswith(os.pardir + os.sep) or rel == os.pardir:
        return None
    return "/" + rel.replace(os.sep, "/")


def host_path(in_image_path: str, root: str | os.PathLike[str]) -> Path:
    """Where the in-image absolute ``in_image_path`` is on the host, under ``root``."""
    if not in_image_path.startswith("/"):
        raise UsageError(f"the state path must be absolute inside the image: {in_image_path!r}")
    return Path(root) / in_image_path.lstrip("/")


def _closure(site: Path, start: str) -> tuple[set[str], set[str]]:
    """(names reachable from ``start`` through Requires-Dist, every name) in the site dir."""
    from importlib.metadata import distributions

    from packaging.utils import canonicalize_name

    requires: dict[str, list[str]] = {}
    for dist in distributions(path=[str(site)]):
        name = dist.metadata["Name"]
        if not name:
            continue
        deps: list[str] = []
        for text in dist.requires or ():
            req = parse_requirement(text)
            if req is None:
                continue
            if req.marker is not None and "extra" in str(req.marker):
                continue  # an optional extra: not needed to run pinguard
            deps.append(str(canonicalize_name(req.name)))
        requires[canonicalize_name(name)] = deps
    seen: set[str] = set()
    todo = [start]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(requires.get(name, ()))
    return seen, set(requires)


def own_paths(
    root: str | os.PathLike[str],
    *,
    module_file: str | None = None,
    prefix: str | None = None,
    base_prefix: str | None = None,
) -> tuple[str, ...]:
    """In-image paths of pinguard's own files under ``root``, for ``audit_directory(exclude=)``.

    The zipapp (or any zip) pinguard runs from; else its package directory and its
    dist-info/egg-info next to it; and the venv it runs in when that venv holds nothing but
    pinguard, its requirements and pip/setuptools/wheel (a venv shared with an application is
    audited, minus pinguard's own package). Arguments default to this interpreter's values.
    """
    if module_file is None:
        import pinguard

        module_file = pinguard.__file__ or ""
    prefix = sys.prefix if prefix is None else prefix
    base_prefix = sys.base_prefix if base_prefix is None else base_prefix
    found: list[str] = []
    package = Path(module_file).parent
    archive = next((p for p in Path(module_file).parents if p.is_file()), None)
    if archive is not None:
        found.append(str(archive))
    else:
        found.append(str(package))
        site = package.parent
        for pattern in ("pinguard-*.dist-info", "pinguard-*.egg-info", "pinguard.egg-info"):
            found.extend(str(p) for p in site.glob(pattern))
        if prefix != base_prefix and Path(prefix).is_dir() and site.is_dir():
            try:
                inside = Path(site).resolve().is_relative_to(Path(prefix).resolve())
            except OSError:
                inside = False
            if inside:
                needed, installed = _closure(site, "pinguard")
                if "pinguard" in installed and installed <= (needed | _TOOLING):
                    found.append(prefix)
    out = {p for p in (in_image(f, root) for f in found) if p is not None and p != "/"}
    return tuple(sorted(out))


# --------------------------------------------------------------------------- state file


def _dist_json(d: Distribution) -> dict[str, Any]:
    return {
        "name": str(d.name),
        "version": d.raw_version,
        "metadata_path": d.metadata_path,
        "fingerprint": d.fingerprint,
    }


def state_to_json(state: GuardState) -> str:
    """The state file text: sorted, indented, without timestamps."""
    unmet: dict[str, list[list[str]]] = {}
    for env, package, requirement in sorted(state.unmet):
        unmet.setdefault(env, []).append([package, requirement])
    doc = {
        "schema": STATE_SCHEMA,
        "steps": [{"index": s.index, "name": s.name, "verdict": s.verdict} for s in state.steps],
        "environments": [
            {
                "path": env.path,
                "python": env.python,
                "distributions": [
                    _dist_json(d)
                    for d in sorted(env.distributions, key=lambda d: (d.name, d.metadata_path))
                ],
                "unmet": unmet.get(env.path, []),
            }
            for env in sorted(state.environments, key=lambda e: e.path)
        ],
    }
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def state_from_json(text: str, where: str = "<state>") -> GuardState:
    """Parse a state file; anything unexpected raises `InvalidState` naming ``where``."""
    from packaging.utils import canonicalize_name

    try:
        doc = json.loads(text)
        if not isinstance(doc, dict) or doc.get("schema") != STATE_SCHEMA:
            found = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
            raise InvalidState(
                f"{where}: not a pinguard guard state (schema {found!r}, expected "
                f"{STATE_SCHEMA!r}); remove it to record a new baseline"
            )
        steps = tuple(
            GuardStep(int(s["index"]), str(s["name"]), str(s["verdict"])) for s in doc["steps"]
        )
        envs: list[Environment] = []
        unmet: set[tuple[str, str, str]] = set()
        for e in doc["environments"]:
            path = str(e["path"])
            dists = tuple(
                Distribution(
                    name=canonicalize_name(str(d["name"])),
                    raw_version=str(d["version"]),
                    metadata_path=str(d["metadata_path"]),
                    fingerprint=str(d.get("fingerprint", "")),
                )
                for d in e["distributions"]
            )
            python = e.get("python")
            envs.append(Environment(path, None if python is None else str(python), dists))
            unmet.update((path, str(p), str(r)) for p, r in e.get("unmet", []))
    except InvalidState:
        raise
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidState(
            f"{where}: unreadable guard state ({exc.__class__.__name__}: {exc}); "
            "remove it to record a new baseline"
        ) from exc
    return GuardState(steps, tuple(envs), frozenset(unmet))


def load_state(path: Path) -> GuardState | None:
    """The recorded state at host ``path``, or None when no guard has recorded one yet."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidState(f"cannot read the guard state {str(path)!r}: {exc}") from exc
    return state_from_json(text, str(path))


def save_state(path: Path, state: GuardState) -> None:
    """Write the state file atomically, creating its directory."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, state_to_json(state))
    except OSError as exc:
        raise UsageError(f"cannot write the guard state {str(path)!r}: {exc}") from exc


# --------------------------------------------------------------------------- step names


def parent_command(pid: int | None = None) -> str | None:
    """The script of the ``sh -c SCRIPT`` that started us (the Dockerfile RUN), if any."""
    pid = os.getppid() if pid is None else pid
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    argv = [a.decode(errors="replace") for a in raw.split(b"\0") if a]
    for i, arg in enumerate(argv[:-1]):
        if arg == "-c" and os.path.basename(argv[0]) in SHELLS:
            return argv[i + 1]
    return None


def _calls_guard(command: SimpleCommand) -> bool:
    try:
        return is_guard_call(command.argv())
    except ValueError:  # an unterminated quote: judge the words as written
        return is_guard_call([t.text for t in command.words])


def step_name_from_script(script: str) -> str:
    """A build-log friendly name for a RUN script: the commands other than the guard call.

    The script's list items (what ``&&``, ``;`` and newlines separate) are kept as written,
    joined with `` && ``, except those that call ``pinguard guard``.
    """
    kept: list[str] = []
    item: list[SimpleCommand] = []
    for command in simple_commands(tokenize(script)):
        item.append(command)
        if command.separator in LIST_SEPARATORS or not command.separator:
            if not any(_calls_guard(c) for c in item):
                kept.append(script[item[0].start : item[-1].end])
            item = []
    if item and not any(_calls_guard(c) for c in item):
        kept.append(script[item[0].start : item[-1].end])
    text = " && ".join(kept) if kept else script
    text = " ".join(text.replace("\\\n", " ").split())
    return text if len(text) <= _MAX_NAME else text[: _MAX_NAME - 3] + "..."


# --------------------------------------------------------------------------- the guard


def _filter_unmet(
    unmet: Iterable[Unmet], known: frozenset[tuple[str, str, str]]
) -> tuple[Unmet, ...]:
    return tuple(u for u in unmet if (u.environment, u.package, u.requirement) not in known)


def guard_result(
    previous: GuardState | None,
    current: AuditResult,
    *,
    step: GuardStep,
    platform: Platform | None,
) -> AuditResult:
    """The unjudged result of one guard call: one step, diffed against ``previous``."""
    from pinguard.audit.diff import unmet_requirements

    now = current.final
    changes: list[Change] = []
    unmet: list[Unmet] = []
    if previous is None:
        for env in now.environments:
            unmet.extend(unmet_requirements(env, platform, now.environments))
    else:
        # the recorded environments carry no requirements, so the diff returns every unmet
        # requirement of ``now``; those recorded as unmet are not new
        changed, found = diff_snapshots(Snapshot(environments=previous.environments), now, platform)
        changes.extend(changed)
        unmet.extend(_filter_unmet(found, previous.unmet))
    the_step = Step(
        index=step.index,
        created_by=step.name,
        layer_digest=None,
        changes=tuple(changes),
        unmet=tuple(sorted(unmet, key=lambda u: (u.environment, u.package, u.requirement))),
    )
    return dataclasses.replace(
        current,
        image=ImageInfo(
            reference=current.image.reference,
            manifest_digest=None,
            platform=platform,
            transport="guard",
        ),
        steps=(the_step,),
        snapshots=(now,),
        findings=(),
    )


def run_guard(
    root: str = "/",
    *,
    policy: Policy,
    state: str = DEFAULT_STATE,
    step_name: str | None = None,
    targets: Sequence[str] = (),
    fail_on: Severity | None = Severity.ERROR,
    allow_incomplete: bool = False,
    allow_no_python: bool = False,
    exclude: Sequence[str] = (),
    update: str = "pass",
    platform: Platform | None = None,
    today: _dt.date | None = None,
) -> GuardOutcome:
    """Audit ``root`` now, judge the step since the recorded state, record it per ``update``.

    ``state`` is the state file's absolute path inside the image (joined under ``root``);
    ``update`` is ``pass`` (record only a passing verdict), ``always`` or ``never``;
    ``exclude`` adds in-image paths to pinguard's own, which are always left out.
    """
    from pinguard.policy.engine import evaluate

    if update not in UPDATE_MODES:
        raise UsageError(f"invalid update mode {update!r}: use one of {', '.join(UPDATE_MODES)}")
    for path in exclude:
        if not path.startswith("/"):
            raise UsageError(f"--exclude needs an absolute in-image path, got {path!r}")
    platform = platform or host_platform()
    state_file = host_path(state, root)
    previous = load_state(state_file)
    skip = {*own_paths(root), *(p.rstrip("/") or "/" for p in exclude), state}
    current = audit_directory(
        str(root),
        reference=f"dir:{root}",
        exclude=tuple(sorted(skip)),
        platform=platform,
    )
    last = previous.steps[-1] if previous is not None and previous.steps else None
    index = (last.index + 1) if last is not None else 1
    if step_name is None:
        script = parent_command()
        if script is not None:
            step_name = step_name_from_script(script)
        else:
            step_name = "baseline" if previous is None else f"guard call {index}"
    result = guard_result(
        previous, current, step=GuardStep(index, step_name, "pending"), platform=platform
    )
    findings = evaluate(result, policy, targets=tuple(targets), today=today)
    result = dataclasses.replace(result, findings=findings, policy=policy.source)
    # the baseline records what the base image has, which may be no Python environment yet;
    # a later call without one is a missed environment (or the wrong root) and fails closed
    verdict = result.verdict(fail_on, allow_incomplete, allow_no_python or previous is None)
    this = GuardStep(index, step_name, verdict)
    record = update == "always" or (update == "pass" and verdict == "pass")
    if record:
        from pinguard.audit.diff import unmet_requirements

        unmet_now = {
            (u.environment, str(u.package), u.requirement)
            for env in current.final.environments
            for u in unmet_requirements(env, platform, current.final.environments)
        }
        save_state(
            state_file,
            GuardState(
                steps=(*(previous.steps if previous else ()), this),
                environments=current.final.environments,
                unmet=frozenset(unmet_now),
            ),
        )
    return GuardOutcome(
        result=result,
        step=this,
        baseline=previous is None,
        state_path=state_file,
        recorded=record,
        previous=last,
    )
