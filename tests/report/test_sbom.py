"""SBOM facts and documents from synthetic audit results (the image tests use real builds)."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
from pathlib import Path

import jsonschema
import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from packaging.utils import canonicalize_name

from pinguard.catalog.dpkg import os_release, packages, parse_os_release, purl
from pinguard.catalog.python import with_environments
from pinguard.models import (
    AuditResult,
    ChangeKind,
    Distribution,
    Environment,
    ImageInfo,
    Incomplete,
    Platform,
    Snapshot,
)
from pinguard.report import cyclonedx, spdx
from pinguard.report.sbom import sbom_facts
from pinguard.sources import image_name
from tests.factories import ENV, SYSTEM, change, step

NCCL = canonicalize_name("nvidia-nccl-cu13")
SPDX_SCHEMA = Path(__file__).parents[1] / "data" / "spdx-schema-2.3.json"
OS_RELEASE = b"""PRETTY_NAME="Ubuntu 24.04.3 LTS"
NAME="Ubuntu"
VERSION_ID="24.04"
# a comment
ID=ubuntu
ID_LIKE=debian
"""


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def result(
    digest: str | None = "sha256:" + "cd" * 32, reference: str = "docker://reg.example/glm:1"
) -> AuditResult:
    torch = Distribution(
        name=canonicalize_name("torch"),
        raw_version="2.12.1",
        metadata_path=f"{ENV}/torch-2.12.1.dist-info",
        requires_dist=(
            "nvidia-nccl-cu13==2.29.7; platform_system == 'Linux'",
            "pywin32; sys_platform == 'win32'",
            "sympy; extra == 'opt'",
        ),
        installer="uv",
        requested=True,
        direct_url={
            "url": "https://example.invalid/torch.whl",
            "archive_info": {"hashes": {"sha256": "AB" * 32}},
        },
        record=(
            (f"{ENV}/torch/lib/libtorch.so", record_hash(b"libtorch\n")),
            (f"{ENV}/torch-2.12.1.dist-info/RECORD", ""),
        ),
    )
    nccl = Distribution(NCCL, "2.29.7", f"{ENV}/nvidia_nccl_cu13-2.29.7.dist-info")
    sympy = Distribution(canonicalize_name("sympy"), "1.14.0", f"{ENV}/sympy-1.14.0.dist-info")
    system_nccl = Distribution(NCCL, "2.30.3", f"{SYSTEM}/nvidia_nccl_cu13-2.30.3.dist-info")
    debian = Snapshot(
        os_release=parse_os_release(OS_RELEASE),
        packages=packages(
            [("libnccl2", "2.30.3-1+cuda13.0", "arm64")], parse_os_release(OS_RELEASE)
        ),
    )
    final = with_environments(
        debian,
        (
            Environment(ENV, "3.12.7", (nccl, sympy, torch)),
            Environment(SYSTEM, "3.12.7", (system_nccl,)),
        ),
    )
    steps = (
        step(
            1,
            "/bin/sh -c pip install nvidia-nccl-cu13==2.30.3",
            change("nvidia-nccl-cu13", ChangeKind.ADDED, None, "2.30.3", env=SYSTEM),
        ),
        step(
            2,
            "/bin/sh -c uv pip install torch==2.12.1",
            change("torch", ChangeKind.ADDED, None, "2.12.1"),
            change("nvidia-nccl-cu13", ChangeKind.ADDED, None, "2.29.7"),
        ),
    )
    return AuditResult(
        image=ImageInfo(reference, digest, Platform("linux", "arm64"), "registry"),
        steps=steps,
        final=final,
        snapshots=(final, final),
    )


def test_os_release_parsing_and_precedence() -> None:
    """Quoted values are unquoted; /etc/os-release wins over /usr/lib/os-release."""
    pairs = dict(parse_os_release(OS_RELEASE))
    assert pairs["ID"] == "ubuntu"
    assert pairs["VERSION_ID"] == "24.04"
    assert pairs["PRETTY_NAME"] == "Ubuntu 24.04.3 LTS"
    files = {"/usr/lib/os-release": b"ID=debian\n", "/etc/os-release": b"ID=ubuntu\n"}
    assert dict(os_release(files))["ID"] == "ubuntu"
    assert dict(os_release({"/usr/lib/os-release": b"ID=debian\n"}))["ID"] == "debian"
    assert os_release({}) == ()


@pytest.mark.parametrize(
    ("release", "expected"),
    [
        (
            {"ID": "ubuntu", "VERSION_ID": "24.04"},
            "pkg:deb/ubuntu/libnccl2@2.30.3-1%2Bcuda13.0?arch=arm64&distro=ubuntu-24.04",
        ),
        ({"ID": "debian"}, "pkg:deb/debian/libnccl2@2.30.3-1%2Bcuda13.0?arch=arm64"),
        ({}, "pkg:deb/libnccl2@2.30.3-1%2Bcuda13.0?arch=arm64"),
    ],
)
def test_deb_purl(release: dict[str, str], expected: str) -> None:
    """The purl spec's deb type, built by the dpkg analyzer: vendor namespace, arch and
    distro qualifiers, '+' escaped."""
    assert purl("libnccl2", "2.30.3-1+cuda13.0", "arm64", release) == expected


@pytest.mark.parametrize(
    ("reference", "expected"),
    [
        ("docker://reg.example/team/glm:1", "reg.example/team/glm"),
        ("docker://reg.example:5000/glm@sha256:" + "a" * 64, "reg.example:5000/glm"),
        ("oci-archive:out/glm.tar:2026-11-29", "out/glm.tar"),
        ("oci:layout", "layout"),
        ("dir:/srv/venv", "/srv/venv"),
        ("glm:latest", "glm"),
    ],
)
def test_image_name(reference: str, expected: str) -> None:
    """The image's name without transport, tag or digest."""
    assert image_name(reference) == expected


def test_facts_provenance_hashes_and_graph() -> None:
    """Each distribution per environment, its installing step, RECORD hashes in hex, the wheel
    hash from direct_url, and Requires-Dist edges only where markers apply and it is installed."""
    facts = sbom_facts(result())
    by_ref = {p.ref: p for p in facts.packages}
    # NCCL twice (once per environment), in the documents' order, then the Debian package
    assert [(p.id_kind, p.ref) for p in facts.packages] == [
        ("Python", f"{ENV}/nvidia_nccl_cu13-2.29.7.dist-info"),
        ("Python", f"{ENV}/sympy-1.14.0.dist-info"),
        ("Python", f"{ENV}/torch-2.12.1.dist-info"),
        ("Python", f"{SYSTEM}/nvidia_nccl_cu13-2.30.3.dist-info"),
        ("Deb", "deb:libnccl2:arm64"),
    ]
    torch = by_ref[f"{ENV}/torch-2.12.1.dist-info"]
    assert torch.purl == "pkg:pypi/torch@2.12.1"  # as the Python analyzer built it
    props = dict(torch.properties)
    assert props["pinguard:step:index"] == "2"
    assert torch.files[0].hex == hashlib.sha256(b"libtorch\n").hexdigest()
    assert len(torch.files) == 1  # RECORD's own line has no hash
    assert torch.hashes == (("sha256", "ab" * 32),)
    # pywin32 (marker false) and sympy (only with an extra) are not edges
    assert torch.depends_on == (f"{ENV}/nvidia_nccl_cu13-2.29.7.dist-info",)
    system = by_ref[f"{SYSTEM}/nvidia_nccl_cu13-2.30.3.dist-info"]
    assert dict(system.properties)["pinguard:step:index"] == "1"
    assert props["pinguard:installer"] == "uv"
    assert props["pinguard:requested"] == "true"
    assert json.loads(props["pinguard:direct_url"])["url"] == "https://example.invalid/torch.whl"
    # the image depends on what was requested or nothing requires: torch, sympy, the system NCCL
    assert set(facts.roots) == {
        torch.ref,
        f"{ENV}/sympy-1.14.0.dist-info",
        system.ref,
        "deb:libnccl2:arm64",
    }
    assert facts.root_purl == (
        "pkg:oci/glm@sha256:" + "cd" * 32 + "?arch=arm64&repository_url=reg.example/glm"
    )


def test_synthetic_documents_validate_and_are_stable() -> None:
    """Both documents validate against the official schemas and do not change between runs."""
    text = cyclonedx.render(result())
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
    assert cyclonedx.render(result()) == text
    doc = json.loads(spdx.render(result()))
    jsonschema.validate(doc, json.loads(SPDX_SCHEMA.read_text()))
    assert doc["creationInfo"]["created"] == "1970-01-01T00:00:00Z"
    assert spdx.render(result()) == spdx.render(result())
    other = json.loads(spdx.render(result(digest="sha256:" + "ef" * 32)))
    assert other["documentNamespace"] != doc["documentNamespace"]


def test_directory_audit_without_digest() -> None:
    """A dir: audit has no digest: no image purl or hash, an identity from the reference."""
    res = result(digest=None, reference="dir:/srv/venv")
    facts = sbom_facts(res)
    assert facts.root_purl is None
    assert facts.root_ref == "image:reference:dir:/srv/venv"
    bom = json.loads(cyclonedx.render(res))
    assert "hashes" not in bom["metadata"]["component"]
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(json.dumps(bom)) is None


def test_incomplete_items_go_to_the_package_they_name() -> None:
    """An item on a metadata directory, a file under it, or a file a RECORD lists belongs to
    that package; one naming no installed distribution (or the same path in the other
    environment's spelling) belongs to the image. Both documents still validate."""
    torch = f"{ENV}/torch-2.12.1.dist-info"
    items = (
        Incomplete(f"{ENV}/torch/lib/libtorch.so", "not an ELF file"),
        Incomplete(f"{torch}/RECORD", "unreadable RECORD: bad row"),
        Incomplete(f"{ENV}/broken-1.0.dist-info", "metadata has no Version"),
        Incomplete(f"{SYSTEM}/torch/lib/libtorch.so", "not an ELF file"),
        Incomplete(torch, "invalid Requires-Dist 'x>>1'"),
    )
    res = dataclasses.replace(result(), incomplete=items)
    facts = sbom_facts(res)
    assert [(i.what, i.ref) for i in facts.incomplete] == [
        (f"{ENV}/broken-1.0.dist-info", None),
        (torch, torch),  # "torch-" sorts before "torch/"
        (f"{torch}/RECORD", torch),
        (f"{ENV}/torch/lib/libtorch.so", torch),
        (f"{SYSTEM}/torch/lib/libtorch.so", None),
    ]
    text = cyclonedx.render(res)
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
    bom = json.loads(text)
    assert bom["compositions"] == [
        {"aggregate": "incomplete", "assemblies": ["image:sha256:" + "cd" * 32, torch]}
    ]
    (component,) = [c for c in bom["components"] if c["bom-ref"] == torch]
    # the library sorts properties by (name, value): "dist-info/" before "dist-info:"
    assert [p["value"] for p in component["properties"] if p["name"] == "pinguard:incomplete"] == [
        f"{torch}/RECORD: unreadable RECORD: bad row",
        f"{torch}: invalid Requires-Dist 'x>>1'",
        f"{ENV}/torch/lib/libtorch.so: not an ELF file",
    ]
    doc = json.loads(spdx.render(res))
    jsonschema.validate(doc, json.loads(SPDX_SCHEMA.read_text()))
    image = next(p for p in doc["packages"] if p["SPDXID"] == "SPDXRef-Image")
    assert [a["comment"] for a in image["annotations"]] == [
        f"pinguard:incomplete={ENV}/broken-1.0.dist-info: metadata has no Version",
        f"pinguard:incomplete={SYSTEM}/torch/lib/libtorch.so: not an ELF file",
    ]
    (package,) = [p for p in doc["packages"] if p["name"] == "torch"]
    assert [
        a["comment"] for a in package["annotations"] if "pinguard:incomplete=" in a["comment"]
    ] == [
        f"pinguard:incomplete={torch}: invalid Requires-Dist 'x>>1'",
        f"pinguard:incomplete={torch}/RECORD: unreadable RECORD: bad row",
        f"pinguard:incomplete={ENV}/torch/lib/libtorch.so: not an ELF file",
    ]
