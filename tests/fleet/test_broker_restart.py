"""`pinguard fleet run` rides out its broker's restart, and reports a broker that never returns.

Real parts: a ``redis-server`` broker with AOF on (``appendonly yes``, as docs/deploy runs
it) in its own directory, a ``pinguard worker`` subprocess, ``fleet run`` as a subprocess,
and three images in a ``docker-registry`` read through an ``HTTPFront`` that holds the first
blob download until the test lets it go, so the broker is killed while the first of the
three audits is surely running. The broker is killed with SIGKILL (no shutdown, no final
write: what it kept is what the AOF had) and, in the first test, started again on the same
port 5 s later; in the second it never comes back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pinguard.errors import EXIT_FINDINGS, EXIT_PASS, EXIT_UNREACHABLE
from pinguard.fleet.records import ResultStore
from tests.infra.fleet import Worker, start_worker
from tests.infra.redis import AOFRedis
from tests.infra.registry import HTTPFront, RegistryServer

FleetRegistry = tuple[RegistryServer, dict[str, str]]
IMAGES = ("team/serve:a", "team/serve:b", "team/story:bad")  # story:bad fails the policy


class HeldFront:
    """An ``HTTPFront`` whose first blob GET is answered only once ``release()`` is called;
    ``held`` is set when a worker is waiting on it (inside its first audit)."""

    def __init__(self, upstream: str) -> None:
        self.held = threading.Event()
        self.gate = threading.Event()
        self.lock = threading.Lock()
        self.front = HTTPFront(upstream, transform=self._transform)

    def _transform(self, path: str, body: bytes) -> bytes:
        if "/blobs/" in path:
            with self.lock:
                first = not self.held.is_set()
                self.held.set()
            if first:
                self.gate.wait(120)
        return body

    def release(self) -> None:
        self.gate.set()

    def stop(self) -> None:
        self.release()
        self.front.stop()


@dataclass
class FleetRun:
    """``pinguard fleet run ... -f json`` running in a child process."""

    process: subprocess.Popen[bytes]
    out: Path
    err: Path

    def finish(self, timeout: float) -> tuple[int, dict[str, Any], str]:
        try:
            code = self.process.wait(timeout=timeout)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
        return code, json.loads(self.out.read_text() or "null"), self.err.read_text()


def fleet_run(
    tmp_path: Path, refs: list[str], broker: str, results: Path, timeout: int
) -> FleetRun:
    out, err = tmp_path / "fleet.json", tmp_path / "fleet.err"
    cmd = [sys.executable, "-m", "pinguard", "fleet", "run", *refs, "--broker", broker]
    cmd += ["--results", str(results), "--timeout", str(timeout), "-f", "json"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PINGUARD_")}
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = subprocess.Popen(cmd, cwd=tmp_path, stdout=stdout, stderr=stderr, env=env)
    return FleetRun(process, out, err)


def first_audit_running(front: HeldFront, run: FleetRun, worker: Worker) -> None:
    """Wait until the worker is inside the first audit (held on its first blob)."""
    if not front.held.wait(90):
        pytest.fail(f"no audit started:\n{run.err.read_text()}\n{worker.text()[-3000:]}")
    assert run.process.poll() is None, run.err.read_text()
    assert run.err.read_text().splitlines()[0] == "enqueued 3 audit(s)"


def test_fleet_run_rides_out_a_broker_killed_mid_audit_and_restarted(
    tmp_path: Path, aof_broker: AOFRedis, fleet_registry: FleetRegistry
) -> None:
    """SIGKILL 2 s into the first of three audits, back on the same port 5 s later (its AOF
    kept the queue and the results): every image is reported with its real verdict, none
    pending, and the run exits 1 for the failing image; not 3, not a traceback."""
    registry, _ = fleet_registry
    results = tmp_path / "results"
    results.mkdir()
    front = HeldFront(registry.address)
    refs = {name: f"docker://{front.front.address}/{name}" for name in IMAGES}
    worker = start_worker(tmp_path / "w1", aof_broker.url(), results)
    try:
        run = fleet_run(tmp_path, sorted(refs.values()), aof_broker.url(), results, 90)
        first_audit_running(front, run, worker)
        time.sleep(2)
        aof_broker.kill9()
        killed = time.monotonic()
        time.sleep(1)
        front.release()  # the first audit finishes while the broker is down
        time.sleep(max(0.0, killed + 5 - time.monotonic()))
        aof_broker.start()  # same port, same directory: the AOF is replayed
        code, doc, err = run.finish(timeout=150)
    finally:
        worker.stop()
        front.stop()
    log = worker.text()
    assert "Traceback" not in err, err[-3000:]
    assert code == EXIT_FINDINGS, (err[-3000:], log[-3000:])
    lines = err.splitlines()
    assert lines[0] == "enqueued 3 audit(s)"
    assert lines[1].startswith("warning: lost the broker ("), lines
    assert "reading the result store" in lines[1]
    assert lines[2].startswith("warning: the broker is back after "), lines
    assert not [line for line in lines if line.startswith("pinguard: error:")], lines
    by_ref = {i["reference"]: i for i in doc["images"]}
    assert set(by_ref) == set(refs.values())
    assert doc["counts"] == {"images": 3, "pass": 2, "fail": 1, "error": 0, "pending": 0}
    assert (
        by_ref[refs["team/story:bad"]]["verdict"],
        by_ref[refs["team/story:bad"]]["exit_code"],
    ) == ("fail", EXIT_FINDINGS)
    for name in ("team/serve:a", "team/serve:b"):
        assert (by_ref[refs[name]]["verdict"], by_ref[refs[name]]["exit_code"]) == (
            "pass",
            EXIT_PASS,
        ), log[-3000:]
    assert by_ref[refs["team/serve:b"]]["packages"]["nvidia-nccl-cu13"] == ["2.29.7"]
    assert doc["exit_code"] == EXIT_FINDINGS
    # the worker reconnected and ran the two audits the AOF kept queued
    assert len(ResultStore(results).ids()) == 3
    assert "Connection to broker lost" in log, log[-3000:]


def test_a_broker_that_never_returns_is_exit_3_with_what_is_done_and_pending(
    tmp_path: Path, aof_broker: AOFRedis, fleet_registry: FleetRegistry
) -> None:
    """The broker is killed mid-audit and never restarted: `fleet run` waits out its
    --timeout, reads the record the first audit left in the result store meanwhile, and
    then reports all three images (one done, two pending, by name), one error line, exit 3."""
    registry, _ = fleet_registry
    results = tmp_path / "results"
    results.mkdir()
    front = HeldFront(registry.address)
    refs = {name: f"docker://{front.front.address}/{name}" for name in IMAGES}
    worker = start_worker(tmp_path / "w1", aof_broker.url(), results)
    timeout = 25
    try:
        run = fleet_run(tmp_path, sorted(refs.values()), aof_broker.url(), results, timeout)
        started = time.monotonic()
        first_audit_running(front, run, worker)
        aof_broker.kill9()
        killed = time.monotonic()
        front.release()
        code, doc, err = run.finish(timeout=timeout + 60)
        ended = time.monotonic()
    finally:
        worker.stop()
        front.stop()
    assert "Traceback" not in err, err[-3000:]
    assert code == EXIT_UNREACHABLE, err[-3000:]
    lines = err.splitlines()
    assert lines[0] == "enqueued 3 audit(s)"
    assert lines[1].startswith("warning: lost the broker ("), lines
    [error] = [line for line in lines if line.startswith("pinguard: error:")]
    assert error == lines[-1]
    assert error.startswith(f"pinguard: error: could not reach the broker {aof_broker.url()}: ")
    assert f"of --timeout {timeout}; 1 of 3 audit(s) done, 2 pending" in error
    assert f"pinguard fleet report --results {results}" in error
    assert ended - killed > timeout - (killed - started) - 2  # rode it out to the deadline
    images = doc["images"]
    assert {i["reference"] for i in images} == set(refs.values())
    done = [i for i in images if i["verdict"] != "pending"]
    pending = [i for i in images if i["verdict"] == "pending"]
    assert (len(done), len(pending)) == (1, 2), images
    assert done[0]["exit_code"] in (EXIT_PASS, EXIT_FINDINGS)
    assert [i["exit_code"] for i in pending] == [EXIT_UNREACHABLE] * 2
    assert all("the broker has been unreachable" in i["error"] for i in pending)
    assert doc["counts"]["pending"] == 2
    assert doc["exit_code"] == EXIT_UNREACHABLE
    [record] = ResultStore(results).all()  # the one the worker wrote while the broker was gone
    assert record.reference == done[0]["reference"]
