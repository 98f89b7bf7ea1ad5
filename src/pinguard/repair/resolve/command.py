"""Replaying ``pip install`` / ``uv pip install`` steps of an image's history outside the image.

A step's ``created_by`` (``/bin/sh -c pip install --pre --index-url U flashinfer-python==X``,
``RUN |1 V=x /bin/sh -c ...``, BuildKit's ``RUN ... # buildkit``) is reduced to its shell
script (`pinguard.buildfile.history`), split into simple commands (`pinguard.buildfile.shell`) and
each install among them read as a `pinguard.buildfile.pipcli.InstallCommand`. What of it can be
replayed by a resolver here is an `InstallReplay`: the requirements, index options and
constraint files it names; what cannot be replayed outside the image (requirement files,
editables and local paths, unexpanded ``$VARS``) is kept as ``skipped`` text rather than
guessed at.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pinguard.buildfile.history import install_commands
from pinguard.buildfile.pipcli import InstallCommand, read_install
from pinguard.repair.resolve.uv import IndexOptions
from pinguard.target import parse_requirement


@dataclass(frozen=True, slots=True)
class InstallReplay:
    """What a resolver outside the image can replay of one install command."""

    command: InstallCommand
    requirements: tuple[str, ...]  # valid PEP 508 requirements with nothing left unexpanded
    index: IndexOptions
    constraint_files: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()  # what cannot be replayed outside the image, as written


def replay(command: InstallCommand) -> InstallReplay:
    """The replayable part of ``command``; the rest goes to ``skipped``."""
    skipped: list[str] = []

    def replayable(option: str, values: Sequence[str]) -> tuple[str, ...]:
        for value in values:
            if "$" in value:
                skipped.append(f"{option} {value}")
        return tuple(v for v in values if "$" not in v)

    index_url = replayable("--index-url", [command.index_url] if command.index_url else [])
    skipped += [f"-r {f}" for f in command.requirement_files]
    skipped += [f"-e {e}" for e in command.editables]
    reqs: list[str] = []
    for word in command.positional:
        if "$" in word or parse_requirement(word) is None:
            skipped.append(word)
        else:
            reqs.append(word)
    return InstallReplay(
        command=command,
        requirements=tuple(reqs),
        index=IndexOptions(
            index_url=index_url[0] if index_url else None,
            extra_index_urls=replayable("--extra-index-url", command.extra_index_urls),
            find_links=replayable("--find-links", command.find_links),
            no_index=command.no_index,
            index_strategy=command.index_strategy,
            prerelease=command.pre,
        ),
        constraint_files=replayable("--constraint", command.constraints),
        skipped=tuple(skipped),
    )


def parse_install_commands(created_by: str) -> tuple[InstallReplay, ...]:
    """Every pip/uv install in one history entry, in order, as replays."""
    return tuple(replay(c) for c in install_commands(created_by))


def parse_command_line(argv: Sequence[str]) -> InstallReplay | None:
    """``pip install ARGS`` / ``uv pip install ARGS`` given as words (``pinguard plan -- ...``)."""
    command = read_install(argv)
    return None if command is None else replay(command)
