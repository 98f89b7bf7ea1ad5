"""The shipped deployment example runs: docs/deploy/compose.yaml's own commands, on loopback.

No container engine runs here, so each service's command is started as the process it is in
the container, with only what a container gives it replaced by its loopback equivalent:
service host names by 127.0.0.1 ports, ``/run/secrets/*`` by files made here, the mounted
policy and result store by paths under ``tmp_path``, and ``$PINGUARD_BROKER_URL`` from the
compose file's own environment block. The registry is Debian's ``docker-registry`` with the
notifications endpoint of docs/deploy/registry-config.yml. A push must end as one audit
record with a signed attestation: the example, started as a reader copies it, works.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from pinguard.cli import build_parser
from pinguard.fleet.records import ResultStore
from pinguard.testing.demo import write_oci_archive
from tests.infra.fleet import LoggedProcess, fleet_layers, start_logged
from tests.infra.keys import ec_key_pair
from tests.infra.paths import REPO
from tests.infra.redis import running_redis
from tests.infra.registry import free_port, running_registry

pytestmark = pytest.mark.integration

DEPLOY = REPO / "docs" / "deploy"


def load(name: str) -> Any:
    return yaml.safe_load((DEPLOY / name).read_text())


def test_every_pinguard_command_in_the_example_parses() -> None:
    """Each service that runs pinguard runs a command pinguard's own parser accepts (the
    receiver was once given a flag it does not take, and never started)."""
    services = load("compose.yaml")["services"]
    commands = {
        name: service["command"]
        for name, service in services.items()
        if service.get("command", [""])[0] == "pinguard"
    }
    assert set(commands) == {"receiver", "worker"}
    for name, command in commands.items():
        try:
            build_parser(command[1]).parse_args(command[1:])
        except SystemExit as exc:  # argparse's usage error
            raise AssertionError(f"{name}: {command} does not parse") from exc


def localize(command: list[str], swaps: dict[str, str]) -> list[str]:
    """``command`` with each ``swaps`` key replaced inside every word; ``pinguard`` run by
    this interpreter (the image's entry point is the same ``pinguard.cli:main``)."""
    words = []
    for word in command:
        local = word
        for old, new in swaps.items():
            local = local.replace(old, new)
        words.append(local)
    assert words[0] == "pinguard"
    return [sys.executable, "-m", "pinguard", *words[1:]]


def test_the_compose_example_audits_a_push(tmp_path: Path) -> None:
    """broker, cache, registry, receiver and worker from the example: a pushed image is
    audited (the demo's NCCL downgrade: a failing record) and attested, once."""
    compose = load("compose.yaml")
    services = compose["services"]
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    fleet_key, fleet_pub = ec_key_pair(secrets, "fleet")
    attest_key, _ = ec_key_pair(secrets, "attest")
    token = "push-token-" + "0f" * 16
    (secrets / "push-token").write_text(token + "\n")
    policy = tmp_path / "policy.toml"
    policy.write_text('extend = ["builtin:default"]\n')
    results = tmp_path / "results"
    receiver_port = free_port()

    notes = load("registry-config.yml")["notifications"]
    [endpoint] = notes["endpoints"]
    assert endpoint["url"] == "http://receiver:8780/events"
    endpoint["url"] = f"http://127.0.0.1:{receiver_port}/events"
    endpoint["headers"]["Authorization"] = [f"Bearer {token}"]

    broker_args = services["broker"]["command"][1:]
    cache_args = services["cache"]["command"][1:]
    procs: list[LoggedProcess] = []
    with (
        running_redis(tmp_path / "broker", extra_args=broker_args) as broker,
        running_redis(tmp_path / "cache", extra_args=cache_args) as cache,
        running_registry(
            tmp_path / "registry", extra_config=yaml.safe_dump({"notifications": notes})
        ) as registry,
    ):
        swaps = {
            "redis://cache:6379/0": cache.url(),
            "registry:5000": registry.address,
            "0.0.0.0:8780": f"127.0.0.1:{receiver_port}",
            "/run/secrets/fleet-key": str(fleet_key),
            "/run/secrets/fleet-pub": str(fleet_pub),
            "/run/secrets/attest-key": str(attest_key),
            "/run/secrets/push-token": str(secrets / "push-token"),
            "/etc/pinguard/policy.toml": str(policy),
            "/srv/pinguard/results": str(results),
        }
        env_url = compose["x-pinguard"]["environment"]["PINGUARD_BROKER_URL"]
        assert env_url == "redis://broker:6379/0"
        env = {
            **os.environ,
            "PINGUARD_BROKER_URL": broker.url(),
            "XDG_CACHE_HOME": str(tmp_path / "xdg"),
        }
        try:
            for name in ("receiver", "worker"):
                command = localize(services[name]["command"], swaps)
                procs.append(start_logged(command, tmp_path / f"{name}.log", cwd=tmp_path, env=env))
            receiver, worker = procs
            receiver.wait_for(r"listening on \S+", 60)
            worker.wait_for(r" ready\.", 120)

            archive = tmp_path / "serve.tar"
            digest = write_oci_archive(fleet_layers("2.12.1+cu130", "2.29.7"), archive, tag="t")
            registry.push(f"oci-archive:{archive}:t", "team/serve:1.0")
            store = ResultStore(results)
            worker.wait_until(store.ids, 180, "writing the record")
            [record] = store.all()
            assert record.manifest_digest == digest
            assert record.reference.startswith(f"docker://{registry.address}/team/serve@")
            assert record.attestation is not None, worker.text()[-3000:]
        finally:
            for proc in procs:
                proc.stop()
