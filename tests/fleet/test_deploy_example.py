"""The deployment example in docs/deploy/ says what docs/fleet.md says: the knobs that matter.

Parsed as YAML (the compose file and the registry config), not run: the checks are that a
reader who copies it gets a broker that never evicts, workers whose visibility timeout is
longer than the default audit wait, signed and trusted cache entries, and a registry that
notifies the receiver with the header the receiver checks.
"""

from __future__ import annotations

from typing import Any

import yaml

from pinguard.cli import build_parser
from pinguard.fleet.app import DEFAULT_VISIBILITY_TIMEOUT
from tests.infra.paths import REPO

DEPLOY = REPO / "docs" / "deploy"


def load(name: str) -> Any:
    return yaml.safe_load((DEPLOY / name).read_text())


def flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_the_compose_example_sets_the_knobs_that_matter() -> None:
    compose = load("compose.yaml")
    services = compose["services"]
    broker = services["broker"]["command"]
    assert flag(broker, "--maxmemory-policy") == "noeviction"
    worker = services["worker"]["command"]
    assert worker[:2] == ["pinguard", "worker"]
    assert int(flag(worker, "--visibility-timeout")) >= DEFAULT_VISIBILITY_TIMEOUT
    assert flag(worker, "--pool") == "solo"
    assert flag(worker, "--cache").startswith("redis://cache:")
    assert "--cache-sign-key" in worker
    assert "--cache-trust" in worker
    assert float(flag(worker, "--cache-lock-wait")) > float(flag(worker, "--cache-lock-ttl"))
    # the command is one `pinguard worker` accepts, every flag spelled as the CLI spells it
    args = build_parser().parse_args(worker[1:])
    assert args.shared_cache == "redis://cache:6379/0"
    assert (args.cache_lock_ttl, args.cache_lock_wait) == (30.0, 900.0)
    receiver = services["receiver"]["command"]
    assert receiver[:3] == ["pinguard", "fleet", "receive"]
    assert flag(receiver, "--listen").endswith(":8780")


def test_the_registry_example_notifies_the_receiver_with_a_bearer_token() -> None:
    config = load("registry-config.yml")
    [endpoint] = config["notifications"]["endpoints"]
    assert endpoint["url"] == "http://receiver:8780/events"
    [value] = endpoint["headers"]["Authorization"]
    assert value.startswith("Bearer ")
