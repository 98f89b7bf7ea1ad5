"""The command line: argument parsing, wiring, progress and exit codes.

This package is the only place in pinguard that prints or exits. ``app`` holds the entry
point (``main``, ``build_parser``, ``err``); each subcommand is a module of its own. Re-exports
only.
"""

from pinguard.cli.app import COMMANDS, build_parser, err, main, parse_command_line

__all__ = ["COMMANDS", "build_parser", "err", "main", "parse_command_line"]
