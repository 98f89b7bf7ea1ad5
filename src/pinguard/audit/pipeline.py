"""The audit pipeline: one image reference in, one ``AuditResult`` out.

Joins the stages in their one direction: the source resolves the image; a replay entry for
its chain answers at once (``replay.py``); else each layer not in the cache is read and
analysed (``loading.py``: lazily or in full, cache claims; ``workers.py``: the worker
processes), the analyses are replayed into the state after every history step and each
step is diffed against the one before (``steps.py``), and the replay entry is stored.
Findings are left empty: judging is the policy's job. Progress is reported through a
callback so that only the CLI draws anything.
"""

from __future__ import annotations

from dataclasses import replace

from pinguard.audit.loading import layer_reads, load_layers
from pinguard.audit.options import AuditOptions
from pinguard.audit.replay import StepEncoder, from_replay, replay_store
from pinguard.audit.steps import StepBuilder
from pinguard.audit.workers import Progress
from pinguard.models import AuditResult, Platform
from pinguard.sources.interface import ImageSource, ResolvedImage, SourceOptions


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
        store = replay_store(resolved, options)
        if store is not None:
            cache, key = store
            hit = cache.get(key)
            if hit is not None:
                if progress is not None:
                    progress.layers([], len(resolved.layers))
                return from_replay(resolved, hit)
        cache_notes: list[str] = []
        encoder = StepEncoder() if store is not None else None
        builder = StepBuilder(resolved, options.analyzers(), encoder)
        analyses = load_layers(
            source, resolved.layers, options, progress, cache_notes, ready=builder.add
        )
    result = builder.result()
    if options.layer_read == "lazy":
        result = replace(result, layer_reads=layer_reads(resolved.layers, analyses))
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


def audit_image(
    reference: str,
    *,
    options: AuditOptions = AuditOptions(),  # noqa: B008 - frozen, so sharing it is safe
    progress: Progress | None = None,
) -> AuditResult:
    """Audit the image ``reference`` names (any transport pinguard knows)."""
    from pinguard.sources import open_source

    return audit_source(open_source(reference, options.source), options, progress)
