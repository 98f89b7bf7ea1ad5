"""Tests for pinguard.buildfile.lint: install commands found in RUN steps and each rule with its line."""

# ruff: noqa: E501  (table rows read better on one line each)
from __future__ import annotations

import json
from pathlib import Path
from typing import TypedDict

import pytest

from pinguard.buildfile.dockerfile import parse
from pinguard.buildfile.lint import find_installs, lint
from pinguard.cli import main
from pinguard.models import Severity
from pinguard.report.formats import render_lint as render

C = "-c /c.txt"


class RuleOptions(TypedDict, total=False):
    """A rule case's options: ``lint``'s keywords, plus ``escape`` for a backtick Dockerfile."""

    escape: bool
    pinned: list[str]
    require_guard: bool
    nightly_patterns: list[str]
    ignore: list[str]


def hits(text: str, options: RuleOptions | None = None) -> list[tuple[str, int]]:
    o = options or RuleOptions()
    findings = lint(
        parse(text),
        pinned=o.get("pinned"),
        require_guard=o.get("require_guard", False),
        nightly_patterns=o.get("nightly_patterns"),
        ignore=o.get("ignore", ()),
    )
    return [(f.rule, f.line) for f in findings]


@pytest.mark.parametrize(
    ("run", "tool", "requirements"),
    [
        ("pip install x", "pip", ("x",)),
        ("pip3 install -q x", "pip", ("x",)),
        ("/opt/venv/bin/pip3.11 --no-cache-dir install x", "pip", ("x",)),
        ("python -m pip install x", "pip", ("x",)),
        ("python3 -u -m pip install x", "pip", ("x",)),
        ("python3.11 -mpip install x", "pip", ("x",)),
        ("uv pip install --system x", "uv", ("x",)),
        ("uv --no-cache pip install x", "uv", ("x",)),
        ("sudo -E env A=1 pip install x", "pip", ("x",)),
        ("cd /src && pip install -e .", "pip", (".",)),
        ("apt-get update; pip install 'x>=1' | tee log", "pip", ("x>=1",)),
        ("if true; then pip install x; fi", "pip", ("x",)),
        ("(cd /a && pip install x)", "pip", ("x",)),
    ],
)
def test_install_commands_are_recognised(
    run: str, tool: str, requirements: tuple[str, ...]
) -> None:
    """pip, pip3, python -m pip and uv pip installs are found after splitting the shell text."""
    (cmd,) = find_installs(parse(f"FROM a\nRUN {run}\n"))
    assert (cmd.tool, cmd.requirements) == (tool, requirements)


@pytest.mark.parametrize(
    "run",
    [
        "pip download x",
        "pip list",
        "echo pip install x",
        "uv add x",
        "uv pip compile r.in",
        "python3 -c 'import pip'",
        "# pip install x",
    ],
)
def test_other_commands_are_not_installs(run: str) -> None:
    """Commands that do not install (or only mention pip) are not install commands."""
    assert find_installs(parse(f"FROM a\nRUN {run}\n")) == ()


def test_options_and_environment_fold_into_the_command() -> None:
    """Short clusters, --opt=value, $VAR expansion and PIP_* environment are all read."""
    text = (
        "FROM a\nARG IDX=https://i/simple\nENV PIP_EXTRA_INDEX_URL=https://e/simple\n"
        "RUN pip install -qUr req.txt --index-url=$IDX -c${C:-/c.txt} x==1\n"
    )
    (cmd,) = find_installs(parse(text))
    assert cmd.requirement_files == ("req.txt",)
    assert cmd.upgrade
    assert cmd.index_url == "https://i/simple"
    assert cmd.extra_index_urls == ("https://e/simple",)
    assert cmd.constraints == ("/c.txt",)
    assert cmd.requirements == ("x==1",)


RULE_CASES: list[tuple[str, str, RuleOptions, list[tuple[str, int]]]] = [
    # (id, Dockerfile after "FROM a\n", kwargs, expected [(rule, line)])
    ("plain install", "RUN pip install x\n", {}, [("unconstrained-install", 2)]),
    ("-c", f"RUN pip install {C} x\n", {}, []),
    ("--constraint=", "RUN pip install --constraint=/c.txt x\n", {}, []),
    ("ENV PIP_CONSTRAINT", "ENV PIP_CONSTRAINT=/c.txt\nRUN pip install x\n", {}, []),
    ("ARG PIP_CONSTRAINT", "ARG PIP_CONSTRAINT=/c.txt\nRUN pip install x\n", {}, []),
    (
        "empty PIP_CONSTRAINT",
        "ENV PIP_CONSTRAINT=\nRUN pip install x\n",
        {},
        [("unconstrained-install", 3)],
    ),
    (
        "ARG without value",
        "ARG PIP_CONSTRAINT\nRUN pip install x\n",
        {},
        [("unconstrained-install", 3)],
    ),
    ("inline env", "RUN PIP_CONSTRAINT=/c.txt pip install x\n", {}, []),
    ("export", "RUN export PIP_CONSTRAINT=/c.txt && pip install x\n", {}, []),
    ("env wrapper", "RUN env PIP_CONSTRAINT=/c.txt pip install x\n", {}, []),
    ("UV_CONSTRAINT for uv", "ENV UV_CONSTRAINT=/c.txt\nRUN uv pip install x\n", {}, []),
    (
        "PIP_CONSTRAINT is not uv's",
        "ENV PIP_CONSTRAINT=/c.txt\nRUN uv pip install x\n",
        {},
        [("unconstrained-install", 3)],
    ),
    ("require-hashes", "RUN pip install --require-hashes -r r.txt\n", {}, []),
    ("bootstrap", "RUN pip install -U pip setuptools wheel\n", {}, []),
    (
        "no-deps exact only",
        "RUN pip install --no-deps x==1 y==2\n",
        {"ignore": ["no-deps-repin"]},
        [],
    ),
    (
        "build-constraint alone",
        "RUN pip install --build-constraint /b.txt x\n",
        {},
        [("unconstrained-install", 2)],
    ),
    ("nothing installed", "RUN pip install --help\n", {}, []),
    ("exec form", 'RUN ["pip", "install", "x"]\n', {}, [("unconstrained-install", 2)]),
    ("exec sh -c", 'RUN ["/bin/sh", "-c", "pip install x"]\n', {}, [("unconstrained-install", 2)]),
    (
        "continuation line",
        "RUN apt-get update \\\n  # comment\n  && pip install \\\n     x\n",
        {},
        [("unconstrained-install", 4)],
    ),
    (
        "heredoc script",
        "RUN <<EOF\nset -e\npip install x\nEOF\n",
        {},
        [("unconstrained-install", 4)],
    ),
    (
        "heredoc to bash",
        "RUN bash -e <<EOF\n\npip install x\nEOF\n",
        {},
        [("unconstrained-install", 4)],
    ),
    ("heredoc as data", "RUN cat <<EOF > /r.txt\npip install x\nEOF\n", {}, []),
    ("python heredoc", "RUN <<EOF\n#!/usr/bin/env python3\nprint('pip install x')\nEOF\n", {}, []),
    (
        "escape directive",
        "RUN pip install `\n  x\n",
        {"escape": True},
        [("unconstrained-install", 2)],
    ),
    # prerelease-unpinned
    ("--pre unpinned", f"RUN pip install --pre {C} x\n", {}, [("prerelease-unpinned", 2)]),
    ("--pre pinned", f"RUN pip install --pre {C} x==1.0.dev1\n", {}, []),
    ("--pre wheel file", f"RUN pip install --pre {C} /w/x-1.0rc1-py3-none-any.whl\n", {}, []),
    ("--pre range", f"RUN pip install --pre {C} 'x>=1'\n", {}, [("prerelease-unpinned", 2)]),
    ("--pre -r", f"RUN pip install --pre {C} -r r.txt\n", {}, [("prerelease-unpinned", 2)]),
    (
        "nightly index",
        f"RUN pip install -i https://download.pytorch.org/whl/nightly/cu128 {C} torch\n",
        {},
        [("prerelease-unpinned", 2)],
    ),
    (
        "nightly pinned",
        f"RUN pip install -i https://x/whl/nightly {C} torch==2.10.0.dev20250101\n",
        {},
        [],
    ),
    (
        "stable index",
        f"RUN pip install -i https://download.pytorch.org/whl/cu128 {C} torch\n",
        {},
        [],
    ),
    (
        "uv prerelease=allow",
        f"RUN uv pip install --prerelease=allow {C} x\n",
        {},
        [("prerelease-unpinned", 2)],
    ),
    ("PIP_PRE env", f"ENV PIP_PRE=1\nRUN pip install {C} x\n", {}, [("prerelease-unpinned", 3)]),
    (
        "custom pattern",
        f"RUN pip install -i https://edge.example/simple {C} x\n",
        {"nightly_patterns": ["edge"]},
        [("prerelease-unpinned", 2)],
    ),
    # index-shadowing
    (
        "pip extra index",
        f"RUN pip install --extra-index-url https://e/simple {C} x\n",
        {},
        [("index-shadowing", 2)],
    ),
    (
        "pip extra via env",
        f"ENV PIP_EXTRA_INDEX_URL=https://e/simple\nRUN pip install {C} x\n",
        {},
        [("index-shadowing", 3)],
    ),
    (
        "uv extra first-index",
        f"RUN uv pip install --extra-index-url https://e/simple {C} x\n",
        {},
        [],
    ),
    (
        "uv unsafe strategy",
        f"RUN uv pip install --index-strategy unsafe-best-match --extra-index-url https://e/simple {C} x\n",
        {},
        [("index-shadowing", 2)],
    ),
    (
        "uv nightly extra",
        f"RUN uv pip install --extra-index-url https://n/nightly/simple {C} x==1\n",
        {},
        [("index-shadowing", 2)],
    ),
    ("pip single index", f"RUN pip install --index-url https://e/simple {C} x\n", {}, []),
    # no-deps-repin
    ("no-deps", f"RUN pip install --no-deps {C} nccl==2.30.1\n", {}, [("no-deps-repin", 2)]),
    ("no-deps then check", f"RUN pip install --no-deps {C} nccl==2.30.1 && pip check\n", {}, []),
    (
        "no-deps then guard",
        f"RUN pip install --no-deps {C} nccl==2.30.1 && pinguard guard\n",
        {},
        [],
    ),
    (
        "check before",
        f"RUN pip check && pip install --no-deps {C} nccl==2.30.1\n",
        {},
        [("no-deps-repin", 2)],
    ),
    ("no-deps local path", f"RUN pip install --no-deps {C} /src\n", {}, []),
    # upgrade-pinned
    (
        "upgrade pinned",
        f"RUN pip install -U {C} torch\n",
        {"pinned": ["torch==2.9.1"]},
        [("upgrade-pinned", 2)],
    ),
    (
        "upgrade exact ok",
        f"RUN pip install -U {C} torch==2.9.1\n",
        {"pinned": ["torch==2.9.1"]},
        [],
    ),
    (
        "upgrade exact outside",
        f"RUN pip install -U {C} torch==2.10\n",
        {"pinned": ["torch==2.9.1"]},
        [("upgrade-pinned", 2)],
    ),
    (
        "upgrade unpinned pkg",
        f"RUN pip install --upgrade {C} numpy\n",
        {"pinned": ["torch==2.9.1"]},
        [],
    ),
    ("no policy", f"RUN pip install -U {C} torch\n", {}, []),
    (
        "uv -P",
        f"RUN uv pip install -P Torch {C} vllm\n",
        {"pinned": ["torch==2.9.1"]},
        [("upgrade-pinned", 2)],
    ),
    ("install without -U", f"RUN pip install {C} torch\n", {"pinned": ["torch==2.9.1"]}, []),
    # missing-guard
    (
        "guard same RUN",
        f"RUN pip install {C} x && pinguard guard --policy /p.toml\n",
        {"require_guard": True},
        [],
    ),
    ("guard next RUN", f"RUN pip install {C} x\nRUN pinguard guard\n", {"require_guard": True}, []),
    (
        "guard as module",
        f"RUN pip install {C} x; python3 -m pinguard guard\n",
        {"require_guard": True},
        [],
    ),
    (
        "guard zipapp",
        f"RUN pip install {C} x && python3 /t/pinguard.pyz guard\n",
        {"require_guard": True},
        [],
    ),
    (
        "guard before",
        f"RUN pinguard guard && pip install {C} x\n",
        {"require_guard": True},
        [("missing-guard", 2)],
    ),
    (
        "guard two RUNs later",
        f"RUN pip install {C} x\nRUN true\nRUN pinguard guard\n",
        {"require_guard": True},
        [("missing-guard", 2)],
    ),
    (
        "guard in next stage",
        f"RUN pip install {C} x\nFROM b\nRUN pinguard guard\n",
        {"require_guard": True},
        [("missing-guard", 2)],
    ),
    ("guard not required", f"RUN pip install {C} x\n", {}, []),
]


@pytest.mark.parametrize(
    ("text", "kwargs", "expected"),
    [pytest.param(t, k, e, id=i) for i, t, k, e in RULE_CASES],
)
def test_rules(text: str, kwargs: RuleOptions, expected: list[tuple[str, int]]) -> None:
    """Each rule fires, or not, on the line of the offending command."""
    head = "# escape=`\nFROM a\n" if kwargs.get("escape", False) else "FROM a\n"
    offset = 1 if head.startswith("#") else 0
    got = hits(head + text, kwargs)
    assert got == [(rule, line + offset) for rule, line in expected]


def test_multi_stage_and_arg_expansion() -> None:
    """Findings carry the stage name; ARG values reach RUN through ${VAR:-default}."""
    text = (
        "ARG CONSTRAINTS\nFROM a AS build\nARG CONSTRAINTS\n"
        "RUN pip install ${CONSTRAINTS:+-c $CONSTRAINTS} x\n"
        "FROM build AS final\nRUN pip install y\n"
    )
    found = lint(parse(text))
    assert [(f.rule, f.line, f.stage) for f in found] == [
        ("unconstrained-install", 4, "build"),
        ("unconstrained-install", 6, "final"),
    ]
    assert lint(parse(text, build_args={"CONSTRAINTS": "/c.txt"})) == (found[1],)


def test_env_inherited_from_parent_stage() -> None:
    """An ENV PIP_CONSTRAINT set in a parent stage holds in stages built FROM it."""
    text = "FROM a AS base\nENV PIP_CONSTRAINT=/c.txt\nFROM base\nRUN pip install x\nFROM a\nRUN pip install y\n"
    assert hits(text) == [("unconstrained-install", 6)]


def test_finding_fields_and_severity() -> None:
    """A finding names the package, the instruction's lines and the command text."""
    text = "FROM a\nRUN true \\\n && pip install --pre -c /c.txt 'x>=1' \\\n  && echo\n"
    (f,) = lint(parse(text), policy_file="p.toml")
    assert f.severity is Severity.ERROR
    assert f.finding.package == "x"
    assert (f.line, f.end_line, f.instruction_line, f.instruction_end_line) == (3, 3, 2, 4)
    assert f.command.startswith("pip install --pre")


def test_unknown_ignored_rule() -> None:
    """Ignoring a rule that does not exist is an error."""
    with pytest.raises(ValueError, match="unknown lint rule"):
        lint(parse("FROM a\n"), ignore=["nope"])


BAD = "FROM python:3.11\nRUN pip install --pre --extra-index-url https://n/nightly x\n"
GOOD = "FROM python:3.11\nRUN pip install -c /c.txt x\n"


def test_render_formats_are_deterministic() -> None:
    """json and sarif renderings are stable and carry the line numbers."""
    found = lint(parse(BAD))
    assert render(found, "json") == render(tuple(reversed(found)), "json")
    doc = json.loads(render(found, "json"))
    assert {f["line"] for f in doc["findings"]} == {2}
    sarif = json.loads(render(found, "sarif"))
    assert sarif["version"] == "2.1.0"
    results = sarif["runs"][0]["results"]
    assert {r["ruleId"] for r in results} == {
        "index-shadowing",
        "prerelease-unpinned",
        "unconstrained-install",
    }
    assert all(r["locations"][0]["physicalLocation"]["region"]["startLine"] == 2 for r in results)
    assert "0 finding(s)" in render((), "table")
    with pytest.raises(ValueError, match="unknown format"):
        render(found, "xml")


@pytest.mark.parametrize(
    ("content", "extra", "code"),
    [
        (GOOD, [], 0),
        (BAD, [], 1),
        (BAD, ["--fail-on", "never"], 0),
        (GOOD.replace("-c /c.txt ", ""), ["--fail-on", "error"], 0),
        (GOOD.replace("-c /c.txt ", ""), [], 1),
        (GOOD, ["--require-guard"], 1),
        ("FROM a\nRUN <<EOF\n", [], 2),
        (GOOD, ["--ignore", "nope"], 2),
        (GOOD, ["--build-arg", "novalue"], 2),
    ],
)
def test_cli_exit_codes(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    content: str,
    extra: list[str],
    code: int,
) -> None:
    """0 clean, 1 findings at or above --fail-on, 2 unreadable Dockerfile or bad usage."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "Dockerfile"
    path.write_text(content)
    assert main(["lint", str(path), *extra]) == code


def test_cli_missing_file_and_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A missing file exits 2 while the others are still reported; -o writes the report."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "Dockerfile").write_text(BAD)
    out = tmp_path / "lint.sarif"
    assert main(["lint", "Dockerfile", "missing", "--format", "sarif", "-o", str(out)]) == 2
    doc = json.loads(out.read_text())
    assert doc["runs"][0]["results"]
    assert doc["runs"][0]["invocations"][0]["executionSuccessful"] is False


def test_cli_policy_pins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With --policy, the policy's pins drive upgrade-pinned."""
    policy = tmp_path / "p.toml"
    policy.write_text('[[pin]]\npackage = "torch"\nversion = "==2.9.1"\n')
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM a\nRUN pip install -U -c /c.txt torch\n")
    out = tmp_path / "out.json"
    code = main(
        ["lint", str(dockerfile), "--policy", str(policy), "--format", "json", "-o", str(out)]
    )
    assert code == 1
    rules = [f["rule"] for f in json.loads(out.read_text())["findings"]]
    assert rules == ["upgrade-pinned"]
