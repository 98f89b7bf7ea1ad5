"""The command line's entry point: the parser of every subcommand, ``main`` and its exit codes.

Each subcommand lives in its own module of this package exposing ``register(subparsers)``;
the module sets ``func`` on its parser to a callable taking the parsed namespace and returning
an exit code. ``build_parser`` imports only the subcommand named. Errors raised below are
``PinguardError`` subclasses and are mapped here to the documented exit codes; Ctrl-C at any
moment of a command, its imports included, is one line and exit 130.
"""

from __future__ import annotations

import sys

from pinguard import __version__
from pinguard.cli.output import guard_stdout, release_stdout
from pinguard.errors import EXIT_INTERRUPTED, EXIT_PASS, EXIT_USAGE, PinguardError

# ``typing.TYPE_CHECKING`` without importing typing (2 ms of a warm audit): mypy reads the name
TYPE_CHECKING = False
if TYPE_CHECKING:  # argparse is imported inside main(), so Ctrl-C while it loads is caught
    import argparse
    from collections.abc import Sequence

# Subcommand modules, in the order `pinguard --help` lists them.
COMMANDS = (
    "audit",
    "compare",
    "policy",
    "constraints",
    "plan",
    "predict",
    "lint",
    "guard",
    "gate",
    "attest",
    "verify",
    "probe",
    "fleet",
    "worker",
    "version",
)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand, or of ``command`` alone (its module is the only one
    imported: importing all of them took about a third of a warm audit's CPU)."""
    import argparse
    import importlib

    parser = argparse.ArgumentParser(
        prog="pinguard",
        description="Audit, judge, repair and gate the Python dependencies of container images.",
    )
    parser.add_argument("--version", action="version", version=f"pinguard {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS if command not in COMMANDS else (command,):
        if name == "version":
            version = sub.add_parser("version", help="print pinguard's version and exit")
            version.set_defaults(func=_print_version)
            continue
        # a subcommand that cannot be imported is a bug: let the ImportError show
        module = importlib.import_module(f"pinguard.cli.{name}")
        module.register(sub)
    return parser


def parse_command_line(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """``argv`` parsed by ``parser`` as ``main`` parses it. A subcommand whose operands are a
    list may name it as ``trailing_operands``: operands after its options join that list, as
    pre-commit runs a hook (``pinguard constraints check --policy P FILE...``: argparse alone
    takes ``check`` as the operands and refuses the files after ``--policy P``)."""
    args, extras = parser.parse_known_args(argv)
    trailing = getattr(args, "trailing_operands", None)
    if extras and trailing and not any(extra.startswith("-") for extra in extras):
        getattr(args, trailing).extend(extras)
    elif extras:
        parser.error(f"unrecognized arguments: {' '.join(extras)}")
    return args


def _print_version(_args: argparse.Namespace) -> int:
    """``pinguard version``, as trivy and syft have it: the same line as ``--version``."""
    print(f"pinguard {__version__}")
    return EXIT_PASS


def err(message: str) -> None:
    """Print one error line on stderr, prefixed like other CLI tools do."""
    print(f"pinguard: error: {message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit code. Ctrl-C anywhere in here (the subcommand's imports,
    parsing, the work) is ``pinguard: error: interrupted`` and 130, never a traceback; a
    stdout that cannot take what the command printed (closed, a full disk, its reader gone)
    is ``pinguard: error: cannot write ... to stdout: WHY`` and 2 (``cli.output``)."""
    guard = guard_stdout()
    try:
        code = _main(argv)
        guard.flush()  # a full disk or a reader gone shows here, not at the interpreter's exit
    except KeyboardInterrupt:
        err("interrupted")
        return EXIT_INTERRUPTED
    except PinguardError as exc:  # raised outside a command: its report could not be written
        err(str(exc))
        return exc.exit_code
    finally:
        release_stdout(guard)
    return code


def _main(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["audit"]:  # a warm audit of a layout, answered before parsing
        from pinguard.cli import warm

        answered = warm.answer(argv)
        if answered is not None:
            return answered
    # the first argument names the subcommand (the top level has no options taking values)
    parser = build_parser(argv[0] if argv else None)
    args = parse_command_line(parser, argv)
    args.argv = tuple(argv)  # as given: the key of a warm audit's quick entry
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        code: int = func(args)
    except PinguardError as exc:
        err(str(exc))
        return exc.exit_code
    return code
