"""Find the line on which each key, table and array element of a TOML document starts.

TOML parsers hand back values without positions, yet every policy error must name its
line. ``locate_lines`` scans the same text a second time (after tomlkit has accepted it, so
it may assume valid syntax) and maps each key path, such as ``("pin", 0, "version")`` or
``("rules", "downgrade")``, to the 1-based line where it is written. Array-of-tables headers
get an index per occurrence, inline tables and arrays are entered, strings of every kind
are skipped correctly. ``Lines.of(path)`` falls back to the nearest enclosing path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

Path = tuple[str | int, ...]

_BARE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


@dataclass(frozen=True, slots=True)
class Lines:
    """Key paths of one document mapped to their first line."""

    lines: Mapping[Path, int]

    def of(self, path: Path) -> int:
        """The line of ``path`` or of its nearest enclosing path (1 when nothing matches)."""
        probe = tuple(path)
        while probe:
            if probe in self.lines:
                return self.lines[probe]
            probe = probe[:-1]
        return 1


class _Scanner:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.line = 1
        self.found: dict[Path, int] = {}
        self.aot: dict[Path, int] = {}

    # -- low level -------------------------------------------------------------------
    def peek(self, n: int = 1) -> str:
        return self.text[self.pos : self.pos + n]

    def advance(self, n: int = 1) -> None:
        chunk = self.text[self.pos : self.pos + n]
        self.line += chunk.count("\n")
        self.pos += n

    def skip_blank(self, newlines: bool) -> None:
        """Skip spaces, tabs, comments and (when ``newlines``) line breaks."""
        while self.pos < len(self.text):
            c = self.text[self.pos]
            if c in " \t\r" or (newlines and c == "\n"):
                self.advance()
            elif c == "#":
                end = self.text.find("\n", self.pos)
                self.advance((len(self.text) if end < 0 else end) - self.pos)
            else:
                return

    def record(self, path: Path) -> None:
        self.found.setdefault(path, self.line)

    def skip_string(self) -> str:
        """Skip a string literal of any of the four kinds and return its value (roughly)."""
        for quote in ('"""', "'''"):
            if self.peek(3) == quote:
                self.advance(3)
                end = self.text.find(quote, self.pos)
                while quote == '"""' and end > 0 and self._escaped(end):
                    end = self.text.find(quote, end + 1)
                end = len(self.text) if end < 0 else end
                # a closing run may hold up to two extra quotes that belong to the string
                while self.text[end + 3 : end + 4] == quote[0]:
                    end += 1
                value = self.text[self.pos : end]
                self.advance(end + 3 - self.pos)
                return value
        quote = self.peek()
        self.advance()
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos] not in (quote, "\n"):
            if quote == '"' and self.text[self.pos] == "\\":
                self.advance()
            self.advance()
        value = self.text[start : self.pos]
        self.advance()
        return value

    def _escaped(self, index: int) -> bool:
        count = 0
        while index - 1 - count >= 0 and self.text[index - 1 - count] == "\\":
            count += 1
        return count % 2 == 1

    # -- grammar ---------------------------------------------------------------------
    def key(self) -> list[str]:
        parts: list[str] = []
        while True:
            self.skip_blank(newlines=False)
            c = self.peek()
            if c in ('"', "'"):
                parts.append(self.skip_string())
            else:
                start = self.pos
                while self.pos < len(self.text) and self.text[self.pos] in _BARE:
                    self.advance()
                parts.append(self.text[start : self.pos])
            self.skip_blank(newlines=False)
            if self.peek() == ".":
                self.advance()
                continue
            return parts

    def resolve(self, parts: list[str], aot_last: bool) -> Path:
        """Turn header key parts into a path, indexing arrays of tables on the way."""
        path: Path = ()
        for i, part in enumerate(parts):
            path = (*path, part)
            last = i == len(parts) - 1
            if last and aot_last:
                self.aot[path] = self.aot.get(path, 0) + 1
                self.record(path)
                path = (*path, self.aot[path] - 1)
            elif path in self.aot:
                path = (*path, self.aot[path] - 1)
        return path

    def value(self, path: Path) -> None:
        self.skip_blank(newlines=False)
        c = self.peek()
        if c == "[":
            self.advance()
            index = 0
            while True:
                self.skip_blank(newlines=True)
                if self.peek() in ("]", ""):
                    self.advance()
                    return
                self.record((*path, index))
                self.value((*path, index))
                self.skip_blank(newlines=True)
                if self.peek() == ",":
                    self.advance()
                    index += 1
        elif c == "{":
            self.advance()
            while True:
                self.skip_blank(newlines=True)
                if self.peek() in ("}", ""):
                    self.advance()
                    return
                self.keyval(path)
                self.skip_blank(newlines=True)
                if self.peek() == ",":
                    self.advance()
        elif c in ('"', "'"):
            self.skip_string()
        else:
            while self.pos < len(self.text) and self.text[self.pos] not in ",]}\n#":
                self.advance()

    def keyval(self, table: Path) -> None:
        parts = self.key()
        path = table
        for part in parts:
            path = (*path, part)
            self.record(path)
        self.skip_blank(newlines=False)
        if self.peek() == "=":
            self.advance()
        self.value(path)

    def document(self) -> dict[Path, int]:
        table: Path = ()
        while True:
            self.skip_blank(newlines=True)
            if self.pos >= len(self.text):
                return self.found
            if self.peek(2) == "[[":
                self.advance(2)
                table = self.resolve(self.key(), aot_last=True)
                self.record(table)
                self.advance(2)
            elif self.peek() == "[":
                self.advance()
                table = self.resolve(self.key(), aot_last=False)
                self.record(table)
                self.advance()
            else:
                self.keyval(table)


def locate_lines(text: str) -> Lines:
    """Map every key path of the (valid) TOML ``text`` to the line where it starts."""
    return Lines(_Scanner(text).document())
