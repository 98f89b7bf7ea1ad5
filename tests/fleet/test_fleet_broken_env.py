"""The fleet's commands in a broken environment, run as a user runs them: a subprocess each.

No broker listening (``fleet run``, ``worker``), the broker lost for good while ``fleet run``
waits (waited out until ``--timeout``, then reported), a typo'd result store, policy,
reference file or token file, pinguard installed without the ``fleet`` extra (Celery, kombu
and redis-py made unimportable by a meta-path finder in the child, as a plain ``pip install
pinguard`` leaves them), the push receiver with its broker down or its port taken, and
``fleet run --repository`` on a repository that also holds pinguard's own ``sha256-<hex>``
attestation tag. Each ends in one ``pinguard: error:`` line naming the cause and a documented
exit code, in seconds (the lost broker: once --timeout has passed), with no traceback; or,
for the missing extra under ``audit --cache redis://``, a note and the audit. Real parts
throughout: ``redis-server`` brokers, a ``docker-registry``, ``pinguard attest --push``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from pinguard.errors import EXIT_FINDINGS, EXIT_UNREACHABLE, EXIT_USAGE
from pinguard.fleet.app import BROKER_ENV, QUEUE
from pinguard.fleet.records import ImageRecord, ResultStore
from pinguard.testing.demo import build_demo, write_oci_archive
from tests.infra.fleet import fleet_layers, post_events, push_event, start_logged
from tests.infra.keys import ec_key_pair
from tests.infra.paths import REPO
from tests.infra.redis import RedisServer
from tests.infra.registry import free_port, running_registry

#: a meta-path finder that refuses the ``fleet`` extra's modules, as if never installed
NO_FLEET_EXTRA = (
    "import importlib.abc, sys\n"
    "class NoFleetExtra(importlib.abc.MetaPathFinder):\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name.partition('.')[0] in ('celery', 'kombu', 'redis'):\n"
    "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
    "        return None\n"
    "sys.meta_path.insert(0, NoFleetExtra())\n"
)
RUN_CLI = "from pinguard.cli import main\nsys.argv[0] = 'pinguard'\nraise SystemExit(main())\n"
EXTRA = "pip install 'pinguard[fleet]'"
#: what "fast" means here: Python and Celery's imports plus one refused connect, on loaded
#: shared cores; Celery alone took 20 s (fleet run) or retried 100 times (worker)
FAST_S = 10.0
TOKEN = "push-token-0123456789abcdef"
POLICY = REPO / "policies" / "default.toml"


@dataclass
class Ran:
    code: int
    out: str
    err: str
    seconds: float

    @property
    def errors(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.startswith("pinguard: error:")]

    def one_error(self) -> str:
        """The only line on stderr, an error line; nothing on stdout, no traceback."""
        assert "Traceback" not in self.out + self.err, self.err[-3000:]
        assert self.out == "", self.out
        lines = self.err.strip().splitlines()
        assert len(lines) == 1, self.err[-3000:]
        assert lines == self.errors, self.err[-3000:]
        return lines[0]


def child_env(home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PINGUARD_")}
    env.update({"HOME": str(home), "XDG_CACHE_HOME": str(home / "cache")})
    env.update(extra or {})
    return env


def pinguard(
    cwd: Path,
    *argv: str,
    extra: bool = True,
    env: Mapping[str, str] | None = None,
    timeout: float = 90,
) -> Ran:
    """``pinguard ARGV...`` in a child process; ``extra=False``: without the fleet extra."""
    code = (NO_FLEET_EXTRA if not extra else "import sys\n") + RUN_CLI
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", code, *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=child_env(cwd, env),
        check=False,
    )
    return Ran(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)


def closed_port() -> int:
    """A loopback port nothing listens on (bound a moment ago, then released)."""
    return free_port()


def queued(broker: RedisServer) -> int:
    import redis

    client = redis.Redis.from_url(broker.url())
    try:
        return int(client.llen(QUEUE))
    finally:
        client.close()


# --------------------------------------------------------------------------- the broker


def test_no_broker_listening_is_one_line_naming_it_exit_3_in_seconds(tmp_path: Path) -> None:
    """`fleet run` (with --broker, or the broker from $PINGUARD_BROKER_URL) and `worker` with
    nothing on the broker's port; a password in the URL is never printed."""
    port = closed_port()
    broker = f"redis://127.0.0.1:{port}/0"
    results = tmp_path / "results"
    results.mkdir()
    secret = f"redis://:s3cret-broker-pw@127.0.0.1:{port}/0"
    image = "docker://registry.example/team/app:1"  # read, never fetched: no broker to send it
    cases = [
        (["fleet", "run", image, "--broker", broker, "--results", "results"], {}, broker),
        (["fleet", "run", image, "--results", "results"], {BROKER_ENV: broker}, broker),
        (["worker", "--broker", broker, "--results", "results"], {}, broker),
        (
            ["worker", "--broker", secret, "--results", "results"],
            {},
            f"redis://:***@127.0.0.1:{port}/0",
        ),
    ]  # fmt: skip
    for argv, env, shown in cases:
        try:
            ran = pinguard(tmp_path, *argv, env=env, timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{argv}: still retrying the broker after 60 s")
        line = ran.one_error()
        assert line.startswith(f"pinguard: error: could not reach the broker {shown}: "), line
        assert "Connection refused" in line, line
        assert "s3cret-broker-pw" not in ran.err
        assert ran.code == EXIT_UNREACHABLE, (argv, ran)
        assert ran.seconds < FAST_S, (argv, ran.seconds)


def test_the_broker_lost_while_fleet_run_waits_is_waited_out_then_one_line_exit_3(
    tmp_path: Path, broker: RedisServer
) -> None:
    """The broker stops after the audits were enqueued (no worker runs them): `fleet run`
    says so, waits for it until --timeout (a broker restarting comes back:
    tests/fleet/test_broker_restart.py), then reports the image as pending and fails with
    one line naming the broker and where the records will land, exit 3."""
    results = tmp_path / "results"
    results.mkdir()
    timeout = 6.0
    err = tmp_path / "err.txt"
    cmd = [sys.executable, "-c", "import sys\n" + RUN_CLI, "fleet", "run", "docker://x/y:1"]
    cmd += ["--broker", broker.url(), "--results", str(results), "--timeout", f"{timeout:g}"]
    run = start_logged(cmd, err, cwd=tmp_path, env=child_env(tmp_path), stdout=subprocess.PIPE)
    proc = run.process
    try:
        run.wait_for(r"enqueued 1 audit\(s\)", 60)
        assert queued(broker) == 1
        broker.stop()
        stopped = time.monotonic()
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    ran = Ran(proc.returncode, out.decode(), err.read_text(), time.monotonic() - stopped)
    assert "Traceback" not in ran.err, ran.err[-3000:]
    lines = ran.err.splitlines()
    assert lines[0] == "enqueued 1 audit(s)"
    assert lines[1].startswith("warning: lost the broker ("), lines
    [line] = ran.errors
    assert line == lines[-1]
    assert line.startswith(f"pinguard: error: could not reach the broker {broker.url()}: "), line
    assert "0 of 1 audit(s) done, 1 pending" in line
    assert f"pinguard fleet report --results {results}" in line
    assert ran.code == EXIT_UNREACHABLE
    assert "1 image(s), 0 pass, 0 fail, 0 could not be audited, 1 pending" in ran.out
    assert "docker://x/y:1  pending  3" in ran.out
    assert ran.seconds < timeout + FAST_S


# --------------------------------------------------------------------------- typo'd paths


def test_a_typo_d_result_store_policy_or_file_is_exit_2_naming_it_before_any_task(
    tmp_path: Path, broker: RedisServer
) -> None:
    """A path that is not there fails the command at once, naming it, with nothing
    enqueued: `fleet report` no longer passes the gate with "0 image(s)"."""
    (tmp_path / "results").mkdir()
    (tmp_path / "a-file").write_text("not a directory\n")
    store = "the result store"
    live = broker.url()
    cases = [
        (["fleet", "report", "--results", "nonexistent"], f"{store} nonexistent does not exist"),
        (["fleet", "report", "--results", "a-file"], "the result store a-file is not a directory"),
        (
            ["fleet", "run", "docker://x/y:1", "--broker", live, "--results", "nonexistent"],
            "the result store nonexistent does not exist",
        ),
        (
            ["fleet", "run", "docker://x/y:1", "--broker", live, "--results", "results",
             "--policy", "polcy.toml"],
            "polcy.toml",
        ),
        (
            ["fleet", "run", "--file", "refs.txt", "--broker", live, "--results", "results"],
            "cannot read 'refs.txt': No such file or directory",
        ),
        (
            ["worker", "--broker", live, "--results", "a-file/results"],
            "cannot write to the result store a-file/results",
        ),
        (
            ["fleet", "receive", "--token-file", "token.txt", "--broker", live],
            "cannot read --token-file 'token.txt': No such file or directory",
        ),
    ]  # fmt: skip
    for argv, cause in cases:
        try:
            ran = pinguard(tmp_path, *argv, timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{argv}: still running after 60 s")
        line = ran.one_error()
        assert cause in line, (argv, line)
        assert ran.code == EXIT_USAGE, (argv, ran)
    assert queued(broker) == 0


# --------------------------------------------------------------------------- no fleet extra


def test_without_the_fleet_extra_commands_name_it_and_audit_notes_it(tmp_path: Path) -> None:
    """Celery and redis-py not importable: the fleet's commands say what to install (exit
    2); `audit --cache redis://` notes it and audits without the shared cache; `fleet
    report`, which needs neither, still reads the store."""
    probe = subprocess.run(
        [sys.executable, "-c", NO_FLEET_EXTRA + "import redis"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert probe.returncode == 1  # the finder blocks as a missing package does
    assert "No module named 'redis'" in probe.stderr
    (tmp_path / "token").write_text(TOKEN + "\n")
    broker = f"redis://127.0.0.1:{closed_port()}/0"
    for argv in (
        ["worker", "--broker", broker, "--results", "results"],
        ["fleet", "run", "docker://x/y:1", "--broker", broker, "--results", "results"],
        ["fleet", "receive", "--token-file", "token", "--broker", broker],
    ):
        ran = pinguard(tmp_path, *argv, extra=False, timeout=60)
        line = ran.one_error()
        command = " ".join(argv[:2]) if argv[0] == "fleet" else argv[0]
        assert line == (
            f"pinguard: error: pinguard {command} needs Celery and redis-py, which are not "
            f"installed (no module 'celery'): {EXTRA}"
        )
        assert ran.code == EXIT_USAGE
        assert ran.seconds < FAST_S

    build_demo(tmp_path / "demo.tar", tag="2026-11-29")
    cache = f"redis://127.0.0.1:{closed_port()}/0"
    ran = pinguard(
        tmp_path, "audit", "demo.tar", "--cache-dir", "fresh", "--cache", cache, "-f", "json",
        extra=False,
    )  # fmt: skip
    assert "Traceback" not in ran.out + ran.err, ran.err[-3000:]
    assert ran.code == EXIT_FINDINGS  # the demo's downgrade, found without the shared cache
    report = json.loads(ran.out)
    assert (
        f"layer cache {cache} unavailable (redis-py is not installed: {EXTRA}): audited "
        "without the shared cache"
    ) in report["notes"]
    assert not report["incomplete"]
    assert any(
        f["rule"] == "downgrade" and f["package"] == "nvidia-nccl-cu13" for f in report["findings"]
    ), report["findings"]

    ResultStore(tmp_path / "store").write(
        "abc123", ImageRecord(reference="docker://x/y:1", verdict="pass", exit_code=0)
    )
    ran = pinguard(tmp_path, "fleet", "report", "--results", "store", extra=False)
    assert (ran.code, ran.err) == (0, ""), ran.err[-3000:]
    assert "1 image(s), 1 pass" in ran.out.splitlines()[0]


# --------------------------------------------------------------------------- the receiver


def test_the_receiver_with_its_broker_down_says_so_and_answers_503_in_time(
    tmp_path: Path,
) -> None:
    """The receiver starts (the broker may come up later) but says it cannot reach it; a
    push is answered 503 within the registry's 5 s notification timeout (Celery's retries
    took 20 s) and the receiver's log says why; its port taken is exit 2, one line."""
    (tmp_path / "token").write_text(TOKEN + "\n")
    broker = f"redis://127.0.0.1:{closed_port()}/0"
    log = tmp_path / "receiver.log"
    cmd = [sys.executable, "-c", "import sys\n" + RUN_CLI, "fleet", "receive", "--token-file"]
    cmd += ["token", "--broker", broker, "--listen", "127.0.0.1:0"]
    receiver = start_logged(cmd, log, cwd=tmp_path, env=child_env(tmp_path))
    try:
        receiver.wait_for("listening on ", 60)
        lines = log.read_text().splitlines()
        assert lines[0] == (
            f"warning: could not reach the broker {broker}: Error 111 connecting to "
            f"{broker.split('/')[2]}. Connection refused; pushes are answered 503 until it can"
        )
        address = lines[1].split()[-1]
        start = time.monotonic()
        assert post_events(address, push_event("1.0"), TOKEN) == 503
        assert time.monotonic() - start < 5.0
        time.sleep(0.2)
        assert log.read_text().splitlines()[2] == (
            "answered 503 (the registry retries): could not enqueue 1 audit(s): could not "
            f"reach the broker {broker}: Error 111 connecting to {broker.split('/')[2]}. "
            "Connection refused"
        )
        host, port = address.rsplit(":", 1)
        ran = pinguard(
            tmp_path, "fleet", "receive", "--token-file", "token", "--broker", broker,
            "--listen", address,
        )  # fmt: skip
        assert ran.one_error() == (
            f"pinguard: error: --listen {host}:{port}: cannot listen there: Address already in use"
        )
        assert ran.code == EXIT_USAGE
    finally:
        receiver.stop()
    assert "Traceback" not in log.read_text()


# --------------------------------------------------------------------------- referrers tags


def test_fleet_run_repository_leaves_out_attestation_tags(
    tmp_path: Path, broker: RedisServer
) -> None:
    """A repository holding an image and its attestation (`pinguard attest --push` on a
    registry without the referrers API: a `sha256-<hex>` tag) and a cosign-style
    `sha256-<hex>.sig` tag: `fleet run --repository` enqueues the image alone."""
    from pinguard.sources.interface import SourceOptions
    from pinguard.sources.registry import RegistrySource, list_tags

    ec_key_pair(tmp_path, "key")
    (tmp_path / "results").mkdir()
    archive = tmp_path / "app.tar"
    write_oci_archive(fleet_layers("2.11.0+cu130", "2.30.3"), archive, tag="t")
    with running_registry(tmp_path / "registry") as registry:
        registry.push(f"oci-archive:{archive}:t", "team/app:1.0")
        image = f"docker://{registry.ref('team/app:1.0')}"
        ran = pinguard(
            tmp_path, "attest", image, "--push", "--key", "key.pem", "--policy", str(POLICY),
            "--no-cache",
        )  # fmt: skip
        assert ran.code == 0, ran.err[-3000:]
        source = RegistrySource(registry.ref("team/app"), SourceOptions())
        try:
            [attestation] = [t for t in list_tags(source) if t.startswith("sha256-")]
        finally:
            source.close()
        registry.push(f"oci-archive:{archive}:t", f"team/app:{attestation}.sig")
        source = RegistrySource(registry.ref("team/app"), SourceOptions())
        try:
            tags = set(list_tags(source))
        finally:
            source.close()
        assert tags == {"1.0", attestation, f"{attestation}.sig"}
        ran = pinguard(
            tmp_path, "fleet", "run", "--repository", f"docker://{registry.ref('team/app')}",
            "--broker", broker.url(), "--results", "results", "--timeout", "1", "-f", "json",
        )  # fmt: skip
    assert "Traceback" not in ran.err, ran.err[-3000:]
    assert ran.err.splitlines()[0] == "enqueued 1 audit(s)"
    fleet = json.loads(ran.out)
    assert [i["reference"] for i in fleet["images"]] == [image]
    assert fleet["images"][0]["verdict"] == "pending"  # no worker: nothing ran it
    assert ran.code == EXIT_FINDINGS
    assert queued(broker) == 1
