"""Where the tests find the repository's own files: the checkout root, shipped policies, the
audit JSON schema and the vendored SARIF 2.1.0 schema (tests/data/README.md says where it came
from). One home, so a test module can move between folders without counting ``parents[n]``."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
POLICIES = REPO / "policies"
DATA = REPO / "tests" / "data"
AUDIT_SCHEMA = REPO / "src" / "pinguard" / "schemas" / "audit-v1.schema.json"
SARIF_SCHEMA = DATA / "sarif-schema-2.1.0.json"
