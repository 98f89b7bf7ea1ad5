"""Fleet test parts: real ``pinguard worker`` processes and a registry of images sharing layers.

``start_worker`` runs ``python -m pinguard worker`` (Celery, ``--pool solo``) in its own
directory with a log file, and waits until Celery logs ``ready``; ``Worker.stop()`` ends it
(SIGTERM, then SIGKILL after 10 s) and ``Worker.kill()`` sends SIGKILL at once (a worker
lost mid-audit); ``stop_all`` stops every worker started. ``enqueue_until_stalled``
enqueues an audit read through a front that holds one download and waits until the worker
is inside it (a moment to kill it). ``fleet_images`` writes OCI archives whose first layer
(Python and pip) is byte-identical across images, as images built on one base are, and
pushes them to a registry.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pinguard.testing.demo import Dist, Layer, demo_layers, write_oci_archive
from tests.infra.registry import HTTPFront, RegistryServer

READY_WAIT = 60.0


@dataclass
class Worker:
    """A running ``pinguard worker``."""

    process: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def kill(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_worker(
    workdir: Path,
    broker: str,
    results: Path,
    *extra: str,
    name: str = "w1",
    env: Mapping[str, str] | None = None,
) -> Worker:
    """``pinguard worker --broker BROKER --results RESULTS --pool solo EXTRA...``, ready;
    ``env``: the process environment (default: this one's)."""
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / f"{name}.log"
    cmd = [sys.executable, "-m", "pinguard", "worker", "--broker", broker]
    cmd += ["--results", str(results), "--pool", "solo", "--hostname", f"{name}@%h", *extra]
    with log.open("wb") as out:
        process = subprocess.Popen(
            cmd,
            cwd=workdir,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
        )
    worker = Worker(process, log)
    deadline = time.monotonic() + READY_WAIT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"pinguard worker exited {process.returncode}:\n{worker.text()}")
        if " ready." in worker.text():
            return worker
        time.sleep(0.1)
    worker.stop()
    raise RuntimeError(f"pinguard worker not ready in {READY_WAIT:g} s:\n{worker.text()}")


def stop_all(*workers: Worker | None) -> None:
    for worker in workers:
        if worker is not None:
            worker.stop()


def enqueue_until_stalled(
    broker: str, ref: str, front: HTTPFront, worker: Worker
) -> tuple[Any, Any]:
    """Enqueue an audit of ``ref`` (read through ``front``, which holds one blob download)
    and wait until ``worker`` is inside it, held; return the Celery app and the tasks."""
    from pinguard.fleet.app import make_app
    from pinguard.fleet.dispatch import enqueue

    app = make_app(broker)
    tasks = enqueue(app, [ref], {"policy": [], "fail_on": "error"})
    deadline = time.monotonic() + 60
    while front.stalled == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert front.stalled == 1, worker.text()[-3000:]
    return app, tasks


def base_layer() -> Layer:
    return demo_layers()[0]  # python + pip: the same bytes in every image


def fleet_layers(torch: str, nccl: str) -> list[Layer]:
    """A serving image on the shared base: torch and NCCL at the given versions."""
    return [
        base_layer(),
        Layer(
            f"RUN /bin/sh -c pip install torch=={torch} nvidia-nccl-cu13=={nccl} # buildkit",
            add=[
                Dist("nvidia-nccl-cu13", nccl),
                Dist("torch", torch, requires=[f"nvidia-nccl-cu13=={nccl}"], requested=True),
            ],
        ),
    ]


def push_fleet(
    registry: RegistryServer, workdir: Path, images: dict[str, list[Layer]]
) -> dict[str, str]:
    """Write and push each ``repo:tag`` -> layers; return ``repo:tag`` -> docker:// ref."""
    out = {}
    for name, layers in sorted(images.items()):
        path = workdir / (name.replace("/", "_").replace(":", "_") + ".tar")
        write_oci_archive(layers, path, tag="t")
        registry.push(f"oci-archive:{path}:t", name)
        out[name] = f"docker://{registry.ref(name)}"
    return out
