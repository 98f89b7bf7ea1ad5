"""Image history entries: the command a step ran, and the Dockerfile line that made it.

A history entry's ``created_by`` wraps the command in its builder's bookkeeping: docker and
buildah write ``/bin/sh -c pip install x`` for a RUN, ``|2 A=1 B=2 /bin/sh -c ...`` when build
args were in effect, and ``/bin/sh -c #(nop) ENV A=b`` (or ``COPY file:... in /x``) for other
instructions; BuildKit writes ``RUN /bin/sh -c pip install x # buildkit``, ``RUN |1 A=1
/bin/sh -c ...`` and ``ENV A=b``. This module owns peeling that off (`command_text`, and
`strip_build_args` for display that keeps the shell), and aligning an image's steps with the
instructions of the Dockerfile that built it (`dockerfile_step_lines`). Reading the command's
words is `pinguard.buildfile.shell`'s; reading an install in them is `pinguard.buildfile.pipcli`'s.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pinguard.buildfile.dockerfile import parse
from pinguard.buildfile.pipcli import InstallCommand, read_install
from pinguard.buildfile.shell import split_commands
from pinguard.models import Step

# "RUN ", "|2 A=1 B=2 ", "/bin/sh -c " (or bash), each optional, in that order.
_PREFIX = re.compile(r"^(?:RUN\s+)?(?:\|\d+\s+(?:\S+=\S*\s+)*)?(?:/bin/(?:ba)?sh\s+-c\s+)?")
_BUILD_ARGS = re.compile(r"^(RUN )?\|\d+ (?:\S+=\S* )*")


def command_text(created_by: str) -> str:
    """The command a history entry ran: the shell script of a RUN, else the instruction.

    ``/bin/sh -c pip install x`` -> ``pip install x``; ``|1 V=2 /bin/sh -c make`` -> ``make``;
    ``/bin/sh -c #(nop)  ENV A=b`` -> ``ENV A=b``; ``RUN /bin/sh -c make # buildkit`` ->
    ``make``. Newlines and spacing inside the script are kept.
    """
    text = created_by.strip().removesuffix("# buildkit").strip()
    text = text.replace("#(nop)", "").strip()
    text = _PREFIX.sub("", text, count=1)
    # "/bin/sh -c #(nop) COPY ..." leaves "COPY ..."; a prefix written twice loses both
    return _PREFIX.sub("", text, count=1)


def install_commands(created_by: str) -> tuple[InstallCommand, ...]:
    """Every pip/uv install a history entry ran, in order, parsed."""
    script = command_text(created_by)
    try:
        commands = split_commands(script)
    except ValueError:  # an unterminated quote: fall back to plain words
        commands = [script.split()]
    found = (read_install(words) for words in commands)
    return tuple(c for c in found if c is not None)


def strip_build_args(created_by: str) -> str:
    """The entry on one line without the ``|N NAME=value ...`` build args (which can be long).

    ``|1 V=2 /bin/sh -c pip  install x`` -> ``/bin/sh -c pip install x``; the shell is kept.
    """
    return _BUILD_ARGS.sub(r"\1", " ".join(created_by.split()), count=1)


def _norm(text: str) -> str:
    return " ".join(text.replace("\\\n", " ").split())


def dockerfile_step_lines(
    text: str, steps: Sequence[Step], path: str = "Dockerfile"
) -> dict[int, int]:
    """Map step indexes to the first line of the Dockerfile instruction that made them.

    Steps are aligned from the end with the instructions of the last stage: a RUN step
    matches a RUN instruction with the same command (whitespace-insensitive, or one
    containing the other), any other step an instruction with the keyword its history entry
    names. Steps that match nothing (base-image steps, mostly) are left out. A Dockerfile
    that cannot be parsed gives an empty mapping.
    """
    try:
        parsed = parse(text, path=path)
    except ValueError:
        return {}
    if not parsed.stages:
        return {}
    instructions = [i for i in parsed.stages[-1].instructions if i.keyword != "FROM"]
    mapping: dict[int, int] = {}
    j = len(instructions) - 1
    for step in reversed(steps):
        history = _norm(command_text(step.created_by))
        if not history:
            continue
        first_word = history.split()[0].upper()
        for k in range(j, -1, -1):
            ins = instructions[k]
            if ins.keyword == "RUN":
                command = _norm(" ".join(ins.exec_form) if ins.exec_form else ins.args)
                ok = bool(command) and (
                    command == history or command in history or history in command
                )
            else:
                ok = first_word == ins.keyword
            if ok:
                mapping[step.index] = ins.start_line
                j = k - 1
                break
    return mapping
