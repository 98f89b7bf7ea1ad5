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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pinguard",
        description="Audit, judge, repair and gate the Python dependencies of container images.",
    )
    parser.add_argument("--version", action="version", version=f"pinguard {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        # a subcommand that cannot be imported is a bug: let the ImportError show
        module = importlib.import_module(f"pinguard.cli.{name}")
        module.register(sub)
    return parser


def err(message: str) -> None:
    """Print one error line on stderr, prefixed like other CLI tools do."""
    print(f"pinguard: error: {message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
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
