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

from pinguard.resolve.uv import IndexOptions

# pip/uv install options that take a value (the value is the next word unless "--opt=value").
_VALUED = {
    "-i", "--index-url", "--extra-index-url", "-f", "--find-links", "-c", "--constraint",
    "-r", "--requirement", "--index-strategy", "--prerelease", "-t", "--target", "--prefix",
    "--root", "--python", "-p", "--platform", "--python-version", "--implementation", "--abi",
    "--only-binary", "--no-binary", "--progress-bar", "--cache-dir", "--src",
    "--upgrade-strategy", "-e", "--editable", "--config-settings", "-C", "--global-option",
    "--trusted-host", "--timeout", "--retries", "--log", "--report", "--proxy", "--cert",
    "--client-cert", "--exists-action", "--root-user-action", "--override",
    "--python-platform", "--extra", "--group", "--build-constraint", "-b",
    "--resolution", "--exclude-newer", "--keyring-provider", "--link-mode", "--reinstall-package",
    "-P", "--upgrade-package", "--no-build-isolation-package", "--torch-backend", "--index",
    "--default-index", "--refresh-package", "--no-binary-package", "--only-binary-package",
}  # fmt: skip
# Options naming an index, a link location or a file: a ``$VAR`` in them cannot be replayed.
_LOCATIONS = {
    "-i", "--index-url", "--default-index", "--extra-index-url", "--index", "-f",
    "--find-links", "-c", "--constraint",
}  # fmt: skip
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
    rest = list(words)
    while rest and ("=" in rest[0] and not rest[0].startswith("-")):
        rest.pop(0)  # VAR=value prefixes
    if rest and rest[0] in {"env", "sudo", "exec", "time"}:
        rest.pop(0)
    for i, word in enumerate(rest):
        base = word.rsplit("/", 1)[-1]
        if base == "uv" and rest[i + 1 : i + 3] == ["pip", "install"]:
            return "uv", rest[i + 3 :]
        if re.fullmatch(r"pip(?:3(?:\.\d+)?)?", base) and rest[i + 1 : i + 2] == ["install"]:
            return "pip", rest[i + 2 :]
        if re.fullmatch(r"python(?:3(?:\.\d+)?)?", base) and rest[i + 1 : i + 4] == [
            "-m",
            "pip",
            "install",
        ]:
            return "pip", rest[i + 4 :]
        if i > 2:
            break
    return None


def parse_install_args(args: Sequence[str], tool: str = "pip") -> InstallCommand:
    """Parse the words after ``install`` into an :class:`InstallCommand`."""
    reqs: list[str] = []
    skipped: list[str] = []
    constraints: list[str] = []
    index_url: str | None = None
    extra: list[str] = []
    links: list[str] = []
    no_index = pre = upgrade = no_deps = force = False
    strategy: str | None = None
    words = list(args)
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        opt, value = word, None
        if word.startswith("--") and "=" in word:
            opt, value = word.split("=", 1)
        if opt in _VALUED:
            if value is None:
                if i >= len(words):
                    skipped.append(word)
                    break
                value = words[i]
                i += 1
            if "$" in value and opt in _LOCATIONS:
                skipped.append(f"{opt} {value}")  # an unexpanded build ARG: not replayable
            elif opt in {"-i", "--index-url", "--default-index"}:
                index_url = value
            elif opt in {"--extra-index-url", "--index"}:
                extra.append(value)
            elif opt in {"-f", "--find-links"}:
                links.append(value)
            elif opt in {"-c", "--constraint"}:
                constraints.append(value)
            elif opt == "--index-strategy":
                strategy = value
            elif opt == "--prerelease":
                pre = pre or value == "allow"
            elif opt in {"-r", "--requirement", "-e", "--editable"}:
                skipped.append(f"{opt} {value}")
            continue
        if word == "--pre":
            pre = True
        elif word == "--no-index":
            no_index = True
        elif word in {"-U", "--upgrade"}:
            upgrade = True
        elif word == "--no-deps":
            no_deps = True
        elif word in {"--force-reinstall", "-I", "--ignore-installed", "--reinstall"}:
            force = True
        elif word.startswith("-"):
            continue  # a flag without a value (-q, --no-cache-dir, --user, ...)
        elif "$" in word:
            skipped.append(word)
        else:
            try:
                Requirement(word)
            except InvalidRequirement:
                skipped.append(word)
            else:
                reqs.append(word)
    return InstallCommand(
        tool=tool,
        requirements=tuple(reqs),
        index=IndexOptions(
            index_url=index_url,
            extra_index_urls=tuple(extra),
            find_links=tuple(links),
            no_index=no_index,
            index_strategy=strategy,
            prerelease=pre,
        ),
        args=tuple(args),
        upgrade=upgrade,
        no_deps=no_deps,
        force_reinstall=force,
        constraint_files=tuple(constraints),
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
