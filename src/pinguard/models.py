"""The value types that flow between pinguard's layers.

Everything here is a frozen, slotted dataclass built from already-parsed values
(`packaging` names and versions), so each stage of the pipeline
(source -> layers -> catalog -> snapshot/diff -> policy -> report/emit) hands the
next one plain, immutable facts. Nothing in this module does I/O. ``Platform`` is defined
beside what is known about it (``pinguard.target``, which imports no other value: a source
resolving an image needs no more) and re-exported here with the values it travels with.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from packaging.utils import NormalizedName
from packaging.version import InvalidVersion, Version

from pinguard.target import Platform  # re-exported: the values below travel with it

__all__ = [
    "DEB",
    "PYTHON",
    "SCHEMA_ID",
    "AuditResult",
    "Cause",
    "Change",
    "ChangeKind",
    "DebPackage",
    "Distribution",
    "Environment",
    "Finding",
    "ImageInfo",
    "Incomplete",
    "LayerRead",
    "NativeLibrary",
    "Package",
    "Platform",
    "PolicySource",
    "Prediction",
    "Resolution",
    "Severity",
    "Snapshot",
    "Step",
    "Unmet",
    "debs_of",
    "package_order",
    "parse_version",
]

SCHEMA_ID = "pinguard/audit/v1"
DEB = "deb"  # the generic record kind of a Debian package (the dpkg analyzer's records)
PYTHON = "python"  # the generic record kind of a Python distribution (the Python analyzer's)


class ChangeKind(str, enum.Enum):
    """What one build step did to one distribution in one environment."""

    ADDED = "added"
    REMOVED = "removed"
    UPGRADED = "upgraded"
    DOWNGRADED = "downgraded"
    REINSTALLED = "reinstalled"
    # a version change where either side is not PEP 440 (``6.7.8.9-10.el7``): its order is
    # unknown, so it is never called an upgrade or a downgrade
    CHANGED = "changed"


class Severity(str, enum.Enum):
    """How much a finding matters; ordered so that ERROR > WARNING > INFO."""

    INFO = "info"
    WARNING = "warning"
    ERROR = "error"

    @property
    def rank(self) -> int:
        return {"info": 0, "warning": 1, "error": 2}[self.value]


@lru_cache(maxsize=4096)
def parse_version(raw: str) -> Version | None:
    """Return the PEP 440 version for ``raw``, or None when it is not PEP 440 (parsed once
    per distinct string: ``Distribution.version`` is read in every diff, rule and sort)."""
    try:
        return Version(raw)
    except InvalidVersion:
        return None


@dataclass(frozen=True, slots=True)
class LayerRead:
    """How one layer was read when a lazy read was asked for (``--layer-read lazy``).

    ``mode`` "lazy": from its zstd:chunked table of contents and the chunks the analyzers
    needed, each verified against the TOC, the TOC against the manifest's checksum; the
    layer's DiffID is not proven. "full": streamed whole and checked against its DiffID,
    ``reason`` saying why it was not read lazily."""

    layer: str
    mode: str  # "lazy" | "full"
    reason: str = ""
    fetched: int = 0  # compressed bytes read (lazy)
    blob_size: int | None = None
    chunks_verified: int = 0
    files_whole: int = 0
    files_in_parts: int = 0
    digests_from_toc: int = 0


@dataclass(frozen=True, slots=True)
class Incomplete:
    """Something pinguard could not read; a gate never passes while one exists.

    ``final_only``: a hole in the image as it ships (metadata no environment reaches), so the
    audit takes it from the final state rather than from the step that made it; the analyzer
    that finds it says so, and the pipeline needs to know no analyzer to honour it."""

    what: str
    why: str
    final_only: bool = field(default=False, compare=False)


@dataclass(frozen=True, slots=True)
class Distribution:
    """One installed Python distribution (a dist-info or egg-info directory)."""

    name: NormalizedName
    raw_version: str
    metadata_path: str  # absolute path of the .dist-info/.egg-info inside the image
    requires_dist: tuple[str, ...] = ()
    requires_python: str | None = None
    installer: str | None = None
    requested: bool = False
    direct_url: dict[str, Any] | None = None
    # RECORD: absolute path -> "algo=hash" ("" when RECORD gives no hash)
    record: tuple[tuple[str, str], ...] = ()
    # A digest over the metadata files, so a reinstall of the same version shows up.
    fingerprint: str = ""
    display_name: str = ""

    @property
    def version(self) -> Version | None:
        return parse_version(self.raw_version)

    @property
    def pep440(self) -> bool:
        return self.version is not None


@dataclass(frozen=True, slots=True)
class Environment:
    """A Python environment: one site-packages or dist-packages directory."""

    path: str  # as a Python sees it (a symlink's path when one leads to the directory)
    python: str | None  # "3.11" or "3.11.2" when known
    distributions: tuple[Distribution, ...] = ()
    real_path: str | None = None  # the directory the files are in, when not ``path``

    def by_name(self) -> dict[NormalizedName, Distribution]:
        """One distribution per name: the first by metadata path, as importlib finds it."""
        out: dict[NormalizedName, Distribution] = {}
        for d in sorted(self.distributions, key=lambda d: d.metadata_path):
            out.setdefault(d.name, d)
        return out


# Debian's and Ubuntu's python3 (their site.py patch) import from, in this order:
# /usr/local/lib/python3.X/dist-packages (pip as root), /usr/lib/python3/dist-packages (apt),
# /usr/lib/python3.X/dist-packages (legacy); each only when it exists.
_DEBIAN_LOCAL = re.compile(r"^/usr/local/lib/python(3\.\d+)/dist-packages$")
_DEBIAN_LEGACY = re.compile(r"^/usr/lib/python(3\.\d+)/dist-packages$")
_DEBIAN_SHARED = "/usr/lib/python3/dist-packages"


def _debian_python(env: Environment, envs: Sequence[Environment]) -> str | None:
    """The X.Y of the Debian system Python whose import path holds ``env``, or None."""
    found = _DEBIAN_LOCAL.match(env.path) or _DEBIAN_LEGACY.match(env.path)
    if found:
        return found.group(1)
    if env.path != _DEBIAN_SHARED:
        return None
    if env.python:  # "3.11" or "3.11.2"
        return ".".join(env.python.split(".")[:2])
    versions = {
        m.group(1)
        for e in envs
        if (m := _DEBIAN_LOCAL.match(e.path) or _DEBIAN_LEGACY.match(e.path))
    }
    return versions.pop() if len(versions) == 1 else None


def interpreter_path(env: Environment, envs: Sequence[Environment]) -> tuple[Environment, ...]:
    """The environments of ``envs`` that the Python owning ``env`` imports from, in its
    ``sys.path`` order (``env`` included): Debian's three dist-packages directories for its
    system python3, ``env`` alone for anything else (a venv, python.org's site-packages).
    A requirement of a distribution in ``/usr/local/lib/python3.11/dist-packages`` is met by
    apt's ``/usr/lib/python3/dist-packages`` too, as pip and ``pip check`` see it."""
    version = _debian_python(env, envs)
    if version is None:
        return (env,)
    by_path = {e.path: e for e in envs}
    by_path[env.path] = env
    order = (
        f"/usr/local/lib/python{version}/dist-packages",
        _DEBIAN_SHARED,
        f"/usr/lib/python{version}/dist-packages",
    )
    return tuple(by_path[p] for p in order if p in by_path)


@dataclass(frozen=True, slots=True)
class DebPackage:
    """One installed Debian package from /var/lib/dpkg/status: the typed view
    (``Snapshot.debs``) of a generic record of kind ``deb``, for the code that asks for
    ``libc6``'s version or an architecture."""

    name: str
    version: str
    architecture: str


@dataclass(frozen=True, slots=True)
class Package:
    """One installed package of any kind, as every consumer reads it: the generic record.

    An analyzer whose facts need no typed fields of their own (conda, ...) contributes these;
    the JSON report, the SBOMs, the HTML report and the policy engine read them without
    knowing the analyzer. ``kind`` names the ecosystem (the analyzer's ``name``), ``location``
    is the file its record was read from, ``owner`` what it belongs to (an environment or
    prefix; None: the image), ``purl`` its package URL when the kind has a purl type, and
    ``properties`` every other fact as sorted ``(name, value)`` pairs. ``key`` tells a record
    from the others of its kind when its location does not (one file holding many records:
    a dpkg status paragraph is ``name:architecture``).
    """

    kind: str
    name: str
    version: str
    location: str
    owner: str | None = None
    properties: tuple[tuple[str, str], ...] = ()
    purl: str | None = None
    key: str = ""

    @property
    def ref(self) -> str:
        """Unique within a state: the kind and the record's key, or else its path."""
        return f"{self.kind}:{self.key or self.location}"

    def value_of(self, key: str) -> str | None:
        """One property's value, None when absent."""
        return dict(self.properties).get(key)


def package_order(package: Package) -> tuple[str, str, str, str, str]:
    """The order of ``Snapshot.packages``: kind, owner, name, location, key."""
    return (package.kind, package.owner or "", package.name, package.location, package.key)


def debs_of(packages: tuple[Package, ...] | list[Package]) -> tuple[DebPackage, ...]:
    """The records of kind ``deb`` among ``packages`` as ``DebPackage`` views, in order."""
    return tuple(
        DebPackage(p.name, p.version, p.value_of("arch") or "") for p in packages if p.kind == DEB
    )


@dataclass(frozen=True, slots=True)
class NativeLibrary:
    """One ELF shared object in a state: its dynamic facts, banner version and owner.

    ``owner_kind`` is ``"wheel"`` (the distribution whose RECORD lists the path; then
    ``owner_environment`` is its environment and ``record_digest`` the RECORD's hash of the
    file), ``"deb"`` (the package whose ``/var/lib/dpkg/info/*.list`` lists it) or None.
    ``problem`` says what could not be read of it.
    """

    path: str
    digest: str  # "sha256=<urlsafe b64>", as in RECORD
    size: int
    layer: str  # digest of the layer that wrote it
    soname: str | None = None
    needed: tuple[str, ...] = ()
    rpath: tuple[str, ...] = ()
    runpath: tuple[str, ...] = ()
    library: str | None = None  # which banner matched ("nccl")
    version: str | None = None  # the version its banner states
    owner_kind: str | None = None
    owner: str | None = None
    owner_version: str | None = None
    owner_environment: str | None = None
    record_digest: str | None = None
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class Resolution:
    """Where the loader finds one ``DT_NEEDED`` of one object, and by which search path.

    ``path`` is the name the loader opens (as ``ld.so --list`` prints it), ``real`` the
    regular file it is after symlinks; both None when nothing is found. ``via`` is
    ``DT_RPATH``, ``LD_LIBRARY_PATH``, ``DT_RUNPATH``, ``ld.so.conf``, ``ld.so.conf (soname)``,
    ``default``, ``path`` (a NEEDED with a slash) or ``preload``; ``directory`` is the entry
    that matched (for a preload, the preloaded file's directory).
    """

    consumer: str
    needed: str
    path: str | None
    real: str | None
    via: str
    directory: str = ""
    # "search": the search order alone predicts it (the library a process gets unless
    # something loaded that soname first); "preload": the package that owns the consumer
    # (or one it requires) loads this file by path on import, and glibc reuses it
    basis: str = "search"
    preloaded_by: str = ""  # the package and where its code says so (basis "preload")
    search_real: str | None = None  # what the search order alone would give (basis "preload")
    search_via: str = ""  # and the rule by which it would find it (``via``'s values)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What was installed after one step."""

    environments: tuple[Environment, ...] = ()
    incomplete: tuple[Incomplete, ...] = ()
    native: tuple[NativeLibrary, ...] = ()  # sorted by path
    resolutions: tuple[Resolution, ...] = ()  # sorted by consumer, then NEEDED order
    os_release: tuple[tuple[str, str], ...] = ()  # os-release(5) KEY=value pairs, sorted
    # every package of every kind as a generic record, in ``package_order``: what the SBOMs
    # and the JSON report loop over
    packages: tuple[Package, ...] = ()

    @property
    def debs(self) -> tuple[DebPackage, ...]:
        """The Debian packages (records of kind ``deb``) as (name, version, architecture)."""
        return debs_of(self.packages)

    def other_packages(self) -> tuple[Package, ...]:
        """The records no typed view lists: neither a Debian package (``debs``; the JSON's
        ``debian_packages``) nor a distribution of one of ``environments`` (listed there with
        what Python's rules need). What the table counts, the HTML lists as "Other packages",
        the JSON under ``packages`` and the policy's ``[[forbidden]]`` judges as records."""
        typed = {d.metadata_path for env in self.environments for d in env.distributions}
        return tuple(
            p
            for p in self.packages
            if p.kind != DEB and not (p.kind == PYTHON and p.location in typed)
        )

    def os_field(self, key: str) -> str | None:
        """One os-release value (``ID``, ``VERSION_ID``, ...), None when absent."""
        return dict(self.os_release).get(key)

    def environment(self, path: str) -> Environment | None:
        for env in self.environments:
            if env.path == path:
                return env
        return None

    def packages_of(self, kind: str) -> tuple[Package, ...]:
        """The generic records of one kind (``"conda"``, ...): a typed view for a rule."""
        return tuple(p for p in self.packages if p.kind == kind)


@dataclass(frozen=True, slots=True)
class Cause:
    """An installed requirement that admits the new version and excludes the old."""

    package: NormalizedName
    version: str
    requirement: str


@dataclass(frozen=True, slots=True)
class Change:
    """One distribution that one step changed in one environment."""

    environment: str
    name: NormalizedName
    kind: ChangeKind
    before: str | None
    after: str | None
    causes: tuple[Cause, ...] = ()


@dataclass(frozen=True, slots=True)
class Unmet:
    """A requirement not met after a step (what ``pip check`` would say)."""

    environment: str
    package: NormalizedName
    version: str
    requirement: str
    installed: str | None  # the installed version of the required name, None if missing


@dataclass(frozen=True, slots=True)
class Prediction:
    """How ``pinguard predict`` made a step it did not build (``Step.prediction``).

    ``status`` is ``predicted`` (an install the resolver answered for, or an instruction
    that changes no environment) or ``unpredicted`` (``reason`` says what could not be
    modelled; the run is then incomplete); ``resolver`` names the resolver and what it
    modelled (``uv 0.9.2 pip install --dry-run, modelling pip``), empty when none ran;
    ``line`` is the instruction's first line in ``dockerfile``; ``notes`` say where the real
    installer could differ from the resolver that answered."""

    status: str  # "predicted" | "unpredicted"
    dockerfile: str
    line: int
    resolver: str = ""
    reason: str = ""
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Step:
    """One history entry of the image; ``layer_digest`` is None for empty layers."""

    index: int  # 1-based position in the image history
    created_by: str
    layer_digest: str | None
    changes: tuple[Change, ...] = ()
    unmet: tuple[Unmet, ...] = ()
    comment: str = ""
    diff_id: str | None = None  # digest of the uncompressed layer, when the config gives it
    prediction: Prediction | None = None  # set by ``pinguard predict``: nothing was built


@dataclass(frozen=True, slots=True)
class Finding:
    """A policy's judgement on one fact."""

    rule: str
    severity: Severity
    message: str
    package: str | None = None
    environment: str | None = None
    step: int | None = None
    versions: tuple[str, ...] = ()
    policy_file: str | None = None
    policy_line: int | None = None
    waived: bool = False
    waiver_reason: str | None = None


@dataclass(frozen=True, slots=True)
class PolicySource:
    """Which policy judged an audit: how it was chosen (``default``: the built-in one,
    ``discovered``: a ``pinguard.toml`` or ``[tool.pinguard]`` found from the working
    directory, ``given``: ``--policy`` files, ``none``: ``--policy none``) and the files it
    was read from (those ``extend`` names included) as ``(path, "sha256:<hex>")`` pairs."""

    kind: str
    files: tuple[tuple[str, str], ...] = ()

    def describe(self) -> str:
        """One line for a report header: ``pinguard.toml (discovered, sha256:1234abcd5678)``."""
        if self.kind == "default":
            return "built-in default"
        if self.kind == "none":
            return "none (--policy none: an inventory)"
        return ", ".join(f"{path} ({self.kind}, {digest[:19]})" for path, digest in self.files)


@dataclass(frozen=True, slots=True)
class ImageInfo:
    """Which image was audited."""

    reference: str
    manifest_digest: str | None
    platform: Platform | None
    transport: str = ""


@dataclass(frozen=True, slots=True)
class AuditResult:
    """Everything an audit found: the object every report renders."""

    image: ImageInfo
    steps: tuple[Step, ...]
    final: Snapshot
    snapshots: tuple[Snapshot, ...] = ()  # state after each step, parallel to ``steps``
    findings: tuple[Finding, ...] = ()
    incomplete: tuple[Incomplete, ...] = ()
    notes: tuple[str, ...] = field(default=())
    # With --verify-records: actual digests of files below each environment, final state,
    # as (absolute path, "sha256=<urlsafe b64>") pairs.
    file_digests: tuple[tuple[str, str], ...] = ()
    # the policy that judged the findings (None: not judged by any policy)
    policy: PolicySource | None = None
    # with --layer-read lazy: how each layer was read (empty for a full read)
    layer_reads: tuple[LayerRead, ...] = ()

    @property
    def no_python(self) -> bool:
        """True when the final state has no Python environment at all (a plain Debian base,
        a distroless image, or site-packages pinguard could not see)."""
        return not self.final.environments

    def no_python_message(self) -> str:
        """The one sentence every format shows for ``no_python``."""
        return f"no Python environment found in {self.image.reference}"

    @property
    def unproven(self) -> tuple[LayerRead, ...]:
        """The layers read lazily (``--layer-read lazy``): what the audit saw of them rests on
        their zstd:chunked TOC's word, since only the whole tar proves a DiffID."""
        return tuple(r for r in self.layer_reads if r.mode == "lazy")

    def verdict(
        self,
        fail_on: Severity | None,
        allow_incomplete: bool = False,
        allow_no_python: bool = False,
        allow_unproven: bool = False,
    ) -> str:
        """``pass`` or ``fail`` for findings at or above ``fail_on`` (None: never).

        Something incomplete fails unless ``allow_incomplete``; an image without any Python
        environment fails unless ``allow_no_python`` (for a gate on Python drift it is most
        likely the wrong image or a missed environment). A lazy read may fail a verdict but
        never pass one: what would pass on unproven layers fails, or with ``allow_unproven``
        is ``unproven``, a verdict no consumer takes for a pass."""
        if self.incomplete and not allow_incomplete:
            return "fail"
        if self.no_python and not allow_no_python:
            return "fail"
        if fail_on is not None:
            for f in self.findings:
                if not f.waived and f.severity.rank >= fail_on.rank:
                    return "fail"
        if self.unproven:
            return "unproven" if allow_unproven else "fail"
        return "pass"
