"""The shared layer cache in a registry: entries as OCI artifacts in a cache repository of a
real ``docker-registry`` (distribution 2.8: no referrers API), tagged by layer and key."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from pinguard.cache.signed import FleetKeys
from pinguard.cache.store import CacheSpec
from pinguard.sources.mediatypes import (
    LAYER_CACHE_ARTIFACT,
    LAYER_CACHE_ENTRY,
    OCI_EMPTY,
    OCI_MANIFEST,
)
from pinguard.sources.registry import (
    EMPTY_DIGEST,
    RegistrySource,
    canonical,
    list_tags,
    push_blob,
    push_manifest,
)
from tests.infra.layercache import LAYERS, audit, inventory
from tests.infra.registry import RegistryServer, free_port, running_registry


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[RegistryServer]:
    with running_registry(tmp_path / "registry") as r:
        yield r


def cache_repo(registry: RegistryServer) -> RegistrySource:
    return RegistrySource(registry.ref("pinguard/cache:x"))


def test_entries_are_tagged_artifacts_and_a_second_audit_reads_them(
    demo: str, registry: RegistryServer
) -> None:
    spec = CacheSpec(f"registry://{registry.address}/pinguard/cache")
    plain, _ = audit(demo, None)
    first, cached_first = audit(demo, spec, jobs=2)
    second, cached_second = audit(demo, spec)
    assert (cached_first, cached_second) == (0, LAYERS)
    assert inventory(first) == inventory(second) == inventory(plain)
    source = cache_repo(registry)
    tags = list_tags(source)
    assert len(tags) == LAYERS
    assert all(t.startswith("sha256-") and len(t) <= 128 for t in tags)
    body, _, _ = source.manifest_bytes(tags[0], OCI_MANIFEST)
    manifest = json.loads(body)
    assert manifest["artifactType"] == LAYER_CACHE_ARTIFACT
    assert manifest["config"]["mediaType"] == OCI_EMPTY
    assert [layer["mediaType"] for layer in manifest["layers"]] == [LAYER_CACHE_ENTRY]
    assert not [n for n in second.notes if "layer cache" in n]


def test_a_poisoned_or_truncated_entry_is_rejected(
    demo: str, registry: RegistryServer, fleet_keys: dict[str, Path]
) -> None:
    url = f"registry://{registry.address}/pinguard/cache"
    fleet = FleetKeys(signing_key=fleet_keys["fleet"], trusted=(fleet_keys["fleet.pub"],))
    audit(demo, CacheSpec(url, fleet))
    source = cache_repo(registry)
    tags = list_tags(source)
    # a writer without the fleet key retags one entry to an unsigned one it made, another
    # to a truncated copy of a real entry
    unsigned_tag, truncated_tag = tags[0], tags[1]
    body, _, _ = source.manifest_bytes(truncated_tag, OCI_MANIFEST)
    real = source.blob_bytes(json.loads(body)["layers"][0]["digest"], 1 << 26)
    for tag, data in (
        (unsigned_tag, b'{"format": "pinguard/layer-cache-entry/2"}'),
        (truncated_tag, real[:100]),
    ):
        push_blob(source.client, b"{}")
        digest = push_blob(source.client, data)
        manifest = {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "artifactType": LAYER_CACHE_ARTIFACT,
            "config": {"mediaType": OCI_EMPTY, "digest": EMPTY_DIGEST, "size": 2},
            "layers": [{"mediaType": LAYER_CACHE_ENTRY, "digest": digest, "size": len(data)}],
        }
        push_manifest(source.client, tag, canonical(manifest), OCI_MANIFEST)
    result, cached = audit(demo, CacheSpec(url, fleet))
    assert cached == LAYERS - 2
    rejected = sorted(n for n in result.notes if "rejected the entry" in n)
    assert len(rejected) == 2
    assert any("unsigned" in n for n in rejected)
    assert any("not JSON" in n for n in rejected)


def test_an_unreachable_cache_registry_is_reported_and_the_audit_completes(demo: str) -> None:
    spec = CacheSpec(f"registry://127.0.0.1:{free_port()}/pinguard/cache")
    plain, _ = audit(demo, None)
    result, cached = audit(demo, spec)
    assert cached == 0
    notes = [n for n in result.notes if "unavailable" in n]
    assert len(notes) == 1
    assert "audited without the shared cache" in notes[0]
    assert inventory(result) == inventory(plain)
