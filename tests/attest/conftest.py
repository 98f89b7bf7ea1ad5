"""Fixtures for the attestation tests: keys made by ``openssl`` and an isolated docker config.

``keys`` makes, once per session, the key files the docs tell users to make:
``openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256`` (PKCS#8 PEM), the same
encrypted with AES-256 (passphrase ``ENCRYPTED_PASSWORD``), ``openssl pkey -pubout`` public
keys (SubjectPublicKeyInfo PEM, the format of cosign.pub), a second P-256 pair, a P-384 key
and an RSA key, so the PEM formats under test are the real ones.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.infra.keys import ec_key_pair, openssl

ENCRYPTED_PASSWORD = "correct horse battery staple"


@dataclass(frozen=True)
class Keys:
    """Paths of the openssl-made key files."""

    private: Path  # P-256, PKCS#8 PEM, unencrypted
    public: Path
    encrypted: Path  # the same key, PKCS#8 encrypted with ENCRYPTED_PASSWORD
    other_private: Path  # another P-256 pair
    other_public: Path
    p384_private: Path
    p384_public: Path
    rsa_private: Path
    rsa_public: Path


@pytest.fixture(scope="session")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    d = tmp_path_factory.mktemp("keys")
    private, public = ec_key_pair(d, "signer", "P-256")
    encrypted = d / "signer-encrypted.pem"
    openssl(
        "pkcs8",
        "-topk8",
        "-v2",
        "aes-256-cbc",
        "-in",
        str(private),
        "-out",
        str(encrypted),
        "-passout",
        f"pass:{ENCRYPTED_PASSWORD}",
    )
    other_private, other_public = ec_key_pair(d, "other", "P-256")
    p384_private, p384_public = ec_key_pair(d, "p384", "P-384")
    rsa_private, rsa_public = d / "rsa.pem", d / "rsa.pub"
    openssl(
        "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(rsa_private)
    )
    openssl("pkey", "-in", str(rsa_private), "-pubout", "-out", str(rsa_public))
    return Keys(
        private=private,
        public=public,
        encrypted=encrypted,
        other_private=other_private,
        other_public=other_public,
        p384_private=p384_private,
        p384_public=p384_public,
        rsa_private=rsa_private,
        rsa_public=rsa_public,
    )


ConfigWriter = Callable[[dict[str, Any]], Path]


@pytest.fixture(autouse=True)
def docker_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ConfigWriter:
    """Point $DOCKER_CONFIG at an empty temp dir; the returned function writes config.json.
    $PINGUARD_KEY_PASSWORD and $SOURCE_DATE_EPOCH start unset."""
    directory = tmp_path / "docker-config"
    directory.mkdir()
    monkeypatch.setenv("DOCKER_CONFIG", str(directory))
    monkeypatch.delenv("PINGUARD_KEY_PASSWORD", raising=False)
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)

    def write(config: dict[str, Any]) -> Path:
        path = directory / "config.json"
        path.write_text(json.dumps(config))
        return path

    return write
