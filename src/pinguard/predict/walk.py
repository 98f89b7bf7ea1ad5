"""The walk over a Dockerfile's stages and instructions, in build order, into an audit result.

`predict_dockerfile` parses the Dockerfile (``--build-arg`` values given), picks the target
stage (the last, or ``PredictOptions.stage``) and the stages it needs (its ``FROM`` chain,
``COPY --from`` and ``RUN --mount=from=`` sources), reads every ``FROM`` image through the
caller's reader (`pinguard.predict.base`), parses again with those images' ``Env`` in
effect, and walks each needed stage: one predicted step per instruction after ``FROM``,
numbered after the base image's history as the builder numbers them (buildah records every
instruction, ``ARG`` and ``LABEL`` included). ``ARG``, ``ENV``, ``WORKDIR`` and ``USER``
change what later steps see; ``COPY``/``ADD`` from the build context make files readable by
later installs (``-r``, ``-c``); ``COPY --from`` of a whole environment, a virtual
environment or a site-packages directory copies it, rebased; ``RUN`` is `run`'s. Each step's
changes and unmet requirements are `pinguard.audit.diff.diff_snapshots` of the states before
and after it, the same call the audit makes for a built layer. The result is an
``AuditResult``: the base image's audited steps, then the predicted ones (each with its
``Prediction``), and an ``Incomplete`` for every step that could not be predicted.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import posixpath
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pinguard.audit.diff import diff_snapshots
from pinguard.buildfile.dockerfile import (
    Dockerfile,
    Instruction,
    Stage,
    expand_word,
    parse_file,
    split_words,
)
from pinguard.catalog.python import with_environments
from pinguard.errors import SourceError, UsageError
from pinguard.models import (
    AuditResult,
    Distribution,
    Environment,
    ImageInfo,
    Incomplete,
    Platform,
    Prediction,
    Snapshot,
    Step,
)
from pinguard.predict.base import (
    SCRATCH,
    BaseImage,
    base_mapping,
    base_reference,
    scratch_base,
    with_platform,
)
from pinguard.predict.reqfiles import ContextFiles, ignore_patterns, python_metadata
from pinguard.predict.run import (
    Check,
    Resolver,
    RunResult,
    StageView,
    environment_roots,
    predict_run,
)
from pinguard.target import host_platform, parse_platform

#: ``(FROM name, reference, platform) -> BaseImage``: the caller's audit of a base image.
BaseReader = Callable[[str, str, Platform | None], BaseImage]
_ARCHIVES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".tar.zst")


@dataclass(frozen=True, slots=True)
class PredictOptions:
    """What a prediction needs besides the Dockerfile."""

    context: Path
    build_args: Mapping[str, str] = field(default_factory=dict)
    stage: str | None = None  # the target stage (default: the last)
    bases: Sequence[str] = ()  # --base [NAME=]REF
    allow_empty_base: bool = False
    platform: Platform | None = None
    resolver: Resolver = field(default_factory=Resolver)


@dataclass(slots=True)
class _Stage:
    """A stage as the walk leaves it."""

    base: BaseImage
    platform: Platform | None
    steps: list[Step]
    snapshots: list[Snapshot]
    snapshot: Snapshot
    venvs: dict[str, str | None]
    files: ContextFiles
    workdir: str
    user: str
    incomplete: list[Incomplete] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    stopped: int | None = None  # the step at which the build would fail
    unpredicted: int | None = None  # the first step that could not be predicted
    pending: list[tuple[int, tuple[Check, ...]]] = field(default_factory=list)

    def copy(self) -> _Stage:
        return dataclasses.replace(
            self,
            steps=list(self.steps),
            snapshots=list(self.snapshots),
            venvs=dict(self.venvs),
            incomplete=list(self.incomplete),
            notes=list(self.notes),
            pending=[],
        )


def _target_stage(dockerfile: Dockerfile, name: str | None) -> Stage:
    if name is None:
        return dockerfile.stages[-1]
    for stage in dockerfile.stages:
        if stage.name == name.lower() or (name.isdigit() and stage.index == int(name)):
            return stage
    known = ", ".join(s.name or str(s.index) for s in dockerfile.stages)
    raise UsageError(f"{dockerfile.path}: no stage named {name!r} (stages: {known})")


def _stage_ref(dockerfile: Dockerfile, ref: str, before: int) -> Stage | None:
    """The earlier stage ``ref`` names (by name or index), or None for an image."""
    for stage in dockerfile.stages[:before]:
        if stage.name == ref.lower() or (ref.isdigit() and stage.index == int(ref)):
            return stage
    return None


def _mount_options(value: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in value.split(","):
        key, _, val = part.partition("=")
        out[key.strip().lower()] = val.strip()
    return out


def _sources(dockerfile: Dockerfile, stage: Stage) -> list[tuple[Instruction, str]]:
    """``(instruction, name)`` of every ``COPY --from``/``RUN --mount=from=`` source."""
    out: list[tuple[Instruction, str]] = []
    for ins in stage.instructions:
        for key, value in ins.flags:
            if key == "from" and ins.keyword in ("COPY", "ADD"):
                out.append((ins, _expand(value, ins)))
            elif key == "mount" and ins.keyword == "RUN":
                opts = _mount_options(value)
                if opts.get("from"):
                    out.append((ins, _expand(opts["from"], ins)))
    return out


def _expand(word: str, ins: Instruction) -> str:
    try:
        return expand_word(word, ins.environ)
    except ValueError as exc:
        raise UsageError(f"{_where(ins)}: {exc}") from None


def _where(ins: Instruction, path: str = "") -> str:
    return f"{path or 'Dockerfile'}:{ins.start_line}"


def _needed(dockerfile: Dockerfile, target: Stage) -> tuple[list[int], dict[str, int]]:
    """The stages ``target`` needs, ascending, and every image a ``COPY --from`` reads by
    name (with the line that names it)."""
    needed: set[int] = set()
    images: dict[str, int] = {}
    todo = [target.index]
    while todo:
        index = todo.pop()
        if index in needed:
            continue
        needed.add(index)
        stage = dockerfile.stages[index]
        if stage.parent is not None:
            todo.append(stage.parent)
        for ins, ref in _sources(dockerfile, stage):
            found = _stage_ref(dockerfile, ref, index)
            if found is not None:
                todo.append(found.index)
            elif ref.isdigit():
                names = ", ".join(s.name or str(s.index) for s in dockerfile.stages)
                raise UsageError(
                    f"{dockerfile.path}:{ins.start_line}: --from={ref}: no stage {ref} before "
                    f"this one (stages: {names})"
                )
            else:
                images.setdefault(ref, ins.start_line)
    return sorted(needed), images


def _platform_of(stage: Stage, options: PredictOptions, where: str) -> Platform | None:
    if stage.platform:
        try:
            return parse_platform(stage.platform)
        except ValueError as exc:
            raise UsageError(f"{where}: FROM --platform: {exc}") from None
    return options.platform


def predict_dockerfile(path: str, options: PredictOptions, read_base: BaseReader) -> AuditResult:
    """Predict the build of the Dockerfile at ``path`` (see the module docstring)."""
    first = parse_file(path, build_args=options.build_args)
    target = _target_stage(first, options.stage)
    needed, copied_images = _needed(first, target)
    external = [
        s.base for i in needed if (s := first.stages[i]).parent is None and s.base != SCRATCH
    ]
    bases_map = base_mapping(options.bases, [*external, *copied_images])
    bases: dict[str, BaseImage] = {}
    for i in needed:
        stage = first.stages[i]
        if stage.parent is not None or stage.base in bases:
            continue
        where = f"{path}:{stage.start_line}"
        platform = _platform_of(stage, options, where)
        bases[stage.base] = _read(stage.base, where, platform, bases_map, options, read_base)
    for name, line in copied_images.items():
        if name not in bases:
            where = f"{path}:{line}"
            bases[name] = _read(name, where, options.platform, bases_map, options, read_base)
    parsed = parse_file(
        path,
        build_args=options.build_args,
        base_env={name: base.environ for name, base in bases.items()},
    )
    walked: dict[int, _Stage] = {}
    patterns = ignore_patterns(options.context)
    with options.resolver:
        for i in needed:
            stage = parsed.stages[i]
            if stage.parent is not None:
                start = walked[stage.parent].copy()
            else:
                start = _start(bases[stage.base], stage, options, path)
            walked[i] = _walk(parsed, stage, start, walked, bases, options, patterns)
    return _result(path, walked[target.index], bases)


def _read(
    name: str,
    where: str,
    platform: Platform | None,
    bases_map: Mapping[str, str],
    options: PredictOptions,
    read_base: BaseReader,
) -> BaseImage:
    if name == SCRATCH:
        return scratch_base(name, platform, "FROM scratch: the build starts from an empty state")
    reference = base_reference(name, bases_map)
    try:
        return with_platform(read_base(name, reference, platform), platform)
    except SourceError as exc:
        if not options.allow_empty_base:
            raise SourceError(
                f"{where}: FROM {name}: cannot read the base image {reference}: {exc} "
                "(--base NAME=REF to read it from elsewhere, --allow-empty-base to start "
                "from an empty state)"
            ) from exc
        return scratch_base(
            name,
            platform,
            f"FROM {name}: the base image {reference} could not be read ({exc}); predicted "
            "from an empty state (--allow-empty-base): what the base holds is not known",
        )


def _start(base: BaseImage, stage: Stage, options: PredictOptions, path: str) -> _Stage:
    result = base.result
    platform = result.image.platform or options.platform or host_platform()
    snapshots = list(result.snapshots)
    if len(snapshots) != len(result.steps):
        snapshots = [result.final] * len(result.steps)
    notes = [base.note] if base.note else []
    if base.onbuild:
        notes.append(
            f"FROM {base.name}: the image's ONBUILD triggers ({len(base.onbuild)}) are not "
            "predicted"
        )
    return _Stage(
        base=base,
        platform=platform,
        steps=list(result.steps),
        snapshots=snapshots,
        snapshot=result.final,
        venvs={},
        files=ContextFiles(),
        workdir=base.workdir or "/",
        user=base.user,
        incomplete=list(result.incomplete),
        notes=notes,
    )


def created_by(ins: Instruction) -> str:
    """The history entry a builder would write for ``ins`` (the instruction as written, its
    heredocs included; a RUN without its ``--mount``/``--network`` flags, as buildah and
    BuildKit record it, so the reports read the command)."""
    shown = () if ins.keyword == "RUN" else ins.flags
    flags = "".join(f"--{k}={v} " if v else f"--{k} " for k, v in shown)
    text = f"{ins.keyword} {flags}{ins.args}"
    for doc in ins.heredocs:
        text += f"\n{doc.body}{doc.delimiter}"
    return text


def _walk(
    dockerfile: Dockerfile,
    stage: Stage,
    state: _Stage,
    walked: Mapping[int, _Stage],
    bases: Mapping[str, BaseImage],
    options: PredictOptions,
    patterns: list[tuple[bool, str]],
) -> _Stage:
    path = dockerfile.path
    for ins in stage.instructions:
        if ins.keyword == "FROM":
            continue
        index = (state.steps[-1].index if state.steps else 0) + 1
        before = state.snapshot
        resolver, reason, notes = "", "", []
        if state.stopped is not None:
            reason = f"step {state.stopped} would fail, so the build stops there"
        elif ins.keyword == "RUN":
            view = StageView(
                snapshot=state.snapshot,
                venvs=state.venvs,
                files=state.files,
                workdir=state.workdir,
                user=state.user,
                platform=state.platform,
                mounts=_mounts(ins, dockerfile, stage, walked, bases, options, path),
            )
            outcome: RunResult = _run(ins, view, options, path)
            resolver, reason, notes = outcome.resolver, outcome.reason, list(outcome.notes)
            if outcome.checks and not reason:
                state.pending.append((len(state.steps), outcome.checks))
            state.files = outcome.files
            if not reason:
                state.snapshot, state.venvs = outcome.snapshot, dict(outcome.venvs)
            elif outcome.fails:
                state.stopped = index
        elif ins.keyword in ("COPY", "ADD"):
            reason = _copy(ins, state, dockerfile, stage, walked, bases, options, patterns)
        elif ins.keyword == "WORKDIR":
            state.workdir = posixpath.normpath(
                posixpath.join(state.workdir, _expand(ins.args, ins))
            )
        elif ins.keyword == "USER":
            state.user = _expand(ins.args, ins).strip()
        elif ins.keyword == "ONBUILD":
            notes.append("ONBUILD runs only in images built from this one; not predicted here")
        if reason and state.unpredicted is None:
            state.unpredicted = index
        elif state.unpredicted is not None and not reason:
            notes.append(f"rests on the state before step {state.unpredicted}, not predicted")
        changes, unmet = diff_snapshots(before, state.snapshot, state.platform)
        prediction = Prediction(
            status="unpredicted" if reason else "predicted",
            dockerfile=path,
            line=ins.start_line,
            resolver=resolver,
            reason=reason,
            notes=tuple(dict.fromkeys(notes)),
        )
        step = Step(index, created_by(ins), None, changes, unmet, prediction=prediction)
        state.steps.append(step)
        state.snapshots.append(state.snapshot)
        if reason:
            short = " ".join(created_by(ins).split())
            short = short if len(short) <= 100 else short[:99] + "…"
            state.incomplete.append(
                Incomplete(
                    f"step {index} ({path}:{ins.start_line}) {short}", f"unpredicted: {reason}"
                )
            )
    _settle(state, path)
    return state


def _settle(state: _Stage, path: str) -> None:
    """Take in pip's answers to the stage's pip steps: a step whose answer differs from uv's
    becomes unpredicted (with pip's answer as the reason), and every later step of the
    stage says it rests on uv's answer there."""
    disputed: int | None = None
    pending = dict(state.pending)
    state.pending = []
    for position, step in enumerate(state.steps):
        prediction = step.prediction
        if prediction is None:
            continue
        notes = list(prediction.notes)
        reason = prediction.reason
        for verdict, text in (check.result() for check in pending.get(position, ())):
            if verdict == "differ" and not reason:
                reason = text
            elif verdict != "differ":
                notes.append(text)
        if reason and not prediction.reason:
            short = " ".join(step.created_by.split())
            short = short if len(short) <= 100 else short[:99] + "…"
            state.incomplete.append(
                Incomplete(
                    f"step {step.index} ({path}:{prediction.line}) {short}",
                    f"unpredicted: {reason}",
                )
            )
            disputed = disputed if disputed is not None else step.index
        elif disputed is not None and step.index > disputed and not reason:
            notes.append(f"rests on uv's answer for step {disputed}, which pip's resolver disputes")
        status = "unpredicted" if reason else "predicted"
        updated = dataclasses.replace(
            prediction, status=status, reason=reason, notes=tuple(dict.fromkeys(notes))
        )
        if updated != prediction:
            state.steps[position] = dataclasses.replace(step, prediction=updated)


def _run(ins: Instruction, view: StageView, options: PredictOptions, path: str) -> RunResult:
    from pinguard.errors import IndexUnreachable

    try:
        return predict_run(ins, view, options.resolver)
    except IndexUnreachable as exc:
        raise IndexUnreachable(f"{path}:{ins.start_line}: {exc}") from exc


def _mounts(
    ins: Instruction,
    dockerfile: Dockerfile,
    stage: Stage,
    walked: Mapping[int, _Stage],
    bases: Mapping[str, BaseImage],
    options: PredictOptions,
    path: str,
) -> ContextFiles:
    """The files ``RUN --mount=type=bind`` makes readable for this step."""
    files = ContextFiles()
    for key, value in ins.flags:
        if key != "mount":
            continue
        opts = _mount_options(_expand(value, ins))
        if opts.get("type", "bind") != "bind":
            continue
        source = opts.get("source") or opts.get("src") or "."
        target = opts.get("target") or opts.get("dst") or opts.get("destination")
        if not target:
            continue
        origin = opts.get("from")
        if origin:
            earlier = _stage_ref(dockerfile, origin, stage.index)
            other = walked[earlier.index].files if earlier is not None else ContextFiles()
            for where, src in other.rebased(posixpath.join("/", source), target):
                files = files.add(where, src)
            continue
        host = _context_path(options.context, source, f"{path}:{ins.start_line}", "RUN --mount")
        files = files.add(target, host)
    return files


def _context_path(context: Path, source: str, where: str, what: str) -> Path:
    rel = posixpath.normpath(source.lstrip("/")) if source not in ("", ".", "/") else "."
    if rel == ".." or rel.startswith("../"):
        raise UsageError(f"{where}: {what} {source}: outside the build context {context}")
    host = context / rel
    if not host.exists():
        raise UsageError(
            f"{where}: {what} {source}: no such file or directory in the build context {context}"
        )
    return host


def _copy(
    ins: Instruction,
    state: _Stage,
    dockerfile: Dockerfile,
    stage: Stage,
    walked: Mapping[int, _Stage],
    bases: Mapping[str, BaseImage],
    options: PredictOptions,
    patterns: list[tuple[bool, str]],
) -> str:
    """Apply a COPY or ADD to ``state``; the reason when it cannot be predicted."""
    where = f"{dockerfile.path}:{ins.start_line}"
    flags = dict(ins.flags)
    words = (
        [_expand(w, ins) for w in ins.exec_form]
        if ins.exec_form is not None
        else [_expand(w, ins) for w, _ in split_words(ins.args, dockerfile.escape)]
    )
    if len(words) < 2:
        raise UsageError(f"{where}: {ins.keyword} needs a source and a destination")
    sources, dest_word = words[:-1], words[-1]
    dest = posixpath.normpath(posixpath.join(state.workdir, dest_word))
    into_dir = dest_word.endswith("/") or len(sources) > 1
    roots = environment_roots(state.snapshot, state.venvs)
    heredocs = {f"<<{h.delimiter}": h for h in ins.heredocs}
    origin = flags.get("from")
    if origin:
        return _copy_from(
            ins, state, _expand(origin, ins), sources, dest, dockerfile, stage, walked, bases
        )
    for source in sources:
        if source in heredocs or source.lstrip("<-") in {h.delimiter for h in ins.heredocs}:
            doc = heredocs.get(source) or ins.heredocs[0]
            target = posixpath.join(dest, doc.delimiter) if into_dir else dest
            state.files = state.files.add(target, doc.body.encode())
            continue
        if ins.keyword == "ADD" and "://" in source:
            target = posixpath.join(dest, posixpath.basename(source)) if into_dir else dest
            if any(_inside(target, r) for r in roots):
                return f"ADD {source} writes into the environment at {target}"
            state.files = state.files.add(target, None)
            continue
        hosts = _matches(options.context, source, where, ins.keyword)
        for host in hosts:
            is_dir = host.is_dir()
            if is_dir:
                target = dest
            elif into_dir or len(hosts) > 1:
                target = posixpath.join(dest, host.name)
            else:
                target = dest
            for root in roots:
                if _inside(target, root) or (is_dir and _inside(root, target)):
                    return f"{ins.keyword} {source} writes into the environment {root}"
            if is_dir:
                found = python_metadata(host, patterns, options.context)
                if found is not None:
                    return (
                        f"{ins.keyword} {source} copies Python metadata ({found}) from the "
                        "build context"
                    )
            elif ins.keyword == "ADD" and host.name.endswith(_ARCHIVES):
                state.notes.append(
                    f"{where}: ADD {source} unpacks an archive whose content is not read"
                )
            state.files = state.files.add(target, host)
    return ""


def _matches(context: Path, source: str, where: str, keyword: str) -> list[Path]:
    """The context paths a COPY source names (wildcards as Go's filepath.Match reads them)."""
    if any(c in source for c in "*?["):
        rel = posixpath.normpath(source.lstrip("/"))
        found = sorted(p for p in context.glob(rel) if p.exists())
        if not found:
            raise UsageError(
                f"{where}: {keyword} {source}: no file in the build context {context} matches"
            )
        return found
    return [_context_path(context, source, where, keyword)]


def _inside(path: str, root: str) -> bool:
    root = root.rstrip("/") or "/"
    return path == root or path.startswith(root + "/")


def _copy_from(
    ins: Instruction,
    state: _Stage,
    origin: str,
    sources: Sequence[str],
    dest: str,
    dockerfile: Dockerfile,
    stage: Stage,
    walked: Mapping[int, _Stage],
    bases: Mapping[str, BaseImage],
) -> str:
    """``COPY --from``: environments wholly below a source directory are copied, rebased."""
    earlier = _stage_ref(dockerfile, origin, stage.index)
    if earlier is not None:
        other = walked[earlier.index]
        snapshot, venvs, files = other.snapshot, other.venvs, other.files
    else:
        base = bases[origin]
        snapshot, venvs, files = base.result.final, {}, ContextFiles()
    for source in sources:
        src = posixpath.normpath(posixpath.join("/", source))
        if any(c in source for c in "*?["):
            hit = [r for r in environment_roots(snapshot, venvs) if fnmatch.fnmatchcase(r, src)]
            if hit or any(
                fnmatch.fnmatchcase(r.rsplit("/", 1)[0], src)
                for r in environment_roots(snapshot, venvs)
            ):
                return (
                    f"COPY --from={origin} {source}: a wildcard over environments is not modelled"
                )
            continue
        for env in snapshot.environments:
            for p in (env.path, env.real_path):
                if p and _inside(src, p) and src != p:
                    return (
                        f"COPY --from={origin} {source} copies part of the environment {env.path}"
                    )
        copied = [e for e in snapshot.environments if _inside(e.path, src)]
        for env in copied:
            if env.real_path is not None and not _inside(env.real_path, src):
                return (
                    f"COPY --from={origin} {source} copies {env.path}, a link to "
                    f"{env.real_path} outside it"
                )
            state.snapshot = _merge(state.snapshot, _rebase(env, src, dest))
        for prefix, python in venvs.items():
            if _inside(prefix, src):
                state.venvs[_rebased(prefix, src, dest)] = python
        for where, content in files.rebased(src, dest):
            state.files = state.files.add(where, content)
    return ""


def _rebased(path: str, src: str, dest: str) -> str:
    return posixpath.normpath(dest + path[len(src.rstrip("/")) :]) if path != src else dest


def _rebase(env: Environment, src: str, dest: str) -> Environment:
    dists = tuple(
        dataclasses.replace(d, metadata_path=_rebased(d.metadata_path, src, dest))
        for d in env.distributions
    )
    real = _rebased(env.real_path, src, dest) if env.real_path else None
    return Environment(_rebased(env.path, src, dest), env.python, dists, real)


def _merge(snapshot: Snapshot, env: Environment) -> Snapshot:
    """``env`` copied over what is at its path: files of the same name are replaced."""
    existing = snapshot.environment(env.path)
    if existing is not None:
        mine = {d.metadata_path for d in env.distributions}
        kept: list[Distribution] = [
            d for d in existing.distributions if d.metadata_path not in mine
        ]
        env = dataclasses.replace(
            env,
            distributions=tuple(
                sorted((*kept, *env.distributions), key=lambda d: (d.name, d.metadata_path))
            ),
        )
    envs = [e for e in snapshot.environments if e.path != env.path]
    return with_environments(snapshot, [*envs, env])


def _result(path: str, stage: _Stage, bases: Mapping[str, BaseImage]) -> AuditResult:
    predicted = [s for s in stage.steps if s.prediction is not None]
    unpredicted = [
        s.index for s in predicted if s.prediction and s.prediction.status == "unpredicted"
    ]
    resolvers = sorted(
        {s.prediction.resolver for s in predicted if s.prediction and s.prediction.resolver}
    )
    notes = list(dict.fromkeys(stage.notes))
    if predicted:
        span = (
            f"steps {predicted[0].index}-{predicted[-1].index}"
            if len(predicted) > 1
            else f"step {predicted[0].index}"
        )
        notes.append(
            f"predicted from {path}, nothing built: {span} "
            + (
                f"({len(unpredicted)} unpredicted: {', '.join(map(str, unpredicted))})"
                if unpredicted
                else "(every one predicted)"
            )
        )
    notes += [f"resolver: {r}" for r in resolvers]
    notes.append(
        "a prediction sees Python distributions only: native libraries, Debian packages and "
        "files a step writes are the base image's"
    )
    image = ImageInfo(
        reference=path, manifest_digest=None, platform=stage.platform, transport="dockerfile"
    )
    incomplete = tuple(dict.fromkeys(stage.incomplete))
    return AuditResult(
        image=image,
        steps=tuple(stage.steps),
        final=stage.snapshot,
        snapshots=tuple(stage.snapshots),
        incomplete=incomplete,
        notes=(*stage.base.result.notes, *notes),
    )
