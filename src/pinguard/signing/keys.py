"""ECDSA P-256 keys for DSSE: PKCS#8 PEM private keys and PEM SubjectPublicKeyInfo public keys.

``openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256`` writes the private key
(add a cipher for an encrypted one, whose passphrase comes from ``PINGUARD_KEY_PASSWORD``);
``openssl pkey -pubout`` writes the public key, the same format as cosign's ``cosign.pub``.
The key id is the hex SHA-256 of the public key's DER SubjectPublicKeyInfo, so a signer and a
verifier holding the same key agree on it. Every problem raises ``KeyFileError`` naming the
file.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from pinguard.errors import KeyFileError

PASSWORD_ENV = "PINGUARD_KEY_PASSWORD"
MAX_KEY_BYTES = 64 * 1024


def _read(path: str | os.PathLike[str], what: str) -> bytes:
    p = Path(path)
    try:
        data = p.read_bytes()[: MAX_KEY_BYTES + 1]
    except OSError as exc:
        raise KeyFileError(f"cannot read {what} {str(p)!r}: {exc.strerror or exc}") from exc
    if len(data) > MAX_KEY_BYTES:
        raise KeyFileError(f"{what} {str(p)!r} is larger than {MAX_KEY_BYTES} bytes")
    return data


def _not_ec(key: object, path: str | os.PathLike[str], what: str) -> KeyFileError:
    kind = type(key).__name__.lstrip("_")
    return KeyFileError(f"{what} {str(path)!r} is a {kind}, not an ECDSA P-256 key")


def _check_curve(curve: ec.EllipticCurve, path: str | os.PathLike[str], what: str) -> None:
    if not isinstance(curve, ec.SECP256R1):
        raise KeyFileError(
            f"{what} {str(path)!r} is on curve {curve.name!r}, not P-256 (secp256r1)"
        )


def load_private_key(
    path: str | os.PathLike[str], password: str | None = None
) -> ec.EllipticCurvePrivateKey:
    """The signing key in ``path``; ``password`` defaults to ``$PINGUARD_KEY_PASSWORD``."""
    data = _read(path, "private key")
    if password is None:
        password = os.environ.get(PASSWORD_ENV)
    encrypted = (
        b"-----BEGIN ENCRYPTED PRIVATE KEY-----" in data or b"Proc-Type: 4,ENCRYPTED" in data
    )
    if encrypted and not password:
        raise KeyFileError(
            f"private key {str(path)!r} is encrypted: set {PASSWORD_ENV} to its passphrase"
        )
    try:
        key = serialization.load_pem_private_key(
            data, password=password.encode() if encrypted and password else None
        )
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        hint = " (wrong passphrase in $" + PASSWORD_ENV + "?)" if encrypted else ""
        raise KeyFileError(
            f"private key {str(path)!r} is not a readable PEM private key{hint}: {exc}"
        ) from exc
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise _not_ec(key, path, "private key")
    _check_curve(key.curve, path, "private key")
    return key


def load_public_key(path: str | os.PathLike[str]) -> ec.EllipticCurvePublicKey:
    """The verification key in ``path`` (PEM SubjectPublicKeyInfo, ``BEGIN PUBLIC KEY``)."""
    data = _read(path, "public key")
    if b"PRIVATE KEY-----" in data:
        raise KeyFileError(
            f"public key {str(path)!r} holds a private key; give the public key "
            "(openssl pkey -in KEY -pubout)"
        )
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise KeyFileError(f"public key {str(path)!r} is not a PEM public key: {exc}") from exc
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise _not_ec(key, path, "public key")
    _check_curve(key.curve, path, "public key")
    return key


def key_id(key: ec.EllipticCurvePublicKey) -> str:
    """Hex SHA-256 of the DER SubjectPublicKeyInfo."""
    der = key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return hashlib.sha256(der).hexdigest()
