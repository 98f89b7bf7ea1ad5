"""A fleet of records as one summary: images x the packages that matter, failing first.

``summarize(records, patterns)`` picks the package columns (every distribution name any image
has that matches one of ``patterns``, ``fnmatch`` on normalised names; by default torch,
NCCL, cutlass and the other CUDA wheels a GPU fleet pins) and orders the rows: failing
images first (unreadable ones, exit 3, before failing audits), then by reference and
platform. The fleet's exit code is the worst: 3 when any image could not be read, else 1
when any failed or never finished, else 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase

from packaging.utils import canonicalize_name

from pinguard.errors import EXIT_FINDINGS, EXIT_IMAGE, EXIT_PASS
from pinguard.fleet.records import ImageRecord

DEFAULT_PACKAGES = (
    "torch",
    "nvidia-nccl-*",
    "nvidia-cutlass*",
    "nvidia-cudnn-*",
    "nvidia-cublas-*",
    "flashinfer-*",
    "vllm",
    "triton",
)


@dataclass(frozen=True, slots=True)
class FleetSummary:
    """Rows (records, failing first) and the package columns of the matrix."""

    rows: tuple[ImageRecord, ...]
    packages: tuple[str, ...]

    @property
    def exit_code(self) -> int:
        codes = {r.exit_code for r in self.rows}
        if EXIT_IMAGE in codes:
            return EXIT_IMAGE
        if codes - {EXIT_PASS}:
            return EXIT_FINDINGS
        return EXIT_PASS

    def counts(self) -> dict[str, int]:
        out = {"images": len(self.rows), "pass": 0, "fail": 0, "error": 0, "pending": 0}
        for r in self.rows:
            out[r.verdict] = out.get(r.verdict, 0) + 1
        return out

    def cell(self, record: ImageRecord, package: str) -> str:
        return ", ".join(record.versions(package)) or "-"


def _order(record: ImageRecord) -> tuple[int, str, str]:
    rank = 0 if record.exit_code == EXIT_IMAGE else 1 if record.failing else 2
    return (rank, record.reference, record.platform or "")


def summarize(
    records: Iterable[ImageRecord], patterns: Sequence[str] = DEFAULT_PACKAGES
) -> FleetSummary:
    rows = tuple(sorted(records, key=_order))
    wanted = [p.lower().replace("_", "-").replace(".", "-") for p in patterns]
    names = sorted(
        {
            p.name
            for r in rows
            for p in r.distributions
            if any(fnmatchcase(str(canonicalize_name(p.name)), w) for w in wanted)
        }
    )
    return FleetSummary(rows=rows, packages=tuple(names))
