"""SARIF (validated against the official SARIF 2.1.0 schema), JUnit (parsed back), Markdown."""

from __future__ import annotations

import datetime as _dt
import json
import xml.etree.ElementTree as ET
from dataclasses import replace

import jsonschema
import pytest

from pinguard.buildfile.history import dockerfile_step_lines
from pinguard.models import AuditResult, ChangeKind, Incomplete, Severity
from pinguard.policy import evaluate, parse_policy
from pinguard.policy.model import RULES
from pinguard.report import junit, markdown, sarif
from pinguard.report.options import RenderOptions
from tests.factories import cause, change, dist, environment, result, step
from tests.infra.paths import SARIF_SCHEMA

# The official OASIS schema, vendored verbatim (see tests/data/README.md).
SCHEMA = json.loads(SARIF_SCHEMA.read_text())
TODAY = _dt.date(2026, 6, 1)

POLICY = """\
[rules.downgrade]
allow = []

[[forbidden]]
package = "nvidia-nccl-cu13"
version = "2.29.7"
reason = "NCCL internal error on the GB10 fabric"
link = "https://github.com/pytorch/pytorch/issues/187526"

[[waiver]]
package = "pip"
rule = "downgrade"
reason = "base image <pip> | pinned"
expires = 2030-01-01
"""

DOCKERFILE = """\
FROM python:3.12-slim AS build
RUN echo builder

FROM python:3.12-slim
ENV PIP_NO_CACHE_DIR=1
RUN pip install \\
      nvidia-nccl-cu13==2.30.1
COPY constraints.txt /c.txt
RUN pip install torch==2.9.1
"""


def audited(incomplete: bool = False) -> AuditResult:
    base = result(
        environment(
            dist("nvidia-nccl-cu13", "2.29.7"), dist("torch", "2.9.1"), dist("pip", "23.0")
        ),
        steps=[
            step(1, "/bin/sh -c #(nop) ADD file:abc in / "),
            step(2, "/bin/sh -c #(nop) ENV PIP_NO_CACHE_DIR=1"),
            step(
                3,
                "/bin/sh -c pip install       nvidia-nccl-cu13==2.30.1",
                change("nvidia-nccl-cu13", ChangeKind.ADDED, None, "2.30.1"),
            ),
            step(4, "/bin/sh -c #(nop) COPY file:123 in /c.txt"),
            step(
                5,
                "RUN /bin/sh -c pip install torch==2.9.1 # buildkit",
                change("torch", ChangeKind.ADDED, None, "2.9.1"),
                change(
                    "nvidia-nccl-cu13",
                    ChangeKind.DOWNGRADED,
                    "2.30.1",
                    "2.29.7",
                    causes=[cause("torch", "2.9.1", "nvidia-nccl-cu13==2.29.7")],
                ),
                change("pip", ChangeKind.DOWNGRADED, "24.0", "23.0"),
            ),
        ],
        incomplete=[Incomplete("layer sha256:dead", "truncated gzip stream")] if incomplete else [],
    )
    findings = evaluate(base, parse_policy(POLICY, file="policies/gb10.toml"), today=TODAY)
    return replace(base, findings=findings)


def test_dockerfile_step_lines_align_history_with_the_last_stage() -> None:
    """RUN steps match their RUN lines, other steps their keyword; base steps stay unmapped."""
    lines = dockerfile_step_lines(DOCKERFILE, audited().steps)
    assert lines == {2: 5, 3: 6, 4: 8, 5: 9}


@pytest.mark.parametrize("with_dockerfile", [True, False], ids=["dockerfile", "policy-lines"])
def test_sarif_is_valid_and_points_at_the_right_line(with_dockerfile: bool) -> None:
    """Valid SARIF 2.1.0; results point at the Dockerfile step line, else at the policy line."""
    options = (
        RenderOptions(dockerfile="docker/Dockerfile", dockerfile_text=DOCKERFILE)
        if with_dockerfile
        else RenderOptions()
    )
    log = json.loads(sarif.render(audited(incomplete=True), options))
    jsonschema.Draft7Validator.check_schema(SCHEMA)
    jsonschema.Draft7Validator(SCHEMA).validate(log)
    run = log["runs"][0]
    rule_ids = [r["id"] for r in run["tool"]["driver"]["rules"]]
    assert rule_ids == sorted(RULES)
    by_key = {(r["ruleId"], r["properties"].get("package")): r for r in run["results"]}
    forbidden = by_key[("forbidden-version", "nvidia-nccl-cu13")]
    assert rule_ids[forbidden["ruleIndex"]] == "forbidden-version"
    assert forbidden["level"] == "error"
    loc = forbidden["locations"][0]["physicalLocation"]
    if with_dockerfile:
        assert loc == {"artifactLocation": {"uri": "docker/Dockerfile"}, "region": {"startLine": 9}}
    else:
        assert loc == {
            "artifactLocation": {"uri": "policies/gb10.toml"},
            "region": {"startLine": 4},
        }
    pip = by_key[("downgrade", "pip")]
    assert pip["suppressions"] == [
        {
            "kind": "external",
            "status": "accepted",
            "justification": "base image <pip> | pinned (until 2030-01-01)",
        }
    ]
    assert "suppressions" not in by_key[("downgrade", "nvidia-nccl-cu13")]
    assert run["invocations"][0]["executionSuccessful"] is False
    assert (
        "truncated gzip"
        in run["invocations"][0]["toolExecutionNotifications"][0]["message"]["text"]
    )


def test_sarif_is_deterministic_and_rejects_nothing_when_empty() -> None:
    """Same input, same bytes; an image without findings is still a valid log."""
    assert sarif.render(audited()) == sarif.render(audited())
    empty = json.loads(sarif.render(result(environment())))
    jsonschema.Draft7Validator(SCHEMA).validate(empty)
    assert empty["runs"][0]["results"] == []


def test_schema_catches_mistakes() -> None:
    """The schema is not a rubber stamp: a bad level or a missing message is rejected."""
    log = json.loads(sarif.render(audited()))
    bad = json.loads(json.dumps(log))
    bad["runs"][0]["results"][0]["level"] = "fatal"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(SCHEMA).validate(bad)
    bad = json.loads(json.dumps(log))
    del bad["runs"][0]["results"][0]["message"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(SCHEMA).validate(bad)
    bad = json.loads(json.dumps(log))
    bad["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"] = {"startLine": 0}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(SCHEMA).validate(bad)


def test_junit_parses_back_with_one_case_per_rule_and_package() -> None:
    """Failures for unwaived findings, skipped for waived ones, errors for unread parts."""
    text = junit.render(audited(incomplete=True), RenderOptions(rules=("coupling",)))
    root = ET.fromstring(text)
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    cases = {(c.get("classname"), c.get("name")): c for c in suite.findall("testcase")}
    assert set(cases) == {
        ("pinguard.downgrade", "nvidia-nccl-cu13"),
        ("pinguard.downgrade", "pip"),
        ("pinguard.forbidden-version", "nvidia-nccl-cu13"),
        ("pinguard.coupling", "all packages"),
        ("pinguard.incomplete", "layer sha256:dead"),
    }
    failure = cases[("pinguard.forbidden-version", "nvidia-nccl-cu13")].find("failure")
    assert failure is not None
    assert failure.get("type") == "error"
    assert "NCCL internal error" in (failure.get("message") or "")
    skipped = cases[("pinguard.downgrade", "pip")].find("skipped")
    assert skipped is not None
    assert "base image <pip>" in (skipped.get("message") or "")
    assert cases[("pinguard.coupling", "all packages")].find("failure") is None
    assert cases[("pinguard.incomplete", "layer sha256:dead")].find("error") is not None
    assert (
        suite.get("tests"),
        suite.get("failures"),
        suite.get("errors"),
        suite.get("skipped"),
    ) == ("5", "2", "1", "1")
    assert root.get("failures") == "2"


def test_junit_fail_on_threshold_and_control_characters() -> None:
    """Below fail_on a finding passes (in system-out); control characters never break XML."""
    audit = audited()
    weird = replace(
        audit,
        findings=tuple(
            replace(f, severity=Severity.WARNING, message=f.message + "\x1b[31m")
            for f in audit.findings
        ),
    )
    root = ET.fromstring(junit.render(weird, RenderOptions(fail_on=Severity.ERROR)))
    assert root.get("failures") == "0"
    outs = [c.findtext("system-out") or "" for c in root.iter("testcase")]
    assert any("\ufffd[31m" in o for o in outs)


def test_markdown_comment() -> None:
    """Verdict first, a table of open findings, waived ones folded, cells escaped."""
    text = markdown.render(audited(incomplete=True))
    first = text.splitlines()[0]
    assert first.startswith("### :x: pinguard: **fail** for `example/glm:latest`")
    assert "| Severity | Rule | Package |" in text
    assert "NCCL internal error on the GB10 fabric" in text
    assert "<details><summary>1 waived finding(s)</summary>" in text
    assert "base image &lt;pip&gt; \\| pinned" in text
    assert "truncated gzip stream" in text
    ok = markdown.render(result(environment()))
    assert ok.startswith("### :white_check_mark: pinguard: **pass**")
    many = replace(audited(), findings=audited().findings * 30)
    assert "more (see the full report)" in markdown.render(many, RenderOptions(max_rows=5))
