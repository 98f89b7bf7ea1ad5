"""Generic package records (``models.Package``) reach every consumer with no code of their
kind: JSON (against its schema), CycloneDX and SPDX (against the official schemas), HTML and
the policy's ``[[forbidden]]`` entries. An image without them keeps its bytes."""

from __future__ import annotations

import dataclasses
import json
from importlib import resources
from pathlib import Path

import jsonschema
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from pinguard.models import AuditResult, Package
from pinguard.policy.engine import evaluate
from pinguard.policy.load import parse_policy
from pinguard.report import cyclonedx, html, spdx
from pinguard.report import json as json_report
from tests.factories import dist, environment, result

SPDX_SCHEMA = Path(__file__).parents[1] / "data" / "spdx-schema-2.3.json"
TOOL = Package(
    kind="example",
    name="frobnicator",
    version="2.0.1",
    location="/opt/tools/frobnicator.toml",
    owner="/opt/tools",
    properties=(("channel", "stable"), ("license", "MIT")),
    purl="pkg:generic/frobnicator@2.0.1",
)


def _with(*packages: Package) -> AuditResult:
    base = result(environment(dist("numpy", "2.1.0")))
    return dataclasses.replace(base, final=dataclasses.replace(base.final, packages=packages))


def test_json_lists_them_and_validates() -> None:
    doc = json_report.to_dict(_with(TOOL))
    schema = json.loads(
        resources.files("pinguard").joinpath("schemas/audit-v1.schema.json").read_text()
    )
    jsonschema.validate(doc, schema)
    assert doc["packages"] == [
        {
            "kind": "example",
            "name": "frobnicator",
            "version": "2.0.1",
            "location": "/opt/tools/frobnicator.toml",
            "owner": "/opt/tools",
            "properties": {"channel": "stable", "license": "MIT"},
            "purl": "pkg:generic/frobnicator@2.0.1",
        }
    ]
    assert "packages" not in json_report.to_dict(_with())


def test_sboms_carry_them_with_their_facts() -> None:
    text = cyclonedx.render(_with(TOOL))
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
    component = next(c for c in json.loads(text)["components"] if c["name"] == "frobnicator")
    assert component["purl"] == "pkg:generic/frobnicator@2.0.1"
    assert {"name": "pinguard:example:license", "value": "MIT"} in component["properties"]
    assert {"name": "pinguard:package:owner", "value": "/opt/tools"} in component["properties"]
    doc = json.loads(spdx.render(_with(TOOL)))
    jsonschema.validate(doc, json.loads(SPDX_SCHEMA.read_text()))
    assert ("frobnicator", "2.0.1") in {(p["name"], p["versionInfo"]) for p in doc["packages"]}
    assert cyclonedx.render(_with()) != text


def test_html_shows_them_only_when_present() -> None:
    assert 'id="packages"' in html.render(_with(TOOL))
    assert "<code>frobnicator</code>" in html.render(_with(TOOL))
    assert 'id="packages"' not in html.render(_with())


def test_a_forbidden_entry_judges_them_by_name_and_version() -> None:
    policy = parse_policy(
        '[[forbidden]]\npackage = "frobnicator"\nversion = ">=2,<2.1"\nreason = "eats data"\n'
        'environments = ["/opt/*"]\n'
    )
    found = [f for f in evaluate(_with(TOOL), policy) if f.rule == "forbidden-version"]
    assert [(f.package, f.environment, f.versions) for f in found] == [
        ("frobnicator", "/opt/tools", ("2.0.1",))
    ]
    other_place = dataclasses.replace(TOOL, owner="/srv/tools")
    assert not [f for f in evaluate(_with(other_place), policy) if f.rule == "forbidden-version"]
