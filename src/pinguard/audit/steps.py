"""The steps of an audit: layer analyses replayed through the image history into a state per
step (``state.py``; its catalog runs the analyzers' post-state hooks with the step's layer and
the image's facts), and each step diffed against the one before (``diff.py``).
``StepBuilder`` takes each layer as soon as it exists, in any order, so the first steps are
replayed while the workers read the last layers."""

from __future__ import annotations

from typing import Any

from pinguard.audit.diff import Differ
from pinguard.audit.replay import StepEncoder, image_info
from pinguard.audit.state import State
from pinguard.catalog import Analyzers, ImageFacts, StepFacts
from pinguard.layers.analysis import LayerAnalysis
from pinguard.models import AuditResult, Incomplete, Snapshot, Step
from pinguard.sources.interface import LayerRef, ResolvedImage


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
        self._image_facts = ImageFacts.of(resolved.config, resolved.platform)
        self._previous = Snapshot()
        self._steps: list[Step] = []
        self._snapshots: list[Snapshot] = []
        self._incomplete: dict[tuple[str, str], Incomplete] = {}
        self._differ = Differ()  # carries what a step's diff shares with the next

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
        snap = state.apply(analysis, StepFacts(layer.digest, analysis.streamed, self._image_facts))
        for stored, real in state.opaque_through_links:  # where runtimes disagree
            what = f"layer {layer.digest} (step {index}): opaque whiteout '{stored}/.wh..wh..opq'"
            why = (
                f"its directory is a lower layer's symbolic link to {real!r} and the layer "
                f"makes no directory there; applied inside {real!r}, as containerd does (what "
                "the lower layers had there is gone), but overlayfs-based runtimes replace the "
                f"link with a new directory and leave {real!r} as it was"
            )
            incomplete.setdefault((what, why), Incomplete(what, why))
        for item in snap.incomplete:
            if not item.final_only:  # where nothing reaches: the final state says
                incomplete.setdefault((item.what, item.why), item)
        changes, unmet = self._differ.snapshots(previous, snap, self._resolved.platform)
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
        return AuditResult(
            image=image_info(resolved),
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
