"""Every pinguard command line the documentation shows is one pinguard's own parser accepts.

The documents are README.md, docs/*.md and every file of docs/deploy/. A command line is a
shell command whose program is pinguard (``pinguard``, a path ending in ``/pinguard`` such as
``.venv/bin/pinguard``, ``python -m pinguard``, the zipapp ``python3 /opt/pinguard.pyz``), found:

- in fenced code blocks: every line of ``sh``, ``dockerfile`` and untagged blocks, the ``$ ``
  lines of ``console`` blocks (the others are output), every string of ``yaml`` blocks (a
  CI step's script, a compose ``command`` list); ``python``, ``toml`` and ``text`` blocks
  hold no command lines; a pre-commit hook of ``.pre-commit-hooks.yaml`` named by ``id``
  runs its ``entry`` with the block's ``args`` and a file name;
- in inline code spans that start with the program;
- in docs/deploy/: the compose file's ``command`` lists, the Dockerfile's ``RUN`` lines.

``\\`` continuations are joined; ``&&``, ``||``, ``|`` and ``;`` with spaces around them
separate commands, ``$(...)`` starts one, and ``NAME=value`` words before the program are
the environment. ``$VAR`` and placeholders in capitals (``REF``, ``FILE``) are words like any.

Two kinds of line are grammar, not commands, and get the weaker check that the subcommand
exists, every option they name exists on it under exactly that spelling, and every choice
they list for an option (``[-f table|json]``) is one of its choices:

- a synopsis: a word with ``[`` or ``]``, ``A|B`` alternatives (a ``|`` inside a word), or
  ``...``;
- an inline span naming a subcommand and perhaps some of its options, with no operand and no
  value but placeholders in capitals (`` `pinguard audit` ``, `` `pinguard audit --cache URL` ``).

Every other line is parsed in full: ``build_parser().parse_args(argv)`` must not exit with
an error, and every ``--option`` it spells must be one the subcommand has (argparse would
take an abbreviation). A few documented commands that need nothing but the repository are
also run, and their documented exit codes and output checked.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import glob
import io
import re
import shlex
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from pinguard.cli import build_parser, main, parse_command_line
from tests.infra.paths import REPO

DOCUMENTS = (
    REPO / "README.md",
    *sorted((REPO / "docs").glob("*.md")),
    *sorted(p for p in (REPO / "docs" / "deploy").iterdir() if p.is_file()),
)
HOOKS = {hook["id"]: hook for hook in yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())}
PARSER = functools.cache(build_parser)  # every subcommand's parser, built once
SEPARATORS = {"&&", "||", "|", ";", "{", "}", "(", ")", "!"}
NO_COMMANDS = {"python", "toml", "text", "json"}
OPTION = re.compile(r"^(--?[A-Za-z][\w-]*)")
PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9_.]*")  # REF, FILE, X.Y: a metavar, not a value


@dataclass(frozen=True)
class Documented:
    """One pinguard command line of the documentation: its arguments after the program."""

    where: str  # file:line, relative to the repository
    argv: tuple[str, ...]
    inline: bool = False

    @property
    def grammar(self) -> bool:
        """A synopsis, or an inline span that only names a subcommand and options."""
        if any("[" in w or "]" in w or "|" in w or w.endswith("...") for w in self.argv):
            return True
        rest = self.argv[_path_length(self) :]
        return self.inline and all(w.startswith("-") or PLACEHOLDER.fullmatch(w) for w in rest)


def _path_length(command: Documented) -> int:
    """How many leading words of ``command`` name the subcommand (``fleet run`` is two)."""
    parser, count = PARSER(), 0
    for word in command.argv:
        sub = _subparsers(parser)
        if sub is None or word.split("|")[0] not in sub.choices:
            break
        parser, count = sub.choices[word.split("|")[0]], count + 1
    return count


def _subparsers(
    parser: argparse.ArgumentParser,
) -> argparse._SubParsersAction[argparse.ArgumentParser] | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


# -- finding the command lines ---------------------------------------------------------------


def _program_end(words: Sequence[str]) -> int | None:
    """Where pinguard's own arguments start in ``words``, or None when pinguard is not run.
    A subcommand or an option follows the program: ``pinguard 0.1.0 policy: ...`` is output."""
    i = 0
    while i < len(words) and re.fullmatch(r"[A-Za-z_]\w*=.*", words[i]):
        i += 1  # NAME=value: the command's environment
    program = [word.rsplit("/", 1)[-1] for word in words[i : i + 3]]
    if program[:1] in (["pinguard"], ["pinguard.pyz"]):
        end = i + 1
    elif (
        program[:1]
        and re.fullmatch(r"python[\d.]*", program[0])
        and program[1:] == ["-m", "pinguard"]
    ):
        end = i + 3
    elif (
        program[:1]
        and re.fullmatch(r"python[\d.]*", program[0])
        and program[1:2] == ["pinguard.pyz"]
    ):
        end = i + 2
    else:
        return None
    return end if end < len(words) and re.match(r"[a-z-]", words[end]) else None


def _commands_in_words(words: list[str]) -> Iterator[list[str]]:
    """The pinguard argument lists among one shell line's words."""
    segment: list[str] = []
    depth = 0  # inside a synopsis's [...]: [--push | -o FILE] is grammar, not a pipe
    for word in words:
        if depth > 0 and word in SEPARATORS:
            segment.append(word)
            continue
        depth += word.count("[") - word.count("]")
        if "$(" in word:  # report=$(pinguard verify ...: a command starts inside the word
            before, _, after = word.partition("$(")
            yield from _pinguard([*segment, before])
            segment = [after] if after else []
        elif word in SEPARATORS:
            yield from _pinguard(segment)
            segment = []
        elif word.endswith(")") and not word.startswith("("):
            yield from _pinguard([*segment, word[:-1]])  # the end of a $(...)
            segment = []
        else:
            segment.append(word)
    yield from _pinguard(segment)


def _pinguard(segment: list[str]) -> Iterator[list[str]]:
    end = _program_end(segment)
    if end is not None:
        yield segment[end:]


def _logical_lines(lines: Sequence[str], first: int) -> Iterator[tuple[int, str]]:
    """(line number, text) with ``\\`` continuations joined."""
    pending, start = "", first
    for number, line in enumerate(lines, first):
        if not pending:
            start = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        yield start, pending + line
        pending = ""
    if pending:
        yield start, pending


def _shell(
    path: str, lines: Sequence[str], first: int, *, prompts: bool = False, inline: bool = False
) -> Iterator[Documented]:
    """The pinguard commands of shell text (a script, a Dockerfile, a console transcript)."""
    for number, line in _logical_lines(lines, first):
        text = line.strip()
        if prompts and not text.startswith("$ "):
            continue  # a console block's output
        text = re.sub(r"^(\$ |RUN\s+|CMD\s+|ENTRYPOINT\s+)", "", text)
        if "pinguard" not in text:
            continue
        try:
            words = shlex.split(text, comments=True)
        except ValueError as exc:  # an unbalanced quote: a line no shell runs
            raise AssertionError(f"{path}:{number}: cannot split {text!r}: {exc}") from exc
        for argv in _commands_in_words(words):
            yield Documented(f"{path}:{number}", tuple(argv), inline)


def _yaml(path: str, text: str, first: int) -> Iterator[Documented]:
    """The commands of a YAML document: strings read as shell, lists of strings as argv,
    and pre-commit hooks of pinguard's own ``.pre-commit-hooks.yaml``."""

    def walk(node: yaml.Node) -> Iterator[Documented]:
        line = first + node.start_mark.line
        if isinstance(node, yaml.ScalarNode) and isinstance(node.value, str):
            block = 1 if node.style in ("|", ">") else 0
            yield from _shell(path, node.value.splitlines(), line + block)
        elif isinstance(node, yaml.SequenceNode):
            words = [item.value for item in node.value if isinstance(item, yaml.ScalarNode)]
            end = _program_end(words) if len(words) == len(node.value) else None
            if end is not None:
                yield Documented(f"{path}:{line}", tuple(words[end:]))
                return
            for item in node.value:
                yield from walk(item)
        elif isinstance(node, yaml.MappingNode):
            keys = {k.value: v for k, v in node.value if isinstance(k, yaml.ScalarNode)}
            hook = keys.get("id")
            if isinstance(hook, yaml.ScalarNode) and hook.value in HOOKS:
                entry = shlex.split(HOOKS[hook.value]["entry"])
                args = keys.get("args")
                extra = [a.value for a in args.value] if isinstance(args, yaml.SequenceNode) else []
                argv = [*entry[1:], *extra, "FILE"]
                yield Documented(f"{path}:{line}", tuple(argv))
            for _key, value in node.value:
                yield from walk(value)

    node = yaml.compose(text)
    if node is not None:
        yield from walk(node)


def _markdown(path: str, text: str) -> Iterator[Documented]:
    lines = text.splitlines()
    fence: str | None = None
    body: list[str] = []
    start = 0
    for number, line in enumerate(lines, 1):
        marker = re.match(r"^\s*```\s*(\w*)", line)
        if marker and fence is None:
            fence, body, start = marker.group(1), [], number + 1
            continue
        if marker and fence is not None:
            yield from _block(path, fence, body, start)
            fence = None
            continue
        if fence is not None:
            body.append(line)
            continue
        for span in re.findall(r"`([^`]+)`", line):
            words = span.split()
            if words and _program_end(words) is not None:
                yield from _shell(path, [span], number, inline=True)


def _block(path: str, fence: str, body: list[str], start: int) -> Iterator[Documented]:
    if fence in NO_COMMANDS:
        return
    if fence == "yaml":
        yield from _yaml(path, "\n".join(body), start)
    else:
        yield from _shell(path, body, start, prompts=fence == "console")


def documented(documents: Sequence[Path] = DOCUMENTS) -> list[Documented]:
    found: list[Documented] = []
    for document in documents:
        path = str(document.relative_to(REPO))
        text = document.read_text(encoding="utf-8")
        if document.suffix == ".md":
            found.extend(_markdown(path, text))
        elif document.suffix in (".yaml", ".yml"):
            found.extend(_yaml(path, text, 1))
        elif document.name == "Dockerfile" or document.suffix == ".sh":
            found.extend(_shell(path, text.splitlines(), 1))
        else:
            raise AssertionError(f"{path}: no reader for this kind of document")
    return found


# -- checking them ----------------------------------------------------------------------------


def problems(command: Documented) -> list[str]:
    """What is wrong with one documented command line (nothing: it is right)."""
    parsers = [PARSER()]
    words = list(command.argv)
    while words:
        sub = _subparsers(parsers[0])
        names = words[0].strip("[]").split("|")
        if sub is None or names[0].startswith("-"):
            break
        unknown = [n for n in names if n not in sub.choices]
        if unknown:
            return [f"no subcommand {' '.join(unknown)!r} (choose from {', '.join(sub.choices)})"]
        parsers = [sub.choices[n] for n in names]
        words.pop(0)
    found = [f for p in parsers for f in _options_named(p, words)]
    if found or command.grammar:
        return found
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            parse_command_line(PARSER(), command.argv)
    except SystemExit as exc:
        if exc.code not in (0, None):
            return [err.getvalue().strip().splitlines()[-1]]
    return []


def _options_named(parser: argparse.ArgumentParser, words: list[str]) -> list[str]:
    """Each option ``words`` names that ``parser`` lacks, and each listed choice it refuses."""
    wrong: list[str] = []
    options = parser._option_string_actions
    for i, word in enumerate(words):
        if word == "--":
            break  # what follows is another program's (pinguard plan REF -- pip install ...)
        for piece in word.strip("[]()").split("|"):
            option = OPTION.match(piece)
            if option is None:
                continue
            action = options.get(option.group(1))
            if action is None:
                wrong.append(f"{parser.prog} has no option {option.group(1)}")
                continue
            value = words[i + 1].strip("[]()") if i + 1 < len(words) else ""
            if "=" in piece:
                value = piece.split("=", 1)[1]
            if not action.choices or not value or value.startswith("-"):
                continue
            for choice in value.split("|"):
                if choice not in action.choices and not PLACEHOLDER.fullmatch(choice):
                    wrong.append(f"{parser.prog} {option.group(1)}: {choice!r} is no choice")
    return wrong


COMMANDS = documented()


def test_the_documentation_shows_the_commands_this_test_reads() -> None:
    """The reader finds what it is meant to (a reader that found nothing would pass)."""
    where = {c.where.rsplit(":", 1)[0] for c in COMMANDS}
    assert {"README.md", "docs/deploy/compose.yaml", "docs/guard.md", "docs/ci.md"} <= where
    assert len(COMMANDS) > 100
    argvs = {c.argv for c in COMMANDS}
    # the demo chain, a $(...) substitution, a zipapp in a RUN line, a folded YAML script
    assert ("audit", "oci-archive:examples/out/glm-serving-demo.tar:2026-11-29") in argvs
    assert any(a[:2] == ("verify", "docker://$1") or a[:2] == ("verify", "$ref") for a in argvs)
    assert ("guard", "--policy", "/etc/pinguard/policy.toml") in argvs
    assert any(a[:1] == ("gate",) and "docker://$PINGUARD_IMAGE" in a for a in argvs)
    assert any(c.grammar for c in COMMANDS)
    assert any(not c.grammar for c in COMMANDS)


@pytest.mark.parametrize("command", COMMANDS, ids=[c.where for c in COMMANDS])
def test_documented_command_parses(command: Documented) -> None:
    assert problems(command) == [], " ".join(("pinguard", *command.argv))


@pytest.mark.parametrize(
    ("line", "wrong"),
    [
        ("pinguard audit REF --no-such-flag", "has no option --no-such-flag"),
        ("pinguard audit REF extra", "unrecognized arguments: extra"),
        ("pinguard audit REF --output", "expected one argument"),
        ("pinguard audit REF --platf linux/amd64", "has no option --platf"),
        ("pinguard audit REF [--bogus X]", "has no option --bogus"),
        ("pinguard audit REF [-f table|yaml]", "'yaml' is no choice"),
        ("pinguard fleet run|recieve --broker URL", "no subcommand 'recieve'"),
        ("pinguard audit", "the following arguments are required: REF"),
    ],
)
def test_a_wrong_line_is_caught(tmp_path: Path, line: str, wrong: str) -> None:
    """The check can fail: a bogus flag, an abbreviation, a wrong choice or subcommand."""
    doc = tmp_path / "doc.md"
    doc.write_text(f"```sh\n{line}\n```\n")
    [command] = _markdown("doc.md", doc.read_text())
    assert command.where == "doc.md:2"
    assert any(wrong in p for p in problems(command)), problems(command)


def test_an_inline_span_naming_a_subcommand_is_grammar() -> None:
    [named, bogus] = list(
        _markdown("doc.md", "`pinguard audit --cache` and `pinguard lint --nope`")
    )
    assert named.grammar
    assert problems(named) == []
    assert problems(bogus) == ["pinguard lint has no option --nope"]


# -- the cheap ones, run ------------------------------------------------------------------------

RUN = {
    ("policy", "check", "policies/*.toml"): (0, "policies/default.toml: ok"),
    ("policy", "check", "nope.toml"): (2, "pinguard: error: cannot read 'nope.toml'"),
    ("policy", "rules"): (0, "downgrade"),
    ("lint", "/nonexistent"): (2, "pinguard: error: cannot read '/nonexistent'"),
}


@pytest.mark.parametrize("argv", sorted(RUN), ids=" ".join)
def test_documented_command_runs(
    argv: tuple[str, ...], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Commands the documentation shows with their outcome, run as shown (from the checkout)."""
    assert argv in {c.argv for c in COMMANDS}, "no longer documented"
    monkeypatch.chdir(REPO)
    expanded = [m for word in argv for m in (sorted(glob.glob(word)) if "*" in word else [word])]
    code, text = RUN[argv]
    assert main(expanded) == code
    captured = capsys.readouterr()
    assert text in captured.out + captured.err


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    from pinguard import __version__

    assert main(["version"]) == 0
    assert capsys.readouterr().out == f"pinguard {__version__}\n"
