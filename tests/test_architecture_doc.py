"""docs/architecture.md is true to the tree: its table of places names every module, and it
names no file that is gone.

Each row of "What each place owns" starts with a place (`models.py`, `sources/`, ...); every
module file of ``src/pinguard`` must be named in the row of the place that holds it (a
package's modules in its package's row, a top-level module in a row of its own), and every
place the table names must exist. And the other way round, every ``.py`` file and folder the
whole map names in backticks (table and prose, ``report/sbom.py``, a row's bare ``state.py``)
must be one of the tree.
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


#: A name in backticks that is a file or folder of the tree: ``report/sbom.py``,
#: ``state.py``, ``sources/registry/``.
_PATH = re.compile(r"^\w[\w.-]*(/[\w.-]+)*(\.py|/)$")


def _named_paths(text: str) -> list[str]:
    return [name for name in re.findall(r"`([^`\s]+)`", text) if _PATH.match(name)]


def _exists(name: str, within: Path) -> bool:
    """``name`` is a file or folder of ``within`` (a bare name anywhere below it, as a row
    names ``uv.py`` of ``repair/resolve/``), of the package, or of the checkout."""
    rel = name.rstrip("/")
    if "/" not in rel and any(within.rglob(rel)):
        return True
    return any((base / rel).exists() for base in (within, SRC, ROOT))


def test_every_file_the_map_names_exists() -> None:
    """Every ``.py`` file and folder the whole map names, in its table and its prose, is one
    of the tree: a row's bare names within its place, a path from the package or checkout."""
    text = DOC.read_text(encoding="utf-8")
    table = text.split("## What each place owns", 1)[1].split("\n## ", 1)[0]
    rows = _rows()
    missing: list[str] = []
    for line in text.splitlines():
        within = SRC
        if line in table and line in rows.values():
            place = next(p for p, row in rows.items() if row == line)
            within = SRC / place.rstrip("/") if place.endswith("/") else SRC
        missing += [name for name in _named_paths(line) if not _exists(name, within)]
    assert missing == []


def test_a_name_of_no_file_is_caught() -> None:
    assert _named_paths("`report/verify.py` and `fleet.py`, not `docker://` or `a b`") == [
        "report/verify.py",
        "fleet.py",
    ]
    assert not _exists("report/verify.py", SRC)
    assert not _exists("nonesuch.py", SRC / "report")
