"""The push receiver under load, with its broker going away (issue 30.5), on real parts.

A real ``docker-registry`` with a ``notifications`` endpoint holds ten images; the envelopes
it sent for their pushes are recorded and then replayed by four client threads as the
registry delivers them (a 5 s timeout, a retry after a backoff on anything but 200), 200
envelopes and 240 push events in all, to a ``pinguard fleet receive`` process; two
``pinguard worker`` processes audit what it enqueues, reading the images through a front
that holds blob downloads while the test says so (an audit that takes a while, as real ones
do). The broker is a ``redis-server`` with AOF on; midway it is stopped (SIGTERM) for 5 s,
and while it is down the two audits held so far are let go, so each worker finishes a task
with no broker. Each answer must be 200 or 503 within the registry's 5 s; each image ends
with one record and the right exit code; the events of an image queued or being audited are
coalesced into that audit (the tasks are a handful, not one per event); each worker says in
one line that it waited for the broker, and acknowledges the task (nothing is left
unacknowledged for redelivery); no log holds a traceback. A push after the records is
audited again. Smaller tests: a broker that stops answering (SIGSTOP) is answered 503 within
the timeout; a task finished while the broker is down is acknowledged once it is back and
not delivered again, or, past ``--broker-patience``, given up in one line and delivered
again.
"""

from __future__ import annotations

import json
import re
import signal
import statistics
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from pinguard.fleet.records import ResultStore
from pinguard.testing.demo import Dist, Layer, demo_layers
from tests.infra.fleet import (
    Worker,
    fleet_layers,
    post_events,
    push_fleet,
    start_receiver,
    start_worker,
    stop_all,
)
from tests.infra.redis import AOFRedis, running_redis
from tests.infra.registry import HTTPFront, RegistryServer, running_registry

TOKEN = "load-token-0123456789abcdef"
REGISTRY_TIMEOUT = 5.0  # docs/deploy/registry-config.yml: timeout: 5s
BACKOFF = 0.5  # the registry's backoff (1s in the docs), shortened for CI
ENVELOPES = 200
CLIENTS = 4
OUTAGE = 5.0


def failing_layers(numpy: str) -> list[Layer]:
    """The demo story (a silent NCCL downgrade: fails the default policy), numpy varied."""
    layers = demo_layers()
    layers[2] = Layer(
        f"RUN /bin/sh -c pip install numpy=={numpy} # buildkit",
        add=[Dist("numpy", numpy, requested=True)],
    )
    return layers


IMAGES: dict[str, list[Layer]] = {
    **{f"team/app{i}:1.0": fleet_layers("2.11.0+cu130", f"2.30.{i}") for i in range(8)},
    "team/bad0:1.0": failing_layers("2.3.5"),
    "team/bad1:1.0": failing_layers("2.3.4"),
}
EXPECTED = {name: ("fail" if "/bad" in name else "pass") for name in IMAGES}


# --- parts ------------------------------------------------------------------------------------


class EnvelopeRecorder:
    """An HTTP endpoint that answers 200 to every POST and keeps its body: where the
    registry's notifications go while the images are pushed."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                recorder.bodies.append(self.rfile.read(length))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/events"

    def manifest_events(self) -> dict[str, dict[str, Any]]:
        """``repo:tag`` -> the registry's push event of that manifest."""
        out = {}
        for body in self.bodies:
            for event in json.loads(body).get("events", []):
                target = event.get("target", {})
                if event.get("action") == "push" and target.get("tag"):
                    out[f"{target['repository']}:{target['tag']}"] = event
        return out

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def notifications(url: str) -> str:
    return (
        "notifications:\n"
        "  endpoints:\n"
        "    - name: pinguard\n"
        f"      url: {url}\n"
        "      headers:\n"
        f"        Authorization: [Bearer {TOKEN}]\n"
        "      timeout: 5s\n"
        "      threshold: 3\n"
        "      backoff: 1s\n"
    )


class Gate:
    """An ``HTTPFront`` whose blob downloads wait while the gate is closed (an audit that
    takes a while); ``held`` counts the downloads waiting now."""

    def __init__(self, upstream: str) -> None:
        self.open = threading.Event()
        self.lock = threading.Lock()
        self.held = 0
        self.front = HTTPFront(upstream, transform=self._transform)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.front.port}"

    def _transform(self, path: str, body: bytes) -> bytes:
        if "/blobs/" in path and not self.open.is_set():
            with self.lock:
                self.held += 1
            try:
                self.open.wait(120)
            finally:
                with self.lock:
                    self.held -= 1
        return body

    def stop(self) -> None:
        self.open.set()
        self.front.stop()


@dataclass(frozen=True)
class Attempt:
    """One delivery attempt: when it started (monotonic), its answer (an HTTP status, or
    ``timeout`` / ``error``) and how long it took."""

    started: float
    status: int | str
    seconds: float


def post(address: str, body: bytes, timeout: float = REGISTRY_TIMEOUT) -> int | str:
    """The receiver's answer, as the registry meets it: a status, ``timeout`` or ``error``."""
    try:
        return post_events(address, body, TOKEN, timeout)
    except TimeoutError:
        return "timeout"
    except (urllib.error.URLError, OSError) as exc:
        return "timeout" if "timed out" in str(exc) else "error"


class Registryish:
    """Clients that deliver envelopes as the registry does: each envelope is POSTed until
    it is answered 200, a retry ``BACKOFF`` after any other answer (or none in 5 s);
    at most ``attempts`` tries, all kept in ``attempts``."""

    def __init__(self, address: str, max_attempts: int = 60) -> None:
        self.address = address
        self.max_attempts = max_attempts
        self.lock = threading.Lock()
        self.attempts: list[Attempt] = []
        self.delivered = 0
        self.undelivered: list[bytes] = []

    def deliver(self, body: bytes) -> None:
        for _ in range(self.max_attempts):
            started = time.monotonic()
            status = post(self.address, body)
            with self.lock:
                self.attempts.append(Attempt(started, status, time.monotonic() - started))
                if status == 200:
                    self.delivered += 1
                    return
            time.sleep(BACKOFF)
        with self.lock:
            self.undelivered.append(body)

    def run(self, envelopes: list[bytes], pace: float) -> list[threading.Thread]:
        """Deliver ``envelopes`` from ``CLIENTS`` threads, each sending its share one after
        another, ``pace`` seconds apart."""

        def client(share: list[bytes]) -> None:
            for body in share:
                self.deliver(body)
                time.sleep(pace)

        threads = [
            threading.Thread(target=client, args=(envelopes[k::CLIENTS],), daemon=True)
            for k in range(CLIENTS)
        ]
        for thread in threads:
            thread.start()
        return threads


def worker_tasks(workers: list[Worker]) -> dict[str, list[str]]:
    """Task id -> the record ids it wrote (one per run), from the workers' logs."""
    out: dict[str, list[str]] = {}
    done = re.compile(r"Task pinguard\.audit\[([0-9a-f-]+)\] succeeded in [^:]+: \{'id': '(\w+)'")
    for worker in workers:
        for task_id, rid in done.findall(worker.text()):
            out.setdefault(task_id, []).append(rid)
    return out


def received(workers: list[Worker]) -> list[str]:
    pattern = re.compile(r"Task pinguard\.audit\[([0-9a-f-]+)\] received")
    return [tid for worker in workers for tid in pattern.findall(worker.text())]


def broker_client(url: str) -> Any:
    import redis

    return redis.Redis.from_url(url, socket_timeout=5)


def drain(workers: list[Worker], broker_url: str, timeout: float) -> None:
    """Wait until the queue is empty, no claim is held and every task received has run."""
    client = broker_client(broker_url)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = sum(len(v) for v in worker_tasks(workers).values())
        queued = client.llen("pinguard")
        claims = client.keys("pinguard::queued::*")
        if queued == 0 and not claims and runs == len(received(workers)):
            return
        time.sleep(0.2)
    raise AssertionError(
        f"not drained in {timeout:g} s: {client.llen('pinguard')} queued, "
        f"{len(client.keys('pinguard::queued::*'))} claims, {len(received(workers))} "
        f"received, {sum(len(v) for v in worker_tasks(workers).values())} run"
    )


def no_tracebacks(*logs: str) -> None:
    for text in logs:
        assert "Traceback" not in text, text[-4000:]
        assert "Exception raised outside body" not in text, text[-4000:]


def stats(attempts: list[Attempt], status: int | str) -> str:
    seconds = sorted(a.seconds for a in attempts if a.status == status)
    if not seconds:
        return f"{status}: none"
    p99 = seconds[min(len(seconds) - 1, int(len(seconds) * 0.99))]
    return (
        f"{status}: {len(seconds)}, median {statistics.median(seconds) * 1000:.0f} ms, "
        f"p99 {p99 * 1000:.0f} ms, max {seconds[-1] * 1000:.0f} ms"
    )


# --- the load test ----------------------------------------------------------------------------


@pytest.fixture
def pushed(tmp_path: Path) -> Iterator[tuple[RegistryServer, dict[str, dict[str, Any]]]]:
    """A real registry holding the ten images, and the push event it sent for each."""
    recorder = EnvelopeRecorder()
    try:
        with running_registry(
            tmp_path / "registry", extra_config=notifications(recorder.url)
        ) as registry:
            push_fleet(registry, tmp_path / "images", IMAGES)
            deadline = time.monotonic() + 60
            while set(recorder.manifest_events()) != set(IMAGES):
                assert time.monotonic() < deadline, recorder.manifest_events().keys()
                time.sleep(0.1)
            yield registry, recorder.manifest_events()
    finally:
        recorder.stop()


def test_a_burst_of_pushes_with_the_broker_stopped_midway(
    tmp_path: Path,
    aof_broker: AOFRedis,
    pushed: tuple[RegistryServer, dict[str, dict[str, Any]]],
) -> None:
    registry, events = pushed
    names = sorted(IMAGES)
    # 200 envelopes as the registry sent them, round robin over the images; every fifth
    # also carries another image's push (240 events)
    envelopes = []
    for i in range(ENVELOPES):
        batch = [events[names[i % len(names)]]]
        if i % 5 == 4:
            batch.append(events[names[(i + 3) % len(names)]])
        envelopes.append(json.dumps({"events": batch}).encode())
    n_events = ENVELOPES + ENVELOPES // 5

    gate = Gate(registry.address)
    results = tmp_path / "results"
    workers: list[Worker] = []
    receiver = start_receiver(
        tmp_path / "receiver", aof_broker.url(), TOKEN, "--registry", gate.address
    )
    try:
        for name in ("w1", "w2"):
            workers.append(start_worker(tmp_path / name, aof_broker.url(), results, name=name))
        clients = Registryish(receiver.address)
        started = time.monotonic()
        threads = clients.run(envelopes, pace=0.15)

        # midway: both workers are inside an audit (held at the gate); stop the broker
        receiver.wait_until(lambda: clients.delivered >= ENVELOPES // 2, 30, "half delivered")
        assert gate.held == 2, (gate.held, [w.text()[-2000:] for w in workers])
        aof_broker.stop()  # SIGTERM: the AOF is written, as on a restart
        stopped = time.monotonic()
        # the two audits finish with the broker down: records in the store, nothing else
        gate.open.set()
        store = ResultStore(results)
        while len(store.ids()) < 2:
            assert time.monotonic() < stopped + OUTAGE - 1, [w.text()[-2000:] for w in workers]
            time.sleep(0.05)
        gate.open.clear()
        finished_in_outage = {r.reference for r in store.all()}
        time.sleep(max(0.0, stopped + OUTAGE - time.monotonic()))
        aof_broker.start()  # same port, same directory: the AOF is replayed
        restarted = time.monotonic()

        for thread in threads:
            thread.join(timeout=60)
        burst = time.monotonic() - started
        assert not clients.undelivered, receiver.text()[-3000:]
        gate.open.set()
        drain(workers, aof_broker.url(), timeout=60)
        burst_tasks = worker_tasks(workers)
        burst_sent = receiver.text().count("\nenqueued ")

        # after the burst: a push of each image is audited again (its record rewritten)
        stamps = {rid: store.stamp(rid) for rid in store.ids()}
        again = Registryish(receiver.address)
        for name in names:
            again.deliver(json.dumps({"events": [events[name]]}).encode())
        drain(workers, aof_broker.url(), timeout=60)
        after_tasks = worker_tasks(workers)
        unacked = broker_client(aof_broker.url()).hlen("unacked")
    finally:
        receiver.stop()
        stop_all(*workers)
        gate.stop()

    attempts = clients.attempts
    figures = (
        f"{len(envelopes)} envelopes ({n_events} events) from {CLIENTS} clients in "
        f"{burst:.1f} s, broker down {restarted - stopped:.1f} s: {len(attempts)} answers, "
        f"{stats(attempts, 200)}; {stats(attempts, 503)}; "
        f"{len(burst_tasks)} tasks for {n_events} events"
    )
    print(figures)
    worker_logs = [w.text() for w in workers]

    # every answer 200 or 503, each within the registry's timeout; 503s during the outage
    assert {a.status for a in attempts} <= {200, 503}, figures
    assert max(a.seconds for a in attempts) < REGISTRY_TIMEOUT, figures
    outage_503 = [a for a in attempts if a.status == 503]
    assert outage_503, figures
    assert all(stopped - 1 <= a.started <= restarted + REGISTRY_TIMEOUT for a in outage_503)
    assert burst < 30, figures

    # one record per image, the right verdict and exit code
    records = {r.reference: r for r in ResultStore(results).all()}
    refs = {
        f"docker://{gate.address}/{name.split(':')[0]}@{events[name]['target']['digest']}": name
        for name in names
    }
    assert set(records) == set(refs), sorted(records)
    for ref, name in refs.items():
        want = EXPECTED[name]
        assert (records[ref].verdict, records[ref].exit_code) == (want, int(want == "fail")), (
            records[ref]
        )
    assert len(ResultStore(results).ids()) == len(IMAGES)

    # far fewer tasks than events: one audit per image while one is queued or running; the
    # two audits that finished during the outage wrote their records midway, so a later push
    # of those two images was audited again (at most once more: it was held until the end)
    assert burst_sent == len(burst_tasks), (burst_sent, figures)
    per_record: dict[str, int] = {}
    for rids in burst_tasks.values():
        assert len(rids) == 1, burst_tasks  # no task ran twice: none was redelivered
        per_record[rids[0]] = per_record.get(rids[0], 0) + 1
    assert len(per_record) == len(IMAGES)
    by_rid = {rid: ResultStore(results).read(rid) for rid in per_record}
    for rid, count in per_record.items():
        record = by_rid[rid]
        assert record is not None
        limit = 2 if record.reference in finished_in_outage else 1
        assert 1 <= count <= limit, (record.reference, count, finished_in_outage)
    assert len(burst_tasks) <= len(IMAGES) + 2 < n_events // 10

    # each worker finished a task with the broker down: one line, no traceback, acked
    for text in worker_logs:
        lost = re.findall(r"lost the broker \(.*\) while .*", text)
        assert len(lost) == 1, text[-4000:]
        assert "retrying until it is back, for at most 300 s" in lost[0]
    no_tracebacks(receiver.text(), *worker_logs)
    assert unacked == 0

    # later pushes, after the records: each image audited again, its record rewritten
    assert len(again.attempts) == len(IMAGES), again.attempts
    assert {a.status for a in again.attempts} == {200}
    assert len(after_tasks) == len(burst_tasks) + len(IMAGES)
    assert all(ResultStore(results).stamp(rid) != stamp for rid, stamp in stamps.items())


def test_a_broker_that_stops_answering_is_answered_503_in_time(tmp_path: Path) -> None:
    """The broker's process is stopped (SIGSTOP: it accepts connections and answers
    nothing, as a hung or partitioned host does) under four clients: every push is answered
    503 within the registry's timeout, most at once; once it answers again, 200."""
    with running_redis(tmp_path / "broker") as broker:
        receiver = start_receiver(tmp_path / "receiver", broker.url(), TOKEN)
        try:
            digest = "sha256:" + "ab" * 32
            target = {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "repository": "team/serve",
                "digest": digest,
                "tag": "1.0",
                "url": f"http://127.0.0.1:5000/v2/team/serve/manifests/{digest}",
            }
            body = json.dumps({"events": [{"action": "push", "target": target}]}).encode()
            assert post(receiver.address, body) == 200  # connected, and the claim is taken
            assert broker.process is not None
            broker.process.send_signal(signal.SIGSTOP)
            try:
                attempts: list[Attempt] = []
                lock = threading.Lock()
                until = time.monotonic() + 8

                def client() -> None:
                    while time.monotonic() < until:
                        started = time.monotonic()
                        status = post(receiver.address, body)
                        with lock:
                            attempts.append(Attempt(started, status, time.monotonic() - started))
                        time.sleep(0.05)

                threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join(30)
            finally:
                broker.process.send_signal(signal.SIGCONT)
            receiver.wait_until(lambda: post(receiver.address, body) == 200, 10, "answering 200")
        finally:
            receiver.stop()
    print(f"{len(attempts)} answers while stopped: {stats(attempts, 503)}")
    assert {a.status for a in attempts} == {503}, attempts
    assert max(a.seconds for a in attempts) < REGISTRY_TIMEOUT
    fast = [a for a in attempts if a.seconds < 0.5]
    assert len(fast) >= len(attempts) * 0.8, stats(attempts, 503)
    text = receiver.text()
    assert "warning: lost the broker" in text
    assert "warning: the broker is back after" in text
    assert "coalesced docker://127.0.0.1:5000/team/serve@" in text  # its claim was kept
    no_tracebacks(text)


@pytest.mark.parametrize("patience", [None, "2"], ids=["rides-it-out", "gives-up-after-2s"])
def test_a_task_finished_while_the_broker_is_down_is_acknowledged_once_it_is_back(
    tmp_path: Path,
    aof_broker: AOFRedis,
    fleet_registry: tuple[RegistryServer, dict[str, str]],
    patience: str | None,
) -> None:
    """One worker with a 4 s visibility timeout finishes an audit while the broker is
    stopped for 5 s: it says so in one line, stores the result and acknowledges the task
    once the broker is back, and the task is not delivered again after the timeout. With
    ``--broker-patience 2`` it gives up after 2 s, in one more line, and the task is
    delivered again once the broker is back (the same record)."""
    from pinguard.fleet.app import make_app
    from pinguard.fleet.dispatch import enqueue

    registry, _ = fleet_registry
    gate = Gate(registry.address)
    results = tmp_path / "results"
    extra = ["--visibility-timeout", "4"]
    if patience is not None:
        extra += ["--broker-patience", patience]
    worker = start_worker(tmp_path / "w1", aof_broker.url(), results, *extra)
    try:
        app = make_app(aof_broker.url(), enqueuer=True)
        [task] = enqueue(app, [f"docker://{gate.address}/team/serve:b"], {"fail_on": "error"})
        worker.wait_until(lambda: gate.held > 0, 60, "held at the gate")
        aof_broker.stop()
        stopped = time.monotonic()
        gate.open.set()
        store = ResultStore(results)
        while not store.ids():
            assert time.monotonic() < stopped + OUTAGE - 1, worker.text()[-3000:]
            time.sleep(0.05)
        time.sleep(max(0.0, stopped + OUTAGE - time.monotonic()))
        aof_broker.start()
        runs = 1 if patience is None else 2
        succeeded = f"{task.task_id}] succeeded"
        worker.wait_until(lambda: worker.text().count(succeeded) >= runs, 30, f"{runs} run(s)")
        time.sleep(8)  # past the visibility timeout, and a sweep for unacknowledged tasks
        state = make_app(aof_broker.url(), enqueuer=True).AsyncResult(task.task_id).state
        unacked = broker_client(aof_broker.url()).hlen("unacked")
    finally:
        worker.stop()
        gate.stop()
    text = worker.text()
    no_tracebacks(text)
    assert received([worker]) == [task.task_id] * runs, text[-4000:]
    [lost] = re.findall(r"lost the broker \(.*", text)
    assert f"while releasing the push claim on record {task.record}" in lost
    gave_up = re.findall(r"the broker has been unreachable for .*", text)
    if patience is None:
        assert "for at most 300 s" in lost
        assert gave_up == []
    else:
        assert "for at most 2 s" in lost
        [line] = gave_up
        assert re.match(
            r"the broker has been unreachable for [23] s \(.*\): gave up releasing the push "
            rf"claim on record {task.record}; the claim lapses by itself",
            line,
        ), line
    assert state == "SUCCESS"
    assert unacked == 0
    [record] = ResultStore(results).all()
    assert record.verdict == "pass"
