"""The CycloneDX 1.6 JSON report, built with cyclonedx-python-lib from :mod:`.sbom` facts.

The image is ``metadata.component`` (type ``container``, its manifest digest as version and as a
SHA-256 hash, its platform as properties); every Python distribution of every environment is a
``library`` component with a ``pkg:pypi`` purl, the wheel hash from ``direct_url.json`` when there
is one, its RECORD files as nested ``file`` components with their hashes, and pinguard's provenance
as ``pinguard:*`` properties; every other package (dpkg, conda, ...) is a ``library`` component
written from its generic record in one loop (the purl its analyzer built, its facts as ``pinguard:``
properties). ``dependencies`` is the Requires-Dist graph resolved to installed components, with the
image depending on the requested and unrequired ones. What the audit could not read makes the
inventory known to be incomplete: the spec's own construct for that, a ``compositions`` entry with
``aggregate: incomplete`` whose assemblies are the image and each package an item belongs to, and
one ``pinguard:incomplete`` property (``<what>: <why>``) per item on that package or else on the
image. cyclonedx-python-lib has no model of compositions yet (CycloneDX/cyclonedx-python-lib#607),
so that one entry is added to the library's JSON output; a complete audit has none.
``metadata.properties`` name the policy (``pinguard:policy:source``, ``pinguard:policy:file`` =
``PATH sha256:HEX``). The serial number is a uuid5 of the image digest and the timestamp is omitted,
so the same image gives the same bytes. ``pinguard:cause`` properties are written nearest cause
first (the library sorts properties), in the table's words (``asked for by this step
(torch==2.11.0)``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from cyclonedx.model import HashAlgorithm, HashType, Property
from cyclonedx.model.bom import Bom
from cyclonedx.model.bom_ref import BomRef
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.model.dependency import Dependency
from cyclonedx.model.tool import ToolRepository
from cyclonedx.output.json import JsonV1Dot6
from packageurl import PackageURL

from pinguard.models import AuditResult
from pinguard.report.options import DEFAULT_OPTIONS, RenderOptions
from pinguard.report.sbom import PROPERTY_PREFIX, TOOL, SbomFacts, sbom_facts

# RECORD and direct_url.json use hashlib names; CycloneDX spells them its own way.
_ALGORITHMS = {
    "sha1": HashAlgorithm.SHA_1,
    "sha256": HashAlgorithm.SHA_256,
    "sha384": HashAlgorithm.SHA_384,
    "sha512": HashAlgorithm.SHA_512,
    "sha3_256": HashAlgorithm.SHA3_256,
    "sha3_384": HashAlgorithm.SHA3_384,
    "sha3_512": HashAlgorithm.SHA3_512,
    "blake2b": HashAlgorithm.BLAKE2B_512,
    "md5": HashAlgorithm.MD5,
}


def _hashes(pairs: Iterable[tuple[str, str]]) -> list[HashType]:
    out = []
    for algo, value in pairs:
        alg = _ALGORITHMS.get(algo.lower().replace("-", "_"))
        if alg is not None:
            out.append(HashType(alg=alg, content=value))
    return out


def _properties(pairs: Iterable[tuple[str, str]]) -> list[Property]:
    return [Property(name=name, value=value) for name, value in pairs]


def build_bom(facts: SbomFacts) -> Bom:
    """A cyclonedx-python-lib ``Bom`` of the facts (no timestamp; serial from the digest)."""
    bom = Bom(serial_number=facts.serial)
    # None omits the field (the library allows it; its annotation says datetime)
    bom.metadata.timestamp = None  # type: ignore[assignment]
    tool = Component(
        type=ComponentType.APPLICATION,
        name=TOOL,
        version=facts.tool_version,
        bom_ref=f"tool:{TOOL}@{facts.tool_version}",
    )
    bom.metadata.tools = ToolRepository(components=[tool])
    bom.metadata.properties = _properties((PROPERTY_PREFIX + k, v) for k, v in facts.policy)
    root_props = [("image:reference", facts.reference)]
    if facts.platform is not None:
        root_props.append(("image:platform", str(facts.platform)))
    root_props.extend(
        (f"os-release:{k}", v) for k, v in facts.os_release if k in {"ID", "VERSION_ID"}
    )
    root = Component(
        type=ComponentType.CONTAINER,
        name=facts.name,
        version=facts.digest,
        bom_ref=facts.root_ref,
        purl=PackageURL.from_string(facts.root_purl) if facts.root_purl else None,
        hashes=_hashes([("sha256", facts.digest.split(":", 1)[1])])
        if facts.digest and facts.digest.startswith("sha256:")
        else [],
        properties=_properties(
            [
                *((PROPERTY_PREFIX + k, v) for k, v in root_props),
                *facts.image_properties,
                *facts.incomplete_of(None),
            ]
        ),
    )
    bom.metadata.component = root
    for pkg in facts.packages:
        component = Component(
            type=ComponentType.LIBRARY,
            name=pkg.name,
            version=pkg.version,
            bom_ref=pkg.ref,
            purl=PackageURL.from_string(pkg.purl) if pkg.purl else None,
            hashes=_hashes(pkg.hashes),
            properties=_properties([*pkg.properties, *facts.incomplete_of(pkg.ref)]),
        )
        for f in pkg.files:
            component.components.add(
                Component(
                    type=ComponentType.FILE,
                    name=f.path,
                    bom_ref=f"{pkg.ref}!{f.path}",
                    hashes=_hashes([(f.algorithm, f.hex)]),
                )
            )
        bom.components.add(component)
    bom.dependencies.add(
        Dependency(
            ref=BomRef(facts.root_ref), dependencies=[Dependency(BomRef(r)) for r in facts.roots]
        )
    )
    for pkg in facts.packages:
        bom.dependencies.add(
            Dependency(
                ref=BomRef(pkg.ref), dependencies=[Dependency(BomRef(r)) for r in pkg.depends_on]
            )
        )
    return bom


def compositions(facts: SbomFacts) -> list[dict[str, Any]]:
    """``[{"aggregate": "incomplete", "assemblies": [image, packages...]}]`` when something
    could not be read (the packages an item belongs to, sorted), else ``[]``."""
    if not facts.incomplete:
        return []
    refs = sorted({item.ref for item in facts.incomplete if item.ref is not None})
    return [{"aggregate": "incomplete", "assemblies": [facts.root_ref, *refs]}]


def render(result: AuditResult, options: RenderOptions = DEFAULT_OPTIONS) -> str:
    """The CycloneDX 1.6 JSON document of ``result``'s final state.

    Newline-terminated; no option changes it (an SBOM carries no verdict).
    """
    facts = sbom_facts(result)
    text: str = JsonV1Dot6(build_bom(facts)).output_as_string(indent=2)
    # the library writes json.dumps(indent=2); the same call keeps its layout
    data = json.loads(text)
    _properties_in_order(data, facts)
    extra = compositions(facts)
    if extra:
        data["compositions"] = extra
    return json.dumps(data, indent=2) + "\n"


def _properties_in_order(data: dict[str, Any], facts: SbomFacts) -> None:
    """Each package's ``pinguard:cause`` properties nearest cause first: the library sorts
    properties by name and value, which would put the chain in alphabetical order; the
    others keep the library's order."""
    name = PROPERTY_PREFIX + "cause"
    wanted = {pkg.ref: list(dict.fromkeys(pkg.causes)) for pkg in facts.packages}
    for component in data.get("components", []):
        causes = wanted.get(component.get("bom-ref", ""))
        if not causes or len(causes) < 2:
            continue
        ordered = iter(causes)
        component["properties"] = [
            {"name": name, "value": next(ordered)} if p.get("name") == name else p
            for p in component.get("properties", [])
        ]
