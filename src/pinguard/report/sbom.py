"""The facts both SBOM formats (CycloneDX, SPDX) are written from, worked out once.

:func:`sbom_facts` turns an audit result's final state into plain values: the image as the
root (reference, manifest digest, platform), and one :class:`SbomPackage` per generic package
record of the snapshot, whatever its kind, with the purl its analyzer built and its facts as
``pinguard:`` properties, so each SBOM writes every package in one loop. A record of a
distribution of a Python environment is written with what the Distribution beside it says:
the RECORD file hashes (as hex), the wheel hash from ``direct_url.json``, pinguard's
provenance (the build step that installed that version: layer digest, step index and
command, and the requirement chain that forced it), and the dependency edges from
``Requires-Dist`` resolved to the installed distributions of the same environment. An image
without any Python environment says so (``image_properties``); each item the audit could not
read (``AuditResult.incomplete``) is an :class:`IncompleteItem`, attributed to the package it
names (its metadata directory, a file under it, or a file its RECORD lists) or else to the
image. Everything is sorted and the document identity (serial number, namespace) is derived
from the image digest, so the same image gives the same bytes. The renderers in
:mod:`pinguard.report.cyclonedx` and :mod:`pinguard.report.spdx` only map these to the
libraries' models.
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from dataclasses import dataclass

from packageurl import PackageURL
from packaging.utils import NormalizedName, canonicalize_name

from pinguard import __version__
from pinguard.models import (
    DEB,
    PYTHON,
    AuditResult,
    ChangeKind,
    Distribution,
    Environment,
    Incomplete,
    Package,
    Platform,
    Snapshot,
    Step,
)
from pinguard.report.summary import policy_pairs
from pinguard.report.why import reasons
from pinguard.sources import image_name, is_registry_reference
from pinguard.target import marker_environment, parse_requirement

TOOL = "pinguard"
# The namespace of pinguard's uuid5 serial numbers (itself uuid5 of the project's name).
SERIAL_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://pinguard.invalid/sbom")
PROPERTY_PREFIX = "pinguard:"


@dataclass(frozen=True, slots=True)
class FileHash:
    """One file of a distribution's RECORD that RECORD gives a hash for."""

    path: str  # absolute path inside the image
    algorithm: str  # hashlib name from RECORD: "sha256", "sha384", "sha512", ...
    hex: str


@dataclass(frozen=True, slots=True)
class SbomPackage:
    """One package as both SBOMs write it, whatever its kind: the same loop writes them all."""

    ref: str  # unique within the document (the bom-ref; the SPDX id is made from it)
    id_kind: str  # the SPDX id's kind word: SPDXRef-<id_kind>-<label>-<hash of ref>
    label: str  # the SPDX id's label: <name>-<version>
    name: str
    version: str
    purl: str | None
    properties: tuple[tuple[str, str], ...]  # ``pinguard:`` pairs: CycloneDX properties
    annotations: tuple[tuple[str, str], ...]  # ``pinguard:`` pairs: SPDX annotations
    download: str | None = None  # where it was downloaded from (a wheel's URL)
    hashes: tuple[tuple[str, str], ...] = ()  # (algorithm, hex) of the archive (a wheel's)
    files: tuple[FileHash, ...] = ()  # its files' hashes (a distribution's RECORD)
    depends_on: tuple[str, ...] = ()  # refs of installed packages it requires
    # the table's reasons, nearest cause first: "torch 2.12.1 requires nvidia-nccl-cu13==2.29.7",
    # ..., or "asked for by this step (torch==2.11.0+cu130)"
    causes: tuple[str, ...] = ()
    root: bool = True  # the image depends on it directly, whatever requires it (a
    # distribution: when it was requested; else only when no other package requires it)


#: How the records of a kind were written before they were generic records, so the
#: documents keep their bytes: Debian packages had SPDX ids ``SPDXRef-Deb-...``, their type
#: and architecture as CycloneDX properties and no SPDX annotations; the distributions of
#: Python environments ``SPDXRef-Python-...`` with their metadata directory as the ref.
_DEB_ID, _PYTHON_ID = "Deb", "Python"


def sbom_package(package: Package) -> SbomPackage:
    """A generic record as both SBOMs write it (see ``package_properties``)."""
    label = f"{package.name}-{package.version}"
    if package.kind == DEB:
        arch = package.value_of("arch")
        pairs = [("package:type", DEB)] + ([("deb:arch", arch)] if arch else [])
        deb = tuple((PROPERTY_PREFIX + k, v) for k, v in pairs)
        return SbomPackage(
            package.ref, _DEB_ID, label, package.name, package.version, package.purl, deb, ()
        )
    props = package_properties(package)
    return SbomPackage(
        package.ref, "Package", label, package.name, package.version, package.purl, props, props
    )


def python_package(
    package: Package,
    env: Environment,
    dist: Distribution,
    installed: tuple[Step, tuple[str, ...]] | None,
    platform: Platform | None,
) -> SbomPackage:
    """The record of a distribution of ``env`` as both SBOMs write it, with what ``dist``
    says and the step that installed it (``installed_by``)."""
    step, causes = installed if installed is not None else (None, ())
    url = (dist.direct_url or {}).get("url")
    props = provenance(env, dist, step, causes)
    return SbomPackage(
        ref=dist.metadata_path,
        id_kind=_PYTHON_ID,
        label=f"{dist.name}-{dist.raw_version}",
        name=dist.display_name or str(dist.name),
        version=dist.raw_version,
        purl=package.purl,
        properties=props,
        annotations=props,
        download=str(url) if isinstance(url, str) and url else None,
        hashes=_archive_hashes(dist),
        files=_file_hashes(dist),
        depends_on=_edges(env, dist, platform),
        causes=causes,
        root=dist.requested,
    )


def provenance(
    env: Environment, dist: Distribution, step: Step | None, causes: tuple[str, ...]
) -> tuple[tuple[str, str], ...]:
    """pinguard's provenance of one distribution as ``pinguard:``-prefixed name/value pairs,
    in a fixed order."""
    out: list[tuple[str, str]] = [
        ("environment:path", env.path),
        ("environment:python", env.python or "unknown"),
        ("metadata:path", dist.metadata_path),
    ]
    if step is not None:
        out.append(("step:index", str(step.index)))
        out.append(("step:command", step.created_by))
        if step.layer_digest:
            out.append(("layer:digest", step.layer_digest))
    out.extend(("cause", cause) for cause in causes)
    out.append(("installer", dist.installer or "unknown"))
    out.append(("requested", "true" if dist.requested else "false"))
    if dist.direct_url is not None:
        text = json.dumps(dist.direct_url, sort_keys=True, separators=(",", ":"))
        out.append(("direct_url", text))
    return tuple((PROPERTY_PREFIX + k, v) for k, v in out)


@dataclass(frozen=True, slots=True)
class IncompleteItem:
    """Something the audit could not read, and the package it belongs to (None: the image)."""

    what: str
    why: str
    ref: str | None

    @property
    def pair(self) -> tuple[str, str]:
        """``("pinguard:incomplete", "<what>: <why>")``, as the table words it."""
        return (PROPERTY_PREFIX + "incomplete", f"{self.what}: {self.why}")


@dataclass(frozen=True, slots=True)
class SbomFacts:
    """Everything an SBOM says about one audited image."""

    reference: str
    name: str  # the image's name without transport, tag or digest
    digest: str | None
    platform: Platform | None
    root_ref: str
    root_purl: str | None
    serial: uuid.UUID
    os_release: tuple[tuple[str, str], ...]
    roots: tuple[str, ...]  # refs the image depends on directly: requested or unrequired ones
    tool_version: str = __version__
    no_python: bool = False  # the final state has no Python environment at all
    # the policy that judged the image (report.summary.policy_pairs: ``policy:source``, one
    # ``policy:file`` = ``PATH sha256:HEX`` each), unprefixed; the documents' metadata says it
    policy: tuple[tuple[str, str], ...] = ()
    incomplete: tuple[IncompleteItem, ...] = ()  # sorted by (what, why), as the JSON report
    # every generic record: the distributions of environments (by environment, then metadata
    # directory), the Debian packages, then the others as the snapshot sorts them
    packages: tuple[SbomPackage, ...] = ()

    def incomplete_of(self, ref: str | None) -> tuple[tuple[str, str], ...]:
        """The ``pinguard:incomplete`` pairs of the package ``ref`` (None: of the image)."""
        return tuple(item.pair for item in self.incomplete if item.ref == ref)

    @property
    def image_properties(self) -> tuple[tuple[str, str], ...]:
        """The image's status as ``pinguard:``-prefixed pairs: ``python-environments=none``
        when no Python environment was found (an explicit status, not an empty list)."""
        return ((PROPERTY_PREFIX + "python-environments", "none"),) if self.no_python else ()


def package_properties(package: Package) -> tuple[tuple[str, str], ...]:
    """A generic record's facts as ``pinguard:``-prefixed pairs, in a fixed order: its kind,
    where its record lies, its owner, then its own properties as ``<kind>:<name>``."""
    out: list[tuple[str, str]] = [
        ("package:type", package.kind),
        ("package:location", package.location),
    ]
    if package.owner is not None:
        out.append(("package:owner", package.owner))
    out.extend((f"{package.kind}:{k}", v) for k, v in package.properties)
    return tuple((PROPERTY_PREFIX + k, v) for k, v in out)


def _hex(value: str) -> str | None:
    """RECORD's urlsafe-base64 digest (no padding) as lower-case hex."""
    try:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    except (binascii.Error, ValueError):
        return None
    return raw.hex() if raw else None


def _file_hashes(dist: Distribution) -> tuple[FileHash, ...]:
    out: list[FileHash] = []
    for path, digest in dist.record:
        algo, sep, value = digest.partition("=")
        if not sep or not value:
            continue
        hexed = _hex(value)
        if hexed is not None:
            out.append(FileHash(path, algo.lower(), hexed))
    return tuple(sorted(out, key=lambda f: (f.path, f.algorithm)))


def _archive_hashes(dist: Distribution) -> tuple[tuple[str, str], ...]:
    info = (dist.direct_url or {}).get("archive_info")
    if not isinstance(info, dict):
        return ()
    found: dict[str, str] = {}
    hashes = info.get("hashes")
    if isinstance(hashes, dict):
        found.update({str(k).lower(): str(v).lower() for k, v in hashes.items()})
    legacy = info.get("hash")
    if isinstance(legacy, str) and "=" in legacy:
        algo, _, value = legacy.partition("=")
        found.setdefault(algo.lower(), value.lower())
    return tuple(sorted(found.items()))


def image_purl(
    reference: str, name: str, digest: str | None, platform: Platform | None
) -> str | None:
    """``pkg:oci/<last path part>@<digest>?arch=..`` when the digest is known, with
    ``repository_url`` for registry references."""
    if not digest:
        return None
    qualifiers: dict[str, str] = {}
    if platform is not None:
        qualifiers["arch"] = platform.architecture
    if is_registry_reference(reference):
        qualifiers["repository_url"] = name
    last = name.rsplit("/", 1)[-1].lower() or "image"
    return PackageURL(type="oci", name=last, version=digest, qualifiers=qualifiers).to_string()


def installed_by(
    result: AuditResult,
) -> dict[tuple[str, NormalizedName], tuple[Step, tuple[str, ...]]]:
    """(environment, name) -> the last step that installed the final version, and the
    reasons the table gives for it (``why.reasons``), nearest cause first."""
    out: dict[tuple[str, NormalizedName], tuple[Step, tuple[str, ...]]] = {}
    for step in result.steps:
        for change in step.changes:
            key = (change.environment, change.name)
            if change.kind is ChangeKind.REMOVED:
                out.pop(key, None)
                continue
            causes = tuple(reasons(change.kind, change.name, change.causes, step.created_by))
            out[key] = (step, causes)
    return out


def _edges(env: Environment, dist: Distribution, platform: Platform | None) -> tuple[str, ...]:
    installed = env.by_name()
    markers = marker_environment(env.python, platform)
    refs: set[str] = set()
    for raw in dist.requires_dist:
        req = parse_requirement(raw)
        if req is None:
            continue
        if req.marker is not None:
            try:
                if not req.marker.evaluate({**markers, "extra": ""}):
                    continue
            except Exception:
                continue
        target = installed.get(canonicalize_name(req.name))
        if target is not None and target.metadata_path != dist.metadata_path:
            refs.add(target.metadata_path)
    return tuple(sorted(refs))


def _attribute(
    items: tuple[Incomplete, ...], dists: list[Distribution]
) -> tuple[IncompleteItem, ...]:
    """Each item with the package it names: the one whose metadata directory is the item's
    path or contains it, else the first (by ref) whose RECORD lists the path; else None."""
    by_file: dict[str, str] = {}
    for dist in sorted(dists, key=lambda d: d.metadata_path):  # the first listing a file
        for path, _ in dist.record:
            by_file.setdefault(path, dist.metadata_path)
    refs = {d.metadata_path for d in dists}
    out: list[IncompleteItem] = []
    for item in sorted(items, key=lambda i: (i.what, i.why)):
        ref = next(
            (r for r in (item.what, *_parents(item.what)) if r in refs), by_file.get(item.what)
        )
        out.append(IncompleteItem(item.what, item.why, ref))
    return tuple(out)


def _parents(path: str) -> tuple[str, ...]:
    """``/a/b/c`` -> ``("/a/b", "/a")``."""
    out: list[str] = []
    while "/" in path.strip("/"):
        path = path.rsplit("/", 1)[0]
        out.append(path)
    return tuple(out)


def sbom_facts(result: AuditResult) -> SbomFacts:
    """The SBOM facts of ``result``'s final state (see the module docstring)."""
    final: Snapshot = result.final
    steps = installed_by(result)
    platform = result.image.platform
    typed = {d.metadata_path: (env, d) for env in final.environments for d in env.distributions}
    first: list[tuple[tuple[str, str], SbomPackage]] = []  # the documents' order, as before
    debs: list[SbomPackage] = []
    others: list[SbomPackage] = []
    for package in final.packages:
        at = typed.get(package.location) if package.kind == PYTHON else None
        if at is not None:
            env, dist = at
            made = python_package(package, env, dist, steps.get((env.path, dist.name)), platform)
            first.append(((env.path, dist.metadata_path), made))
        else:
            (debs if package.kind == DEB else others).append(sbom_package(package))
    packages = (*(made for _, made in sorted(first, key=lambda x: x[0])), *debs, *others)
    required = {ref for p in packages for ref in p.depends_on}
    roots = tuple(
        sorted(
            p.ref for p in packages if p.root or p.id_kind != _PYTHON_ID or p.ref not in required
        )
    )
    name = image_name(result.image.reference)
    digest = result.image.manifest_digest
    identity = digest or f"reference:{result.image.reference}"
    return SbomFacts(
        reference=result.image.reference,
        name=name,
        digest=digest,
        platform=platform,
        root_ref=f"image:{identity}",
        root_purl=image_purl(result.image.reference, name, digest, platform),
        serial=uuid.uuid5(SERIAL_NAMESPACE, f"{identity}|{platform or ''}"),
        os_release=final.os_release,
        roots=roots,
        no_python=result.no_python,
        incomplete=_attribute(result.incomplete, [dist for _, dist in typed.values()]),
        packages=packages,
        policy=tuple(policy_pairs(result)),
    )
