"""Why a change happened, in words every report shares: the cause chain, else the request.

A change whose cause chain is empty was, in the usual case, asked for by its own step
(``pip install torch==2.11.0`` adds torch with no dependant to blame). ``asked_for`` reads
the step's history command through the install-command reader and returns the requirement
it named for each package, so a report can say "asked for by this step (torch==2.11.0)"
instead of leaving the reason blank. ``reasons`` gives the lines to show for one change;
``headline`` names a step by what it installed, for column heads too narrow for a command.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from pinguard.buildfile import history
from pinguard.models import Cause, ChangeKind

ASKED = "asked for by this step"


def command_text(created_by: str) -> str:
    """A history entry's command on one line (`pinguard.buildfile.history.command_text`)."""
    return " ".join(history.command_text(created_by).split())


@lru_cache(maxsize=256)
def asked_for(created_by: str) -> Mapping[str, str]:
    """{normalized name: requirement as written} for every install in a history command."""
    out: dict[str, str] = {}
    for command in history.install_commands(created_by):
        for text in command.positional:
            try:
                name = canonicalize_name(Requirement(text).name)
            except InvalidRequirement:
                continue
            out.setdefault(name, text)
    return out


def reasons(
    kind: ChangeKind, name: str, causes: Sequence[Cause], created_by: str | None
) -> list[str]:
    """The reason lines for one change: the chain nearest first, else what the step asked."""
    if causes:
        return [f"{c.package} {c.version} requires {c.requirement}" for c in causes]
    if created_by is None:
        return []
    requested = asked_for(created_by).get(canonicalize_name(name))
    if requested is not None:
        return [f"{ASKED} ({requested})"]
    if kind is ChangeKind.REMOVED and "uninstall" in created_by:
        return ["uninstalled by this step"]
    command = command_text(created_by)
    if not command:
        return ["made by this step (no installed requirement asks for it)"]
    short = command if len(command) <= 60 else command[:59] + "\u2026"
    return [f"made by this step ({short}); no installed requirement asks for it"]


def headline(created_by: str) -> str:
    """What a step did, in the fewest words that tell steps apart (the HTML's column heads):
    the requirements and files an install named (``pip install torch==2.11.0+cu130
    -r req.txt``; options left out), else the command itself."""
    parts = []
    for command in history.install_commands(created_by):
        words = [*command.positional, *(f"-r {f}" for f in command.requirement_files)]
        words += [f"-e {e}" for e in command.editables]
        parts.append(f"{command.tool} install {' '.join(words)}".rstrip())
    return " && ".join(parts) if parts else command_text(created_by)
