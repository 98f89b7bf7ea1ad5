"""docs/architecture.md is true to the tree: its table of places names every module.

Each row of "What each place owns" starts with a place (`models.py`, `sources/`, ...); every
module file of ``src/pinguard`` must be named in the row of the place that holds it (a
package's modules in its package's row, a top-level module in a row of its own), and every
place the table names must exist.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "pinguard"
DOC = ROOT / "docs" / "architecture.md"


def _rows() -> dict[str, str]:
    """{place: row text} of the ownership table (a row may name several places)."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## What each place owns", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        cells = line.split("|")
        if len(cells) < 3 or not cells[1].strip().startswith("`"):
            continue
        for place in re.findall(r"`([^`]+)`", cells[1]):
            rows[place] = line
    return rows


def test_every_module_is_named_in_its_places_row() -> None:
    rows = _rows()
    missing: list[str] = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        top = rel.parts[0]
        place = f"{top}/" if len(rel.parts) > 1 else top
        row = rows.get(place)
        if row is None:
            missing.append(f"{rel}: no row for {place}")
            continue
        if len(rel.parts) > 1 and rel.name != "__init__.py" and f"`{rel.name}`" not in row:
            missing.append(str(rel))
    assert missing == []


def test_every_place_in_the_table_exists() -> None:
    for place in _rows():
        assert (SRC / place.rstrip("/")).exists(), place
