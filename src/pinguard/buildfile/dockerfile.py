"""A Dockerfile parser that keeps what a linter needs: where each instruction is, what it says.

`parse` reads Dockerfile text the way BuildKit does: parser directives at the top (``syntax``,
``escape`` with a backslash or backtick, ``check``), continuation lines (comment and blank lines
inside a continuation are dropped), heredocs on RUN/COPY/ADD (``<<EOF``, ``<<-EOF`` which strips
leading tabs, and quoted delimiters that turn expansion off), exec (JSON) and shell forms,
leading ``--flag=value`` options, and multi-stage builds with ``FROM ... AS name``. Every
`Instruction` keeps its first and last physical line (heredoc bodies included), a map from
offsets in its argument text back to physical lines, and the variables in effect when it runs:
ARGs scoped the Docker way (global ARGs before the first FROM are visible to FROM lines and to
a stage only when the stage re-declares them; ``--build-arg`` values override defaults) and ENV
values (which win over ARGs of the same name and are inherited by stages built ``FROM`` an
earlier stage). `expand_word` implements Docker's word expansion (``$VAR``, ``${VAR}``,
``${VAR:-default}``, ``${VAR-default}``, ``${VAR:+alt}``, ``${VAR+alt}``, ``${VAR:?msg}``, quotes
and the escape character). Errors are `InvalidDockerfile`, quoting the bad value and its line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from pinguard.errors import UsageError

__all__ = [
    "Dockerfile",
    "Heredoc",
    "Instruction",
    "InvalidDockerfile",
    "Stage",
    "expand_word",
    "parse",
    "parse_file",
    "split_words",
]

INSTRUCTIONS = frozenset(
    {
        "ADD",
        "ARG",
        "CMD",
        "COPY",
        "ENTRYPOINT",
        "ENV",
        "EXPOSE",
        "FROM",
        "HEALTHCHECK",
        "LABEL",
        "MAINTAINER",
        "ONBUILD",
        "RUN",
        "SHELL",
        "STOPSIGNAL",
        "USER",
        "VOLUME",
        "WORKDIR",
    }
)
HEREDOC_INSTRUCTIONS = frozenset({"RUN", "COPY", "ADD"})
FLAG_INSTRUCTIONS = frozenset({"RUN", "COPY", "ADD", "FROM", "HEALTHCHECK"})
EXEC_INSTRUCTIONS = frozenset({"RUN", "CMD", "ENTRYPOINT", "SHELL", "COPY", "ADD", "VOLUME"})
KNOWN_DIRECTIVES = frozenset({"syntax", "escape", "check"})

_DIRECTIVE = re.compile(r"^#[ \t]*([A-Za-z][A-Za-z0-9_-]*)[ \t]*=[ \t]*(.*?)[ \t]*$")
_HEREDOC_WORD = re.compile(r"^(\d*)<<(-?)([^<]*)$")
_STAGE_NAME = re.compile(r"^[a-z][a-z0-9._-]*$")
_NAME_CHARS = re.compile(r"[A-Za-z0-9_]")


class InvalidDockerfile(UsageError, ValueError):
    """The Dockerfile cannot be parsed; the message names the file, the line and the value."""


@dataclass(frozen=True, slots=True)
class Heredoc:
    """One heredoc attached to an instruction; ``body`` already has ``<<-`` tabs stripped."""

    delimiter: str
    body: str
    strip_tabs: bool
    quoted: bool  # a quoted delimiter ('EOF' or "EOF") turns variable expansion off
    fd: int | None  # the file descriptor before ``<<`` (``3<<EOF``), if any
    start_line: int  # first body line (the line after the instruction, or the previous heredoc)
    end_line: int  # the line holding the closing delimiter


@dataclass(frozen=True, slots=True)
class Instruction:
    """One Dockerfile instruction with its location and the variables in effect for it."""

    keyword: str  # upper case: RUN, FROM, ...
    args: str  # the text after the keyword and flags, continuations joined, not expanded
    start_line: int
    end_line: int  # the last physical line, heredoc bodies included
    flags: tuple[tuple[str, str], ...] = ()  # ("mount", "type=cache,target=/root/.cache")
    exec_form: tuple[str, ...] | None = None  # the JSON array, when the exec form is used
    heredocs: tuple[Heredoc, ...] = ()
    stage: int | None = None  # index into Dockerfile.stages; None for global ARGs
    variables: tuple[tuple[str, str], ...] = ()  # ARG and ENV values in effect, sorted
    line_map: tuple[tuple[int, int], ...] = ()  # (offset in args, physical line), ascending
    source: str = ""  # the physical lines of the instruction itself, without heredoc bodies

    @property
    def environ(self) -> dict[str, str]:
        """The variables in effect for this instruction as a dict."""
        return dict(self.variables)

    def line_at(self, offset: int) -> int:
        """The physical line holding character ``offset`` of `args`."""
        line = self.start_line
        for start, physical in self.line_map:
            if start > offset:
                break
            line = physical
        return line


@dataclass(frozen=True, slots=True)
class Stage:
    """One build stage: from its FROM line up to the next FROM."""

    index: int
    base: str  # the image reference after ARG expansion
    name: str | None  # the ``AS`` name, lower-cased as Docker does
    start_line: int
    platform: str | None = None
    parent: int | None = None  # index of the earlier stage this one is built FROM
    instructions: tuple[Instruction, ...] = ()


@dataclass(frozen=True, slots=True)
class Dockerfile:
    """A parsed Dockerfile."""

    path: str
    escape: str
    directives: tuple[tuple[str, str], ...]
    global_args: tuple[Instruction, ...]
    stages: tuple[Stage, ...]
    instructions: tuple[Instruction, ...] = field(default=())  # all of them, in file order


# --- words and expansion -----------------------------------------------------------------


class _Expander:
    """Docker's word processing over one word: quotes, the escape character and ``$`` forms."""

    def __init__(self, word: str, env: Mapping[str, str], escape: str, keep_unknown: bool) -> None:
        self.s = word
        self.i = 0
        self.env = env
        self.escape = escape
        self.keep_unknown = keep_unknown

    def peek(self) -> str:
        return self.s[self.i] if self.i < len(self.s) else ""

    def run(self, stop: str = "") -> str:
        out: list[str] = []
        while self.i < len(self.s):
            ch = self.s[self.i]
            if stop and ch in stop:
                break
            if ch == self.escape:
                self.i += 1
                if self.i < len(self.s):
                    out.append(self.s[self.i])
                    self.i += 1
                continue
            if ch == "'":
                end = self.s.find("'", self.i + 1)
                if end < 0:
                    raise ValueError(f"unterminated single quote in {self.s!r}")
                out.append(self.s[self.i + 1 : end])
                self.i = end + 1
                continue
            if ch == '"':
                self.i += 1
                out.append(self.double_quoted())
                continue
            if ch == "$":
                out.append(self.dollar())
                continue
            out.append(ch)
            self.i += 1
        return "".join(out)

    def double_quoted(self) -> str:
        out: list[str] = []
        while True:
            if self.i >= len(self.s):
                raise ValueError(f"unterminated double quote in {self.s!r}")
            ch = self.s[self.i]
            if ch == '"':
                self.i += 1
                return "".join(out)
            if ch == self.escape and self.i + 1 < len(self.s):
                nxt = self.s[self.i + 1]
                if nxt in ('"', "$", self.escape):
                    out.append(nxt)
                    self.i += 2
                    continue
            if ch == "$":
                out.append(self.dollar())
                continue
            out.append(ch)
            self.i += 1

    def name(self) -> str:
        start = self.i
        while self.i < len(self.s) and _NAME_CHARS.match(self.s[self.i]):
            self.i += 1
        return self.s[start : self.i]

    def dollar(self) -> str:
        start = self.i
        self.i += 1  # the "$"
        if self.peek() == "{":
            self.i += 1
            name = self.name()
            if not name:
                raise ValueError(f"bad substitution in {self.s!r}")
            op = ""
            if self.peek() == ":" and self.i + 1 < len(self.s) and self.s[self.i + 1] in "-+?":
                op = self.s[self.i : self.i + 2]
                self.i += 2
            elif self.peek() in ("-", "+", "?"):
                op = self.peek()
                self.i += 1
            word = self.run(stop="}") if op else ""
            if self.peek() != "}":
                raise ValueError(f"missing '}}' in {self.s!r}")
            self.i += 1
            known = name in self.env
            value = self.env.get(name, "")
            if op == ":-":
                return value if value else word
            if op == "-":
                return value if known else word
            if op == ":+":
                return word if value else ""
            if op == "+":
                return word if known else ""
            if op in (":?", "?") and (not known or (op == ":?" and not value)):
                raise ValueError(f"{name}: {word or 'is not set'}")
            if not known and self.keep_unknown:
                return self.s[start : self.i]
            return value
        name = self.name()
        if not name:
            return "$"
        if name not in self.env and self.keep_unknown:
            return self.s[start : self.i]
        return self.env.get(name, "")


def expand_word(
    word: str, env: Mapping[str, str], *, escape: str = "\\", keep_unknown: bool = False
) -> str:
    """Expand one word as Docker does: remove quotes, apply escapes, substitute variables.

    Unset variables expand to "" unless ``keep_unknown``, which leaves ``$NAME`` as written.
    Raises ValueError for unterminated quotes, bad ``${...}`` forms and ``${VAR:?msg}``.
    """
    return _Expander(word, env, escape, keep_unknown).run()


def split_words(text: str, escape: str = "\\") -> list[tuple[str, int]]:
    """Split on unquoted whitespace, keeping quotes and escapes: ``[(raw word, offset)]``."""
    words: list[tuple[str, int]] = []
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i] in " \t\r\n":
            i += 1
        if i >= n:
            break
        start = i
        quote = ""
        while i < n:
            ch = text[i]
            if quote:
                if ch == quote:
                    quote = ""
                elif ch == escape and quote == '"' and i + 1 < n:
                    i += 1
            elif ch in "'\"":
                quote = ch
            elif ch == escape and i + 1 < n:
                i += 1
            elif ch in " \t\r\n":
                break
            i += 1
        words.append((text[start:i], start))
    return words


# --- the parser ----------------------------------------------------------------------------


@dataclass(slots=True)
class _Logical:
    keyword: str
    rest: str  # text after the keyword
    line_map: list[tuple[int, int]]  # offsets into ``rest``
    start_line: int
    end_line: int
    source: str
    heredocs: list[Heredoc]


def _directives(lines: list[str], path: str) -> tuple[dict[str, str], int]:
    found: dict[str, str] = {}
    for index, line in enumerate(lines):
        m = _DIRECTIVE.match(line.strip())
        if not m or m.group(1).lower() not in KNOWN_DIRECTIVES:
            return found, index
        key = m.group(1).lower()
        if key in found:
            raise InvalidDockerfile(
                f"{path}:{index + 1}: only one {key!r} parser directive can be used"
            )
        found[key] = m.group(2)
    return found, len(lines)


def _is_continued(line: str, escape: str) -> tuple[bool, str]:
    stripped = line.rstrip(" \t")
    if stripped.endswith(escape):
        return True, stripped[: -len(escape)]
    return False, line


def _heredoc_markers(rest: str, escape: str) -> list[tuple[str, bool, bool, int | None]]:
    markers: list[tuple[str, bool, bool, int | None]] = []
    for raw, _ in split_words(rest, escape):
        # a marker may be glued to a redirection: "cat <<EOF>/out" is rare; take the plain form
        m = _HEREDOC_WORD.match(raw)
        if not m or not m.group(3):
            continue
        delim_raw = m.group(3)
        quoted = any(q in delim_raw for q in "'\"")
        try:
            delimiter = expand_word(delim_raw, {}, escape=escape, keep_unknown=True)
        except ValueError:
            continue
        if not delimiter or any(c in delimiter for c in " \t"):
            continue
        fd = int(m.group(1)) if m.group(1) else None
        markers.append((delimiter, m.group(2) == "-", quoted, fd))
    return markers


def _logical_lines(lines: list[str], start: int, escape: str, path: str) -> list[_Logical]:
    out: list[_Logical] = []
    i, n = start, len(lines)
    while i < n:
        line = lines[i]
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            i += 1
            continue
        first = i
        text = ""
        line_map: list[tuple[int, int]] = []
        while True:
            cont, content = _is_continued(lines[i], escape)
            line_map.append((len(text), i + 1))
            text += content
            i += 1
            if not cont:
                break
            while i < n and (not lines[i].strip() or lines[i].lstrip().startswith("#")):
                i += 1
            if i >= n:
                break
        end = i  # exclusive
        body = text.lstrip()
        lead = len(text) - len(body)
        parts = body.split(None, 1)
        keyword = parts[0]
        rest = parts[1] if len(parts) > 1 else ""
        rest_offset = lead + (body.find(rest, len(keyword)) if rest else len(body))
        rest = rest.rstrip()
        rest_map = [(max(off - rest_offset, 0), ln) for off, ln in line_map]
        # keep only the last entry that starts at or before 0 plus later ones
        trimmed: list[tuple[int, int]] = []
        for off, ln in rest_map:
            if trimmed and trimmed[-1][0] == off:
                trimmed[-1] = (off, ln)
            else:
                trimmed.append((off, ln))
        logical = _Logical(
            keyword=keyword.upper(),
            rest=rest,
            line_map=trimmed,
            start_line=first + 1,
            end_line=end,
            source="\n".join(lines[first:end]),
            heredocs=[],
        )
        if logical.keyword in HEREDOC_INSTRUCTIONS:
            for delimiter, strip_tabs, quoted, fd in _heredoc_markers(rest, escape):
                body_lines: list[str] = []
                body_start = i + 1
                while True:
                    if i >= n:
                        raise InvalidDockerfile(
                            f"{path}:{logical.start_line}: heredoc <<{delimiter} is never "
                            f"closed (no line {delimiter!r} before the end of the file)"
                        )
                    current = lines[i].lstrip("\t") if strip_tabs else lines[i]
                    i += 1
                    if current == delimiter:
                        break
                    body_lines.append(current)
                logical.heredocs.append(
                    Heredoc(
                        delimiter=delimiter,
                        body="".join(f"{b}\n" for b in body_lines),
                        strip_tabs=strip_tabs,
                        quoted=quoted,
                        fd=fd,
                        start_line=body_start,
                        end_line=i,
                    )
                )
            logical.end_line = max(logical.end_line, i)
        out.append(logical)
    return out


def _split_flags(rest: str, escape: str) -> tuple[list[tuple[str, str]], str, int]:
    flags: list[tuple[str, str]] = []
    offset = 0
    for raw, pos in split_words(rest, escape):
        if not raw.startswith("--") or len(raw) == 2:
            offset = pos
            break
        name, _, value = raw[2:].partition("=")
        flags.append((name, value))
        offset = pos + len(raw)
    else:
        offset = len(rest)
    remaining = rest[offset:]
    skipped = len(remaining) - len(remaining.lstrip())
    return flags, remaining.lstrip(), offset + skipped


def _exec_form(rest: str) -> tuple[str, ...] | None:
    if not rest.startswith("["):
        return None
    try:
        value = json.loads(rest)
    except ValueError:
        return None
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return None


def _name_values(
    keyword: str, rest: str, env: Mapping[str, str], escape: str, where: str
) -> list[tuple[str, str | None]]:
    """The NAME=value pairs of an ENV or ARG instruction, values expanded (None: no value)."""
    words = split_words(rest, escape)
    if not words:
        raise InvalidDockerfile(f"{where}: {keyword} needs at least one argument")
    pairs: list[tuple[str, str | None]] = []
    try:
        if keyword == "ENV" and "=" not in words[0][0]:
            # the legacy form: ENV NAME value with spaces
            if len(words) < 2:
                raise InvalidDockerfile(f"{where}: ENV {words[0][0]!r} needs a value")
            value_text = rest[words[1][1] :]
            return [(words[0][0], expand_word(value_text, env, escape=escape))]
        for raw, _ in words:
            name, eq, value = raw.partition("=")
            if not name:
                raise InvalidDockerfile(f"{where}: {keyword} names can not be blank: {raw!r}")
            if not eq:
                if keyword == "ENV":
                    raise InvalidDockerfile(
                        f"{where}: can't find '=' in {raw!r}; ENV takes NAME=value pairs"
                    )
                pairs.append((name, None))
                continue
            pairs.append((name, expand_word(value, env, escape=escape)))
    except ValueError as exc:
        if isinstance(exc, InvalidDockerfile):
            raise
        raise InvalidDockerfile(f"{where}: {exc}") from exc
    return pairs


def parse(
    text: str,
    *,
    path: str = "Dockerfile",
    build_args: Mapping[str, str] | None = None,
    base_env: Mapping[str, Mapping[str, str]] | None = None,
) -> Dockerfile:
    """Parse Dockerfile ``text``; ``build_args`` play the role of ``--build-arg NAME=value``;
    ``base_env`` maps a ``FROM`` image (as the stage's ``base`` reads) to the environment its
    config sets (``PATH``, ``PIP_*``), which a stage built from it starts with (unknown: none)."""
    build_args = dict(build_args or {})
    base_env = base_env or {}
    lines = text.splitlines()
    directives, first = _directives(lines, path)
    escape = directives.get("escape", "\\")
    if escape not in ("\\", "`"):
        raise InvalidDockerfile(
            f"{path}: invalid escape directive {escape!r}: must be a backslash or a backtick"
        )
    logicals = _logical_lines(lines, first, escape, path)

    global_vars: dict[str, str | None] = {}
    global_args: list[Instruction] = []
    stages: list[Stage] = []
    stage_instructions: list[list[Instruction]] = []
    stage_env: list[dict[str, str]] = []
    names: dict[str, int] = {}
    every: list[Instruction] = []
    args: dict[str, str | None] = {}
    env: dict[str, str] = {}

    def in_effect() -> dict[str, str]:
        merged = {k: v for k, v in args.items() if v is not None}
        merged.update(env)
        return merged

    for logical in logicals:
        where = f"{path}:{logical.start_line}"
        kw = logical.keyword
        if kw not in INSTRUCTIONS:
            raise InvalidDockerfile(f"{where}: unknown instruction {logical.keyword!r}")
        flags: list[tuple[str, str]] = []
        rest, rest_offset = logical.rest, 0
        if kw in FLAG_INSTRUCTIONS:
            flags, rest, rest_offset = _split_flags(logical.rest, escape)
        line_map = tuple((max(off - rest_offset, 0), ln) for off, ln in logical.line_map)
        exec_form = _exec_form(rest) if kw in EXEC_INSTRUCTIONS else None
        if kw == "SHELL" and exec_form is None:
            raise InvalidDockerfile(f"{where}: SHELL requires the JSON form, got {rest!r}")

        if kw == "FROM":
            global_env = {k: v for k, v in global_vars.items() if v is not None}
            words = [w for w, _ in split_words(rest, escape)]
            if len(words) not in (1, 3) or (len(words) == 3 and words[1].lower() != "as"):
                raise InvalidDockerfile(f"{where}: FROM takes 'IMAGE [AS NAME]', got {rest!r}")
            try:
                base = expand_word(words[0], global_env, escape=escape)
                platform = dict(flags).get("platform")
                if platform is not None:
                    platform = expand_word(platform, global_env, escape=escape)
            except ValueError as exc:
                raise InvalidDockerfile(f"{where}: {exc}") from exc
            if not base:
                raise InvalidDockerfile(f"{where}: FROM {words[0]!r} expands to nothing")
            name = words[2].lower() if len(words) == 3 else None
            if name is not None:
                if not _STAGE_NAME.match(name):
                    raise InvalidDockerfile(f"{where}: invalid stage name {words[2]!r}")
                if name in names:
                    raise InvalidDockerfile(f"{where}: duplicate stage name {words[2]!r}")
            parent = names.get(base.lower())
            index = len(stages)
            if name is not None:
                names[name] = index
            stages.append(
                Stage(
                    index=index,
                    base=base,
                    name=name,
                    start_line=logical.start_line,
                    platform=platform,
                    parent=parent,
                )
            )
            args = {}
            env = dict(stage_env[parent]) if parent is not None else dict(base_env.get(base, {}))
            stage_env.append(env)
            stage_instructions.append([])
            variables = tuple(sorted(global_env.items()))
        elif not stages:
            if kw != "ARG":
                raise InvalidDockerfile(
                    f"{where}: {logical.keyword} before the first FROM; only ARG may come first"
                )
            current = {k: v for k, v in global_vars.items() if v is not None}
            for name_, value in _name_values(kw, rest, current, escape, where):
                global_vars[name_] = build_args.get(name_, value)
            variables = tuple(sorted((k, v) for k, v in global_vars.items() if v is not None))
        else:
            if kw == "ARG":
                for name_, value in _name_values(kw, rest, in_effect(), escape, where):
                    if name_ in build_args:
                        args[name_] = build_args[name_]
                    elif value is not None:
                        args[name_] = value
                    else:
                        args[name_] = global_vars.get(name_)
            elif kw == "ENV":
                before = in_effect()
                for name_, value in _name_values(kw, rest, before, escape, where):
                    env[name_] = value or ""
                stage_env[-1] = env
            variables = tuple(sorted(in_effect().items()))

        instruction = Instruction(
            keyword=kw,
            args=rest,
            start_line=logical.start_line,
            end_line=logical.end_line,
            flags=tuple(flags),
            exec_form=exec_form,
            heredocs=tuple(logical.heredocs),
            stage=len(stages) - 1 if stages else None,
            variables=variables,
            line_map=line_map,
            source=logical.source,
        )
        every.append(instruction)
        if stages:
            stage_instructions[-1].append(instruction)
        else:
            global_args.append(instruction)

    if not stages:
        raise InvalidDockerfile(f"{path}: no FROM instruction: nothing to build")
    built = tuple(
        replace(stage, instructions=tuple(instrs))
        for stage, instrs in zip(stages, stage_instructions, strict=True)
    )
    return Dockerfile(
        path=path,
        escape=escape,
        directives=tuple(sorted(directives.items())),
        global_args=tuple(global_args),
        stages=built,
        instructions=tuple(every),
    )


def parse_file(
    path: str | Path,
    *,
    build_args: Mapping[str, str] | None = None,
    base_env: Mapping[str, Mapping[str, str]] | None = None,
) -> Dockerfile:
    """Read and parse the Dockerfile at ``path``; unreadable files raise `InvalidDockerfile`."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise InvalidDockerfile(f"cannot read {str(path)!r}: {why}") from exc
    return parse(text, path=str(path), build_args=build_args, base_env=base_env)
