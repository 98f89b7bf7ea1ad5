"""Stopping an audit while its layer workers are busy: Ctrl-C, and one layer failing.

The image is pushed into a real ``docker-registry``; an ``HTTPFront`` in front of it sends
half of each layer blob and then hangs, so the worker processes are blocked inside a read
exactly when the signal arrives (as with a slow or stuck registry). The audit runs as a real
``python -m pinguard`` process with two workers; the test sends a real SIGINT, to the main
process alone (``kill -INT``) and to its whole process group (a terminal's Ctrl-C), and
asserts: exit 130 within seconds, one error line and no traceback, and no worker left
running. Without stopping the workers the parent waits for the stuck reads (the registry
timeout, 60 s) before it can exit.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.infra.cli import PINGUARD_WITH_CTRL_C
from tests.infra.registry import HTTPFront, Layout, RegistryServer, build_oci_layout, start_registry

pytestmark = pytest.mark.integration

PROMPT = 10.0  # seconds: an interrupted audit must be gone well within this


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> Layout:
    # incompressible bytes, so half a blob is never the whole tar
    def noise(seed: str, n: int) -> bytes:
        return b"".join(hashlib.sha256(f"{seed}{i}".encode()).digest() for i in range(n // 32))

    return build_oci_layout(
        tmp_path_factory.mktemp("interrupt") / "layout",
        layers=[{f"opt/data{i}": noise(str(i), 256 * 1024)} for i in range(3)],
    )


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory, layout: Layout) -> Iterator[RegistryServer]:
    server = start_registry(tmp_path_factory.mktemp("registry"))
    try:
        server.push(layout.source, "app/slow:v1")
        yield server
    finally:
        server.stop()


def _layer_digests(layout: Layout) -> set[str]:
    return {digest for digest, _ in layout.images[0].layers}


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text()
        found.update(int(c) for c in text.split())
    return found


def _running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _start(front: HTTPFront, home: Path, jobs: int = 2) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            *PINGUARD_WITH_CTRL_C,
            "audit",
            f"docker://{front.address}/app/slow:v1",
            "--no-cache",
            "--jobs",
            str(jobs),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "HOME": str(home)},
        start_new_session=True,  # its own process group, as a shell job would be
    )


def _wait_for(predicate: object, timeout: float = 60.0) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting for the audit to get going"
        time.sleep(0.05)


@pytest.mark.parametrize("target", ["process", "group"])
def test_ctrl_c_stops_busy_workers_promptly(
    registry: RegistryServer, layout: Layout, tmp_path: Path, target: str
) -> None:
    layers = _layer_digests(layout)
    with HTTPFront(registry.address, stall=lambda path: path.rsplit("/", 1)[-1] in layers) as front:
        proc = _start(front, tmp_path)
        try:
            _wait_for(lambda: front.stalled >= 2)  # both workers blocked mid-blob
            workers = _children(proc.pid)
            assert len(workers) >= 2
            start = time.monotonic()
            if target == "process":
                os.kill(proc.pid, signal.SIGINT)
            else:
                os.killpg(proc.pid, signal.SIGINT)
            out, err = proc.communicate(timeout=60)
            took = time.monotonic() - start
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    print(f"\ninterrupt ({target}): exited {proc.returncode} after {took:.2f} s")
    assert proc.returncode == 130
    assert err.strip().splitlines() == ["pinguard: error: interrupted"]
    assert "Traceback" not in out + err
    assert took < PROMPT
    deadline = time.monotonic() + 5
    while any(_running(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in workers if _running(pid)], "a layer worker outlived the audit"


def test_a_failing_layer_stops_the_other_workers(
    registry: RegistryServer, layout: Layout, tmp_path: Path
) -> None:
    """One layer arrives corrupted while another hangs: exit 3 at once, not after the hang."""
    layers = _layer_digests(layout)
    bad = sorted(layers)[0]

    def corrupt(path: str, body: bytes) -> bytes:
        if path.endswith(bad):
            # the scenario: the bad layer arrives while another hangs in flight; a worker
            # that forked late on a loaded machine must not find the audit already failed
            deadline = time.monotonic() + 10
            while front.stalled < 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            return body[:-1] + bytes([body[-1] ^ 0xFF])
        return body

    with HTTPFront(
        registry.address,
        transform=corrupt,
        stall=lambda path: path.rsplit("/", 1)[-1] in layers - {bad},
    ) as front:
        start = time.monotonic()
        proc = _start(front, tmp_path, jobs=3)  # every layer in flight at once
        try:
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        took = time.monotonic() - start
        assert front.stalled >= 1, "the other layer was never in flight"
    print(f"\nfailing layer: exited {proc.returncode} after {took:.2f} s")
    assert proc.returncode == 3
    assert bad in err
    assert "Traceback" not in out + err
    assert took < PROMPT + 5  # start-up and the config fetch included
