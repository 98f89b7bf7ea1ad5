"""The registry backend of the shared layer cache: entries as OCI artifacts in a repository.

Distribution 2.8 has no referrers API, so, as BuildKit's ``--cache-to type=registry`` does,
entries live in a cache repository of their own (``registry://HOST/REPO``), each one an OCI
image manifest of artifact type ``application/vnd.pinguard.layer-cache-entry.v1+json`` with
the empty config and one layer (the entry's bytes: canonical JSON or a DSSE envelope),
tagged ``<algo>-<hex>.<key>``: the layer digest and the full cache key, which covers the
analyzers' versions (a valid tag: at most 128 characters of ``[A-Za-z0-9_.-]``). Reading
fetches the manifest by tag and the layer blob by digest (verified against it, as every blob
is); the entry inside is then verified by ``pinguard.cache.verified`` like any other. A
missing tag is a miss; a manifest that is not such an artifact is a rejected entry; a
registry that cannot be reached is ``CacheUnavailable``. One retry, short timeouts: a cache
must not stall an audit. Credentials come from the docker config, as for images.
"""

from __future__ import annotations

import json
from typing import Any

from pinguard.cache.interface import MAX_ENTRY_BYTES, CacheUnavailable, EntryRejected
from pinguard.errors import BlobVerificationError, ImageNotFound, SourceError
from pinguard.sources.mediatypes import (
    LAYER_CACHE_ARTIFACT,
    LAYER_CACHE_ENTRY,
    OCI_EMPTY,
    OCI_MANIFEST,
)

TIMEOUT = 10.0


class RegistryBackend:
    """Entries in the repository ``HOST/REPO`` of a registry."""

    def __init__(self, repository: str, *, insecure: tuple[str, ...] = ()) -> None:
        self.repository = repository.rstrip("/")
        self.insecure = insecure
        self._source: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_source": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def describe(self) -> str:
        return f"registry://{self.repository}"

    def source(self) -> Any:
        if self._source is None:
            from pinguard.sources.interface import SourceOptions
            from pinguard.sources.registry import RegistrySource

            options = SourceOptions(
                insecure_registries=self.insecure, timeout=TIMEOUT, max_retries=1
            )
            self._source = RegistrySource(f"{self.repository}:cache", options)
        return self._source

    def load(self, name: str) -> bytes | None:
        try:
            body, _, _ = self.source().manifest_bytes(name, OCI_MANIFEST)
        except ImageNotFound:
            return None
        except SourceError as exc:
            raise CacheUnavailable(str(exc)) from None
        try:
            manifest = json.loads(body)
            layers = manifest["layers"]
            kind = manifest.get("artifactType")
            layer = layers[0]
            digest, size = str(layer["digest"]), int(layer["size"])
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise EntryRejected(f"its manifest is not a cache entry: {exc!r:.80}") from None
        if kind != LAYER_CACHE_ARTIFACT or len(layers) != 1:
            raise EntryRejected(
                f"its manifest is of artifact type {kind!r}, with {len(layers)} layer(s)"
            )
        if size > MAX_ENTRY_BYTES:
            raise EntryRejected(f"larger than {MAX_ENTRY_BYTES} bytes")
        try:
            return bytes(self.source().blob_bytes(digest, MAX_ENTRY_BYTES))
        except ImageNotFound:
            return None
        except BlobVerificationError as exc:
            raise EntryRejected(str(exc)) from None
        except SourceError as exc:
            raise CacheUnavailable(str(exc)) from None

    def save(self, name: str, data: bytes) -> None:
        from pinguard.sources.registry import (
            EMPTY_BLOB,
            EMPTY_DIGEST,
            canonical,
            push_blob,
            push_manifest,
        )

        source = self.source()
        try:
            push_blob(source.client, EMPTY_BLOB)
            digest = push_blob(source.client, data)
            manifest = {
                "schemaVersion": 2,
                "mediaType": OCI_MANIFEST,
                "artifactType": LAYER_CACHE_ARTIFACT,
                "config": {"mediaType": OCI_EMPTY, "digest": EMPTY_DIGEST, "size": 2},
                "layers": [{"mediaType": LAYER_CACHE_ENTRY, "digest": digest, "size": len(data)}],
            }
            push_manifest(source.client, name, canonical(manifest), OCI_MANIFEST)
        except SourceError as exc:
            raise CacheUnavailable(str(exc)) from None
