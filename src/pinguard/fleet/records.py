"""What one image's fleet audit leaves behind, and the directory that keeps it.

An ``ImageRecord`` is small (reference, digest, platform, verdict, exit code, error, notes,
every distribution's name and version per environment, finding counts); the full audit goes
beside it as the JSON report. ``ResultStore`` is a directory shared by workers and readers
(a volume), one ``<id>.json`` record and one ``<id>.audit.json`` report per (reference,
options); the id is a digest of both, so a task delivered twice (a worker killed mid-audit)
writes the same names with the same bytes, atomically: one result. Celery's result backend
carries only the id, never the record. A store that is not there, or cannot be listed, is a
``UsageError`` naming it (``check_readable``) for readers, and one a worker cannot create or
write to is (``check_writable``), before any audit: a typo'd path must not read as an empty
fleet, nor fail every task.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pinguard.errors import UsageError
from pinguard.fileio import atomic_write

RECORD_FORMAT = "pinguard/fleet-record/1"


@dataclass(frozen=True, slots=True, order=True)
class DistributionVersion:
    """Which version of one Python distribution one environment of an image holds: a cell of
    the fleet's version matrix (not a package record: ``models.Package`` is that)."""

    environment: str
    name: str
    version: str


@dataclass(frozen=True, slots=True)
class ImageRecord:
    """One image's audit as the fleet sees it. ``verdict``: pass, fail or error."""

    reference: str
    verdict: str
    exit_code: int
    manifest_digest: str | None = None
    platform: str | None = None
    error: str | None = None
    notes: tuple[str, ...] = ()
    # every distribution of every environment (the record's JSON calls them "packages")
    distributions: tuple[DistributionVersion, ...] = ()
    errors: int = 0  # unwaived error findings
    warnings: int = 0
    incomplete: int = 0
    attestation: str | None = None  # the attached attestation's digest, when pushed

    @property
    def failing(self) -> bool:
        return self.exit_code != 0

    def versions(self, name: str) -> tuple[str, ...]:
        """Every version of ``name`` in the image, sorted, one per distinct version."""
        return tuple(sorted({d.version for d in self.distributions if d.name == name}))

    def to_json(self) -> dict[str, Any]:
        return {
            "format": RECORD_FORMAT,
            "reference": self.reference,
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "manifest_digest": self.manifest_digest,
            "platform": self.platform,
            "error": self.error,
            "notes": list(self.notes),
            "packages": [
                {"environment": d.environment, "name": d.name, "version": d.version}
                for d in self.distributions
            ],
            "errors": self.errors,
            "warnings": self.warnings,
            "incomplete": self.incomplete,
            "attestation": self.attestation,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ImageRecord:
        if data.get("format") != RECORD_FORMAT:
            raise ValueError(f"not a fleet record: format {data.get('format')!r}")
        return cls(
            reference=str(data["reference"]),
            verdict=str(data["verdict"]),
            exit_code=int(data["exit_code"]),
            manifest_digest=data.get("manifest_digest"),
            platform=data.get("platform"),
            error=data.get("error"),
            notes=tuple(str(n) for n in data.get("notes", ())),
            distributions=tuple(
                DistributionVersion(str(p["environment"]), str(p["name"]), str(p["version"]))
                for p in data.get("packages", ())
            ),
            errors=int(data.get("errors", 0)),
            warnings=int(data.get("warnings", 0)),
            incomplete=int(data.get("incomplete", 0)),
            attestation=data.get("attestation"),
        )


def record_id(reference: str, options: Mapping[str, Any]) -> str:
    """The store name of (reference, options): the same for every delivery of a task."""
    text = json.dumps({"reference": reference, "options": options}, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


class ResultStore:
    """A directory of records (``<id>.json``) and full audit reports (``<id>.audit.json``)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _path(self, rid: str, suffix: str = ".json") -> Path:
        if not rid.isalnum():
            raise ValueError(f"not a record id: {rid!r}")
        return self.directory / f"{rid}{suffix}"

    def check_readable(self) -> None:
        """``UsageError`` unless the store is a directory this process can list."""
        try:
            with os.scandir(self.directory):
                pass
        except FileNotFoundError:
            raise UsageError(f"the result store {self.directory} does not exist") from None
        except NotADirectoryError:
            raise UsageError(f"the result store {self.directory} is not a directory") from None
        except OSError as exc:
            raise UsageError(
                f"cannot read the result store {self.directory}: {exc.strerror or exc}"
            ) from None

    def check_writable(self) -> None:
        """Create the store if it is not there; ``UsageError`` unless a record can be
        written to it (a file is made there and removed)."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=self.directory, prefix=".pinguard-check-"):
                pass
        except OSError as exc:
            raise UsageError(
                f"cannot write to the result store {self.directory}: {exc.strerror or exc}"
            ) from None

    def write(self, rid: str, record: ImageRecord, report: str | None = None) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        if report is not None:
            atomic_write(self._path(rid, ".audit.json"), report)
        text = json.dumps(record.to_json(), indent=1, sort_keys=True) + "\n"
        path = self._path(rid)
        atomic_write(path, text)
        return path

    def stamp(self, rid: str) -> tuple[int, int, int, int] | None:
        """What identifies the record file as it is now (inode, mtime, ctime, size), or None
        when there is none. Every write replaces the file (a new inode), so a stamp taken
        before a task was sent tells the record it writes from one an earlier run left."""
        try:
            st = self._path(rid).stat()
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)

    def read(self, rid: str) -> ImageRecord | None:
        try:
            data = json.loads(self._path(rid).read_text())
        except (OSError, ValueError):
            return None
        return ImageRecord.from_json(data)

    def ids(self) -> list[str]:
        if not self.directory.is_dir():
            return []
        return sorted(
            p.name[: -len(".json")]
            for p in self.directory.glob("*.json")
            if not p.name.endswith(".audit.json")
        )

    def all(self) -> list[ImageRecord]:
        """Every record in the store (by id); an unreadable one is skipped."""
        out = []
        for rid in self.ids():
            try:
                record = self.read(rid)
            except (ValueError, KeyError, TypeError):
                continue
            if record is not None:
                out.append(record)
        return out
