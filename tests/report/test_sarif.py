"""The one SARIF builder: audit, lint and gate logs share levels, rules and result shapes."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import jsonschema

from pinguard.buildfile.dockerfile import parse
from pinguard.buildfile.lint import lint
from pinguard.models import Finding, Severity
from pinguard.report import sarif
from pinguard.report.lint import render_sarif
from pinguard.report.options import RenderOptions
from tests.factories import environment, result

SCHEMA = json.loads((Path(__file__).parents[1] / "data" / "sarif-schema-2.1.0.json").read_text())
BAD = "FROM python:3.11\nRUN pip install --pre --extra-index-url https://n/nightly x\n"
LINT_RULES = [
    "index-shadowing",
    "missing-guard",
    "no-deps-repin",
    "prerelease-unpinned",
    "unconstrained-install",
    "upgrade-pinned",
]


def test_levels_are_the_sarif_levels() -> None:
    """SARIF 2.1.0 §3.27.10 levels: error, warning, note (pinguard's info)."""
    assert dict(sarif.LEVEL) == {
        Severity.ERROR: "error",
        Severity.WARNING: "warning",
        Severity.INFO: "note",
    }


def test_artifact_uris() -> None:
    """Relative paths stay relative (percent-encoded); absolute ones become file: URIs."""
    assert sarif.artifact_uri("docker/Dockerfile") == "docker/Dockerfile"
    assert sarif.artifact_uri("my dir/Dockerfile") == "my%20dir/Dockerfile"
    assert sarif.artifact_uri("/src/Dockerfile") == "file:///src/Dockerfile"


def test_lint_log_is_valid_and_located() -> None:
    """`pinguard lint --format sarif`: one pinguard-lint run, every lint rule, results at the
    command's lines, unreadable files as error notifications."""
    found = lint(parse(BAD, path="Dockerfile"))
    log = json.loads(render_sarif(found, [("missing", "cannot read 'missing'")]))
    jsonschema.Draft7Validator(SCHEMA).validate(log)
    (run,) = log["runs"]
    assert run["tool"]["driver"]["name"] == "pinguard-lint"
    assert [r["id"] for r in run["tool"]["driver"]["rules"]] == LINT_RULES
    by_rule = {r["ruleId"]: r for r in run["results"]}
    assert sorted(by_rule) == ["index-shadowing", "prerelease-unpinned", "unconstrained-install"]
    pre = by_rule["prerelease-unpinned"]
    assert pre["level"] == "error"
    assert LINT_RULES[pre["ruleIndex"]] == "prerelease-unpinned"
    assert pre["locations"][0]["physicalLocation"] == {
        "artifactLocation": {"uri": "Dockerfile"},
        "region": {"startLine": 2, "endLine": 2},
    }
    assert pre["properties"]["package"] == "x"
    assert by_rule["unconstrained-install"]["level"] == "warning"
    invocation = run["invocations"][0]
    assert invocation["executionSuccessful"] is False
    assert invocation["toolExecutionNotifications"][0]["message"]["text"] == "cannot read 'missing'"


def test_gate_log_holds_both_catalogues_and_the_same_lint_results() -> None:
    """The gate's one run lists policy rules then lint rules; its lint results are exactly
    the ones `pinguard lint` writes apart from ruleIndex."""
    found = lint(parse(BAD, path="Dockerfile"))
    image = Finding(rule="downgrade", severity=Severity.INFO, message="m", package="pip", step=1)
    audited = replace(result(environment()), findings=(image,))
    log = json.loads(sarif.dumps(sarif.to_dict(audited, RenderOptions(), found)))
    jsonschema.Draft7Validator(SCHEMA).validate(log)
    run = log["runs"][0]
    ids = [r["id"] for r in run["tool"]["driver"]["rules"]]
    assert ids[-len(LINT_RULES) :] == LINT_RULES
    assert "downgrade" in ids[: -len(LINT_RULES)]
    results = run["results"]
    assert results[0]["ruleId"] == "downgrade"
    assert results[0]["level"] == "note"
    assert all(ids[r["ruleIndex"]] == r["ruleId"] for r in results)
    alone = json.loads(render_sarif(found))["runs"][0]["results"]
    strip = [{k: v for k, v in r.items() if k != "ruleIndex"} for r in results[1:]]
    assert strip == [{k: v for k, v in r.items() if k != "ruleIndex"} for r in alone]
    # an audit log alone has no lint rules
    alone_audit = json.loads(sarif.render(audited))["runs"][0]
    assert not set(LINT_RULES) & {r["id"] for r in alone_audit["tool"]["driver"]["rules"]}
