"""The layers of one audit: each layer's analysis from the cache where present, else read,
and whether it is read lazily or in full. A lazy read (``--layer-read lazy``) tries the
zstd:chunked TOC first and sends a layer that cannot be read so back to a full read, its
reason kept for the report. With a shared cache that can lock (Redis), an uncached layer is
claimed before it is analysed: a layer another audit has claimed is waited for (its entry
read when written) while this audit analyses the rest, and analysed here only when the
other's claim lapses or the wait runs out. Every layer read in full is proven against the
config's diff_id, cache hits included."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence

from pinguard.audit.options import AuditOptions
from pinguard.audit.workers import (
    Progress,
    Ready,
    analyze_in_pool,
    analyze_in_turn,
    analyze_one,
    analyze_tree,
)
from pinguard.cache.interface import LayerStore
from pinguard.cache.store import LocalCache
from pinguard.cache.verified import VerifiedCache
from pinguard.catalog import Analyzers
from pinguard.errors import BlobVerificationError
from pinguard.layers.analysis import LayerAnalysis
from pinguard.layers.blob import keep_chunk_memory
from pinguard.models import LayerRead
from pinguard.sources.interface import ImageSource, LayerRef


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
        done = analyze_in_pool(
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
    return analyze_in_turn(source, todo, analyzers, progress, options.limits, cache, labels)


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
    key = options.layers_key()
    cache: LayerStore | None = None
    if options.shared_cache is not None:
        cache = options.shared_cache.open(key, analyzers.versions())
    elif options.cache_dir is not None:
        cache = LocalCache(options.cache_dir, key, analyzers.versions())
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
        found[layer.digest] = analyze_tree(layer, analyzers)
        if progress is not None:
            progress.done(layer)
    fallbacks: dict[str, str] = {}
    jobs = options.jobs or (os.cpu_count() or 1)
    if todo:
        keep_chunk_memory()  # before the workers fork: they inherit it
    if lazy and todo:
        # a lazy read is a few rounds of requests and some CPU per layer (its TOC): several
        # layers go to worker processes, up to two per core, so one layer's CPU fills
        # another's wait for the registry, and each layer read is handed to ``ready`` as a
        # worker frees up (the parent replays the first layers while the last are read: a
        # lazy analysis has nothing more to prove here); one layer is read here; a layer
        # that cannot be read lazily goes on to the full read below, its reason kept
        if source.parallel_safe and len(todo) > 1 and jobs > 1:
            workers = min(2 * jobs, len(todo))
            done = analyze_in_pool(
                source, todo, analyzers, workers, None, cache, options.limits, True, ready
            )
        else:
            done = {
                layer.digest: analyze_one(source, layer, analyzers, cache, options.limits, True)
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


def lazy_read(analysis: LayerAnalysis) -> bool:
    """Whether ``analysis`` was read from a zstd:chunked TOC (its DiffID not proven)."""
    return analysis.lazy is not None and "toc" in analysis.lazy


def layer_reads(
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
