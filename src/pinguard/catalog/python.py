"""Python distributions: which paths hold their metadata, and parsing it into values.

Owns the dist-info and egg-info formats (METADATA / PKG-INFO through
``packaging.metadata``, RECORD, INSTALLER, REQUESTED, direct_url.json, requires.txt) and
the rules that say where a Python environment is (a ``site-packages`` or
``dist-packages`` directory) and which Python it belongs to (its path or ``pyvenv.cfg``).
Bad metadata becomes an ``Incomplete`` naming the path, never a silent drop: metadata
that is not UTF-8 (decoded with replacement), a kept header above its cap, a dist-info whose
directory name and ``Name`` disagree, an egg-info without a ``Version`` (listed with an
unknown version), and pip's ``~``-prefixed leftovers of an interrupted install (never counted
as installed). Suffixes match in any case; the interpreter's own ``Python-X.Y.egg-info``
(``Name: Python``, as Debian ships it) is not a distribution.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from packaging.metadata import parse_email
from packaging.utils import canonicalize_name

from pinguard.catalog.interface import (
    Analyzer,
    AnalyzerOptions,
    AnalyzerSession,
    SnapshotParts,
    StateView,
)
from pinguard.layers.tar import CAPTURE, HASH, SKIP
from pinguard.models import Distribution, Environment, Incomplete
from pinguard.target import parse_requirement

VERSION = "1"  # bump when parsing changes (the layer cache key also covers this source)

ENV_DIRS = ("site-packages", "dist-packages")
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


def record_fingerprint(record: list[tuple[str, str]]) -> str:
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
    """'/…/site-packages/x-1.dist-info/METADATA' -> '/…/site-packages/x-1.dist-info'."""
    parent, base = posixpath.split(path)
    pdir = posixpath.basename(parent).lower()
    if pdir.endswith(".dist-info") and base in DIST_INFO_FILES:
        return parent if posixpath.basename(posixpath.dirname(parent)) in ENV_DIRS else None
    if pdir.endswith(".egg-info") and base in EGG_INFO_FILES:
        return parent if posixpath.basename(posixpath.dirname(parent)) in ENV_DIRS else None
    if base.lower().endswith(".egg-info") and pdir in ENV_DIRS:
        return path  # a single-file egg-info (PKG-INFO format)
    return None


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
    """True for every file the Python analyzer reads."""
    base = posixpath.basename(path)
    if base == "pyvenv.cfg":
        return True
    if is_python_marker(path):
        return True
    return metadata_dir(path) is not None


def in_environment(path: str) -> bool:
    """True for any file below a site-packages/dist-packages directory (RECORD checks)."""
    return "/site-packages/" in path or "/dist-packages/" in path


def python_of(env: str, files: Mapping[str, bytes], markers: Mapping[str, str]) -> str | None:
    """The Python version of an environment: pyvenv.cfg, else its path, else the system's."""
    if env.endswith("/site-packages") or env.endswith("/dist-packages"):
        lib = posixpath.dirname(env)  # …/lib/python3.11 or …/lib/python3
        root = posixpath.dirname(posixpath.dirname(lib))
        cfg = files.get(posixpath.join(root, "pyvenv.cfg"))
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
        if parse_requirement(req) is None:
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
    """dist-info and egg-info metadata, interpreters' ``os.py`` and ``pyvenv.cfg``; with
    ``verify_records`` also the digest of every file inside an environment."""

    name = "python"
    version = VERSION
    verify_records: bool = False

    @classmethod
    def create(cls, options: AnalyzerOptions) -> PythonAnalyzer:
        return cls(verify_records=options.verify_records)

    def wants(self, path: str) -> int:
        base = path[path.rfind("/") + 1 :]
        if (base in _BASENAMES or base[-9:].lower() == ".egg-info") and wants(path):
            return CAPTURE
        if self.verify_records and in_environment(path):
            return HASH
        return SKIP

    def session(self) -> PythonSession:
        return PythonSession()


class PythonSession(AnalyzerSession):
    """Parsed distributions of a state; only the metadata directories a layer touched are
    parsed again."""

    def __init__(self) -> None:
        self._dists: dict[str, tuple[Distribution | None, tuple[Incomplete, ...]]] = {}

    def update(self, state: StateView, touched: Sequence[str]) -> None:
        files = state.files
        dirs: set[str] = set()
        for path in touched:
            meta = metadata_dir(path)
            if meta is not None:
                dirs.add(meta)
            else:
                # a removed directory: every metadata dir below it
                prefix = path.rstrip("/") + "/"
                dirs.update(d for d in self._dists if d.startswith(prefix) or d == path)
        for meta in dirs:
            present = meta in files or any(
                f"{meta}/{name}" in files for name in (*DIST_INFO_FILES, *EGG_INFO_FILES)
            )
            if not present:
                self._dists.pop(meta, None)
                continue
            dist, problems = parse_distribution(meta, files)
            self._dists[meta] = (dist, tuple(problems))

    def contribute(self, state: StateView, parts: SnapshotParts) -> None:
        files = state.files
        markers = python_markers(files)
        by_env: dict[str, list[Distribution]] = {}
        for meta in sorted(self._dists):
            dist, problems = self._dists[meta]
            parts.incomplete.extend(problems)
            if dist is not None:
                by_env.setdefault(posixpath.dirname(meta), []).append(dist)
        parts.environments.extend(
            Environment(
                path=env,
                python=python_of(env, files, markers),
                distributions=tuple(sorted(dists, key=lambda d: (d.name, d.metadata_path))),
            )
            for env, dists in sorted(by_env.items())
        )
