"""The registry client's parts, each alone against a real registry (distribution): the
transport with its auth (``RegistryClient``), pulling (``RegistrySource``) and pushing
(``registry.push``)."""

from __future__ import annotations

import hashlib

import pytest

from pinguard.errors import ImageNotFound
from pinguard.sources.interface import SourceOptions
from pinguard.sources.mediatypes import ACCEPT
from pinguard.sources.registry import RegistryClient, RegistrySource, has_blob, push_blob
from tests.infra.registry import DEFAULT_PASSWORD, DEFAULT_USER, RegistryServer
from tests.sources.conftest import ConfigWriter, Images
from tests.sources.test_registry import _auths

pytestmark = pytest.mark.integration


def test_the_client_alone_authenticates_and_reads_a_manifest(
    token_registry: RegistryServer, docker_config: ConfigWriter, images: Images
) -> None:
    """A Bearer-token registry: the client answers the challenge with config.json's
    credentials and returns the manifest's exact bytes (the digest the layout wrote)."""
    docker_config(_auths(token_registry.address, DEFAULT_USER, DEFAULT_PASSWORD))
    client = RegistryClient(token_registry.ref("app/single:v1"), SourceOptions())
    try:
        want = images.single.images[0].manifest_digest
        body, _headers = client.get_small(
            client.manifest_url(want), {"Accept": ACCEPT}, 1 << 20, "manifest"
        )
    finally:
        client.close()
    assert "sha256:" + hashlib.sha256(body).hexdigest() == want


def test_pushing_alone_then_pulling_the_blob_back(registry: RegistryServer) -> None:
    client = RegistryClient(registry.ref("parts/push:v1"), SourceOptions())
    data = b"one blob pushed by registry.push alone\n"
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    try:
        assert has_blob(client, digest) is False
        assert push_blob(client, data) == digest
        assert has_blob(client, digest) is True
        assert push_blob(client, data) == digest  # already there: no second upload
    finally:
        client.close()
    source = RegistrySource(registry.ref("parts/push:v1"), SourceOptions())
    with source:
        assert source.blob_bytes(digest, 1024) == data
        with pytest.raises(ImageNotFound):
            source.blob_bytes("sha256:" + "0" * 64, 1024)
