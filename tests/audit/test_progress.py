"""Progress from worker processes: bytes reported as they flow, not once per layer at the end."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from pinguard.audit.options import AuditOptions
from pinguard.audit.pipeline import audit_image
from pinguard.sources.interface import LayerRef
from tests.infra.registry import build_oci_layout

LAYER_BYTES = 6 << 20  # incompressible, so the gzip blob is about as large


class Recorder:
    """A ``Progress`` that logs every call in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int]] = []
        self.todo: list[LayerRef] = []

    def layers(self, todo: Sequence[LayerRef], cached: int) -> None:
        self.todo = list(todo)

    def advance(self, layer: LayerRef, nbytes: int) -> None:
        self.calls.append(("advance", layer.digest, nbytes))

    def done(self, layer: LayerRef) -> None:
        self.calls.append(("done", layer.digest, 0))


def test_workers_report_bytes_while_streaming(tmp_path: Path) -> None:
    """With two worker processes, each 6 MiB layer gets several byte counts (about one per
    MiB) before it is done, and the counts never exceed the blob's size."""
    layers = [{f"data/blob{i}": os.urandom(LAYER_BYTES)} for i in range(2)]
    layout = build_oci_layout(tmp_path / "layout", tag="t", layers=layers)
    recorder = Recorder()
    audit_image(layout.source, options=AuditOptions(jobs=2), progress=recorder)
    assert len(recorder.todo) == 2
    for layer in recorder.todo:
        mine = [c for c in recorder.calls if c[1] == layer.digest]
        assert mine[-1][0] == "done"
        counts = [n for kind, _, n in mine if kind == "advance"]
        assert len(counts) >= 4, counts  # 6 MiB in 1 MiB reports, not one at the end
        assert all(n >= 1 << 20 for n in counts)
        assert layer.size is not None
        assert sum(counts) <= layer.size
        assert [kind for kind, _, _ in mine].count("done") == 1


def test_no_queue_without_progress(tmp_path: Path) -> None:
    """Without a progress callback the parallel audit still works (nothing is reported)."""
    layers = [{f"data/blob{i}": os.urandom(1 << 16)} for i in range(2)]
    layout = build_oci_layout(tmp_path / "layout", tag="t", layers=layers)
    result = audit_image(layout.source, options=AuditOptions(jobs=2))
    assert len(result.steps) == 2
