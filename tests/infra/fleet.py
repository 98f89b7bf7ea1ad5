"""Fleet test parts: real ``pinguard worker`` processes and a registry of images sharing layers.

``LoggedProcess`` is a child process logging to a file (``start_logged``): ``wait_for`` a
pattern in its log, ``wait_until`` a condition, each failing with the log when the process
exits first or the time is up; ``stop()`` ends it (SIGTERM, then SIGKILL after 10 s) and
``kill()`` sends SIGKILL at once (a worker lost mid-audit). ``start_worker`` runs
``python -m pinguard worker`` (Celery, ``--pool solo``) in its own directory and waits until
Celery logs ``ready``; ``start_receiver`` runs ``pinguard fleet receive`` on a free loopback
port and reads the address it logs, ``post_events`` posts it a registry's notification
(``push_event``); ``stop_all`` stops every worker started.
``enqueue_until_stalled`` enqueues an audit read through a front that holds one download and
waits until the worker is inside it (a moment to kill it). ``fleet_images`` writes OCI
archives whose first layer (Python and pip) is byte-identical across images, as images built
on one base are, and pushes them to a registry.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pinguard.testing.demo import Dist, Layer, demo_layers, write_oci_archive
from tests.infra.paths import POLICIES
from tests.infra.registry import HTTPFront, RegistryServer

READY_WAIT = 60.0


@dataclass
class LoggedProcess:
    """A child process whose output goes to a log file: a worker, a receiver, ``fleet run``."""

    process: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def wait_until(self, done: Callable[[], object], timeout: float, what: str) -> None:
        """Poll ``done()`` until it is true; AssertionError with the log when the process
        exits first or ``timeout`` seconds pass."""
        deadline = time.monotonic() + timeout
        while not done():
            if self.process.poll() is not None:
                raise AssertionError(
                    f"exited {self.process.returncode} before {what}:\n{self.text()}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"not {what} in {timeout:g} s:\n{self.text()}")
            time.sleep(0.1)

    def wait_for(self, pattern: str, timeout: float = 60) -> re.Match[str]:
        """The first match of ``pattern`` in the log, once the process has logged it."""
        found: list[re.Match[str]] = []

        def logged() -> bool:
            match = re.search(pattern, self.text())
            found.extend([match] if match else [])
            return match is not None

        self.wait_until(logged, timeout, f"logging {pattern!r}")
        return found[0]

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


def start_logged(
    cmd: Sequence[str],
    log: Path,
    *,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    stdout: int | None = None,
) -> LoggedProcess:
    """``cmd`` started in ``cwd`` with its stdout and stderr in ``log`` (with
    ``stdout=subprocess.PIPE``, its stderr alone); ``env``: default this one's."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            list(cmd),
            cwd=cwd,
            stdout=out if stdout is None else stdout,
            stderr=subprocess.STDOUT if stdout is None else out,
            env=dict(env) if env is not None else None,
        )
    return LoggedProcess(process, log)


class Worker(LoggedProcess):
    """A running ``pinguard worker``."""


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
    cmd = [sys.executable, "-m", "pinguard", "worker", "--broker", broker]
    cmd += ["--results", str(results), "--pool", "solo", "--hostname", f"{name}@%h", *extra]
    started = start_logged(cmd, workdir / f"{name}.log", cwd=workdir, env=env)
    worker = Worker(started.process, started.log)
    try:
        worker.wait_for(r" ready\.", READY_WAIT)
    except AssertionError:
        worker.stop()
        raise
    return worker


@dataclass
class Receiver(LoggedProcess):
    """A running ``pinguard fleet receive``, and the address it listens on."""

    address: str = ""


def start_receiver(
    workdir: Path, broker: str, token: str, *extra: str, env: Mapping[str, str] | None = None
) -> Receiver:
    """``pinguard fleet receive --listen 127.0.0.1:0 --token-file T --broker BROKER --policy
    default.toml EXTRA...`` in ``workdir`` (``token`` written to ``T`` there), listening."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "token").write_text(token + "\n")
    cmd = [sys.executable, "-m", "pinguard", "fleet", "receive", "--listen", "127.0.0.1:0"]
    cmd += ["--token-file", str(workdir / "token"), "--broker", broker]
    cmd += ["--policy", str(POLICIES / "default.toml"), *extra]
    started = start_logged(cmd, workdir / "receiver.log", cwd=workdir, env=env)
    receiver = Receiver(started.process, started.log)
    try:
        receiver.address = receiver.wait_for(r"listening on (\S+)").group(1)
    except AssertionError:
        receiver.stop()
        raise
    return receiver


def push_event(
    tag: str, digest: str = "sha256:" + "ab" * 32, repository: str = "team/serve"
) -> bytes:
    """The registry's notification of one manifest pushed under ``tag``: the body it posts."""
    target = {
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "repository": repository,
        "digest": digest,
        "tag": tag,
        "url": f"http://127.0.0.1:5000/v2/{repository}/manifests/{digest}",
    }
    return json.dumps({"events": [{"action": "push", "target": target}]}).encode()


def post_events(address: str, body: bytes, token: str, timeout: float = 60) -> int:
    """POST ``body`` to the receiver at ``address`` as the registry does: its HTTP status."""
    request = urllib.request.Request(
        f"http://{address}/events",
        data=body,
        method="POST",
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/vnd.docker.distribution.events.v1+json",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            response.read()
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


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
    worker.wait_until(lambda: front.stalled > 0, 60, "inside the held download")
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
