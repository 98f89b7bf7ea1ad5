"""Conda environments: the package records in each prefix's ``conda-meta/*.json``.

conda (and mamba, micromamba, pixi, rattler) writes one JSON record per installed package to
``<prefix>/conda-meta/<name>-<version>-<build>.json``: name, version, build, channel, subdir,
license, the archive's digests and the files it placed. This analyzer captures those records
from every layer and turns the current state's into generic ``Package`` records (kind
``conda``, owner the prefix, a ``pkg:conda`` purl), which the reports and the policy read
without knowing conda. A record that is not a JSON object naming a package and a version is
reported as incomplete, never skipped. conda-forge's ``nccl`` in a prefix next to pip's
``nvidia-nccl-cu13`` in an environment is one more way an image carries NCCL twice: both
show up, each with its owner.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import quote

from pinguard.catalog.interface import (
    Analyzer,
    AnalyzerOptions,
    AnalyzerSession,
    SnapshotParts,
    StateView,
)
from pinguard.layers.tar import CAPTURE, SKIP
from pinguard.models import Incomplete, Package

VERSION = "1"
KIND = "conda"
META_DIR = "conda-meta"
#: Record fields kept as properties (strings as written; numbers as their JSON text).
PROPERTIES = ("build", "build_number", "channel", "license", "md5", "sha256", "subdir", "url")


def is_record(path: str) -> bool:
    """``<prefix>/conda-meta/<file>.json``: a package record (conda-meta/history is not)."""
    head, name = posixpath.split(path)
    return name.endswith(".json") and posixpath.basename(head) == META_DIR


def _channel_name(channel: str) -> str:
    """``https://conda.anaconda.org/conda-forge/`` -> ``conda-forge``; a name stays as is."""
    return channel.rstrip("/").rsplit("/", 1)[-1]


def purl(record: Mapping[str, object], name: str, version: str) -> str:
    """``pkg:conda/<name>@<version>?build=..&channel=..&subdir=..`` (qualifiers sorted)."""
    qualifiers = {
        "build": record.get("build"),
        "channel": _channel_name(str(record["channel"])) if record.get("channel") else None,
        "subdir": record.get("subdir"),
    }
    query = "&".join(
        f"{key}={quote(str(value), safe='')}"
        for key, value in sorted(qualifiers.items())
        if isinstance(value, str) and value
    )
    return f"pkg:conda/{quote(name.lower(), safe='')}@{quote(version, safe='')}" + (
        f"?{query}" if query else ""
    )


def parse_record(path: str, data: bytes) -> Package | Incomplete:
    """One record as a ``Package`` (owner: the prefix), or why it cannot be read."""
    try:
        record = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        return Incomplete(path, f"conda-meta record is not JSON: {exc}")
    if not isinstance(record, dict):
        return Incomplete(path, "conda-meta record is not a JSON object")
    name, version = record.get("name"), record.get("version")
    if not isinstance(name, str) or not name or not isinstance(version, str) or not version:
        return Incomplete(path, "conda-meta record names no package and version")
    properties = tuple(
        (key, value if isinstance(value, str) else json.dumps(value))
        for key in PROPERTIES
        if (value := record.get(key)) is not None and value != ""
    )
    return Package(
        kind=KIND,
        name=name,
        version=version,
        location=path,
        owner=posixpath.dirname(posixpath.dirname(path)) or "/",
        properties=properties,
        purl=purl(record, name, version),
    )


@dataclass(frozen=True, slots=True)
class CondaAnalyzer(Analyzer):
    """The conda-meta records of every prefix (a record a later layer removes is gone)."""

    name = KIND
    version = VERSION

    @classmethod
    def create(cls, options: AnalyzerOptions) -> CondaAnalyzer:
        return cls()

    def wants(self, path: str) -> int:
        return CAPTURE if path.endswith(".json") and is_record(path) else SKIP

    def session(self) -> CondaSession:
        return CondaSession()


class CondaSession(AnalyzerSession):
    """The records of the current state, re-read when a layer touches a conda-meta path."""

    def __init__(self) -> None:
        self._found: tuple[Package | Incomplete, ...] = ()

    def update(self, state: StateView, touched: Sequence[str]) -> None:
        known = [item.location if isinstance(item, Package) else item.what for item in self._found]
        if not any(
            META_DIR in path or any(k.startswith(path.rstrip("/") + "/") for k in known)
            for path in touched
        ):
            return  # neither a record nor a directory above one (a whited-out prefix)
        self._found = tuple(
            parse_record(path, data)
            for path, data in sorted(state.files.items())
            if is_record(path)
        )

    def contribute(self, state: StateView, parts: SnapshotParts) -> None:
        for item in self._found:
            if isinstance(item, Package):
                parts.packages.append(item)
            else:
                parts.incomplete.append(item)
