"""The GIL switch interval of the threads reading a layer, in a pool worker and in the
parent; and what else ``_init_worker`` gives each worker process."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from pinguard.audit.options import AuditOptions
from pinguard.audit.pipeline import audit_image
from pinguard.audit.workers import WORKER_SWITCH_INTERVAL, _init_worker
from pinguard.errors import PinguardError
from pinguard.sources.interface import LayerRef
from tests.audit.test_progress import Recorder
from tests.infra.registry import build_oci_layout


def _settings() -> tuple[float, object]:
    return sys.getswitchinterval(), signal.getsignal(signal.SIGINT)


def test_a_worker_switches_threads_sooner_than_the_parent() -> None:
    """A worker's C stages get the GIL back within ``WORKER_SWITCH_INTERVAL`` of asking, not
    CPython's 5 ms; the parent keeps its own interval, and the worker ignores SIGINT."""
    parent = sys.getswitchinterval()
    ctx = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(1, mp_context=ctx, initializer=_init_worker, initargs=(None,)) as pool:
        interval, sigint = pool.submit(_settings).result(timeout=60)
    # CPython keeps the interval in microseconds: 0.0002 comes back as 0.00019999...
    assert abs(interval - WORKER_SWITCH_INTERVAL) < 1e-6
    assert parent > WORKER_SWITCH_INTERVAL
    assert sigint == signal.SIG_IGN
    assert sys.getswitchinterval() == parent


class _Intervals(Recorder):
    """A ``Progress`` that notes the GIL switch interval whenever bytes are reported (from
    the thread reading the layer)."""

    def __init__(self) -> None:
        super().__init__()
        self.intervals: set[float] = set()

    def advance(self, layer: LayerRef, nbytes: int) -> None:
        self.intervals.add(sys.getswitchinterval())
        super().advance(layer, nbytes)


def test_a_layer_read_in_the_parent_switches_as_a_worker_does(tmp_path: Path) -> None:
    """``--jobs 1`` reads the layers in this process (``analyze_in_turn``): while they are
    read its threads switch every ``WORKER_SWITCH_INTERVAL``; the interval it had is back
    after, and after a failed read too."""
    layers = [{f"data/blob{i}": os.urandom(3 << 20)} for i in range(2)]
    layout = build_oci_layout(tmp_path / "layout", tag="t", layers=layers)
    before = sys.getswitchinterval()
    progress = _Intervals()
    result = audit_image(layout.source, options=AuditOptions(jobs=1), progress=progress)
    assert len(result.steps) == 2
    assert progress.intervals
    assert all(abs(i - WORKER_SWITCH_INTERVAL) < 1e-6 for i in progress.intervals)
    assert sys.getswitchinterval() == before

    # a layer blob of the same size whose bytes are not its digest's: the read fails
    blob = max((layout.path / "blobs" / "sha256").glob("*"), key=lambda p: p.stat().st_size)
    blob.write_bytes(os.urandom(blob.stat().st_size))
    failed = _Intervals()
    with pytest.raises(PinguardError, match="layer sha256:"):
        audit_image(layout.source, options=AuditOptions(jobs=1), progress=failed)
    assert failed.intervals  # the failure came while the layer was read
    assert sys.getswitchinterval() == before
