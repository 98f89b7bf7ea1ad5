"""The audit pipeline: one image reference in, one ``AuditResult`` out.

Joins the stages in their one direction: the source resolves the image, each layer not in
the cache is streamed and analysed (in worker processes when the transport allows, since
two layers in two processes keep both cores busy), the analyses are replayed into the
state after every history step, and each step is diffed against the one before. When the
audit is abandoned (Ctrl-C, or one layer failed) the workers are stopped at once rather than
left to finish layers nobody will read. With a shared cache that can lock (Redis), an
uncached layer is claimed before it is analysed: a layer another audit has claimed is
waited for (its entry read when written) while this audit analyses the rest, and analysed
here only when the other's claim lapses or the wait runs out. Findings are left empty:
judging is the policy's job. Progress is reported through a callback so that only the CLI
draws anything.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

from pinguard.audit.diff import diff_snapshots
from pinguard.audit.hooks import POST_STATE, ImageFacts
from pinguard.audit.replay import Replay, ReplayCache, StepEncoder, replay_key
from pinguard.audit.state import State
from pinguard.catalog import AnalyzerOptions, Analyzers
from pinguard.errors import BlobVerificationError, SourceError
from pinguard.layers.analysis import (
    LayerAnalysis,
    LayerLimits,
    analyze_directory,
    analyze_stream,
)
from pinguard.layers.blob import keep_chunk_memory
from pinguard.layers.cache import LayerCache
from pinguard.layers.cachestore import CacheSpec, LayerStore, VerifiedCache
from pinguard.layers.chunked import LazyUnavailable, TocPosition, analyze_chunked
from pinguard.models import (
    AuditResult,
    ImageInfo,
    Incomplete,
    LayerRead,
    Platform,
    Snapshot,
    Step,
)
from pinguard.sources.interface import ImageSource, LayerRef, ResolvedImage, SourceOptions

if TYPE_CHECKING:
    from concurrent.futures import Future, ProcessPoolExecutor

#: Handed each layer's analysis (digest, analysis) as soon as it is ready.
Ready = Callable[[str, LayerAnalysis], None]


class Progress(Protocol):
    """What the audit tells whoever draws progress (the CLI)."""

    def layers(self, todo: Sequence[LayerRef], cached: int) -> None: ...
    def advance(self, layer: LayerRef, nbytes: int) -> None: ...
    def done(self, layer: LayerRef) -> None: ...


@dataclass(frozen=True, slots=True)
class AuditOptions:
    """How to audit, beyond where the image is."""

    source: SourceOptions = SourceOptions()  # noqa: RUF009 - frozen, so sharing it is safe
    cache_dir: Path | None = None  # None: no cache
    shared_cache: CacheSpec | None = None  # a shared, verified cache; replaces cache_dir
    verify_records: bool = False
    jobs: int = 0  # worker processes for layers; 0: one per core
    limits: LayerLimits = LayerLimits()  # noqa: RUF009 - frozen, so sharing it is safe
    # "full": stream every layer and prove its DiffID; "lazy": read a zstd:chunked layer
    # from its table of contents and only the chunks the analyzers need (the DiffID is then
    # not proven; docs/reliability.md), any other layer, or one that does not verify, full
    layer_read: str = "full"
    # write the replay entry in a forked child while the caller judges and renders (the
    # process waits for it before it exits: ``replay.wait_behind``); the CLI asks for it
    write_behind: bool = False

    def analyzers(self) -> Analyzers:
        """The analyzers these options configure."""
        return Analyzers.for_options(AnalyzerOptions(verify_records=self.verify_records))


def _analyze_blob(
    stream: BinaryIO,
    layer: LayerRef,
    analyzers: Analyzers,
    progress: Callable[[int], None] | None = None,
    limits: LayerLimits | None = None,
    label: str = "",
) -> LayerAnalysis:
    return analyze_stream(
        stream,
        digest=layer.digest,
        size=layer.size,
        select=analyzers.selector(),
        open_stream=analyzers.open_stream,
        progress=progress,
        diff_id=layer.diff_id,
        limits=limits,
        label=label,
    )


def _read_lazily(
    source: ImageSource, layer: LayerRef, analyzers: Analyzers, limits: LayerLimits
) -> LayerAnalysis:
    """One layer from its zstd:chunked TOC and the chunks its analyzers need
    (``pinguard.layers.chunked``); ``LazyUnavailable`` says why it cannot be."""
    position = TocPosition.of(layer.annotation)
    if position is None:
        raise LazyUnavailable("it has no zstd:chunked table of contents")

    def fetch(ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        got = source.read_ranges(layer, ranges)
        if got is None:
            raise LazyUnavailable("its transport cannot read parts of a blob")
        return got

    return analyze_chunked(
        fetch,
        position,
        digest=layer.digest,
        size=layer.size,
        select=analyzers.selector(),
        open_stream=analyzers.open_stream,
        open_parts=analyzers.open_parts,
        limits=limits,
    )


def _analyze_tree(layer: LayerRef, analyzers: Analyzers) -> LayerAnalysis:
    assert layer.tree is not None
    analysis = analyze_directory(
        layer.tree.root,
        select=analyzers.selector(),
        open_stream=analyzers.open_stream,
        exclude=layer.tree.exclude,
    )
    analysis.digest = layer.digest
    return analysis


# In a worker process: where byte counts go while a blob streams (set by the pool's
# initializer, so the queue is inherited rather than pickled), and whether a layer is
# being analysed (so a SIGTERM knows whether there is anything to clean up first).
_BYTES: Any = None
_BUSY = False
_REPORT_EVERY = 1 << 20  # send a count once a MiB has gone by, not per read
_STOP_GRACE = 5.0  # seconds a terminated worker gets to clean up before it is killed


class _Stopped(BaseException):
    """Raised in a busy worker by SIGTERM: unwinds it so ``finally`` blocks (the blob
    stream, a cache entry's temporary file) clean up before the process exits."""


def _on_sigterm(signum: int, frame: object) -> None:
    if _BUSY:
        raise _Stopped
    os._exit(128 + signum)  # idle: nothing to clean up, and no traceback from the pool loop


def _init_worker(queue: Any) -> None:
    """Pool worker set-up: the byte queue, and signals. Ctrl-C in a terminal goes to the
    whole process group; the parent alone handles it (and stops the workers), so a worker
    ignores SIGINT rather than printing a traceback of its own."""
    global _BYTES  # noqa: PLW0603 - per-process state of a pool worker
    _BYTES = queue
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _on_sigterm)


def _byte_reporter(digest: str) -> Callable[[int], None] | None:
    queue = _BYTES
    if queue is None:
        return None
    pending = [0]

    def tick(n: int) -> None:
        pending[0] += n
        if pending[0] >= _REPORT_EVERY:
            queue.put((digest, pending[0]))
            pending[0] = 0

    return tick


def _analyze_one(
    source: ImageSource,
    layer: LayerRef,
    analyzers: Analyzers,
    cache: LayerStore | None,
    limits: LayerLimits,
    lazy: bool = False,
    label: str = "",
) -> LayerAnalysis | str:
    """One layer in a worker process; the worker also writes the cache entry, so the
    serialisation runs on both cores instead of after the pool, and parses what the states
    will need of the layer's captured files (``Analyzers.prepare``: RECORD rows), so the
    parent replaying the states does not. Bytes read are reported
    through the pool's queue as they flow, when the parent asked for progress. Stopped by
    the parent (SIGTERM), it unwinds and exits at once: the pool is being torn down.
    ``lazy``: read from the layer's zstd:chunked TOC, or return why it cannot be."""
    global _BUSY  # noqa: PLW0603 - per-process state of a pool worker
    _BUSY = True
    try:
        if lazy:
            try:
                analysis = _read_lazily(source, layer, analyzers, limits)
            except LazyUnavailable as exc:
                return str(exc)
            if cache is not None:
                cache.put(analysis)
            analyzers.prepare(analysis)
            return analysis
        stream = source.open_blob(layer)
        try:
            analysis = _analyze_blob(
                stream, layer, analyzers, _byte_reporter(layer.digest), limits, label
            )
        except _Stopped:
            # leave the stream: closing it waits for the lock its prefetch thread holds
            # while blocked in a read of a stalled connection (measured: the 5 s grace)
            raise
        except BaseException:
            stream.close()
            raise
        stream.close()
        if cache is not None:
            cache.put(analysis)
        analyzers.prepare(analysis)  # parsed here, on this core, not by the parent
        return analysis
    except _Stopped:
        os._exit(128 + signal.SIGTERM)
    finally:
        _BUSY = False


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Stop a pool's workers now, whatever they are doing (a blob read blocked on a slow
    registry included): SIGTERM, a short grace to clean up, then SIGKILL. Used when the
    audit is abandoned (Ctrl-C, or one layer failed), so the parent never waits for layers
    whose analyses nobody will read."""
    # ProcessPoolExecutor gains terminate_workers() in Python 3.14; until then its
    # process table is the only handle on the workers (and shutdown() clears it).
    workers = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in workers:
        if proc.is_alive():
            proc.terminate()
    deadline = time.monotonic() + _STOP_GRACE
    for proc in workers:
        proc.join(max(0.0, deadline - time.monotonic()))
        if proc.is_alive():
            proc.kill()
            proc.join()


def _history_steps(
    resolved: ResolvedImage,
) -> tuple[list[tuple[int, str, str, LayerRef | None]], list[str]]:
    """(index, created_by, comment, layer) for every history entry, and notes."""
    history: list[dict[str, Any]] = [
        h for h in resolved.config.get("history", []) if isinstance(h, dict)
    ]
    layers = list(resolved.layers)
    with_layer = [h for h in history if not h.get("empty_layer", False)]
    notes: list[str] = []
    if history and len(with_layer) == len(layers):
        out = []
        it = iter(layers)
        for i, h in enumerate(history, start=1):
            layer = None if h.get("empty_layer", False) else next(it)
            out.append((i, str(h.get("created_by", "")), str(h.get("comment", "")), layer))
        return out, notes
    if history:
        notes.append(
            f"image history has {len(with_layer)} layer entries for {len(layers)} layers; "
            "steps are numbered by layer"
        )
    return [(i, "", "", layer) for i, layer in enumerate(layers, start=1)], notes


def _parallel(
    source: ImageSource,
    todo: Sequence[LayerRef],
    analyzers: Analyzers,
    jobs: int,
    progress: Progress | None,
    cache: LayerStore | None,
    limits: LayerLimits,
    lazy: bool = False,
    ready: Ready | None = None,
    labels: Mapping[str, str] | None = None,
) -> dict[str, LayerAnalysis | str]:
    # worker processes are imported here, not for every audit: a warm one starts none
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    ctx = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")
    out: dict[str, LayerAnalysis | str] = {}
    queue = ctx.SimpleQueue() if progress is not None else None
    by_digest = {layer.digest: layer for layer in todo}

    def drain() -> None:
        while queue is not None and progress is not None and not queue.empty():
            digest, nbytes = queue.get()
            progress.advance(by_digest[digest], nbytes)

    with ProcessPoolExecutor(
        max_workers=jobs, mp_context=ctx, initializer=_init_worker, initargs=(queue,)
    ) as pool:
        ordered = _submit_order(todo, jobs)
        label = (labels or {}).get
        pending: dict[Future[LayerAnalysis | str], LayerRef] = {
            pool.submit(
                _analyze_one, source, layer, analyzers, cache, limits, lazy, label(layer.digest, "")
            ): layer
            for layer in ordered
        }
        held: list[tuple[str, LayerAnalysis]] = []  # arrived, not handed to ``ready`` yet
        try:
            while pending:
                timeout = 0.1 if progress is not None else None
                finished, _ = wait(pending, timeout=timeout, return_when=FIRST_COMPLETED)
                drain()
                for fut in finished:
                    layer = pending.pop(fut)
                    got = out[layer.digest] = fut.result()
                    if progress is not None:
                        progress.done(layer)
                    if ready is not None and isinstance(got, LayerAnalysis):
                        held.append((layer.digest, got))
                if ready is not None and held and len(pending) < jobs:
                    # A worker is idle: its core replays what arrived, while the others
                    # read the last layers. Not before: this thread holding the GIL slows
                    # the pool's thread that reads results from the pipe, and a worker
                    # cannot start its next layer until its result is read (replaying each
                    # layer at once made the 1 GB dense image's cold audit slower, not
                    # faster, on 2 cores).
                    for digest, analysis in held:
                        ready(digest, analysis)
                    held.clear()
        except BaseException:
            _stop_workers(pool)
            raise
    return out


def _submit_order(todo: Sequence[LayerRef], jobs: int) -> list[LayerRef]:
    """The order layers go to the workers: in the image's order, so the parent can replay
    the first layers while the later ones are read (``StepBuilder``), except that a layer
    holding at least a worker's share of the bytes goes first (largest first), so a big
    layer never starts last while the other cores sit idle."""
    total = sum(layer.size or 0 for layer in todo)
    big = [layer for layer in todo if (layer.size or 0) * jobs >= total > 0]
    big.sort(key=lambda layer: -(layer.size or 0))
    return big + [layer for layer in todo if layer not in big]


def _sequential(
    source: ImageSource,
    todo: Sequence[LayerRef],
    analyzers: Analyzers,
    progress: Progress | None,
    limits: LayerLimits,
    cache: LayerStore | None = None,
    labels: Mapping[str, str] | None = None,
) -> dict[str, LayerAnalysis]:
    """Each layer in turn from the source's own blob iterator, cached as soon as it is
    analysed (an audit waiting for it need not wait for the rest)."""
    out: dict[str, LayerAnalysis] = {}
    wanted = {layer.digest for layer in todo}
    for layer, stream in source.iter_blobs(todo):
        tick: Callable[[int], None] | None = None
        if progress is not None:
            tick = lambda n, layer=layer: progress.advance(layer, n)  # noqa: E731
        label = (labels or {}).get(layer.digest, "")
        out[layer.digest] = _analyze_blob(stream, layer, analyzers, tick, limits, label)
        if cache is not None:
            cache.put(out[layer.digest])
        if progress is not None:
            progress.done(layer)
    missing = wanted - set(out)
    if missing:
        raise SourceError(
            f"the image source did not deliver layer(s): {', '.join(sorted(missing))}"
        )
    return out


def _fresh(
    source: ImageSource,
    todo: Sequence[LayerRef],
    analyzers: Analyzers,
    options: AuditOptions,
    progress: Progress | None,
    cache: LayerStore | None,
    ready: Ready | None = None,
    labels: Mapping[str, str] | None = None,
) -> dict[str, LayerAnalysis]:
    """Stream and analyse ``todo`` (in worker processes when it pays), caching each; with
    workers, each is handed to ``ready`` once a worker is idle to spare a core for it.
    ``labels`` name each layer in a blob error (``"layer 2"``)."""
    jobs = options.jobs or (os.cpu_count() or 1)
    if not todo:
        return {}
    if source.parallel_safe and len(todo) > 1 and jobs > 1:
        jobs = min(jobs, len(todo))
        done = _parallel(
            source,
            todo,
            analyzers,
            jobs,
            progress,
            cache,
            options.limits,
            ready=ready,
            labels=labels,
        )
        return {k: v for k, v in done.items() if isinstance(v, LayerAnalysis)}
    return _sequential(source, todo, analyzers, progress, options.limits, cache, labels)


def load_layers(
    source: ImageSource,
    layers: Sequence[LayerRef],
    options: AuditOptions,
    progress: Progress | None = None,
    notes: list[str] | None = None,
    ready: Ready | None = None,
) -> dict[str, LayerAnalysis]:
    """Analyses for every layer: from the cache where present, else streamed (and cached).
    What the cache reports (a shared cache unreachable, an entry refused) goes to ``notes``.
    ``ready`` is handed each layer that worker processes analysed and verified once a
    worker is idle (the parent replays it while the others read the rest); the rest, and every layer
    again, are handed over once all are checked, so ``ready`` sees every layer at least
    once and must take repeats.

    A layer that is a directory on disk (``LayerRef.tree``) is walked in place and never
    cached: its digest names it but does not address its content."""
    analyzers = options.analyzers()
    lazy = options.layer_read == "lazy"
    key = _layers_key(options)
    cache: LayerStore | None = None
    if options.shared_cache is not None:
        cache = options.shared_cache.open(key, analyzers.versions())
    elif options.cache_dir is not None:
        cache = LayerCache(options.cache_dir, key)
    found: dict[str, LayerAnalysis] = {}
    todo: list[LayerRef] = []
    trees: list[LayerRef] = []
    labels: dict[str, str] = {}  # digest -> "layer N", its first place in the image
    for number, layer in enumerate(layers, start=1):
        labels.setdefault(layer.digest, f"layer {number}")
    for layer in layers:
        if layer.digest in found or any(t.digest == layer.digest for t in (*todo, *trees)):
            continue
        if layer.tree is not None:
            trees.append(layer)
            continue
        hit = cache.get(layer.digest) if cache else None
        if hit is not None:
            found[layer.digest] = hit
        else:
            todo.append(layer)
    if progress is not None:
        progress.layers([*trees, *todo], len(found))
    for layer in trees:
        found[layer.digest] = _analyze_tree(layer, analyzers)
        if progress is not None:
            progress.done(layer)
    fallbacks: dict[str, str] = {}
    jobs = options.jobs or (os.cpu_count() or 1)
    if todo:
        keep_chunk_memory()  # before the workers fork: they inherit it
    if lazy and todo:
        # a lazy read is a few rounds of requests and some CPU per layer (its TOC): several
        # layers go to worker processes, up to two per core, so one layer's CPU fills
        # another's wait for the registry; one layer is read here; a layer that cannot be
        # read lazily goes on to the full read below, its reason kept
        if source.parallel_safe and len(todo) > 1 and jobs > 1:
            workers = min(2 * jobs, len(todo))
            done = _parallel(source, todo, analyzers, workers, None, cache, options.limits, True)
        else:
            done = {
                layer.digest: _analyze_one(source, layer, analyzers, cache, options.limits, True)
                for layer in todo
            }
        rest: list[LayerRef] = []
        for layer in todo:
            got = done[layer.digest]
            if isinstance(got, str):
                fallbacks[layer.digest] = got
                rest.append(layer)
                continue
            found[layer.digest] = got
            if progress is not None:
                progress.advance(layer, layer.size or 0)
                progress.done(layer)
        todo = rest
    # layers another audit is analysing now (it holds their in-flight claims): wait for its
    # entries after analysing the rest, and analyse the ones it leaves behind
    shared = cache if isinstance(cache, VerifiedCache) else None
    theirs = {t.digest for t in todo if shared is not None and not shared.claim(t.digest)}
    waiting = [layer for layer in todo if layer.digest in theirs]
    todo = [layer for layer in todo if layer.digest not in theirs]
    with shared.holding() if shared is not None else contextlib.nullcontext():
        found.update(_fresh(source, todo, analyzers, options, progress, cache, ready, labels))
        late = []
        for layer in waiting:
            hit = shared.wait(layer.digest) if shared is not None else None
            if hit is None:
                late.append(layer)
                continue
            found[layer.digest] = hit
            if progress is not None:
                progress.done(layer)
        found.update(_fresh(source, late, analyzers, options, progress, cache, ready, labels))
    for digest, reason in fallbacks.items():
        found[digest].lazy = {"fallback": reason}  # read in full: why, for the report
    if cache is not None and notes is not None:
        notes.extend(cache.report())
    for layer in layers:
        # fresh analyses were checked while streaming; this covers cache hits
        analysis = found[layer.digest]
        if lazy_read(analysis):
            continue  # read from its TOC: the DiffID is not proven (LayerRead says so)
        if layer.tree is None and layer.diff_id and analysis.diff_id != layer.diff_id:
            raise BlobVerificationError(
                f"layer {layer.digest}: its uncompressed tar is {analysis.diff_id or 'unknown'}, "
                f"but the image config's diff_id is {layer.diff_id}"
            )
    if ready is not None:
        for digest, analysis in found.items():
            ready(digest, analysis)
    return found


def _layers_key(options: AuditOptions) -> str:
    """The layer cache key: the analyzers, the limits, and a lazy read's own suffix, so an
    analysis read from a TOC never answers for a full read."""
    lazy = "-lazy" if options.layer_read == "lazy" else ""
    return f"{options.analyzers().key()}-{options.limits.key()}{lazy}"


def lazy_read(analysis: LayerAnalysis) -> bool:
    """Whether ``analysis`` was read from a zstd:chunked TOC (its DiffID not proven)."""
    return analysis.lazy is not None and "toc" in analysis.lazy


def _layer_reads(
    layers: Sequence[LayerRef], analyses: dict[str, LayerAnalysis]
) -> tuple[LayerRead, ...]:
    """How each blob layer was read, when a lazy read was asked for."""
    out: dict[str, LayerRead] = {}
    for layer in layers:
        lazy = analyses[layer.digest].lazy
        if layer.tree is not None or layer.digest in out:
            continue
        if lazy is None or "toc" not in lazy:  # a full read (from the cache: no reason kept)
            why = str((lazy or {}).get("fallback", "read in full (a cached analysis)"))
            out[layer.digest] = LayerRead(layer.digest, "full", why)
            continue

        def n(key: str, lazy: dict[str, object] = lazy) -> int:
            value = lazy.get(key)
            return value if isinstance(value, int) else 0

        out[layer.digest] = LayerRead(
            layer.digest,
            "lazy",
            fetched=n("fetched"),
            blob_size=layer.size,
            chunks_verified=n("chunks_verified"),
            files_whole=n("files_whole"),
            files_in_parts=n("files_in_parts"),
            digests_from_toc=n("digests_from_toc"),
        )
    return tuple(out.values())


class StepBuilder:
    """Replays layer analyses through the image history into steps, snapshots and diffs, a
    step at a time: each analysis is handed in when it exists (``add``), in any order, and
    the history is replayed as far as the analyses handed in so far reach. The pipeline
    feeds it as the worker processes return layers, so the replay of the first layers runs
    while the last ones are still being read; ``result`` finishes it. With an ``encoder``,
    each step is also encoded for the replay entry as soon as it is made."""

    def __init__(
        self,
        resolved: ResolvedImage,
        analyzers: Analyzers | None = None,
        encoder: StepEncoder | None = None,
    ) -> None:
        self._resolved = resolved
        self._encoder = encoder
        self._entries, self._notes = _history_steps(resolved)
        self._next = 0  # the first history entry not replayed yet
        self._analyses: dict[str, LayerAnalysis] = {}
        self._state = State(analyzers)
        self._image_facts = ImageFacts.of(resolved)
        self._previous = Snapshot()
        self._steps: list[Step] = []
        self._snapshots: list[Snapshot] = []
        self._incomplete: dict[tuple[str, str], Incomplete] = {}

    def add(self, digest: str, analysis: LayerAnalysis) -> None:
        """One layer's analysis; replays every step it completes the prefix of."""
        self._analyses.setdefault(digest, analysis)
        self._advance()

    def _advance(self) -> None:
        entries = self._entries
        while self._next < len(entries):
            index, created_by, comment, layer = entries[self._next]
            if layer is not None and layer.digest not in self._analyses:
                return
            self._step(index, created_by, comment, layer)
            self._next += 1

    def _step(self, index: int, created_by: str, comment: str, layer: LayerRef | None) -> None:
        incomplete = self._incomplete
        previous = self._previous
        if layer is None:
            self._keep(Step(index, created_by, None, comment=comment), previous)
            return
        state = self._state
        analysis = self._analyses[layer.digest]
        for path, why in analysis.unreadable:
            incomplete.setdefault((path, why), Incomplete(path, why))
        for flag in analysis.name_flags:  # the layer is not what a conforming writer makes
            what = f"layer {layer.digest} (step {index}): {flag.subject()}"
            incomplete.setdefault((what, flag.why()), Incomplete(what, flag.why()))
        snap = state.apply(analysis)
        for stored, real in state.opaque_through_links:  # where runtimes disagree
            what = f"layer {layer.digest} (step {index}): opaque whiteout '{stored}/.wh..wh..opq'"
            why = (
                f"its directory is a lower layer's symbolic link to {real!r} and the layer "
                f"makes no directory there; applied inside {real!r}, as containerd does (what "
                "the lower layers had there is gone), but overlayfs-based runtimes replace the "
                f"link with a new directory and leave {real!r} as it was"
            )
            incomplete.setdefault((what, why), Incomplete(what, why))
        for hook in POST_STATE:  # work over the whole state (the native loader, ...)
            snap = hook(snap, previous, layer.digest, analysis.streamed, state, self._image_facts)
        for item in snap.incomplete:
            if not item.final_only:  # where nothing reaches: the final state says
                incomplete.setdefault((item.what, item.why), item)
        changes, unmet = diff_snapshots(previous, snap, self._resolved.platform)
        self._keep(
            Step(index, created_by, layer.digest, changes, unmet, comment, layer.diff_id), snap
        )
        self._previous = snap

    def _keep(self, step: Step, snapshot: Snapshot) -> None:
        self._steps.append(step)
        self._snapshots.append(snapshot)
        if self._encoder is not None:
            self._encoder.step(step, snapshot)

    def result(self) -> AuditResult:
        """The audit result; every layer's analysis must have been added."""
        if self._next < len(self._entries):
            _, _, _, layer = self._entries[self._next]
            raise KeyError(layer.digest if layer is not None else "")
        resolved, incomplete, previous = self._resolved, self._incomplete, self._previous
        # Metadata no environment reaches is a hole in the image as it ships (pip --target
        # used through PYTHONPATH), so it is taken from the final state: files a later step
        # links into an environment were importable nowhere before, and that step shows them
        # added.
        for item in previous.incomplete:
            if item.final_only:
                incomplete.setdefault((item.what, item.why), item)
        image = ImageInfo(
            reference=resolved.reference,
            manifest_digest=resolved.manifest_digest,
            platform=resolved.platform,
            transport=resolved.transport,
        )
        return AuditResult(
            image=image,
            steps=tuple(self._steps),
            final=previous,
            snapshots=tuple(self._snapshots),
            incomplete=tuple(sorted(incomplete.values(), key=lambda i: (i.what, i.why))),
            notes=tuple(resolved.notes) + tuple(self._notes),
            file_digests=tuple(sorted(self._state.file_digests(previous).items())),
        )


def build_result(
    resolved: ResolvedImage,
    analyses: dict[str, LayerAnalysis],
    analyzers: Analyzers | None = None,
) -> AuditResult:
    """Replay the analyses through the image history into steps, snapshots and diffs."""
    builder = StepBuilder(resolved, analyzers)
    for digest, analysis in analyses.items():
        builder.add(digest, analysis)
    return builder.result()


def audit_directory(
    root: str,
    *,
    reference: str | None = None,
    verify_records: bool = False,
    exclude: tuple[str, ...] = (),
    platform: Platform | None = None,
) -> AuditResult:
    """Audit a root filesystem or virtual environment on disk as one state (``dir:``)."""
    from pinguard.sources.rootfs import DirSource

    source = DirSource(root, SourceOptions(platform=platform), exclude=exclude)
    options = AuditOptions(source=source.options, verify_records=verify_records)
    return audit_source(source, options, reference=reference)


def audit_source(
    source: ImageSource,
    options: AuditOptions,
    progress: Progress | None = None,
    *,
    reference: str | None = None,
    resolved: ResolvedImage | None = None,
) -> AuditResult:
    """Audit the image an opened source resolves to (the source is closed afterwards);
    ``resolved``: what the source resolved to already (not fetched again).

    With a cache directory, an image chain replayed before is read back from its replay
    entry (``replay.py``) without reading any layer analysis; otherwise the result is
    built and its replay stored."""
    with source:
        resolved = resolved if resolved is not None else source.resolve()
        if reference is not None:
            resolved = replace(resolved, reference=reference)
        store = _replay_store(resolved, options)
        if store is not None:
            cache, key = store
            hit = cache.get(key)
            if hit is not None:
                if progress is not None:
                    progress.layers([], len(resolved.layers))
                return _from_replay(resolved, hit)
        cache_notes: list[str] = []
        encoder = StepEncoder() if store is not None else None
        builder = StepBuilder(resolved, options.analyzers(), encoder)
        analyses = load_layers(
            source, resolved.layers, options, progress, cache_notes, ready=builder.add
        )
    result = builder.result()
    if options.layer_read == "lazy":
        result = replace(result, layer_reads=_layer_reads(resolved.layers, analyses))
    if store is not None and encoder is not None:
        cache, key = store
        own = len(resolved.notes)  # the source's notes come first; the history's follow
        entry = encoder.finish(result.incomplete, result.notes[own:], result.file_digests)
        if options.write_behind:
            cache.put_behind(key, entry)  # off the critical path: written while we judge
        else:
            cache.put(key, entry)
    if cache_notes:  # about this run's shared cache: not part of the replayed audit
        result = replace(result, notes=(*result.notes, *cache_notes))
    return result


def _replay_store(resolved: ResolvedImage, options: AuditOptions) -> tuple[ReplayCache, str] | None:
    """Where this image chain's replay entry lives, when it may have one: a cache directory,
    and no layer that is a directory on disk (its digest does not address its content)."""
    if options.cache_dir is None or any(layer.tree is not None for layer in resolved.layers):
        return None
    if options.layer_read == "lazy":
        return None  # the replay keeps no layer reads: a lazy audit reads its layer entries
    key = replay_key(_layers_key(options), resolved.platform, resolved.config, resolved.layers)
    return ReplayCache(options.cache_dir), key


def _from_replay(resolved: ResolvedImage, replay: Replay) -> AuditResult:
    return AuditResult(
        image=ImageInfo(
            reference=resolved.reference,
            manifest_digest=resolved.manifest_digest,
            platform=resolved.platform,
            transport=resolved.transport,
        ),
        steps=replay.steps,
        final=replay.snapshots[-1] if replay.snapshots else Snapshot(),
        snapshots=replay.snapshots,
        incomplete=replay.incomplete,
        notes=tuple(resolved.notes) + replay.notes,
        file_digests=replay.file_digests,
    )


def audit_image(
    reference: str,
    *,
    options: AuditOptions = AuditOptions(),
    progress: Progress | None = None,
) -> AuditResult:
    """Audit the image ``reference`` names (any transport pinguard knows)."""
    from pinguard.sources import open_source

    return audit_source(open_source(reference, options.source), options, progress)
