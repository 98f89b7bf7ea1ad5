"""Key files as openssl writes them: PKCS#8 (plain and encrypted), SPKI public keys, bad ones."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pinguard.errors import EXIT_USAGE, KeyFileError
from pinguard.signing.keys import load_private_key, load_public_key
from tests.attest.conftest import ENCRYPTED_PASSWORD, Keys
from tests.infra.tools import require_tool


def test_plain_pkcs8_key_loads_and_matches_its_public_key(keys: Keys) -> None:
    """openssl genpkey's P-256 key and openssl pkey -pubout's public key are one pair."""
    assert keys.private.read_text().startswith("-----BEGIN PRIVATE KEY-----")
    assert keys.public.read_text().startswith("-----BEGIN PUBLIC KEY-----")
    private = load_private_key(keys.private)
    assert private.public_key().public_numbers() == load_public_key(keys.public).public_numbers()


def test_encrypted_key_uses_the_environment_passphrase(
    keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An encrypted PKCS#8 key opens with $PINGUARD_KEY_PASSWORD."""
    assert keys.encrypted.read_text().startswith("-----BEGIN ENCRYPTED PRIVATE KEY-----")
    monkeypatch.setenv("PINGUARD_KEY_PASSWORD", ENCRYPTED_PASSWORD)
    key = load_private_key(keys.encrypted)
    assert key.public_key().public_numbers() == load_public_key(keys.public).public_numbers()


def test_encrypted_key_without_passphrase_names_the_variable(keys: Keys) -> None:
    """No passphrase set: a usage error that says which variable to set."""
    with pytest.raises(KeyFileError, match="encrypted: set PINGUARD_KEY_PASSWORD") as info:
        load_private_key(keys.encrypted)
    assert info.value.exit_code == EXIT_USAGE


def test_encrypted_key_with_wrong_passphrase(keys: Keys, monkeypatch: pytest.MonkeyPatch) -> None:
    """A wrong passphrase is reported as such, naming the file."""
    monkeypatch.setenv("PINGUARD_KEY_PASSWORD", "wrong")
    with pytest.raises(KeyFileError, match=r"signer-encrypted\.pem.*wrong passphrase"):
        load_private_key(keys.encrypted)


@pytest.mark.parametrize(
    ("which", "loader", "message"),
    [
        ("p384_private", load_private_key, "curve 'secp384r1', not P-256"),
        ("p384_public", load_public_key, "curve 'secp384r1', not P-256"),
        ("rsa_private", load_private_key, "not an ECDSA P-256 key"),
        ("rsa_public", load_public_key, "not an ECDSA P-256 key"),
        ("private", load_public_key, "holds a private key"),
        ("public", load_private_key, "not a readable PEM private key"),
    ],
)
def test_wrong_keys_are_refused(keys: Keys, which: str, loader: object, message: str) -> None:
    """Other curves, RSA, and a private key where a public one belongs are refused."""
    assert callable(loader)
    with pytest.raises(KeyFileError, match=message):
        loader(getattr(keys, which))


def test_missing_and_garbage_files(tmp_path: Path) -> None:
    """A missing file and a file that is not PEM both name the path."""
    with pytest.raises(KeyFileError, match=r"cannot read private key '.*nope\.pem'"):
        load_private_key(tmp_path / "nope.pem")
    garbage = tmp_path / "garbage.pub"
    garbage.write_text("hello\n")
    with pytest.raises(KeyFileError, match=r"garbage\.pub.*not a PEM public key"):
        load_public_key(garbage)


def test_documented_encrypted_genpkey_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The docs' command (genpkey -aes-256-cbc -pass env:PINGUARD_KEY_PASSWORD) makes a key
    that loads with that variable and matches its `openssl pkey -pubout` public key."""
    openssl = require_tool("openssl")
    monkeypatch.setenv("PINGUARD_KEY_PASSWORD", "from the environment")
    key, pub = tmp_path / "key.pem", tmp_path / "key.pub"
    subprocess.run(
        [
            openssl,
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-aes-256-cbc",
            "-pass",
            "env:PINGUARD_KEY_PASSWORD",
            "-out",
            str(key),
        ],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [
            openssl,
            "pkey",
            "-in",
            str(key),
            "-passin",
            "env:PINGUARD_KEY_PASSWORD",
            "-pubout",
            "-out",
            str(pub),
        ],
        check=True,
        capture_output=True,
    )
    assert key.read_text().startswith("-----BEGIN ENCRYPTED PRIVATE KEY-----")
    loaded = load_private_key(key)
    assert loaded.public_key().public_numbers() == load_public_key(pub).public_numbers()
