"""A policy under which nothing could fire says so: the ``no-active-rules`` error.

Each case audits a real OCI layout (``pinguard.testing.images``, the layout of
``test_fail_closed``: one distribution, six, in a Python 3.12 site-packages of a linux/amd64
image) through the CLI with a policy file written here. The expected findings, messages and
exit codes are written by hand. ``--policy none`` is the inventory: no findings, no notice,
exit 0.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pinguard.cli import main
from pinguard.testing.images import ImageWriter, layer_tar
from tests.policy.test_fail_closed import SITE, _layout

# every rule a policy file can configure, written out by hand
ALL_RULES = (
    "coupling",
    "downgrade",
    "duplicate-distribution",
    "file-collision",
    "forbidden-version",
    "native-duplicate",
    "native-mismatch",
    "native-pin",
    "pin-violation",
    "record-mismatch",
    "unmet-requirement",
    "unpinned-prerelease",
    "variant-change",
)
TAIL = "; the image was not judged (use --policy none for an inventory without a policy)"


def _tables(body: str, rules: tuple[str, ...] = ALL_RULES) -> str:
    return "".join(f"[rules.{rule}]\n{body}\n" for rule in rules)


def _audit(
    capsys: pytest.CaptureFixture[str], ref: str, *args: str
) -> tuple[int, dict[str, object]]:
    code = main(["audit", ref, "--no-cache", "--format", "json", *args])
    return code, json.loads(capsys.readouterr().out)


def _findings(doc: dict[str, object]) -> list[tuple[str, str, str]]:
    found = doc["findings"]
    assert isinstance(found, list)
    return [(f["rule"], f["severity"], f["message"]) for f in found]


def _scoped_notice(policy: Path, detail: str) -> list[tuple[str, str, str]]:
    return [
        (
            "no-active-rules",
            "error",
            f"nothing could fire: no rule of {policy} applies to this image: {detail}{TAIL}",
        )
    ]


def test_every_rule_off_is_an_error_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every rule turned off: one error finding naming the policy file, exit 1."""
    ref = _layout(tmp_path)
    policy = tmp_path / "off.toml"
    policy.write_text(_tables("enabled = false"))
    code, doc = _audit(capsys, ref, "--policy", str(policy))
    assert code == 1
    assert _findings(doc) == [
        ("no-active-rules", "error", f"nothing could fire: every rule is off in {policy}{TAIL}")
    ]
    assert doc["findings"][0]["policy_file"] == str(policy)  # type: ignore[index]
    assert doc["verdict"] == "fail"
    # it is a finding like any other: --fail-on never reports it and passes
    assert main(["audit", ref, "--no-cache", "--policy", str(policy), "--fail-on", "never"]) == 0
    assert "nothing could fire: every rule is off" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            'platforms = ["linux/arm64"]',
            "scoped to platforms linux/arm64",
        ),
        (
            'environments = ["/opt/venv/*"]',
            "scoped to environments /opt/venv/*",
        ),
        (
            "marker = \"python_version >= '3.13'\"",
            "scoped to marker 'python_version >= \"3.13\"'",
        ),
        (
            'targets = ["sm_121"]',
            "scoped to targets sm_121",
        ),
    ],
)
def test_every_rule_scoped_away_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str, expected: str
) -> None:
    """Rules scoped to a platform, environments, Pythons or targets this run does not have
    (unpinned-prerelease stays off by default: a scope does not turn a rule on)."""
    ref = _layout(tmp_path)
    policy = tmp_path / "scoped.toml"
    policy.write_text(_tables(body))
    code, doc = _audit(capsys, ref, "--policy", str(policy))
    assert code == 1
    assert _findings(doc) == _scoped_notice(
        policy,
        f"{', '.join(r for r in ALL_RULES if r != 'unpinned-prerelease')}: {expected}; "
        "unpinned-prerelease: off",
    )


def test_rules_waiting_for_entries_none_of_which_applies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only entry rules left on, and the one pin is scoped to an environment not present."""
    ref = _layout(tmp_path)
    entry_rules = ("coupling", "forbidden-version", "native-pin", "pin-violation")
    policy = tmp_path / "entries.toml"
    policy.write_text(
        _tables("enabled = false", tuple(r for r in ALL_RULES if r not in entry_rules))
        + '[[pin]]\npackage = "six"\nversion = "==1.16.0"\nenvironments = ["/opt/venv/*"]\n'
    )
    code, doc = _audit(capsys, ref, "--policy", str(policy))
    assert code == 1
    assert _findings(doc) == _scoped_notice(
        policy,
        "coupling: no [[coupling]] entry applies; "
        "downgrade, duplicate-distribution, file-collision, native-duplicate, "
        "native-mismatch, record-mismatch, unmet-requirement, unpinned-prerelease, "
        "variant-change: off; "
        "forbidden-version: no [[forbidden]] entry applies; "
        "native-pin: no [[native-pin]] entry applies; "
        "pin-violation: no [[pin]] entry applies",
    )


@pytest.mark.parametrize(
    "policy_text",
    [
        # one rule left on, unscoped: it could fire, so there is no notice
        _tables("enabled = false", tuple(r for r in ALL_RULES if r != "downgrade")),
        # every rule off but one pin rule with an entry that covers the environment
        _tables("enabled = false", tuple(r for r in ALL_RULES if r != "pin-violation"))
        + '[[pin]]\npackage = "six"\nversion = "==1.16.0"\n',
        # an empty file is the default policy
        "",
    ],
    ids=["one-rule-on", "a-pin-applies", "empty-file"],
)
def test_a_policy_that_could_fire_gets_no_notice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], policy_text: str
) -> None:
    ref = _layout(tmp_path)
    policy = tmp_path / "p.toml"
    policy.write_text(policy_text)
    code, doc = _audit(capsys, ref, "--policy", str(policy))
    assert (code, _findings(doc), doc["verdict"]) == (0, [], "pass")


def test_default_policy_gets_no_notice(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No --policy and nothing discovered: the built-in default, whose rules fire anywhere."""
    ref = _layout(tmp_path)
    code, doc = _audit(capsys, ref)
    assert (code, _findings(doc)) == (0, [])


def test_policy_none_is_a_quiet_inventory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--policy none judges nothing on purpose: no finding, no notice, exit 0; a downgrade
    the default policy reports is not reported."""
    writer = ImageWriter(tmp_path / "layout")
    new = b"Metadata-Version: 2.1\nName: six\nVersion: 1.17.0\n\n"
    old = b"Metadata-Version: 2.1\nName: six\nVersion: 1.16.0\n\n"
    first = writer.layer(layer_tar({f"{SITE}/six-1.17.0.dist-info/METADATA": new}))
    second = writer.layer(
        layer_tar(
            {
                f"{SITE}/.wh.six-1.17.0.dist-info": b"",
                f"{SITE}/six-1.16.0.dist-info/METADATA": old,
            }
        )
    )
    image = writer.image(
        [first, second], [{"created_by": "RUN pip install six"}, {"created_by": "RUN downgrade"}]
    )
    index, _ = writer.index([image], tag="t")
    writer.write_layout(index)
    ref = f"oci:{tmp_path / 'layout'}:t"
    code, doc = _audit(capsys, ref)
    assert code == 1
    assert [(r, s) for r, s, _ in _findings(doc)] == [("downgrade", "error")]
    code, doc = _audit(capsys, ref, "--policy", "none")
    assert (code, _findings(doc), doc["verdict"]) == (0, [], "pass")
    assert doc["environments"][0]["packages"][0]["version"] == "1.16.0"  # type: ignore[index]


def test_policy_none_with_a_file_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "p.toml"
    policy.write_text("")
    code = main(
        ["audit", _layout(tmp_path), "--no-cache", "--policy", "none", "--policy", str(policy)]
    )
    assert code == 2
    assert (
        "--policy none (no policy: an inventory) cannot be combined with policy files; "
        "write ./none for a file named none" in capsys.readouterr().err
    )


def test_a_file_named_none_is_read_as_dot_slash_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "none").write_text(_tables("enabled = false"))
    code, doc = _audit(capsys, _layout(tmp_path), "--policy", "./none")
    assert code == 1
    assert [r for r, _, _ in _findings(doc)] == ["no-active-rules"]


def test_no_active_rules_cannot_be_configured(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It is not a rule a policy can turn off (like expired-waiver): exit 2 naming it."""
    policy = tmp_path / "p.toml"
    policy.write_text("[rules.no-active-rules]\nenabled = false\n")
    assert main(["policy", "check", str(policy)]) == 2
    assert "no-active-rules" in capsys.readouterr().err
