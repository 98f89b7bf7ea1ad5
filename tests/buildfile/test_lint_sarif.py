"""`pinguard lint --format sarif` output against the official SARIF 2.1.0 schema."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from pinguard.cli import main
from tests.infra.paths import SARIF_SCHEMA

SCHEMA = json.loads(SARIF_SCHEMA.read_text())


def test_lint_sarif_is_valid_and_points_at_the_line(tmp_path: Path) -> None:
    """A nightly install without a pin is reported at its RUN line in a schema-valid log."""
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(
        "FROM python:3.11\n"
        "ENV PIP_NO_INPUT=1\n"
        "RUN pip install --pre flashinfer-python \\\n"
        "    --extra-index-url https://flashinfer.ai/whl/nightly/\n"
    )
    out = tmp_path / "lint.sarif"
    assert main(["lint", str(dockerfile), "--format", "sarif", "-o", str(out)]) == 1
    log = json.loads(out.read_text())
    jsonschema.Draft7Validator(SCHEMA).validate(log)
    lines = {
        r["locations"][0]["physicalLocation"]["region"]["startLine"]
        for r in log["runs"][0]["results"]
    }
    assert lines == {3}
