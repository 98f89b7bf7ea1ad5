"""Trust in the fleet: the shared cache's keys, the task's options, and --attest up front.

A worker refuses a shared cache without the fleet's signing and trusted keys unless told
``--cache-unsigned`` (any host that can write to the cache could otherwise poison what the
workers trust), and the test shows why: a re-digested, unsigned entry in a real Redis cache
changes what an unsigned worker reports, and a worker with the keys refuses it. A task whose
options a worker cannot honour (an unknown ``fail_on``, a flag that is not a boolean, an
option it does not know) is an error record naming the value, never a pass; and ``fleet
run``/``receive`` refuse ``--attest`` with a verdict that judges nothing before anything is
enqueued. Real parts: ``redis-server`` broker and cache, ``pinguard worker`` processes,
Debian's ``docker-registry``, keys made by ``openssl``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from pinguard.cache.backends.redis import PREFIX
from pinguard.cache.entry import seal, unseal
from pinguard.cache.signed import FleetKeys
from pinguard.cache.store import CacheSpec
from pinguard.cli import build_parser, main
from pinguard.errors import EXIT_FINDINGS, EXIT_PASS, EXIT_USAGE, UsageError
from pinguard.fleet.app import QUEUE, make_app
from pinguard.fleet.dispatch import enqueue, wait
from pinguard.fleet.records import ImageRecord, ResultStore
from pinguard.fleet.task import WorkerSettings, require_fleet_keys
from tests.infra.fleet import start_worker, stop_all
from tests.infra.keys import ec_key_pair
from tests.infra.paths import REPO
from tests.infra.redis import RedisServer
from tests.infra.registry import RegistryServer, free_port

FleetRegistry = tuple[RegistryServer, dict[str, str]]
TRUE_NCCL, FORGED_NCCL = "2.29.7", "2.30.3"  # team/serve:b's NCCL, and what a forger claims
TOKEN = "push-token-0123456789abcdef"


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The fleet's P-256 key pair, made by openssl as docs/fleet.md says."""
    d = tmp_path_factory.mktemp("fleet-keys")
    private, public = ec_key_pair(d, "fleet")
    return {"private": private, "public": public}


def pinguard(cwd: Path, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PINGUARD_")}
    return subprocess.run(
        [sys.executable, "-m", "pinguard", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def one_error(ran: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in ran.stderr, ran.stderr[-3000:]
    assert ran.stdout == ""
    [line] = ran.stderr.strip().splitlines()
    assert line.startswith("pinguard: error: "), line
    return line


def queued(broker: RedisServer) -> int:
    client = redis.Redis.from_url(broker.url())
    try:
        return int(client.llen(QUEUE))
    finally:
        client.close()


# --------------------------------------------------------------------------- the cache's keys


def test_a_worker_refuses_a_shared_cache_without_the_fleet_keys_unless_told_unsigned(
    tmp_path: Path, broker: RedisServer, cache_redis: RedisServer, keys: dict[str, Path]
) -> None:
    """No keys, half the keys, any backend: exit 2 before the broker is even asked (its
    port here is closed: reaching it would be exit 3), one line naming what to give, the
    cache's password never printed. --cache-unsigned, or both keys: the worker runs."""
    dead_broker = f"redis://127.0.0.1:{free_port()}/0"
    port = cache_redis.port
    sign = ["--cache-sign-key", str(keys["private"])]
    trust = ["--cache-trust", str(keys["public"])]
    both = "--cache-sign-key and --cache-trust"
    cases = [
        (f"redis://127.0.0.1:{port}/0", [], f"redis://127.0.0.1:{port}/0 without {both}"),
        (f"redis://:pw-secret@127.0.0.1:{port}/0", [], f"redis://:***@127.0.0.1:{port}/0"),
        (f"redis://127.0.0.1:{port}/0", sign, "without --cache-trust:"),
        (f"redis://127.0.0.1:{port}/0", trust, "without --cache-sign-key:"),
        (f"file://{tmp_path / 'shared'}", [], f"file://{tmp_path / 'shared'} without {both}"),
        ("registry://127.0.0.1:5000/cache", [], f"without {both}"),
    ]
    for url, extra, said in cases:
        ran = pinguard(
            tmp_path, "worker", "--broker", dead_broker, "--results", "results",
            "--cache", url, *extra,
        )  # fmt: skip
        line = one_error(ran)
        assert said in line, (url, extra, line)
        assert "could poison what the workers trust" in line
        assert line.endswith(
            "give the fleet's key pair (--cache-sign-key KEY.pem --cache-trust KEY.pub) or "
            "--cache-unsigned to use it unsigned"
        ), line
        assert "pw-secret" not in ran.stderr
        assert ran.returncode == EXIT_USAGE, (url, extra, ran.stderr)
    unsigned = keyed = None
    try:
        unsigned = start_worker(
            tmp_path / "unsigned", broker.url(), tmp_path / "results",
            "--cache", cache_redis.url(), "--cache-unsigned",
        )  # fmt: skip
        keyed = start_worker(
            tmp_path / "keyed", broker.url(), tmp_path / "results",
            "--cache", cache_redis.url(), *sign, *trust, name="w2",
        )  # fmt: skip
        assert unsigned.process.poll() is None
        assert keyed.process.poll() is None
    finally:
        stop_all(unsigned, keyed)


def test_a_plain_celery_worker_from_the_environment_follows_the_same_rule(
    tmp_path: Path, keys: dict[str, Path]
) -> None:
    """`celery -A pinguard.fleet.app worker` reads PINGUARD_* variables: the same refusal,
    naming the variables; PINGUARD_CACHE_UNSIGNED=1 or both keys let it use the cache."""
    base = {"PINGUARD_RESULTS_DIR": str(tmp_path), "PINGUARD_CACHE_URL": "redis://c:6379/0"}
    with pytest.raises(UsageError) as refused:
        WorkerSettings.from_env(base)
    assert str(refused.value) == (
        "the shared cache redis://c:6379/0 without PINGUARD_CACHE_SIGN_KEY and "
        "PINGUARD_CACHE_TRUST: any host that can write to it could poison what the workers "
        "trust; give the fleet's key pair (PINGUARD_CACHE_SIGN_KEY=KEY.pem "
        "PINGUARD_CACHE_TRUST=KEY.pub) or PINGUARD_CACHE_UNSIGNED=1 to use it unsigned"
    )
    assert refused.value.exit_code == EXIT_USAGE
    unsigned = WorkerSettings.from_env({**base, "PINGUARD_CACHE_UNSIGNED": "1"})
    assert unsigned.cache is not None
    assert unsigned.cache.keys == FleetKeys()
    keyed = WorkerSettings.from_env(
        {
            **base,
            "PINGUARD_CACHE_SIGN_KEY": str(keys["private"]),
            "PINGUARD_CACHE_TRUST": str(keys["public"]),
        }
    )
    assert keyed.cache is not None
    assert keyed.cache.keys == FleetKeys(keys["private"], (keys["public"],))


def test_the_deploy_example_s_workers_pass_the_rule() -> None:
    """docs/deploy/compose.yaml's worker command signs and trusts, without the waiver."""
    compose = yaml.safe_load((REPO / "docs" / "deploy" / "compose.yaml").read_text())
    worker = compose["services"]["worker"]["command"]
    args = build_parser().parse_args(worker[1:])
    assert not args.cache_unsigned
    spec = CacheSpec(args.shared_cache, FleetKeys(args.cache_sign_key, tuple(args.cache_trust)))
    require_fleet_keys(spec, args.cache_unsigned)  # raises if a key were missing


def redigest(entry: bytes) -> bytes | None:
    """``entry`` (an unsigned cache entry) with TRUE_NCCL replaced by FORGED_NCCL in its
    analysis and its content digest recomputed: well formed, for the right layer and key.
    None when the entry does not mention TRUE_NCCL."""
    assert entry.startswith(b'{"content":')  # unsigned (sealed, no envelope): an unsigned worker's
    doc = unseal(entry)
    assert doc is not None
    analysis = json.dumps(doc["analysis"])
    if TRUE_NCCL not in analysis:
        return None
    doc["analysis"] = json.loads(analysis.replace(TRUE_NCCL, FORGED_NCCL))
    return seal(doc).encode()  # sealed again, as anyone can: the digest catches damage only


def fleet_image(tmp_path: Path, ref: str, broker: RedisServer, results: Path) -> dict[str, Any]:
    out = tmp_path / "fleet.json"
    code = main(
        ["fleet", "run", ref, "--broker", broker.url(), "--results", str(results),
         "--timeout", "180", "-f", "json", "-o", str(out)]
    )  # fmt: skip
    [image] = json.loads(out.read_text())["images"]
    assert isinstance(image, dict)
    assert code == image["exit_code"]
    return image


def test_a_re_digested_unsigned_entry_poisons_an_unsigned_worker_and_not_a_keyed_one(
    tmp_path: Path,
    broker: RedisServer,
    cache_redis: RedisServer,
    fleet_registry: FleetRegistry,
    keys: dict[str, Path],
) -> None:
    """A host that can write to Redis rewrites team/serve:b's entries to claim another NCCL
    and recomputes their digests: a worker run --cache-unsigned reports the forged version
    (why the keys are required), a worker with the fleet's keys refuses every such entry,
    says so in the record's notes and reports the image's real NCCL."""
    _, refs = fleet_registry
    ref = refs["team/serve:b"]
    results = tmp_path / "results"
    unsigned = start_worker(
        tmp_path / "unsigned", broker.url(), results,
        "--cache", cache_redis.url(), "--cache-unsigned",
    )  # fmt: skip
    keyed = None
    try:
        first = fleet_image(tmp_path, ref, broker, results)
        assert first["packages"]["nvidia-nccl-cu13"] == [TRUE_NCCL]
        client = redis.Redis.from_url(cache_redis.url())
        forged = 0
        for name in client.keys(PREFIX + "*"):
            value = client.get(name)
            assert isinstance(value, bytes)
            bad = redigest(value)
            if bad is not None:
                client.set(name, bad)
                forged += 1
        assert forged >= 1
        poisoned = fleet_image(tmp_path, ref, broker, results)
        assert poisoned["packages"]["nvidia-nccl-cu13"] == [FORGED_NCCL]  # the hole
        assert not [n for n in poisoned["notes"] if "layer cache" in n]
        unsigned.stop()
        keyed = start_worker(
            tmp_path / "keyed", broker.url(), results, "--cache", cache_redis.url(),
            "--cache-sign-key", str(keys["private"]), "--cache-trust", str(keys["public"]),
            name="w2",
        )  # fmt: skip
        trusted = fleet_image(tmp_path, ref, broker, results)
    finally:
        stop_all(unsigned, keyed)
    assert trusted["packages"]["nvidia-nccl-cu13"] == [TRUE_NCCL]
    assert (trusted["verdict"], trusted["exit_code"]) == ("pass", EXIT_PASS)
    rejected = [n for n in trusted["notes"] if "rejected the entry" in n]
    assert len(rejected) == len(client.keys(PREFIX + "*")), trusted["notes"]
    assert all("unsigned, and this reader trusts only fleet-signed entries" in n for n in rejected)
    # what the keyed worker wrote instead is signed
    assert all(b"payloadType" in (client.get(k) or b"") for k in client.keys(PREFIX + "*"))


# --------------------------------------------------------------------------- task options


def run_tasks(
    broker: RedisServer, results: Path, ref: str, options: list[Mapping[str, Any]]
) -> list[ImageRecord]:
    app = make_app(broker.url(), enqueuer=True)
    store = ResultStore(results)
    tasks = [t for o in options for t in enqueue(app, [ref], o, store)]
    return wait(app, tasks, store, timeout=180)


def test_a_task_whose_options_the_worker_cannot_honour_is_an_error_record_naming_them(
    tmp_path: Path, broker: RedisServer, fleet_registry: FleetRegistry
) -> None:
    """The story image fails the default policy at `error`. A task asking `fail_on` "nevr"
    used to be judged at "never" and pass; it is now an error record (exit 2) naming the
    value, as are a flag given as the string "false" and an option the worker does not
    know. The same task with a valid `fail_on` still audits."""
    _, refs = fleet_registry
    ref = refs["team/story:bad"]
    results = tmp_path / "results"
    worker = start_worker(tmp_path / "w", broker.url(), results)
    try:
        records = run_tasks(
            broker,
            results,
            ref,
            [
                {"policy": [], "fail_on": "nevr"},
                {"policy": [], "fail_on": "ERROR"},
                {"policy": [], "fail_on": None},
                {"policy": [], "fail_on": "error", "allow_incomplete": "false"},
                {"policy": [], "fail_on": "error", "verify_records": True},
                {"policy": [], "fail_on": "error"},
                {"policy": [], "fail_on": "never"},
            ],
        )
    finally:
        worker.stop()
    nevr, upper, null, string_flag, unknown, valid, never = records
    for record in (nevr, upper, null, string_flag, unknown):
        assert (record.verdict, record.exit_code) == ("error", EXIT_USAGE), record
        assert record.reference == ref
        assert record.error is not None
        assert record.error.endswith("; not audited"), record.error
    assert nevr.error == (
        "task option fail_on 'nevr' is not one of error, warning, info, never; not audited"
    )
    assert upper.error is not None
    assert "fail_on 'ERROR'" in upper.error
    assert null.error is not None
    assert "fail_on None" in null.error
    assert (
        string_flag.error
        == "task option allow_incomplete 'false' is not true or false; not audited"
    )
    assert unknown.error is not None
    assert unknown.error.startswith("unknown task option(s) 'verify_records': this worker knows ")
    assert (valid.verdict, valid.exit_code) == ("fail", EXIT_FINDINGS)  # the NCCL downgrade
    assert (never.verdict, never.exit_code) == ("pass", EXIT_PASS)  # "never" as asked


# --------------------------------------------------------------------------- --attest up front


def test_attest_with_a_verdict_that_judges_nothing_is_refused_before_enqueueing(
    tmp_path: Path, broker: RedisServer
) -> None:
    """`fleet run --attest` at --fail-on never or under --policy none: exit 2, one line,
    nothing enqueued (each image used to get an error record from the workers); the push
    receiver refuses to start so configured."""
    (tmp_path / "results").mkdir()
    (tmp_path / "token").write_text(TOKEN + "\n")
    live = broker.url()
    run = ["fleet", "run", "docker://127.0.0.1:5000/team/app:1", "--broker", live,
           "--results", "results", "--timeout", "1", "--attest"]  # fmt: skip
    receive = ["fleet", "receive", "--token-file", "token", "--broker", live,
               "--listen", "127.0.0.1:0", "--attest"]  # fmt: skip
    never = "--attest: --fail-on never judges nothing: the attestation would say 'pass'"
    none = "--attest: --policy none judges nothing (an inventory): an attestation names"
    for argv, said in (
        ([*run, "--fail-on", "never"], never),
        ([*run, "--policy", "none"], none),
        ([*receive, "--fail-on", "never"], never),
        ([*receive, "--policy", "none"], none),
    ):
        try:
            ran = pinguard(tmp_path, *argv, timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{argv}: still running after 30 s (the receiver started)")
        line = one_error(ran)
        assert line.startswith(f"pinguard: error: {said}"), line
        assert ran.returncode == EXIT_USAGE, (argv, ran.stderr)
    assert queued(broker) == 0
