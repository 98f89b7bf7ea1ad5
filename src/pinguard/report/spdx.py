"""The SPDX 2.3 JSON report, built with spdx-tools from :mod:`.sbom` facts.

The document DESCRIBES the image package (purpose ``CONTAINER``, its manifest digest as
version and SHA-256 checksum, a ``pkg:oci`` purl); the image CONTAINS one package per Python
distribution per environment (``pkg:pypi`` purl, the wheel's checksum from ``direct_url.json``
when there is one) and per generic package record of every other kind (dpkg, conda, ...:
the purl its analyzer built), written by one loop; Python packages
DEPENDS_ON the installed distributions their ``Requires-Dist`` names. pinguard's provenance
(layer digest, step index and command, environment, INSTALLER, REQUESTED, direct_url) is
written as ``OTHER`` annotations ``pinguard:<key>=<value>`` on each package, since SPDX 2.3 has
no free properties; so is each item the audit could not read
(``pinguard:incomplete=<what>: <why>``), on the package it belongs to or else on the image.
RECORD's per-file hashes are left to the CycloneDX report: SPDX 2.3 requires a SHA-1 for
every file, which RECORD does not give. The namespace is a uuid5 of the image
digest and the creation time is fixed (the Unix epoch), so the same image gives the same
bytes; spdx-tools validates the document before it is written. The creator comment names
the audited reference and the policy (``policy:source=given; policy:file=PATH sha256:HEX``).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re

from spdx_tools.spdx.jsonschema.document_converter import DocumentConverter
from spdx_tools.spdx.model.actor import Actor, ActorType
from spdx_tools.spdx.model.annotation import Annotation, AnnotationType
from spdx_tools.spdx.model.checksum import Checksum, ChecksumAlgorithm
from spdx_tools.spdx.model.document import CreationInfo, Document
from spdx_tools.spdx.model.package import (
    ExternalPackageRef,
    ExternalPackageRefCategory,
    Package,
    PackagePurpose,
)
from spdx_tools.spdx.model.relationship import Relationship, RelationshipType
from spdx_tools.spdx.model.spdx_no_assertion import SpdxNoAssertion
from spdx_tools.spdx.validation.document_validator import validate_full_spdx_document
from spdx_tools.spdx.writer.write_utils import convert

from pinguard.errors import PinguardError
from pinguard.models import AuditResult
from pinguard.report.options import DEFAULT_OPTIONS, RenderOptions
from pinguard.report.sbom import TOOL, SbomFacts, sbom_facts

# SPDX 2.3 needs a creation time; a fixed one keeps the bytes reproducible (as
# SOURCE_DATE_EPOCH=0 would).
CREATED = datetime.datetime(1970, 1, 1)  # spdx-tools writes naive times as UTC ("...Z")
NAMESPACE_BASE = "https://pinguard.invalid/spdxdocs/"
_ALGORITHMS = {
    "sha1": ChecksumAlgorithm.SHA1,
    "sha256": ChecksumAlgorithm.SHA256,
    "sha384": ChecksumAlgorithm.SHA384,
    "sha512": ChecksumAlgorithm.SHA512,
    "md5": ChecksumAlgorithm.MD5,
}
_UNSAFE = re.compile(r"[^A-Za-z0-9.-]+")


class SpdxError(PinguardError):
    """spdx-tools rejected the document pinguard built (a bug in pinguard: please report)."""


def spdx_id(kind: str, ref: str, label: str) -> str:
    """``SPDXRef-<kind>-<label>-<12 hex of ref>``: readable, unique, stable per ref."""
    digest = hashlib.sha256(ref.encode("utf-8")).hexdigest()[:12]
    clean = _UNSAFE.sub("-", label).strip("-") or "x"
    return f"SPDXRef-{kind}-{clean}-{digest}"


def _purl(value: str) -> ExternalPackageRef:
    return ExternalPackageRef(ExternalPackageRefCategory.PACKAGE_MANAGER, "purl", value)


def _checksums(pairs: tuple[tuple[str, str], ...]) -> list[Checksum]:
    return [Checksum(_ALGORITHMS[algo], value) for algo, value in pairs if algo in _ALGORITHMS]


def build_document(facts: SbomFacts) -> Document:
    """An spdx-tools ``Document`` of the facts."""
    tool = Actor(ActorType.TOOL, f"{TOOL}-{facts.tool_version}")
    info = CreationInfo(
        spdx_version="SPDX-2.3",
        spdx_id="SPDXRef-DOCUMENT",
        name=facts.name,
        document_namespace=f"{NAMESPACE_BASE}{_UNSAFE.sub('-', facts.name)}-{facts.serial}",
        creators=[tool],
        created=CREATED,
        creator_comment=f"pinguard audit of {facts.reference}"
        + "".join(f"; {k}={v}" for k, v in facts.policy),
    )
    root_id = "SPDXRef-Image"
    root_checksums = (
        [Checksum(ChecksumAlgorithm.SHA256, facts.digest.split(":", 1)[1])]
        if facts.digest and facts.digest.startswith("sha256:")
        else []
    )
    root = Package(
        spdx_id=root_id,
        name=facts.name,
        download_location=SpdxNoAssertion(),
        version=facts.digest,
        files_analyzed=False,
        checksums=root_checksums,
        external_references=[_purl(facts.root_purl)] if facts.root_purl else [],
        primary_package_purpose=PackagePurpose.CONTAINER,
        comment=f"platform: {facts.platform}" if facts.platform is not None else None,
    )
    packages = [root]
    relationships = [Relationship("SPDXRef-DOCUMENT", RelationshipType.DESCRIBES, root_id)]
    annotations: list[Annotation] = [
        Annotation(root_id, AnnotationType.OTHER, tool, CREATED, f"{name}={value}")
        for name, value in (*facts.image_properties, *facts.incomplete_of(None))
    ]
    ids = {pkg.ref: spdx_id(pkg.id_kind, pkg.ref, pkg.label) for pkg in facts.packages}
    for pkg in facts.packages:
        packages.append(
            Package(
                spdx_id=ids[pkg.ref],
                name=pkg.name,
                download_location=pkg.download or SpdxNoAssertion(),
                version=pkg.version,
                files_analyzed=False,
                checksums=_checksums(pkg.hashes),
                external_references=[_purl(pkg.purl)] if pkg.purl else [],
                primary_package_purpose=PackagePurpose.LIBRARY,
            )
        )
        relationships.append(Relationship(root_id, RelationshipType.CONTAINS, ids[pkg.ref]))
        relationships.extend(
            Relationship(ids[pkg.ref], RelationshipType.DEPENDS_ON, ids[dep])
            for dep in pkg.depends_on
        )
        annotations.extend(
            Annotation(ids[pkg.ref], AnnotationType.OTHER, tool, CREATED, f"{name}={value}")
            for name, value in (*pkg.annotations, *facts.incomplete_of(pkg.ref))
        )
    return Document(
        creation_info=info,
        packages=packages,
        relationships=relationships,
        annotations=annotations,
    )


def render(result: AuditResult, options: RenderOptions = DEFAULT_OPTIONS) -> str:
    """The SPDX 2.3 JSON document of ``result``'s final state, validated.

    Newline-terminated; no option changes it (an SBOM carries no verdict).
    """
    document = build_document(sbom_facts(result))
    problems = validate_full_spdx_document(document, "SPDX-2.3")
    if problems:
        first = problems[0]
        raise SpdxError(
            f"the SPDX document does not validate ({len(problems)} problems): "
            f"{first.validation_message!r}"
        )
    data = convert(document, DocumentConverter())  # type: ignore[no-untyped-call]
    # spdx-tools writes the enum's Python name (PACKAGE_MANAGER); the SPDX 2.3 JSON schema
    # only allows the spec's spelling (PACKAGE-MANAGER), which spdx-tools also parses.
    for package in data.get("packages", []):
        for ref in package.get("externalRefs", []):
            ref["referenceCategory"] = str(ref["referenceCategory"]).replace("_", "-")
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"
