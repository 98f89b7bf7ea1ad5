"""Loading policy files: syntax, validation errors with file and line, extend, discovery."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.specifiers import SpecifierSet

from pinguard.errors import ConfigError
from pinguard.models import Severity
from pinguard.policy import (
    RULES,
    PolicyError,
    check_policy_files,
    default_policy,
    discover,
    load_policy,
    parse_policy,
)
from pinguard.policy.locate import locate_lines
from pinguard.policy.model import CONFIGURABLE_RULES, Forbidden, Origin, Scope
from tests.infra.paths import REPO

POLICIES = REPO / "policies"

FULL = """\
name = "full"

[rules.downgrade]
severity = "warning"
allow = ["pip", "Setuptools"]
environments = ["/opt/*"]

[rules.file-collision]
enabled = false

[[pin]]
package = "Nvidia_NCCL_cu13"
version = ">=2.30,<2.31"
reason = "known good"

[[pin]]
package = "torch"
version = "2.10.0.dev20251201"
platforms = ["linux/arm64"]
marker = "python_version >= '3.12'"

[[forbidden]]
package = "flashinfer-python"
version = "0.6.17"
targets = ["sm_121"]
reason = "NaNs"
link = "https://example.invalid/1"
severity = "warning"

[[coupling]]
package = "flashinfer-python"
version = ">=0.6"
requires = "nvidia-cutlass-dsl>=4.3"

[[waiver]]
package = "pip"
rule = "downgrade"
reason = "pip is downgraded by the base image on purpose"
expires = 2030-01-31
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_full_policy_parses_into_typed_values(tmp_path: Path) -> None:
    """Every section becomes packaging/Severity values with the file and line it came from."""
    path = write(tmp_path, "p.toml", FULL)
    policy = load_policy(path)
    down = policy.rule("downgrade")
    assert down.severity is Severity.WARNING
    assert down.allow == {"pip", "setuptools"}
    assert down.scope == Scope(environments=("/opt/*",))
    assert down.origin == Origin(str(path), 3)
    assert policy.rule("file-collision").enabled is False
    assert policy.rule("unmet-requirement") == default_policy().rule("unmet-requirement")

    nccl, torch = policy.pins
    assert nccl.package == "nvidia-nccl-cu13"
    assert nccl.specifier == SpecifierSet(">=2.30,<2.31")
    assert nccl.origin.line == 11
    assert torch.specifier == SpecifierSet("==2.10.0.dev20251201")
    assert torch.scope.platforms == ("linux/arm64",)
    assert torch.scope.marker == Marker("python_version >= '3.12'")

    (fi,) = policy.forbidden
    assert (fi.package, fi.reason, fi.link, fi.severity) == (
        "flashinfer-python",
        "NaNs",
        "https://example.invalid/1",
        Severity.WARNING,
    )
    assert fi.scope.targets == ("sm_121",)
    assert fi.origin.line == 22

    (cp,) = policy.couplings
    assert (cp.package, cp.requires) == ("flashinfer-python", "nvidia-cutlass-dsl")
    assert cp.requires_specifier == SpecifierSet(">=4.3")

    (w,) = policy.waivers
    assert (w.package, w.rule, w.expires) == ("pip", "downgrade", _dt.date(2030, 1, 31))
    assert w.origin.line == 35


def test_default_toml_equals_builtin_default() -> None:
    """policies/default.toml says exactly what the built-in default does, rule by rule."""
    from_file = load_policy(POLICIES / "default.toml")
    assert from_file == default_policy()
    assert load_policy() == default_policy()
    # and it is not equal by being empty: it spells out every configurable rule
    text = (POLICIES / "default.toml").read_text()
    for rule in CONFIGURABLE_RULES:
        assert f"[rules.{rule}]" in text
        assert from_file.rule(rule).origin.file is not None
    # the four rules the design names fire by default with these severities
    builtin = default_policy()
    assert builtin.rule("downgrade").severity is Severity.ERROR
    assert builtin.rule("unmet-requirement").severity is Severity.ERROR
    assert builtin.rule("file-collision").severity is Severity.WARNING
    assert builtin.rule("duplicate-distribution").severity is Severity.WARNING
    assert not builtin.rule("unpinned-prerelease").enabled


def test_glm_policy_encodes_the_known_facts() -> None:
    """The GB10 policy forbids the two known-bad builds with reasons and links."""
    policy = load_policy(POLICIES / "glm-serving-gb10.toml")
    by_name: dict[str, Forbidden] = {f.package: f for f in policy.forbidden}
    nccl = by_name["nvidia-nccl-cu13"]
    assert nccl.specifier == SpecifierSet("==2.29.7")
    assert nccl.reason == "NCCL internal error on the GB10 fabric"
    assert "pytorch/pytorch/issues/187526" in nccl.link
    fi = by_name["flashinfer-python"]
    assert fi.specifier == SpecifierSet("==0.6.17")
    assert fi.scope.targets == ("sm_121",)
    assert fi.reason == "FA2 MLA kernel NaNs on 64-256-row batches"
    assert "flashinfer-ai/flashinfer/issues/3821" in fi.link
    assert policy.rule("unpinned-prerelease").enabled
    assert policy.rule("downgrade").severity is Severity.ERROR
    assert {(c.package, c.requires) for c in policy.couplings} == {
        ("flashinfer-python", "nvidia-cutlass-dsl"),
        ("nvidia-cutlass-dsl", "flashinfer-python"),
    }
    assert str(POLICIES / "default.toml") in policy.files


BAD = [
    # (id, text, line, fragment of the message)
    ("unknown top key", 'colour = "red"\n', 1, "unknown key 'colour'"),
    (
        "unknown pin key",
        '[[pin]]\npackage = "a"\nversion = "1"\nversoin = "2"\n',
        4,
        "unknown key 'versoin'",
    ),
    ("unknown rule", "[rules.no-such-rule]\nseverity = 'error'\n", 1, "unknown key 'no-such-rule'"),
    ("unknown rule key", "[rules.coupling]\nallow = ['x']\n", 2, "unknown key 'allow'"),
    (
        "wrong type string",
        '[[pin]]\npackage = 3\nversion = "1"\n',
        2,
        "expected a string, got int 3",
    ),
    ("wrong type bool", "[rules.downgrade]\nenabled = 'yes'\n", 2, "expected true or false"),
    ("wrong type list", "[rules.downgrade]\nallow = [1, 2]\n", 2, "[1, 2]"),
    ("wrong type table", "rules = 3\n", 1, "expected a table, got 3"),
    ("pin not table", "pin = [1]\n", 1, "pin[0]: expected a table, got 1"),
    (
        "bad specifier",
        '[[pin]]\npackage = "a"\nversion = ">>1.0"\n',
        3,
        "invalid version or specifier '>>1.0'",
    ),
    (
        "bad version",
        '[[forbidden]]\npackage = "a"\nversion = "1.0-foo-bar"\nreason = "r"\n',
        3,
        "invalid version or specifier '1.0-foo-bar'",
    ),
    (
        "empty version",
        '[[pin]]\npackage = "a"\nversion = ""\n',
        3,
        "invalid version or specifier ''",
    ),
    (
        "bad marker",
        '[[pin]]\npackage = "a"\nversion = "1"\nmarker = "python_version >> \'3\'"\n',
        4,
        "invalid marker",
    ),
    (
        "bad name",
        '[[pin]]\npackage = "not a name"\nversion = "1"\n',
        2,
        "invalid package name 'not a name'",
    ),
    ("bad severity", "[rules.downgrade]\nseverity = 'fatal'\n", 2, "invalid severity 'fatal'"),
    ("bad platform", "[rules.downgrade]\nplatforms = ['arm64']\n", 2, "invalid platform 'arm64'"),
    (
        "missing reason",
        '[[forbidden]]\npackage = "a"\nversion = "1"\n',
        1,
        "missing required key 'reason'",
    ),
    (
        "bad requires",
        '[[coupling]]\npackage = "a"\nversion = "1"\nrequires = "b @ https://x"\n',
        4,
        "invalid requirement 'b @ https://x'",
    ),
    (
        "waiver unknown rule",
        '[[waiver]]\npackage = "a"\nrule = "nope"\nreason = "r"\nexpires = 2030-01-01\n',
        3,
        "unknown rule 'nope'",
    ),
    (
        "waiver bad date",
        '[[waiver]]\npackage = "a"\nrule = "downgrade"\nreason = "r"\nexpires = "soon"\n',
        5,
        "expected a date such as 2026-03-31, got 'soon'",
    ),
    (
        "waiver empty reason",
        '[[waiver]]\npackage = "a"\nrule = "downgrade"\nreason = " "\nexpires = 2030-01-01\n',
        4,
        "a waiver needs a reason",
    ),
    ("invalid toml", "a = \n", 1, "invalid TOML"),
    (
        "second entry line",
        '[[pin]]\npackage = "a"\nversion = "1"\n\n[[pin]]\npackage = "b"\nversion = "~=x"\n',
        7,
        "pin[1].version",
    ),
    (
        "inline table key",
        'pin = [\n  {package = "a", version = "1"},\n  {package = "b", bad = 1},\n]\n',
        3,
        "unknown key 'bad'",
    ),
]


@pytest.mark.parametrize(
    ("text", "line", "fragment"), [b[1:] for b in BAD], ids=[b[0] for b in BAD]
)
def test_bad_policy_is_a_config_error_with_file_and_line(
    tmp_path: Path, text: str, line: int, fragment: str
) -> None:
    """Unknown keys, wrong types, bad specifiers and markers name the file, line and value."""
    path = write(tmp_path, "bad.toml", text)
    with pytest.raises(ConfigError) as info:
        load_policy(path)
    assert isinstance(info.value, PolicyError)
    messages = [str(p) for p in info.value.problems]
    assert any(m.startswith(f"{path}:{line}: ") and fragment in m for m in messages), messages
    assert f"{path}:{line}: " in str(info.value)


def test_every_problem_of_a_file_is_reported(tmp_path: Path) -> None:
    """One run lists all problems, sorted by line, instead of stopping at the first."""
    path = write(
        tmp_path,
        "bad.toml",
        '[[pin]]\npackage = "a b"\nversion = ">>1"\nfoo = 1\n[rules.downgrade]\n'
        'severity = "fatal"\n',
    )
    problems = check_policy_files([path])
    assert [p.line for p in problems] == [2, 3, 4, 6]


def test_extend_resolves_relative_paths_and_merges_in_order(tmp_path: Path) -> None:
    """Extended files load first; later files override rule keys one by one; entries add up."""
    write(
        tmp_path,
        "base/base.toml",
        '[rules.downgrade]\nseverity = "warning"\nallow = ["pip"]\n'
        '[[pin]]\npackage = "a"\nversion = "1"\n',
    )
    write(
        tmp_path, "base/mid.toml", 'extend = "base.toml"\n[[pin]]\npackage = "b"\nversion = "2"\n'
    )
    top = write(
        tmp_path,
        "top.toml",
        'extend = ["base/mid.toml", "base/base.toml"]\n'
        '[rules.downgrade]\nseverity = "error"\n[[pin]]\npackage = "c"\nversion = "3"\n',
    )
    policy = load_policy(top)
    assert [p.package for p in policy.pins] == ["a", "b", "c"]  # base once, despite the diamond
    down = policy.rule("downgrade")
    assert down.severity is Severity.ERROR  # overridden by top
    assert down.allow == {"pip"}  # kept from base
    assert [Path(f).name for f in policy.files] == ["base.toml", "mid.toml", "top.toml"]


def test_extend_cycle_is_an_error(tmp_path: Path) -> None:
    """a extends b extends a: reported at the extend line, with the chain."""
    a = write(tmp_path, "a.toml", '# a\nextend = "b.toml"\n')
    write(tmp_path, "b.toml", 'extend = ["a.toml"]\n')
    with pytest.raises(PolicyError) as info:
        load_policy(a)
    (problem,) = info.value.problems
    assert problem.file.endswith("b.toml")
    assert problem.line == 1
    assert "cycle" in problem.message
    assert "a.toml" in problem.message


def test_extend_of_a_missing_file_points_at_the_extend_line(tmp_path: Path) -> None:
    """A missing extended file is a problem of the extending file."""
    a = write(tmp_path, "a.toml", '\n\nextend = "nope.toml"\n')
    with pytest.raises(PolicyError, match=r"a\.toml:3: extend: cannot read '.*nope\.toml'"):
        load_policy(a)


def test_pyproject_tool_table_with_lines(tmp_path: Path) -> None:
    """[tool.pinguard] in pyproject.toml is a policy; errors point at pyproject lines."""
    good = write(
        tmp_path,
        "good/pyproject.toml",
        '[project]\nname = "x"\n\n[tool.pinguard]\nextend = "../pol.toml"\n'
        '[[tool.pinguard.pin]]\npackage = "a"\nversion = "1"\n',
    )
    write(tmp_path, "pol.toml", '[[forbidden]]\npackage = "b"\nversion = "2"\nreason = "r"\n')
    policy = load_policy(good)
    assert [p.package for p in policy.pins] == ["a"]
    assert policy.pins[0].origin.line == 6
    assert [f.package for f in policy.forbidden] == ["b"]
    bad = write(
        tmp_path,
        "bad/pyproject.toml",
        '[project]\nname = "x"\n[tool.pinguard.rules.downgrade]\nseverity = 1\n',
    )
    with pytest.raises(PolicyError, match=r"pyproject\.toml:4: rules\.downgrade\.severity"):
        load_policy(bad)


def test_discover_walks_up_and_prefers_pinguard_toml(tmp_path: Path) -> None:
    """pinguard.toml, or pyproject.toml with [tool.pinguard], from a directory upwards."""
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    write(tmp_path, "a/pyproject.toml", '[project]\nname = "x"\n')  # no tool table: skipped
    assert discover(deep) is None or not str(discover(deep)).startswith(str(tmp_path))
    with_tool = write(tmp_path, "a/b/pyproject.toml", "[tool.pinguard]\n")
    assert discover(deep) == with_tool
    own = write(tmp_path, "a/b/pinguard.toml", "")
    assert discover(deep) == own


def test_parse_policy_from_a_string() -> None:
    """parse_policy reads inline TOML (no extend) with the given file name in errors."""
    assert parse_policy("") == default_policy()
    with pytest.raises(PolicyError, match=r"^inline:1: pin\[0\]: missing required key 'version'"):
        parse_policy('[[pin]]\npackage = "a"\n', file="inline")


def test_locator_lines() -> None:
    """Header, dotted, inline and multi-line values all get their own line."""
    lines = locate_lines(
        '# c\na.b = 1\ns = """x\ny"""\n[[t]]\nk = [\n  1,\n  {z = 2},\n]\n[[t]]\n[t.u]\nv = 3\n'
    )
    assert lines.of(("a", "b")) == 2
    assert lines.of(("s",)) == 3
    assert lines.of(("t", 0)) == 5
    assert lines.of(("t", 0, "k", 1, "z")) == 8
    assert lines.of(("t", 1, "u", "v")) == 12
    assert lines.of(("t", 1, "missing")) == 10
    assert set(RULES) >= set(CONFIGURABLE_RULES)
