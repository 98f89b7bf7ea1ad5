"""Tests for pinguard.buildfile.dockerfile: directives, continuations, heredocs, forms, stages."""

from __future__ import annotations

from pathlib import Path

import pytest

from pinguard.buildfile.dockerfile import (
    Dockerfile,
    Instruction,
    InvalidDockerfile,
    expand_word,
    parse,
    parse_file,
    split_words,
)


def runs(d: Dockerfile) -> list[Instruction]:
    return [i for i in d.instructions if i.keyword == "RUN"]


@pytest.mark.parametrize(
    ("text", "keyword", "args", "start", "end"),
    [
        ("FROM a\nRUN echo hi\n", "RUN", "echo hi", 2, 2),
        ("FROM a\nRUN echo \\\n  hi\n", "RUN", "echo   hi", 2, 3),
        ("FROM a\nRUN echo \\  \n  hi\n", "RUN", "echo   hi", 2, 3),
        ("FROM a\nRUN a \\\n# note\n\n  && b\n", "RUN", "a   && b", 2, 5),
        ("# escape=`\nFROM a\nRUN a `\n  b\n", "RUN", "a   b", 3, 4),
        ("# escape=`\nFROM a\nRUN dir c:\\\nRUN b\n", "RUN", "dir c:\\", 3, 3),
        ("FROM a\n\n# c\n   run   x\n", "RUN", "x", 4, 4),
    ],
)
def test_continuations_and_comments(
    text: str, keyword: str, args: str, start: int, end: int
) -> None:
    """Continuation lines join, comment and blank lines inside them drop, lines are kept."""
    instruction = runs(parse(text))[0]
    assert (instruction.keyword, instruction.args) == (keyword, args)
    assert (instruction.start_line, instruction.end_line) == (start, end)


def test_line_at_maps_offsets_to_physical_lines() -> None:
    """An offset in the joined text maps back to the physical line it came from."""
    ins = runs(parse("FROM a\nRUN pip install \\\n  # c\n  foo \\\n  bar\n"))[0]
    assert ins.line_at(ins.args.index("pip")) == 2
    assert ins.line_at(ins.args.index("foo")) == 4
    assert ins.line_at(ins.args.index("bar")) == 5


@pytest.mark.parametrize(
    ("text", "delims", "bodies", "end", "quoted"),
    [
        ("FROM a\nRUN <<EOF\npip install x\nEOF\n", ["EOF"], ["pip install x\n"], 4, [False]),
        ("FROM a\nRUN <<-EOT\n\tone\n\tEOT\n", ["EOT"], ["one\n"], 4, [False]),
        ("FROM a\nRUN cat <<'E' > /f\n$X\nE\n", ["E"], ["$X\n"], 4, [True]),
        ('FROM a\nRUN cat <<"E" > /f\n$X\nE\n', ["E"], ["$X\n"], 4, [True]),
        (
            "FROM a\nRUN <<A 3<<B cat\na1\nA\nb1\nb2\nB\nRUN x\n",
            ["A", "B"],
            ["a1\n", "b1\nb2\n"],
            7,
            [False, False],
        ),
        ("FROM a\nCOPY <<EOF /x\nhi\nEOF\n", ["EOF"], ["hi\n"], 4, [False]),
        ("FROM a\nRUN echo '<<EOF'\nRUN x\n", [], [], 2, []),
    ],
)
def test_heredocs(
    text: str, delims: list[str], bodies: list[str], end: int, quoted: list[bool]
) -> None:
    """Heredoc bodies attach to their instruction, which ends at the closing delimiter."""
    ins = parse(text).instructions[1]
    assert [h.delimiter for h in ins.heredocs] == delims
    assert [h.body for h in ins.heredocs] == bodies
    assert [h.quoted for h in ins.heredocs] == quoted
    assert ins.end_line == end


def test_heredoc_lines() -> None:
    """A heredoc body knows its first line and its closing line."""
    h = parse("FROM a\nRUN <<EOF\none\ntwo\nEOF\n").instructions[1].heredocs[0]
    assert (h.start_line, h.end_line) == (3, 5)


@pytest.mark.parametrize(
    ("text", "exec_form", "args"),
    [
        ('FROM a\nRUN ["pip", "x"]\n', ("pip", "x"), '["pip", "x"]'),
        ("FROM a\nRUN [not json\n", None, "[not json"),
        ("FROM a\nRUN [1, 2]\n", None, "[1, 2]"),
        ("FROM a\nRUN pip install x\n", None, "pip install x"),
    ],
)
def test_exec_and_shell_forms(text: str, exec_form: tuple[str, ...] | None, args: str) -> None:
    """A JSON array is the exec form; anything else is the shell form."""
    ins = runs(parse(text))[0]
    assert (ins.exec_form, ins.args) == (exec_form, args)


def test_flags_are_split_off() -> None:
    """Leading --flag=value options are separated from the command."""
    ins = runs(parse("FROM a\nRUN --mount=type=cache,target=/c --network=none pip install x\n"))[0]
    assert ins.flags == (("mount", "type=cache,target=/c"), ("network", "none"))
    assert ins.args == "pip install x"


@pytest.mark.parametrize(
    ("word", "env", "expected"),
    [
        ("$A", {"A": "1"}, "1"),
        ("${A}b", {"A": "1"}, "1b"),
        ("${A:-d}", {}, "d"),
        ("${A:-d}", {"A": ""}, "d"),
        ("${A-d}", {"A": ""}, ""),
        ("${A:+x}", {"A": "1"}, "x"),
        ("${A:+x}", {}, ""),
        ("${A+x}", {"A": ""}, "x"),
        ("${A:-${B}}", {"B": "2"}, "2"),
        ("'$A'", {"A": "1"}, "$A"),
        ('"$A b"', {"A": "1"}, "1 b"),
        ("\\$A", {"A": "1"}, "$A"),
        ("$", {}, "$"),
        ("$MISSING", {}, ""),
    ],
)
def test_expand_word(word: str, env: dict[str, str], expected: str) -> None:
    """Docker's word expansion: defaults, alternatives, quotes and escapes."""
    assert expand_word(word, env) == expected


def test_expand_keep_unknown_and_backtick_escape() -> None:
    """Unknown variables can be kept as written; the escape character is configurable."""
    assert expand_word("${X:-a}$Y", {}, keep_unknown=True) == "a$Y"
    assert expand_word("`$A", {"A": "1"}, escape="`") == "$A"


@pytest.mark.parametrize("word", ["'open", '"open', "${A", "${}", "${A:?must be set}"])
def test_expand_word_invalid(word: str) -> None:
    """Bad quoting and substitutions raise ValueError."""
    with pytest.raises(ValueError):  # noqa: PT011 - the message quotes the word
        expand_word(word, {})


def test_split_words_keeps_quotes() -> None:
    """Words split on unquoted whitespace and keep their quotes."""
    assert split_words("A=\"x y\" B='z w' C") == [('A="x y"', 0), ("B='z w'", 8), ("C", 16)]


def test_arg_scoping_across_stages() -> None:
    """Global ARGs reach FROM and only re-declaring stages; build args override defaults."""
    text = (
        "ARG BASE=python:3.11\nARG V=1\n"
        "FROM ${BASE} AS one\nRUN a\nARG V\nRUN b\n"
        "FROM ${BASE}-slim AS two\nRUN c\nARG V=local\nRUN d\n"
    )
    d = parse(text)
    assert [s.base for s in d.stages] == ["python:3.11", "python:3.11-slim"]
    assert [s.name for s in d.stages] == ["one", "two"]
    a, b, c, e = runs(d)
    assert "V" not in a.environ
    assert b.environ["V"] == "1"
    assert "V" not in c.environ
    assert e.environ["V"] == "local"
    d2 = parse(text, build_args={"V": "cli", "BASE": "img"})
    assert d2.stages[0].base == "img"
    assert runs(d2)[1].environ["V"] == "cli"
    assert runs(d2)[3].environ["V"] == "cli"


def test_env_expansion_order_and_inheritance() -> None:
    """ENV values expand with the values before the instruction; child stages inherit ENV."""
    text = (
        "FROM a AS base\nARG X=arg\nENV A=1 B=$A C=${X:-none}\nENV A=2\nENV X=env\nRUN r\n"
        "FROM base AS child\nRUN s\nFROM a\nRUN t\n"
    )
    d = parse(text)
    r, s, t = runs(d)
    assert r.environ == {"A": "2", "B": "", "C": "arg", "X": "env"}
    assert s.environ == {"A": "2", "B": "", "C": "arg", "X": "env"}
    assert t.environ == {}
    assert d.stages[1].parent == 0
    assert d.stages[2].parent is None


def test_env_legacy_form_and_quotes() -> None:
    """`ENV NAME value with spaces` and quoted NAME="v w" pairs both work."""
    d = parse("FROM a\nENV PIP_CONSTRAINT /c/constraints.txt\nENV Q=\"a b\" R='$Q'\nRUN x\n")
    assert runs(d)[0].environ == {"PIP_CONSTRAINT": "/c/constraints.txt", "Q": "a b", "R": "$Q"}


def test_directives() -> None:
    """Directives are read only at the top; after any other line they are comments."""
    d = parse("# syntax=docker/dockerfile:1\n#escape = `\nFROM a\n")
    assert d.directives == (("escape", "`"), ("syntax", "docker/dockerfile:1"))
    assert d.escape == "`"
    late = parse("# a comment\n# escape=`\nFROM a\nRUN a \\\n b\n")
    assert late.escape == "\\"
    assert runs(late)[0].args == "a  b"


def test_parse_file(tmp_path: Path) -> None:
    """parse_file reads from disk and records the path."""
    path = tmp_path / "Dockerfile"
    path.write_text("FROM a\nRUN b\n")
    assert parse_file(path).path == str(path)
    with pytest.raises(InvalidDockerfile, match="cannot read"):
        parse_file(tmp_path / "missing")


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "no FROM"),
        ("ARG A=1\n", "no FROM"),
        ("RUN x\nFROM a\n", "before the first FROM"),
        ("FROM a\nFOO bar\n", "unknown instruction"),
        ("# escape=x\nFROM a\n", "invalid escape"),
        ("# escape=`\n# escape=\\\nFROM a\n", "only one 'escape'"),
        ("FROM a\nRUN <<EOF\nno end\n", "never closed"),
        ("FROM a AS one\nFROM b AS ONE\n", "duplicate stage name"),
        ("FROM a AS 1bad\n", "invalid stage name"),
        ("FROM a b c d\n", "FROM takes"),
        ("FROM\n", "FROM takes"),
        ("ARG B\nFROM ${B}\n", "expands to nothing"),
        ("FROM a\nENV A\n", "needs a value"),
        ("FROM a\nENV A=1 B\n", "can't find '='"),
        ("FROM a\nENV =1\n", "can not be blank"),
        ("FROM a\nENV A='x\n", "unterminated"),
        ("FROM a\nSHELL /bin/bash\n", "SHELL requires"),
        ("FROM a\nARG\n", "at least one"),
    ],
)
def test_invalid(text: str, match: str) -> None:
    """Invalid Dockerfiles raise InvalidDockerfile naming the problem."""
    with pytest.raises(InvalidDockerfile, match=match):
        parse(text)
