"""`pinguard audit --format cyclonedx|spdx` on the real, buildah-built scenario image.

The documents are validated against the official schemas (CycloneDX 1.6 as shipped by
cyclonedx-python-lib; SPDX 2.3 vendored from spdx/spdx-spec, plus spdx-tools' own validation),
loaded back with the same libraries a consumer would use, and checked against what the build
did: the expected step comes from the scenario's data and the layer digest from the OCI
layout's own manifest and config (read here, not by pinguard).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from cyclonedx.model.bom import Bom
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from spdx_tools.spdx.parser.parse_anything import parse_file
from spdx_tools.spdx.validation.document_validator import validate_full_spdx_document

from tests.infra.cli import cli
from tests.infra.scenario import SITE, VENV_SITE, Scenario

pytestmark = pytest.mark.integration

SPDX_SCHEMA = Path(__file__).parents[1] / "data" / "spdx-schema-2.3.json"


def layout_facts(ref: str) -> tuple[str, list[str | None]]:
    """(manifest digest, layer digest per history entry or None for empty ones) of oci:DIR:TAG,
    read straight from the OCI layout's JSON files."""
    _, rest = ref.split(":", 1)
    directory, tag = rest.rsplit(":", 1)
    root = Path(directory)
    index = json.loads((root / "index.json").read_text())
    desc = next(
        m
        for m in index["manifests"]
        if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag
    )

    def blob(digest: str) -> Any:
        algo, hexed = digest.split(":", 1)
        return json.loads((root / "blobs" / algo / hexed).read_text())

    manifest = blob(desc["digest"])
    config = blob(manifest["config"]["digest"])
    layers = iter(layer["digest"] for layer in manifest["layers"])
    per_entry: list[str | None] = [
        None if h.get("empty_layer") else next(layers) for h in config["history"]
    ]
    return desc["digest"], per_entry


@pytest.fixture(scope="module")
def documents(bad_image_oci: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("sbom")
    cache = out / "cache"
    paths = {}
    for fmt in ("cyclonedx", "spdx"):
        path = out / f"{fmt}.json"
        code, text = cli(
            "audit", bad_image_oci, "--format", fmt, "-o", str(path), "--cache-dir", str(cache)
        )
        assert code == 1, text  # the bad image has findings; the format does not change that
        paths[fmt] = path
    return paths


def test_cyclonedx_validates_and_carries_step_provenance(
    documents: dict[str, Path], bad_image_oci: str, scenario: Scenario
) -> None:
    """The CycloneDX 1.6 document passes the official strict schema, names the image by digest,
    and says NCCL 2.29.7 came from step C's layer because torch 2.12.1 pinned it."""
    text = documents["cyclonedx"].read_text()
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
    doc = json.loads(text)
    assert doc["specVersion"] == "1.6"
    digest, layers = layout_facts(bad_image_oci)
    root = doc["metadata"]["component"]
    assert root["type"] == "container"
    assert root["version"] == digest
    assert {"alg": "SHA-256", "content": digest.split(":")[1]} in root["hashes"]
    assert "timestamp" not in doc["metadata"]

    by_ref = {c["bom-ref"]: c for c in doc["components"]}
    nccl = by_ref[f"{SITE}/nvidia_nccl_cu13-2.29.7.dist-info"]
    assert nccl["purl"] == "pkg:pypi/nvidia-nccl-cu13@2.29.7"
    props = {p["name"]: p["value"] for p in nccl["properties"]}
    step_c = scenario.bad.history_index("C")
    assert props["pinguard:step:index"] == str(step_c)
    assert props["pinguard:layer:digest"] == layers[step_c - 1]
    assert "flashinfer-python==0.6.18.dev20261120" in props["pinguard:step:command"]
    assert props["pinguard:environment:path"] == SITE
    assert props["pinguard:installer"] == "pip"
    assert props["pinguard:requested"] == "false"
    causes = [p["value"] for p in nccl["properties"] if p["name"] == "pinguard:cause"]
    assert causes == [  # the requirement chain, nearest cause first, as the table says it
        'torch 2.12.1 requires nvidia-nccl-cu13==2.29.7; platform_system == "Linux"',
        "flashinfer-python 0.6.18.dev20261120 requires torch>=2.12",
    ]
    # a package the step asked for carries the table's reason, not an empty chain
    flashinfer = next(c for c in doc["components"] if c["name"] == "flashinfer-python")
    assert [p["value"] for p in flashinfer["properties"] if p["name"] == "pinguard:cause"] == [
        "asked for by this step (flashinfer-python==0.6.18.dev20261120)"
    ]
    # RECORD's hash of the shared object, as nested file components (hex of the base64 digest)
    files = {f["name"]: f for f in nccl["components"]}
    lib = files[f"{SITE}/nvidia/nccl/lib/libnccl.so.2"]
    assert lib["hashes"] == [
        {"alg": "SHA-256", "content": hashlib.sha256(b"NCCL 2.29.7\n").hexdigest()}
    ]

    # the venv's filelock is its own component, from step F
    venv_filelock = by_ref[f"{VENV_SITE}/filelock-3.16.1.dist-info"]
    vprops = {p["name"]: p["value"] for p in venv_filelock["properties"]}
    assert vprops["pinguard:step:index"] == str(scenario.bad.history_index("F"))
    assert vprops["pinguard:requested"] == "true"

    deps = {d["ref"]: set(d.get("dependsOn", [])) for d in doc["dependencies"]}
    torch = f"{SITE}/torch-2.12.1.dist-info"
    assert deps[torch] >= {
        f"{SITE}/nvidia_nccl_cu13-2.29.7.dist-info",
        f"{SITE}/nvidia_cutlass_dsl-4.2.1.dist-info",
        f"{SITE}/filelock-3.16.1.dist-info",
    }
    assert torch in deps[f"{SITE}/flashinfer_python-0.6.18.dev20261120.dist-info"]
    # the Debian base's own packages carry deb purls from os-release (bookworm is Debian 12)
    python3 = next(c for c in doc["components"] if c["name"] == "python3")
    assert python3["purl"].startswith("pkg:deb/debian/python3@")
    assert python3["purl"].endswith("?arch=amd64&distro=debian-12")

    # a consumer reads it back with the same library
    bom = Bom.from_json(doc)  # type: ignore[attr-defined]
    names = {c.name for c in bom.components}
    assert {"torch", "nvidia-nccl-cu13", "vllm", "python3"} <= names


def test_spdx_validates_and_carries_step_provenance(
    documents: dict[str, Path], bad_image_oci: str, scenario: Scenario
) -> None:
    """The SPDX 2.3 document passes the official JSON schema and spdx-tools' validation when
    parsed back, DESCRIBES the image, and annotates NCCL with step C's provenance."""
    doc = json.loads(documents["spdx"].read_text())
    jsonschema.validate(doc, json.loads(SPDX_SCHEMA.read_text()))
    parsed = parse_file(str(documents["spdx"]))
    assert validate_full_spdx_document(parsed, "SPDX-2.3") == []

    digest, layers = layout_facts(bad_image_oci)
    image = next(p for p in parsed.packages if p.spdx_id == "SPDXRef-Image")
    assert image.version == digest
    described = [
        r.related_spdx_element_id
        for r in parsed.relationships
        if r.spdx_element_id == "SPDXRef-DOCUMENT" and r.relationship_type.name == "DESCRIBES"
    ]
    assert described == ["SPDXRef-Image"]
    nccl = next(
        p for p in parsed.packages if p.name == "nvidia-nccl-cu13" and p.version == "2.29.7"
    )
    assert [r.locator for r in nccl.external_references] == ["pkg:pypi/nvidia-nccl-cu13@2.29.7"]
    notes = {a.annotation_comment for a in parsed.annotations if a.spdx_id == nccl.spdx_id}
    step_c = scenario.bad.history_index("C")
    assert f"pinguard:step:index={step_c}" in notes
    assert f"pinguard:layer:digest={layers[step_c - 1]}" in notes
    torch = next(p for p in parsed.packages if p.name == "torch")
    depends = {
        r.related_spdx_element_id
        for r in parsed.relationships
        if r.spdx_element_id == torch.spdx_id and r.relationship_type.name == "DEPENDS_ON"
    }
    assert nccl.spdx_id in depends
    contained = {
        r.related_spdx_element_id
        for r in parsed.relationships
        if r.spdx_element_id == "SPDXRef-Image" and r.relationship_type.name == "CONTAINS"
    }
    assert contained == {p.spdx_id for p in parsed.packages} - {"SPDXRef-Image"}


def test_sboms_are_byte_identical_across_runs(
    documents: dict[str, Path], bad_image_oci: str, tmp_path: Path
) -> None:
    """A second audit of the same image, without the cache, writes the same bytes."""
    for fmt, first in documents.items():
        again = tmp_path / f"{fmt}.json"
        code, text = cli("audit", bad_image_oci, "--format", fmt, "-o", str(again), "--no-cache")
        assert code == 1, text
        assert again.read_bytes() == first.read_bytes(), fmt
