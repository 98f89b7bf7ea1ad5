"""``require_guard``: a real policy key that makes ``lint`` and ``gate`` report ``missing-guard``.

The gate audits a real directory (``dir:``) holding one installed distribution, so these run
without image builds; the expected rules and exit codes are written by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pinguard.cli import main
from pinguard.errors import ConfigError
from pinguard.policy import load_policy, parse_policy

UNGUARDED = "FROM python:3.12\nRUN pip install -c /c.txt a==1.0\n"
GUARDED = (
    "FROM python:3.12\n"
    "RUN pip install -c /c.txt a==1.0 && python3 /opt/pinguard.pyz guard --policy /p.toml\n"
)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """An image filesystem with one distribution in a venv."""
    info = tmp_path / "root/opt/venv/lib/python3.12/site-packages/a-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: a\nVersion: 1.0\n")
    return tmp_path / "root"


# (Dockerfile, policy, exit code, rules reported): the same for lint and gate
CASES = pytest.mark.parametrize(
    ("dockerfile", "policy", "code", "rules"),
    [
        (UNGUARDED, "require_guard = true\n", 1, ["missing-guard"]),
        (GUARDED, "require_guard = true\n", 0, []),
        (UNGUARDED, "require_guard = false\n", 0, []),
        (UNGUARDED, "", 0, []),
    ],
    ids=["unguarded", "guarded", "key-false", "key-absent"],
)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def lint_rules(tmp_path: Path, dockerfile: str, policy: str) -> tuple[int, list[str]]:
    out = tmp_path / "lint.json"
    code = main(
        [
            "lint",
            str(write(tmp_path, "Dockerfile", dockerfile)),
            "--policy",
            str(write(tmp_path, "p.toml", policy)),
            "--format",
            "json",
            "-o",
            str(out),
        ]
    )
    rules = [f["rule"] for f in json.loads(out.read_text())["findings"]] if out.exists() else []
    return code, rules


def gate_rules(tmp_path: Path, root: Path, dockerfile: str, policy: str) -> tuple[int, list[str]]:
    sarif = tmp_path / "gate.sarif"
    code = main(
        [
            "gate",
            "--dockerfile",
            str(write(tmp_path, "Dockerfile", dockerfile)),
            "--image",
            f"dir:{root}",
            "--policy",
            str(write(tmp_path, "p.toml", policy)),
            "--sarif",
            str(sarif),
            "--no-cache",
        ]
    )
    if not sarif.exists():
        return code, []
    return code, [r["ruleId"] for r in json.loads(sarif.read_text())["runs"][0]["results"]]


def test_the_key_loads_validates_and_later_files_win(tmp_path: Path) -> None:
    """true/false are read; absent is false; the extending file overrides what it extends."""
    assert parse_policy("require_guard = true\n").require_guard is True
    assert parse_policy("require_guard = false\n").require_guard is False
    assert parse_policy("").require_guard is False
    base = write(tmp_path, "base.toml", "require_guard = true\n")
    child = write(tmp_path, "child.toml", 'extend = ["base.toml"]\nrequire_guard = false\n')
    assert load_policy(base).require_guard is True
    assert load_policy(child).require_guard is False
    other = write(tmp_path, "other.toml", "require_guard = true\n")
    assert load_policy(child, other).require_guard is True  # --policy files combine in order
    assert load_policy(other, child).require_guard is False
    pyproject = write(tmp_path, "pyproject.toml", "[tool.pinguard]\nrequire_guard = true\n")
    assert load_policy(pyproject).require_guard is True


def test_a_wrong_type_is_a_config_error_with_file_and_line(tmp_path: Path) -> None:
    policy = write(tmp_path, "p.toml", '# guard\n\nrequire_guard = "yes"\n')
    with pytest.raises(ConfigError) as exc:
        load_policy(policy)
    assert str(exc.value) == (
        f"{policy}:3: require_guard: expected true or false, got string 'yes'"
    )


@CASES
def test_lint(tmp_path: Path, dockerfile: str, policy: str, code: int, rules: list[str]) -> None:
    assert lint_rules(tmp_path, dockerfile, policy) == (code, rules)


@CASES
def test_gate(
    tmp_path: Path, root: Path, dockerfile: str, policy: str, code: int, rules: list[str]
) -> None:
    assert gate_rules(tmp_path, root, dockerfile, policy) == (code, rules)


def test_lint_finding_names_the_policy_file(tmp_path: Path) -> None:
    """The missing-guard finding says which policy asked for the guard."""
    out = tmp_path / "lint.json"
    policy = write(tmp_path, "p.toml", "require_guard = true\n")
    dockerfile = write(tmp_path, "Dockerfile", UNGUARDED)
    main(["lint", str(dockerfile), "--policy", str(policy), "--format", "json", "-o", str(out)])
    (finding,) = json.loads(out.read_text())["findings"]
    assert (finding["rule"], finding["line"], finding["policy_file"]) == (
        "missing-guard",
        2,
        str(policy),
    )


@pytest.mark.parametrize("command", ["lint", "gate"])
def test_wrong_type_exits_2(
    tmp_path: Path, root: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``require_guard = "yes"`` stops both commands with exit 2 and the file:line message."""
    bad = 'require_guard = "yes"\n'
    if command == "lint":
        code, _ = lint_rules(tmp_path, UNGUARDED, bad)
    else:
        code, _ = gate_rules(tmp_path, root, UNGUARDED, bad)
    assert code == 2
    err = capsys.readouterr().err
    assert (
        f"{tmp_path / 'p.toml'}:1: require_guard: expected true or false, got string 'yes'" in err
    )
