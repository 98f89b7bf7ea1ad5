"""The analyzers' purls (``pinguard.catalog.purl``) are the strings packageurl-python writes
for the same parts: the SBOM writers parse them back with it, and a consumer compares them."""

from __future__ import annotations

import pytest
from packageurl import PackageURL

from pinguard.catalog.purl import package_url

CASES = [
    ("deb", "libnccl2", "2.30.3-1+cuda13.0", "ubuntu", {"arch": "arm64", "distro": "ubuntu-24.04"}),
    ("deb", "libc6", "2.36-9+deb12u10", "debian", {"arch": "amd64", "distro": "debian-12"}),
    ("deb", "python3-pip-whl", "23.0.1+dfsg-1", None, {"arch": "all"}),
    ("deb", "tzdata", "2025b-0+deb12u1", "debian", {}),
    ("deb", "libgcc-s1", "1:12.2.0-14+deb12u1", "debian", {"arch": "amd64", "distro": ""}),
    ("deb", "g++", "4:12.2.0-3", "Debian", {"Arch": "amd64"}),
    ("pypi", "nvidia-nccl-cu13", "2.29.7", None, {}),
    ("pypi", "Torch_Vision", "0.27.0+cu130", None, {}),
    ("pypi", "zope.interface", "1!7.0 post/x", None, {}),
    ("pypi", "torch", "", None, {}),
]


@pytest.mark.parametrize(("kind", "name", "version", "namespace", "qualifiers"), CASES)
def test_same_string_as_packageurl(
    kind: str, name: str, version: str, namespace: str | None, qualifiers: dict[str, str]
) -> None:
    expected = PackageURL(
        type=kind, namespace=namespace, name=name, version=version or None, qualifiers=qualifiers
    ).to_string()
    assert package_url(kind, name, version, namespace, qualifiers) == expected
