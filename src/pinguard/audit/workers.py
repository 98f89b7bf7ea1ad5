"""The layer readers and the worker pool: one layer streamed and analysed (a blob, a
zstd:chunked TOC read lazily, a directory on disk), in worker processes when the transport
allows (two layers in two processes keep both cores busy), or in turn from the source's own
blob iterator. A pool worker writes the layer's cache entry and parses what the states need
(``Analyzers.prepare``) on its own core, reports bytes through the pool's queue, ignores
SIGINT (the parent handles Ctrl-C) and unwinds on SIGTERM; ``stop_workers`` stops them all
at once when the audit is abandoned. Each worker's own state is one ``_WorkerProcess``
object the pool's initializer makes in it."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

from pinguard.cache.interface import LayerStore
from pinguard.catalog import Analyzers
from pinguard.errors import SourceError
from pinguard.layers.analysis import (
    LayerAnalysis,
    LayerLimits,
    analyze_directory,
    analyze_stream,
)
from pinguard.layers.chunked import LazyUnavailable, TocPosition, analyze_chunked
from pinguard.sources.interface import ImageSource, LayerRef

if TYPE_CHECKING:
    from concurrent.futures import Future, ProcessPoolExecutor

#: Handed each layer's analysis (digest, analysis) as soon as it is ready.
Ready = Callable[[str, LayerAnalysis], None]


class Progress(Protocol):
    """What the audit tells whoever draws progress (the CLI)."""

    def layers(self, todo: Sequence[LayerRef], cached: int) -> None: ...
    def advance(self, layer: LayerRef, nbytes: int) -> None: ...
    def done(self, layer: LayerRef) -> None: ...


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


def analyze_tree(layer: LayerRef, analyzers: Analyzers) -> LayerAnalysis:
    assert layer.tree is not None
    analysis = analyze_directory(
        layer.tree.root,
        select=analyzers.selector(),
        open_stream=analyzers.open_stream,
        exclude=layer.tree.exclude,
    )
    analysis.digest = layer.digest
    return analysis


_REPORT_EVERY = 1 << 20  # send a count once a MiB has gone by, not per read
_STOP_GRACE = 5.0  # seconds a terminated worker gets to clean up before it is killed


class _Stopped(BaseException):
    """Raised in a busy worker by SIGTERM: unwinds it so ``finally`` blocks (the blob
    stream, a cache entry's temporary file) clean up before the process exits."""


class _WorkerProcess:
    """A pool worker's own state: where byte counts go while a blob streams (the pool's
    queue, inherited rather than pickled), and whether a layer is being analysed (so a
    SIGTERM knows whether there is anything to clean up first)."""

    def __init__(self, queue: Any) -> None:
        self.queue = queue
        self.busy = False

    def on_sigterm(self, signum: int, frame: object) -> None:
        if self.busy:
            raise _Stopped
        os._exit(128 + signum)  # idle: nothing to clean up, and no traceback from the pool loop

    def byte_reporter(self, digest: str) -> Callable[[int], None] | None:
        queue = self.queue
        if queue is None:
            return None
        pending = [0]

        def tick(n: int) -> None:
            pending[0] += n
            if pending[0] >= _REPORT_EVERY:
                queue.put((digest, pending[0]))
                pending[0] = 0

        return tick


#: This process's worker state, made by the pool's initializer in each worker; None in the
#: parent (a layer analysed there reports no bytes and installs no handler).
_WORKER: _WorkerProcess | None = None

#: The GIL switch interval of a pool worker (CPython's default is 5 ms). A worker runs the
#: layer's C stages (inflate, both SHA-256s) in threads beside its Python tar walk; each C
#: call hands the GIL back when it ends and then waits for the walk to yield it, which at 5 ms
#: is about as long as the call (a 4 MiB inflate, a 1 MiB hash), so with a core to spare the
#: stages run nearly in turn. One 533 MB dense layer with two cores to itself (the case of a
#: worker on a 16-core machine): 1.05-1.17 s at 5 ms, 0.91-1.00 s at 0.2 ms, the same CPU
#: (``benchmarks/audit_bench.py --stages``). With every core busy it changes nothing. Layers
#: analysed in the parent (``analyze_in_turn``) switch as often while they are read.
WORKER_SWITCH_INTERVAL = 0.0002


@contextlib.contextmanager
def _switching_sooner() -> Iterator[None]:
    """``WORKER_SWITCH_INTERVAL`` while the block runs, for layers analysed in this process
    (``analyze_in_turn``: one layer to read, a source that cannot be shared, ``--jobs 1``);
    the interval found is restored after."""
    found = sys.getswitchinterval()
    sys.setswitchinterval(WORKER_SWITCH_INTERVAL)
    try:
        yield
    finally:
        sys.setswitchinterval(found)


def _init_worker(queue: Any) -> None:
    """Pool worker set-up: the byte queue, the GIL switch interval, and signals. Ctrl-C in a
    terminal goes to the whole process group; the parent alone handles it (and stops the
    workers), so a worker ignores SIGINT rather than printing a traceback of its own."""
    global _WORKER  # noqa: PLW0603 - per-process state of a pool worker
    _WORKER = _WorkerProcess(queue)
    sys.setswitchinterval(WORKER_SWITCH_INTERVAL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _WORKER.on_sigterm)


def analyze_one(
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
    worker = _WORKER if _WORKER is not None else _WorkerProcess(None)
    worker.busy = True
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
                stream, layer, analyzers, worker.byte_reporter(layer.digest), limits, label
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
        worker.busy = False


def stop_workers(pool: ProcessPoolExecutor) -> None:
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


def analyze_in_pool(
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
                analyze_one, source, layer, analyzers, cache, limits, lazy, label(layer.digest, "")
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
            stop_workers(pool)
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


def analyze_in_turn(
    source: ImageSource,
    todo: Sequence[LayerRef],
    analyzers: Analyzers,
    progress: Progress | None,
    limits: LayerLimits,
    cache: LayerStore | None = None,
    labels: Mapping[str, str] | None = None,
) -> dict[str, LayerAnalysis]:
    """Each layer in turn from the source's own blob iterator, cached as soon as it is
    analysed (an audit waiting for it need not wait for the rest), its threads switching
    as a pool worker's do."""
    out: dict[str, LayerAnalysis] = {}
    wanted = {layer.digest for layer in todo}
    with _switching_sooner():
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
