"""Signing key files made as the docs tell users to make them: ``openssl genpkey -algorithm EC
-pkeyopt ec_paramgen_curve:P-256`` (PKCS#8 PEM) and ``openssl pkey -pubout`` (the
SubjectPublicKeyInfo PEM of cosign.pub), for the attestation, fleet, cache and CLI tests."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.infra.tools import require_tool


def openssl(*args: str) -> None:
    subprocess.run([require_tool("openssl"), *args], check=True, capture_output=True)


def ec_key_pair(directory: Path, name: str, curve: str = "P-256") -> tuple[Path, Path]:
    """``directory/name.pem`` and ``directory/name.pub``, a fresh EC pair on ``curve``."""
    private, public = directory / f"{name}.pem", directory / f"{name}.pub"
    openssl(
        "genpkey",
        "-algorithm",
        "EC",
        "-pkeyopt",
        f"ec_paramgen_curve:{curve}",
        "-out",
        str(private),
    )
    openssl("pkey", "-in", str(private), "-pubout", "-out", str(public))
    return private, public
