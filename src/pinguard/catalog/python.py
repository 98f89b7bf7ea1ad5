"""Python distributions: which paths hold their metadata, and parsing it into values.

Owns the dist-info and egg-info formats (METADATA / PKG-INFO through
``packaging.metadata``, RECORD, INSTALLER, REQUESTED, direct_url.json, requires.txt) and
the rules that say where a Python environment is and which Python it belongs to (its path
or ``pyvenv.cfg``): metadata is kept wherever it lies, and ``place`` puts each metadata
directory in a ``site-packages``/``dist-packages`` directory, or in the one a symlink so
named resolves to (``/usr/local/lib/python3.11/site-packages -> /opt/pkgs``: the environment
is the link's path, its ``real_path`` the directory), or outside every environment (an
incomplete, unless it is a vendored copy, an installer cache or a source tree's egg-info).
A dist-info kept in a directory named ``dist-info`` outside every environment is the record
of a wheel whose files were moved elsewhere: the CUDA toolkit assembled from NVIDIA's
``nvidia-*`` wheels keeps ``/usr/local/cuda-13.0/dist-info/nvidia_cuda_runtime-13.0.96.dist-info``
while ``libcudart.so.13`` lies in ``/usr/local/cuda-13.0/lib``. No Python imports from there,
yet the metadata reads, so it is catalogued as a generic ``Package`` (kind ``python``, owner
the tree above ``dist-info``, a ``pkg:pypi`` purl), not reported as incomplete. Every
distribution of an environment is contributed twice over: as the typed ``Distribution`` of
its ``Environment`` (what the diff, the audit and Python's rules read) and as its generic
``Package`` (kind ``python``, owner the environment, the same purl; what the SBOMs and the
JSON report loop over); ``with_environments`` keeps the two together when a workflow
replaces a snapshot's environments.
Bad metadata becomes an ``Incomplete`` naming the path, never a silent drop: metadata
that is not UTF-8 (decoded with replacement), a kept header above its cap, a dist-info whose
directory name and ``Name`` disagree, an egg-info without a ``Version`` (listed with an
unknown version), and pip's ``~``-prefixed leftovers of an interrupted install (never counted
as installed). Suffixes match in any case; the interpreter's own ``Python-X.Y.egg-info``
(``Name: Python``, as Debian ships it) is not a distribution. Which environments one
interpreter imports from together (Debian's python3 reads three dist-packages directories)
is ``pinguard.models.interpreter_path``: the audit's diff and the prediction read it too.
"""

from __future__ import annotations

import bisect
import csv
import dataclasses
import hashlib
import io
import json
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from packaging.utils import canonicalize_name

from pinguard.catalog.interface import (
    Analyzer,
    AnalyzerOptions,
    AnalyzerSession,
    SnapshotParts,
    StateView,
)
from pinguard.catalog.purl import package_url
from pinguard.layers.links import resolve
from pinguard.layers.tar import CAPTURE, HASH, LINK
from pinguard.models import (
    PYTHON,
    Distribution,
    Environment,
    Incomplete,
    Package,
    Snapshot,
    package_order,
)
from pinguard.target import (
    cached_requirement,
    remember_requirements,
    requirement_parts,
)

if TYPE_CHECKING:
    from pinguard.target import RequirementParts

# bump when parsing changes (the layer cache key also covers this source); 3: a generic
# Package for every distribution of an environment too
VERSION = "3"

ENV_DIRS = ("site-packages", "dist-packages")
# A directory of this name outside every environment holds the dist-info records of wheels
# whose files were installed elsewhere (the CUDA toolkit built from nvidia-* wheels).
RECORDS_DIR = "dist-info"
KIND = PYTHON  # the generic Package kind of every distribution (this analyzer's name)
DIST_INFO_FILES = frozenset({"METADATA", "RECORD", "INSTALLER", "REQUESTED", "direct_url.json"})
EGG_INFO_FILES = frozenset({"PKG-INFO", "requires.txt", "installed-files.txt"})
# Caps on the header values the catalog keeps (characters); a longer value is incomplete.
MAX_NAME = 256
MAX_VERSION = 256
MAX_REQUIREMENT = 4096
_INTERPRETER_EGG = re.compile(r"^python-\d+(\.\d+)*(-py\d+(\.\d+)*)?\.egg-info$", re.IGNORECASE)
_PY_LIB = re.compile(r"/lib/python(3\.\d+)/")
_PY_MARKER = re.compile(r"^(.*)/lib/python(3\.\d+)/os\.py$")
# Files left out of the reinstall fingerprint: those a reinstall of identical bytes
# rewrites differently (bytecode embeds mtimes; installer bookkeeping).
_FINGERPRINT_SKIP = (".pyc", "/RECORD", "/INSTALLER", "/REQUESTED", "/direct_url.json")


def record_fingerprint(record: Sequence[tuple[str, str]]) -> str:
    """A digest of sorted RECORD rows, bytecode and bookkeeping left out."""
    kept = [row for row in record if not row[0].endswith(_FINGERPRINT_SKIP)]
    text = "\n".join(map(",".join, kept))
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def _parse_record(env: str, data: bytes) -> list[tuple[str, str]]:
    """RECORD rows as sorted (absolute path, hash); paths are relative to ``env``.

    This runs for every installed file, so it is kept cheap: a RECORD without quotes (the
    usual case: no path holds a comma) is split on commas rather than fed to ``csv``, and
    plain relative paths are joined by concatenation; only rows with ``.``/``..``
    components or absolute paths go through ``normpath``.
    """
    text = data.decode("utf-8")
    rows: Iterable[list[str]] = (
        (line.split(",", 2) for line in text.splitlines())
        if '"' not in text
        else csv.reader(io.StringIO(text))
    )
    prefix = env.rstrip("/") + "/"
    normpath, join = posixpath.normpath, posixpath.join
    out: list[tuple[str, str]] = []
    append = out.append
    for row in rows:
        rel = row[0] if row else ""
        if not rel:
            continue
        if "./" in rel or "//" in rel or rel[0] == "/" or rel[-1] == ".":
            path = normpath(join(env, rel))
        else:
            path = prefix + rel
        append((path, row[1] if len(row) > 1 else ""))
    out.sort()
    return out


def metadata_dir(path: str) -> str | None:
    """'/…/x-1.dist-info/METADATA' -> '/…/x-1.dist-info', wherever it is (``place`` says
    which environment, if any, reaches it)."""
    parent, base = posixpath.split(path)
    pdir = posixpath.basename(parent).lower()
    if pdir.endswith(".dist-info") and base in DIST_INFO_FILES:
        return parent
    if pdir.endswith(".egg-info") and base in EGG_INFO_FILES:
        return parent
    if base.lower().endswith(".egg-info"):
        return path  # a single-file egg-info (PKG-INFO format)
    return None


def is_env_dir(path: str) -> bool:
    """True for a ``site-packages`` or ``dist-packages`` directory path."""
    return path[path.rfind("/") + 1 :] in ENV_DIRS


_UV_ARCHIVE = re.compile(r"^archive-v\d+$")


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a metadata directory (by its real path) belongs in a state.

    ``env`` is the environment as a Python sees it: the real directory when it is itself a
    ``site-packages``/``dist-packages`` path, else the first (sorted) such symlink that
    resolves to it; ``real_env`` is the directory the files are in. ``env`` None: no
    environment reaches it, and ``why`` says whether that is reported (``outside``) or
    expected (``vendored``, ``cache``, ``egg-info``)."""

    env: str | None
    real_env: str
    why: str = ""

    def seen(self, meta: str) -> str:
        """The metadata directory's path under ``env``."""
        if self.env is None or self.env == self.real_env:
            return meta
        return self.env + meta[len(self.real_env) :]


def env_links(links: Mapping[str, str]) -> dict[str, str]:
    """{real directory: the first symlink named site-packages/dist-packages reaching it}."""
    out: dict[str, str] = {}
    for path in sorted(p for p in links if is_env_dir(p)):
        real = resolve(path, links)
        if real is not None and real != path and not is_env_dir(real):
            out.setdefault(real, path)
    return out


def place(meta: str, aliases: Mapping[str, str]) -> Placement:
    """Which environment reaches the metadata directory ``meta`` (a real path).

    ``aliases`` is ``env_links`` of the state. A directory inside an environment but not
    directly in it (a package's vendored ``_vendor/x.dist-info``), an installer's cache
    (a ``.cache`` directory, uv's ``archive-vN`` entries) and an egg-info no environment
    reaches (setuptools writes one into every source tree it builds) are expected; a
    dist-info in a directory named ``dist-info`` is a ``record`` of a wheel whose files lie
    elsewhere (catalogued as a generic package); any other dist-info no environment reaches
    is ``outside``, reported as incomplete.
    """
    real_env = posixpath.dirname(meta)
    if is_env_dir(real_env):
        return Placement(real_env, real_env)
    alias = aliases.get(real_env)
    if alias is not None:
        return Placement(alias, real_env)
    parts = real_env.split("/")
    for i in range(len(parts) - 1, 1, -1):
        above = "/".join(parts[:i])
        if is_env_dir(above) or above in aliases:
            return Placement(None, real_env, "vendored")
    if ".cache" in parts or _UV_ARCHIVE.match(parts[-2] if len(parts) > 1 else ""):
        return Placement(None, real_env, "cache")
    if _is_egg(meta):
        return Placement(None, real_env, "egg-info")
    if parts[-1] == RECORDS_DIR:
        return Placement(None, real_env, "record")
    return Placement(None, real_env, "outside")


OUTSIDE = (
    "distribution metadata in a directory no Python environment reaches (neither a "
    "site-packages/dist-packages path nor a symlink named so resolves to it); not audited"
)


def distribution_package(dist: Distribution, owner: str) -> Package:
    """A distribution as a generic ``Package`` owned by ``owner`` (its environment, or for a
    record the tree it describes): its installer and the wheel's URL from ``direct_url.json``
    as properties, a ``pkg:pypi`` purl."""
    properties: list[tuple[str, str]] = []
    if dist.installer:
        properties.append(("installer", dist.installer))
    url = (dist.direct_url or {}).get("url")
    if isinstance(url, str) and url:
        properties.append(("url", url))
    return Package(
        kind=KIND,
        name=str(dist.name),
        version=dist.raw_version,
        location=dist.metadata_path,
        owner=owner,
        properties=tuple(properties),
        purl=package_url("pypi", str(dist.name), dist.raw_version),
    )


def record_owner(dist: Distribution) -> str:
    """The owner of a dist-info under a ``dist-info`` directory: the tree it describes (the
    directory above ``dist-info``)."""
    return posixpath.dirname(posixpath.dirname(dist.metadata_path)) or "/"


def environment_packages(environments: Iterable[Environment]) -> list[Package]:
    """The generic records of the distributions of ``environments``."""
    return [distribution_package(d, env.path) for env in environments for d in env.distributions]


def with_environments(snapshot: Snapshot, environments: Iterable[Environment]) -> Snapshot:
    """``snapshot`` with ``environments`` (sorted by path) in place of its own, and the
    generic records of their distributions in place of those of the old ones."""
    envs = tuple(sorted(environments, key=lambda e: e.path))
    old = {d.metadata_path for env in snapshot.environments for d in env.distributions}
    kept = [p for p in snapshot.packages if p.kind != KIND or p.location not in old]
    packages = sorted([*kept, *environment_packages(envs)], key=package_order)
    return dataclasses.replace(snapshot, environments=envs, packages=tuple(packages))


def _is_egg(meta_dir: str) -> bool:
    return meta_dir.lower().endswith(".egg-info")


def _dir_name(meta_dir: str) -> str:
    """The project name in a dist-info directory's name ('foo_bar-1.0.dist-info': 'foo_bar')."""
    base = posixpath.basename(meta_dir)
    return base[: -len(".dist-info")].partition("-")[0]


def _decode(meta_dir: str, metadata: bytes, problems: list[Incomplete]) -> str:
    """METADATA as text: UTF-8, else decoded with replacement characters and flagged."""
    try:
        return metadata.decode("utf-8")
    except UnicodeDecodeError as exc:
        problems.append(
            Incomplete(
                meta_dir,
                f"metadata is not UTF-8 (byte {metadata[exc.start : exc.start + 1]!r} at "
                f"offset {exc.start}); decoded with replacement characters",
            )
        )
        return metadata.decode("utf-8", "replace")


def _capped(meta_dir: str, field: str, value: str, cap: int, problems: list[Incomplete]) -> bool:
    """False (and flagged) when ``value`` is longer than ``cap`` characters."""
    if len(value) <= cap:
        return True
    problems.append(
        Incomplete(meta_dir, f"{field} header is {len(value)} characters, above the cap of {cap}")
    )
    return False


def is_python_marker(path: str) -> bool:
    return path.endswith("/os.py") and _PY_MARKER.match(path) is not None


def wants(path: str) -> bool:
    """True for every file the Python analyzer reads: metadata wherever it is (a symlink
    may make any directory an environment, in this layer or a later one)."""
    base = posixpath.basename(path)
    if base == "pyvenv.cfg":
        return True
    if is_python_marker(path):
        return True
    return metadata_dir(path) is not None


def python_of(
    env: str,
    files: Mapping[str, bytes],
    markers: Mapping[str, str],
    links: Mapping[str, str] | None = None,
) -> str | None:
    """The Python version of an environment: pyvenv.cfg, else its path, else the system's."""
    if is_env_dir(env):
        lib = posixpath.dirname(env)  # …/lib/python3.11 or …/lib/python3
        root = posixpath.dirname(posixpath.dirname(lib))
        cfg_path = posixpath.join(root, "pyvenv.cfg")
        cfg = files.get(resolve(cfg_path, links or {}) or cfg_path)
        if cfg is not None:
            for line in cfg.decode("utf-8", "replace").splitlines():
                key, _, value = line.partition("=")
                if key.strip() in {"version", "version_info"} and value.strip():
                    return value.strip()
        match = _PY_LIB.search(env + "/")
        if match:
            return match.group(1)
        prefix = posixpath.dirname(posixpath.dirname(lib))
        candidates = [v for p, v in markers.items() if p == prefix] or list(markers.values())
        if candidates:
            return max(candidates, key=lambda v: tuple(int(x) for x in v.split(".")))
    return None


def python_markers(paths: Mapping[str, bytes]) -> dict[str, str]:
    """{install prefix: "3.X"} for every '<prefix>/lib/python3.X/os.py' present."""
    out: dict[str, str] = {}
    for path in paths:
        if path.endswith("/os.py"):
            m = _PY_MARKER.match(path)
            if m:
                prefix = m.group(1) or "/"
                if prefix not in out or _vkey(m.group(2)) > _vkey(out[prefix]):
                    out[prefix] = m.group(2)
    return out


def _vkey(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


@lru_cache(maxsize=65536)
def _requires_txt(text: str) -> list[str]:
    """setuptools' requires.txt sections -> Requires-Dist strings with markers."""
    out: list[str] = []
    section_marker = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            extra, _, marker = line[1:-1].partition(":")
            parts = []
            if extra:
                parts.append(f'extra == "{extra}"')
            if marker:
                parts.append(f"({marker})")
            section_marker = " and ".join(parts)
            continue
        out.append(f"{line}; {section_marker}" if section_marker else line)
    return out


#: A metadata directory parsed where its layer was read: the files it was parsed from (each
#: candidate path with the bytes the layer captured there, or None), what
#: ``parse_distribution`` made of them, and its Requires-Dist lines parsed (text -> the
#: requirement's parts, None when it is not one).
PreparedDistribution = tuple[
    tuple[tuple[str, bytes | None], ...],
    Distribution | None,
    tuple[Incomplete, ...],
    dict[str, "RequirementParts | None"],
]


def _candidates(meta: str) -> tuple[str, ...]:
    """Every path ``parse_distribution`` may read for the metadata directory ``meta``."""
    return (meta, *(f"{meta}/{name}" for name in _META_NAMES))


def prepare_distributions(files: Mapping[str, bytes]) -> dict[str, object]:
    """Every metadata directory among one layer's captured ``files``, parsed as
    ``parse_distribution`` parses it where it lies (a ``PreparedDistribution`` by directory):
    the worker process that read the layer does this, so replaying the states parses no
    METADATA or RECORD of it again. The parse holds for a state whose files at the candidate
    paths are these very bytes objects (``PythonSession`` checks)."""
    metas = {meta for path in files if (meta := metadata_dir(path)) is not None}
    out: dict[str, object] = {}
    for meta in metas:
        dist, problems = parse_distribution(meta, files)
        sources = tuple((path, files.get(path)) for path in _candidates(meta))
        # its Requires-Dist lines as parsed here, for the diffs (``remember_requirements``)
        reqs = (
            {t: requirement_parts(cached_requirement(t)) for t in dist.requires_dist}
            if dist is not None
            else {}
        )
        out[meta] = (sources, dist, tuple(problems), reqs)
    return out


def parse_distribution(
    meta_dir: str, files: Mapping[str, bytes]
) -> tuple[Distribution | None, list[Incomplete]]:
    """Build one Distribution from the metadata files of ``meta_dir``."""
    problems: list[Incomplete] = []
    egg = _is_egg(meta_dir)
    if posixpath.basename(meta_dir).startswith("~"):
        return None, [
            Incomplete(
                meta_dir,
                "leftover of an interrupted pip install (a '~'-prefixed directory pip "
                "ignores); not counted as installed",
            )
        ]
    if egg and meta_dir in files:  # single-file egg-info
        metadata = files[meta_dir]
    else:
        metadata = files.get(f"{meta_dir}/{'PKG-INFO' if egg else 'METADATA'}")  # type: ignore[assignment]
    if metadata is None:
        return None, [Incomplete(meta_dir, "no METADATA/PKG-INFO file")]
    text = _decode(meta_dir, metadata, problems)
    from packaging.metadata import parse_email  # with email.*: only when METADATA is read

    try:
        raw, unparsed = parse_email(text)
    except Exception as exc:
        return None, [*problems, Incomplete(meta_dir, f"unreadable metadata: {exc}")]
    name, version = raw.get("name"), raw.get("version")
    if name and not _capped(meta_dir, "Name", name, MAX_NAME, problems):
        return None, problems
    if version and not _capped(meta_dir, "Version", version, MAX_VERSION, problems):
        version = None
    if (
        egg
        and name
        and canonicalize_name(name) == "python"
        and _INTERPRETER_EGG.match(posixpath.basename(meta_dir))
    ):
        return None, []  # the interpreter's own egg-info (Debian's Python-3.11.egg-info)
    if not name:
        return None, [*problems, Incomplete(meta_dir, "metadata has no Name")]
    if not version:
        if not egg:
            return None, [*problems, Incomplete(meta_dir, "metadata has no Version")]
        problems.append(Incomplete(meta_dir, "egg-info has no Version; listed as unknown"))
        version = ""
    if not egg and canonicalize_name(_dir_name(meta_dir)) != canonicalize_name(name):
        problems.append(
            Incomplete(
                meta_dir,
                f"directory name says {_dir_name(meta_dir)!r} but METADATA Name is {name!r}",
            )
        )
    requires = []
    for req in raw.get("requires_dist", []):
        if _capped(meta_dir, "Requires-Dist", req, MAX_REQUIREMENT, problems):
            requires.append(req)
    if egg and f"{meta_dir}/requires.txt" in files:
        requires += _requires_txt(files[f"{meta_dir}/requires.txt"].decode("utf-8", "replace"))
    for req in requires:
        if cached_requirement(req) is None:
            problems.append(Incomplete(meta_dir, f"invalid Requires-Dist {req!r}"))
    env = posixpath.dirname(meta_dir)
    record: list[tuple[str, str]] = []
    record_bytes = files.get(f"{meta_dir}/RECORD")
    if record_bytes is not None:
        try:
            record = _parse_record(env, record_bytes)
        except (UnicodeDecodeError, csv.Error) as exc:
            problems.append(Incomplete(f"{meta_dir}/RECORD", f"unreadable RECORD: {exc}"))
    if record:
        fingerprint = record_fingerprint(record)
    else:
        fingerprint = hashlib.sha256(metadata).hexdigest()[:16]
    direct_url = None
    du = files.get(f"{meta_dir}/direct_url.json")
    if du is not None:
        try:
            loaded = json.loads(du)
            direct_url = loaded if isinstance(loaded, dict) else None
        except ValueError:
            problems.append(Incomplete(f"{meta_dir}/direct_url.json", "not valid JSON"))
    installer = files.get(f"{meta_dir}/INSTALLER")
    for key in unparsed:
        if key in {"name", "version", "requires_dist", "requires_python"}:
            problems.append(Incomplete(meta_dir, f"malformed {key} field"))
    dist = Distribution(
        name=canonicalize_name(name),
        raw_version=version.strip(),
        metadata_path=meta_dir,
        requires_dist=tuple(requires),
        requires_python=raw.get("requires_python"),
        installer=installer.decode("utf-8", "replace").strip() or None if installer else None,
        requested=f"{meta_dir}/REQUESTED" in files,
        direct_url=direct_url,
        record=tuple(record),
        fingerprint=fingerprint,
        display_name=name,
    )
    return dist, problems


# Every base name the analyzer may keep: a set lookup rejects almost every member of a layer
# before the path rules run (``wants`` is called once per tar member).
_BASENAMES = frozenset({*DIST_INFO_FILES, *EGG_INFO_FILES, "pyvenv.cfg", "os.py"})


@dataclass(frozen=True, slots=True)
class PythonAnalyzer(Analyzer):
    """dist-info and egg-info metadata wherever it is, interpreters' ``os.py`` and
    ``pyvenv.cfg``, every symlink (any directory link may put an environment on a path);
    with ``verify_records`` also the digest of every regular file, since a RECORD's files
    may be in any directory a link makes part of an environment."""

    name = "python"
    version = VERSION
    verify_records: bool = False

    @classmethod
    def create(cls, options: AnalyzerOptions) -> PythonAnalyzer:
        return cls(verify_records=options.verify_records)

    def wants(self, path: str) -> int:
        base = path[path.rfind("/") + 1 :]
        if (base in _BASENAMES or base[-9:].lower() == ".egg-info") and wants(path):
            return CAPTURE | LINK
        if self.verify_records:
            return HASH | LINK
        return LINK  # for a symlink or hard link; the walk ignores LINK on a regular file

    def prepare(self, files: Mapping[str, bytes]) -> dict[str, object]:
        return prepare_distributions(files)

    def session(self) -> PythonSession:
        return PythonSession()


_META_NAMES = (*DIST_INFO_FILES, *EGG_INFO_FILES)


def _seen_files(meta: str, seen: str, files: Mapping[str, bytes]) -> Mapping[str, bytes]:
    """The metadata files of the real directory ``meta`` under the path ``seen``."""
    if seen == meta:
        return files
    out = {
        f"{seen}/{name}": files[f"{meta}/{name}"]
        for name in _META_NAMES
        if f"{meta}/{name}" in files
    }
    if meta in files:
        out[seen] = files[meta]
    return out


class PythonSession(AnalyzerSession):
    """Parsed distributions of a state; only the metadata directories a layer touched are
    parsed again (or whose environment path changed with the links)."""

    def __init__(self) -> None:
        # real metadata dir -> {path as an environment sees it: parsed}
        self._dists: dict[str, dict[str, tuple[Distribution | None, tuple[Incomplete, ...]]]] = {}
        # (id of a distribution, owner) -> it and its generic record, made once and shared by
        # the states that hold it (the replay entry writes a shared record once)
        self._records: dict[tuple[int, str], tuple[Distribution, Package]] = {}

    def _record(
        self,
        dist: Distribution,
        owner: str,
        made: dict[tuple[int, str], tuple[Distribution, Package]],
    ) -> Package:
        key = (id(dist), owner)
        known = self._records.get(key)
        if known is None:
            known = (dist, distribution_package(dist, owner))
        made[key] = known
        return known[1]

    def update(self, state: StateView, touched: Sequence[str]) -> None:
        files = state.files
        dirs: set[str] = set()
        known = sorted(self._dists)  # bisected: a layer touches many paths, few dists dirs
        for path in touched:
            meta = metadata_dir(path)
            if meta is not None:
                dirs.add(meta)
            else:
                # a removed directory: every metadata dir below it
                if path in self._dists:
                    dirs.add(path)
                prefix = path.rstrip("/") + "/"
                at = bisect.bisect_left(known, prefix)
                while at < len(known) and known[at].startswith(prefix):
                    dirs.add(known[at])
                    at += 1
        for meta in dirs:
            present = meta in files or any(f"{meta}/{name}" in files for name in _META_NAMES)
            if present:
                self._dists[meta] = {}  # parsed again, under its current environment path
            else:
                self._dists.pop(meta, None)

    def _parsed(
        self,
        meta: str,
        seen: str,
        files: Mapping[str, bytes],
        prepared: Mapping[str, object],
    ) -> tuple[Distribution | None, tuple[Incomplete, ...]]:
        cached = self._dists[meta]
        hit = cached.get(seen)
        if hit is None:  # not parsed yet, or a link moved it to another environment path
            made = prepared.get(meta) if seen == meta else None
            if isinstance(made, tuple) and all(files.get(p) is b for p, b in made[0]):
                cached.clear()
                hit = cached[seen] = (made[1], made[2])  # the worker's parse of these files
                remember_requirements(made[3])  # and of its Requires-Dist lines
                return hit
            dist, problems = parse_distribution(seen, _seen_files(meta, seen, files))
            cached.clear()
            hit = cached[seen] = (dist, tuple(problems))
        return hit

    def contribute(self, state: StateView, parts: SnapshotParts) -> None:
        files, links = state.files, state.links
        prepared = state.prepared(PythonAnalyzer.name)
        markers = python_markers(files)
        aliases = env_links(links)
        by_env: dict[str, list[Distribution]] = {}
        real_of: dict[str, str] = {}
        records: dict[tuple[int, str], tuple[Distribution, Package]] = {}
        for meta in sorted(self._dists):
            where = place(meta, aliases)
            if where.why == "record":
                record, problems = self._parsed(meta, meta, files, prepared)
                parts.incomplete.extend(problems)
                if record is not None:
                    parts.packages.append(self._record(record, record_owner(record), records))
                continue
            if where.env is None:
                if where.why == "outside":
                    parts.incomplete.append(Incomplete(meta, OUTSIDE, final_only=True))
                continue
            dist, problems = self._parsed(meta, where.seen(meta), files, prepared)
            parts.incomplete.extend(problems)
            if dist is not None:
                by_env.setdefault(where.env, []).append(dist)
                real_of[where.env] = where.real_env
                parts.packages.append(self._record(dist, where.env, records))
        self._records = records
        parts.environments.extend(
            Environment(
                path=env,
                python=python_of(env, files, markers, links),
                distributions=tuple(sorted(dists, key=lambda d: (d.name, d.metadata_path))),
                real_path=real_of[env] if real_of[env] != env else None,
            )
            for env, dists in sorted(by_env.items())
        )
