"""The command line: argument parsing, wiring, progress and exit codes.

This package is the only place in pinguard that prints or exits. Each subcommand lives in
its own module exposing ``register(subparsers)``; the module sets ``func`` on its parser to
a callable taking the parsed namespace and returning an exit code. Errors raised below are
``PinguardError`` subclasses and are mapped here to the documented exit codes.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from pinguard import __version__
from pinguard.errors import EXIT_USAGE, PinguardError

# Subcommand modules, in the order `pinguard --help` lists them.
COMMANDS = (
    "audit",
    "compare",
    "policy",
    "constraints",
    "plan",
    "lint",
    "guard",
    "gate",
    "attest",
    "verify",
    "probe",
    "fleet",
    "worker",
)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand, or of ``command`` alone (its module is the only one
    imported: importing all of them took about a third of a warm audit's CPU)."""
    parser = argparse.ArgumentParser(
        prog="pinguard",
        description="Audit, judge, repair and gate the Python dependencies of container images.",
    )
    parser.add_argument("--version", action="version", version=f"pinguard {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS if command not in COMMANDS else (command,):
        # a subcommand that cannot be imported is a bug: let the ImportError show
        module = importlib.import_module(f"pinguard.cli.{name}")
        module.register(sub)
    return parser


def err(message: str) -> None:
    """Print one error line on stderr, prefixed like other CLI tools do."""
    print(f"pinguard: error: {message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # the first argument names the subcommand (the top level has no options taking values)
    parser = build_parser(argv[0] if argv else None)
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        code: int = func(args)
    except PinguardError as exc:
        err(str(exc))
        return exc.exit_code
    except KeyboardInterrupt:
        err("interrupted")
        return 130
    return code
