"""Reading ``pip install`` / ``uv pip install`` invocations out of image history commands.

A step's ``created_by`` (``/bin/sh -c pip install --pre --index-url U flashinfer-python==X``,
``RUN |1 V=x /bin/sh -c ...``, buildkit's ``RUN ... # buildkit``) is split into shell
commands; each install command becomes an :class:`InstallCommand`: the requirements it names,
its index options and its flags. What cannot be replayed outside the image (requirement files,
local paths, unexpanded ``$VARS``) is kept as ``skipped`` text rather than guessed at.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from packaging.requirements import InvalidRequirement, Requirement

from pinguard.build.pipcli import ASSIGNMENT, parse_install, pip_invocation, strip_wrappers
from pinguard.repair.resolve.uv import IndexOptions

_SEPARATORS = {"&&", "||", ";", "|", "&", "\n", "(", ")"}
_PREFIX = re.compile(r"^(?:RUN\s+)?(?:\|\d+\s+(?:\S+=\S*\s+)*)?(?:/bin/(?:ba)?sh\s+-c\s+)?")


@dataclass(frozen=True, slots=True)
class InstallCommand:
    """One ``pip install`` (tool "pip") or ``uv pip install`` (tool "uv") invocation."""

    tool: str
    requirements: tuple[str, ...]
    index: IndexOptions
    args: tuple[str, ...]  # the words after ``install``
    upgrade: bool = False
    no_deps: bool = False
    force_reinstall: bool = False
    constraint_files: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()  # words that cannot be replayed outside the image


def strip_history_prefix(created_by: str) -> str:
    """The shell text of a history entry, without ``RUN``, ARG prefixes and ``/bin/sh -c``."""
    text = created_by.strip()
    text = text.removesuffix("# buildkit").strip()
    text = text.replace("#(nop)", "").strip()
    return _PREFIX.sub("", text, count=1)


def _split_shell(text: str) -> list[list[str]]:
    lexer = shlex.shlex(text.replace("\\\n", " "), posix=True, punctuation_chars=";&|()")
    lexer.whitespace_split = True
    lexer.commenters = ""
    commands: list[list[str]] = [[]]
    try:
        for token in lexer:
            if token in _SEPARATORS or set(token) <= set(";&|()"):
                commands.append([])
            else:
                commands[-1].append(token)
    except ValueError:  # unbalanced quotes: fall back to plain words
        commands = [text.split()]
    return [c for c in commands if c]


def _install_args(words: Sequence[str]) -> tuple[str, list[str]] | None:
    """(tool, words after ``install``) when ``words`` is a pip or uv pip install."""
    argv = list(words)
    while argv and ASSIGNMENT.match(argv[0]):
        argv.pop(0)  # VAR=value prefixes
    hit = pip_invocation(strip_wrappers(argv, {}))
    if hit is None or hit[1] != "install":
        return None
    return hit[0], hit[2]


def parse_install_args(args: Sequence[str], tool: str = "pip") -> InstallCommand:
    """Parse the words after ``install`` into an :class:`InstallCommand`.

    What cannot be replayed outside the image (``$VAR`` locations left unexpanded in the
    history, requirement files, editables) is listed in ``skipped`` instead.
    """
    opts = parse_install(tool, args)
    skipped: list[str] = []

    def replayable(option: str, values: Sequence[str]) -> tuple[str, ...]:
        for value in values:
            if "$" in value:
                skipped.append(f"{option} {value}")
        return tuple(v for v in values if "$" not in v)

    index_url = replayable("--index-url", [opts.index_url] if opts.index_url else [])
    skipped += [f"-r {f}" for f in opts.requirement_files]
    skipped += [f"-e {e}" for e in opts.editables]
    reqs: list[str] = []
    for word in opts.positional:
        try:
            if "$" in word:
                raise InvalidRequirement(word)
            Requirement(word)
        except InvalidRequirement:
            skipped.append(word)
        else:
            reqs.append(word)
    return InstallCommand(
        tool=tool,
        requirements=tuple(reqs),
        index=IndexOptions(
            index_url=index_url[0] if index_url else None,
            extra_index_urls=replayable("--extra-index-url", opts.extra_index_urls),
            find_links=replayable("--find-links", opts.find_links),
            no_index=opts.no_index,
            index_strategy=opts.index_strategy,
            prerelease=opts.pre,
        ),
        args=tuple(args),
        upgrade=opts.upgrade,
        no_deps=opts.no_deps,
        force_reinstall=opts.force_reinstall,
        constraint_files=replayable("--constraint", opts.constraints),
        skipped=tuple(skipped),
    )


def parse_install_commands(created_by: str) -> tuple[InstallCommand, ...]:
    """Every pip/uv install in one history entry, in order."""
    found: list[InstallCommand] = []
    for words in _split_shell(strip_history_prefix(created_by)):
        hit = _install_args(words)
        if hit is not None:
            found.append(parse_install_args(hit[1], hit[0]))
    return tuple(found)


def parse_command_line(argv: Sequence[str]) -> InstallCommand | None:
    """``pip install ARGS`` / ``uv pip install ARGS`` given as words (``pinguard plan -- ...``)."""
    hit = _install_args(argv)
    return None if hit is None else parse_install_args(hit[1], hit[0])
