"""The shared layer cache on a real ``redis-server``: hits, signing, poisoning, faults.

Every test audits the bundled demo image (an OCI archive) through ``audit_image`` with a
``CacheSpec`` pointing at a redis-server started for the test; what is cached is observed
through the progress callback (how many layers came from the cache) and through Redis
itself, and every audit's packages are compared with an audit made without any cache.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from pinguard.cache.backends.redis import PREFIX
from pinguard.cache.signed import FleetKeys
from pinguard.cache.store import CacheSpec
from pinguard.cli import main
from tests.infra.layercache import LAYERS, audit, inventory
from tests.infra.redis import RedisServer, running_redis, tls_files
from tests.infra.registry import free_port


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    with running_redis(tmp_path / "redis") as r:
        yield r


def entries(server: RedisServer) -> dict[bytes, bytes]:
    client = redis.Redis.from_url(server.url())
    out: dict[bytes, bytes] = {}
    for name in client.keys(PREFIX + "*"):
        value = client.get(name)
        assert isinstance(name, bytes)
        assert isinstance(value, bytes)
        out[name] = value
    return out


def test_second_audit_reads_every_layer_from_redis_and_finds_the_same(
    demo: str, server: RedisServer
) -> None:
    spec = CacheSpec(server.url(), ttl=3600)
    plain, _ = audit(demo, None)
    first, cached_first = audit(demo, spec, jobs=2)  # written from the worker processes
    second, cached_second = audit(demo, spec)
    assert (cached_first, cached_second) == (0, LAYERS)
    assert inventory(first) == inventory(second) == inventory(plain)
    assert ("nvidia-nccl-cu13", "2.29.7") in inventory(second)
    stored = entries(server)
    assert len(stored) == LAYERS
    client = redis.Redis.from_url(server.url())
    assert all(0 < client.ttl(k) <= 3600 for k in stored)
    doc = json.loads(next(iter(stored.values())))
    assert doc["format"] == "pinguard/layer-cache-entry/2"
    assert any(a.startswith("python=") for a in doc["analyzers"])
    assert not any("layer cache" in n for n in second.notes)


@pytest.mark.parametrize("damage", ["truncated", "altered", "other-layer", "other-key"])
def test_a_damaged_entry_is_rejected_reported_and_the_layer_analysed(
    demo: str, server: RedisServer, damage: str
) -> None:
    spec = CacheSpec(server.url())
    plain, _ = audit(demo, spec)
    client = redis.Redis.from_url(server.url())
    stored = entries(server)
    names = sorted(stored)
    victim, donor = names[0], names[1]
    data = stored[victim]
    if damage == "truncated":
        bad = data[: len(data) // 2]
    elif damage == "altered":
        doc = json.loads(data)  # valid JSON, one field changed, its content digest kept
        doc["analysis"]["members"] = int(doc["analysis"]["members"]) + 1
        bad = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
    elif damage == "other-layer":
        bad = stored[donor]  # a valid entry, for another layer
    else:
        doc = json.loads(data)
        doc["key"] = "0" * 16
        bad = json.dumps(doc).encode()
    client.set(victim, bad)
    result, cached = audit(demo, spec)
    assert cached == LAYERS - 1
    digest = victim.decode().removeprefix(PREFIX).split(".")[0].replace("-", ":", 1)
    rejected = [n for n in result.notes if "rejected the entry" in n]
    assert len(rejected) == 1
    assert digest in rejected[0]
    assert inventory(result) == inventory(plain)


def test_with_a_fleet_key_only_signed_entries_are_trusted(
    demo: str, server: RedisServer, fleet_keys: dict[str, Path]
) -> None:
    trusting = CacheSpec(server.url(), FleetKeys(trusted=(fleet_keys["fleet.pub"],)))
    stranger = CacheSpec(server.url(), FleetKeys(signing_key=fleet_keys["stranger"]))
    fleet = CacheSpec(
        server.url(),
        FleetKeys(signing_key=fleet_keys["fleet"], trusted=(fleet_keys["fleet.pub"],)),
    )
    plain, _ = audit(demo, None)
    # a writer without the fleet key fills the cache: its entries are all refused
    audit(demo, stranger)
    result, cached = audit(demo, trusting)
    assert cached == 0
    assert len([n for n in result.notes if "not signed by a trusted fleet key" in n]) == LAYERS
    # unsigned entries too
    client = redis.Redis.from_url(server.url())
    client.flushdb()
    audit(demo, CacheSpec(server.url()))
    result, cached = audit(demo, trusting)
    assert cached == 0
    assert len([n for n in result.notes if "unsigned" in n]) == LAYERS
    # the fleet's own signed entries are used
    client.flushdb()
    audit(demo, fleet)
    result, cached = audit(demo, trusting)
    assert cached == LAYERS
    assert inventory(result) == inventory(plain)
    assert not [n for n in result.notes if "layer cache" in n]


def test_a_forged_entry_with_a_recomputed_digest_is_refused_by_a_trusting_reader(
    demo: str, server: RedisServer, fleet_keys: dict[str, Path]
) -> None:
    fleet = CacheSpec(
        server.url(),
        FleetKeys(signing_key=fleet_keys["fleet"], trusted=(fleet_keys["fleet.pub"],)),
    )
    audit(demo, fleet)
    client = redis.Redis.from_url(server.url())
    for name, data in entries(server).items():
        envelope = json.loads(data)
        # the attacker keeps the signature but swaps in another payload
        envelope["payload"] = json.loads(data)["payload"][:-8] + "AAAAAAA="
        client.set(name, json.dumps(envelope))
    result, cached = audit(demo, fleet)
    assert cached == 0
    assert len([n for n in result.notes if "rejected the entry" in n]) == LAYERS


def test_redis_down_then_restarted_mid_run(demo: str, server: RedisServer) -> None:
    spec = CacheSpec(server.url())
    plain, _ = audit(demo, None)
    server.stop()
    down, cached = audit(demo, spec, jobs=2)
    assert cached == 0
    notes = [n for n in down.notes if "unavailable" in n]
    assert len(notes) == 1
    assert f"redis://127.0.0.1:{server.port}/0" in notes[0]
    assert "audited without the shared cache" in notes[0]
    assert inventory(down) == inventory(plain)
    server.start()  # the same port, empty (no persistence): the run goes on with it
    audit(demo, spec)
    again, cached = audit(demo, spec)
    assert cached == LAYERS
    assert not [n for n in again.notes if "layer cache" in n]


def test_auth_password_from_the_environment(
    demo: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with running_redis(tmp_path / "auth", password="fleet-Pa55") as server:
        url = server.url(with_password=False)
        denied, _ = audit(demo, CacheSpec(url))
        assert any("unavailable" in n and "uthentication" in n for n in denied.notes)
        monkeypatch.setenv("PINGUARD_CACHE_PASSWORD", "fleet-Pa55")
        audit(demo, CacheSpec(url))
        _, cached = audit(demo, CacheSpec(url))
        assert cached == LAYERS
        assert len(entries(server)) == LAYERS


def test_cli_audit_with_a_cache_nobody_listens_on_completes_and_says_so(
    demo: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    # a fresh local cache directory: a replay entry left by an earlier run would answer
    # before the shared cache is asked
    local = ["--cache-dir", str(tmp_path / "local")]
    code = main(["audit", demo, "--cache", url, *local, "--policy", "none", "-f", "json"])
    out = capsys.readouterr().out
    assert code == 0
    doc = json.loads(out)
    assert any("unavailable" in n for n in doc["notes"])
    assert "nvidia-nccl-cu13" in out


def test_cli_refuses_an_unknown_cache_scheme(demo: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", demo, "--cache", "memcached://x", "--policy", "none"]) == 2
    assert "--cache 'memcached://x'" in capsys.readouterr().err


def test_tls_with_a_client_certificate(demo: str, tmp_path: Path) -> None:
    tls = tls_files(tmp_path / "tls")
    with running_redis(tmp_path / "tls-redis", tls=tls, tls_clients=True) as server:
        url = server.url()
        assert url.startswith("rediss://")
        no_client = CacheSpec(url, tls_ca=tls.ca)
        denied, cached = audit(demo, no_client)
        assert cached == 0
        assert any("unavailable" in n for n in denied.notes)
        spec = CacheSpec(url, tls_ca=tls.ca, tls_cert=tls.client_cert, tls_key=tls.client_key)
        audit(demo, spec)
        again, cached = audit(demo, spec)
        assert cached == LAYERS
        assert not [n for n in again.notes if "layer cache" in n]
        wrong_ca = CacheSpec(
            url, tls_ca=tls.client_cert, tls_cert=tls.client_cert, tls_key=tls.client_key
        )
        refused, cached = audit(demo, wrong_ca)
        assert cached == 0
        assert any("unavailable" in n for n in refused.notes)
