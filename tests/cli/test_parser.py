"""The command line's parser: every subcommand registers, none is skipped silently."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

import pinguard.cli.app
from pinguard.cli import COMMANDS, build_parser


def test_every_command_is_registered() -> None:
    """Each listed subcommand parses its --help (argparse exits 0 after printing it)."""
    parser = build_parser()
    for name in COMMANDS:
        with pytest.raises(SystemExit) as exc:
            parser.parse_args([name, "--help"])
        assert exc.value.code == 0, name


def test_a_subcommand_that_cannot_be_imported_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A missing subcommand module raises instead of vanishing from `pinguard --help`."""
    monkeypatch.setattr(pinguard.cli.app, "COMMANDS", (*COMMANDS, "no_such_command"))
    with pytest.raises(ModuleNotFoundError, match=r"pinguard\.cli\.no_such_command"):
        build_parser()


@pytest.mark.parametrize("command", ["lint", "guard", "gate", "audit"])
def test_policy_options_are_the_shared_ones(command: str) -> None:
    """lint, guard, gate and audit take the same --policy/--target/--fail-on options."""
    parser = build_parser()
    base = {
        "lint": ["lint", "Dockerfile"],
        "guard": ["guard"],
        "gate": ["gate", "--dockerfile", "D", "--image", "x:1"],
        "audit": ["audit", "x:1"],
    }[command]
    args = parser.parse_args([*base, "--policy", "a.toml", "--policy", "b.toml", "--target", "t"])
    assert args.policy == ["a.toml", "b.toml"]
    assert args.target == ["t"]
    assert args.fail_on == ("warning" if command == "lint" else "error")


def test_building_the_parser_needs_only_what_the_guard_zipapp_ships() -> None:
    """`pinguard.pyz guard` builds the whole parser; the zipapp leaves out requests,
    platformdirs, isal and zstandard (scripts/build_zipapp.py), so registering the
    subcommands must not import them."""
    blocked = ("requests", "platformdirs", "isal", "zstandard")
    code = (
        "import sys\n"
        f"for name in {blocked!r}:\n"
        "    sys.modules[name] = None\n"
        "from pinguard.cli import build_parser\n"
        "build_parser()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def test_a_subcommand_alone_imports_only_its_own_module() -> None:
    """`pinguard audit ...` builds only the audit parser: the other subcommands' modules
    (fleet, attest, ...) are not imported, and the parser still parses audit's options."""
    code = (
        "import sys\n"
        "from pinguard.cli import COMMANDS, build_parser\n"
        "args = build_parser('audit').parse_args(['audit', 'x:1', '--format', 'json'])\n"
        "assert args.format == 'json', args\n"
        "loaded = sorted(c for c in COMMANDS if f'pinguard.cli.{c}' in sys.modules)\n"
        "print(' '.join(loaded))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["audit"]


def test_every_format_choice_comes_from_the_one_table() -> None:
    """Each command's ``--format`` choices are report/formats.py's table for it (fleet's also
    the keys of its renderers in fleet/render.py, which report/ cannot import)."""
    from pinguard.fleet.render import FLEET_FORMATS
    from pinguard.report import formats

    tables: dict[tuple[str, ...], tuple[str, ...]] = {
        ("audit",): tuple(formats.FORMATS),
        ("predict",): tuple(formats.FORMATS),
        ("compare",): tuple(formats.COMPARE_FORMATS),
        ("lint",): tuple(formats.LINT_FORMATS),
        ("gate",): formats.VERDICT_FORMATS,
        ("guard",): formats.VERDICT_FORMATS,
        ("verify",): formats.VERIFY_FORMATS,
        ("probe",): formats.PROBE_FORMATS,
        ("fleet", "run"): formats.FLEET_FORMAT_NAMES,
        ("fleet", "report"): formats.FLEET_FORMAT_NAMES,
    }
    assert tuple(FLEET_FORMATS) == formats.FLEET_FORMAT_NAMES
    for path, names in tables.items():
        parser = build_parser()
        for word in path:
            [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
            parser = sub.choices[word]
        [action] = [a for a in parser._actions if "--format" in a.option_strings]
        assert tuple(action.choices or ()) == names, path
