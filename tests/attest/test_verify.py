"""The checks `pinguard verify` runs on each attestation, one failure row at a time."""

from __future__ import annotations

import base64
import dataclasses
import datetime as _dt
import json
from importlib import resources
from typing import Any

import jsonschema
import pytest

from pinguard.attest import render as report
from pinguard.attest.statement import PREDICATE_TYPE
from pinguard.attest.store import Candidate
from pinguard.attest.verify import Demands, check_envelope, verify
from pinguard.signing import dsse
from pinguard.signing.keys import load_private_key, load_public_key
from tests.attest.conftest import Keys

IMAGE = "sha256:" + "1f" * 32
OTHER = "sha256:" + "2e" * 32
POLICY = "c0" * 32
NOW = _dt.datetime(2026, 12, 1, 9, 0, 0, tzinfo=_dt.timezone.utc)


def statement(**predicate: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "verdict": "pass",
        "failOn": "error",
        "allowIncomplete": False,
        "incomplete": [],
        "policies": [{"path": "policy.toml", "digest": {"sha256": POLICY}}],
        "platform": "linux/amd64",
        "image": {"reference": "docker://registry.example/app:v1", "digest": IMAGE},
        "pinguard": {"version": "0.1.0"},
        "timestamp": "2026-11-30T09:00:00Z",
        "summary": {
            "findings": {"error": 0, "warning": 1, "info": 0, "waived": 0},
            "steps": 2,
            "environments": 1,
            "distributions": 3,
        },
    }
    base.update(predicate)
    return {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": "registry.example/app", "digest": {"sha256": IMAGE[7:]}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": base,
    }


def signed(keys: Keys, doc: dict[str, Any], private: str = "private") -> bytes:
    key = load_private_key(getattr(keys, private))
    return dsse.sign(json.dumps(doc).encode(), key).to_json().encode()


DEMANDS = Demands(image_digest=IMAGE, policy_digests=(POLICY,), max_age=_dt.timedelta(days=30))


def test_a_good_attestation_passes(keys: Keys) -> None:
    """Signed, right subject, known type, verdict pass, same policy, young enough: no reason."""
    check = check_envelope(
        signed(keys, statement()),
        load_public_key(keys.public),
        DEMANDS,
        NOW,
        source="a",
        via="file",
    )
    assert check.ok, check.reasons
    assert check.attested is not None
    assert check.attested.verdict == "pass"


def _other_subject(doc: dict[str, Any]) -> dict[str, Any]:
    doc["subject"][0]["digest"]["sha256"] = OTHER[7:]
    return doc


def _other_type(doc: dict[str, Any]) -> dict[str, Any]:
    doc["predicateType"] = "https://slsa.dev/provenance/v1"
    return doc


@pytest.mark.parametrize(
    ("doc", "demands", "reason"),
    [
        (_other_subject(statement()), DEMANDS, f"subject is {OTHER}, not the image {IMAGE}"),
        (_other_type(statement()), DEMANDS, "unknown predicate type 'https://slsa.dev/"),
        (statement(verdict="fail"), DEMANDS, "attested verdict is 'fail', not 'pass'"),
        (
            statement(incomplete=[{"what": "/x.dist-info", "why": "no METADATA"}]),
            DEMANDS,
            "could not read everything (1 item(s), first: /x.dist-info: no METADATA)",
        ),
        (
            statement(policies=[{"path": "p", "digest": {"sha256": "d1" * 32}}]),
            DEMANDS,
            "differ from the given policy files'",
        ),
        (statement(timestamp="2026-10-01T09:00:00Z"), DEMANDS, "61.0d old"),
        (statement(timestamp="2026-12-02T09:00:00Z"), DEMANDS, "is in the future"),
    ],
    ids=[
        "foreign-subject",
        "unknown-type",
        "failed",
        "incomplete",
        "policy-changed",
        "expired",
        "future",
    ],
)
def test_each_failure_has_its_reason(
    keys: Keys, doc: dict[str, Any], demands: Demands, reason: str
) -> None:
    """A signed statement that misses one demand fails with that demand's reason."""
    check = check_envelope(
        signed(keys, doc), load_public_key(keys.public), demands, NOW, source="a", via="file"
    )
    assert not check.ok
    assert any(reason in r for r in check.reasons), check.reasons


def test_demands_that_are_not_made_are_not_checked(keys: Keys) -> None:
    """Without --policy and --max-age, another policy and an old date pass; incomplete too
    when allowed."""
    doc = statement(
        policies=[],
        timestamp="2025-01-01T00:00:00Z",
        incomplete=[{"what": "w", "why": "y"}],
        allowIncomplete=True,
    )
    demands = Demands(image_digest=IMAGE, allow_incomplete=True)
    check = check_envelope(
        signed(keys, doc), load_public_key(keys.public), demands, NOW, source="a", via="file"
    )
    assert check.ok, check.reasons


def _tampered(data: bytes) -> bytes:
    env = json.loads(data)
    payload = base64.b64decode(env["payload"]).replace(b'"fail"', b'"pass"')
    env["payload"] = base64.b64encode(payload).decode()
    return json.dumps(env).encode()


def _unsigned(data: bytes) -> bytes:
    env = json.loads(data)
    env["signatures"] = []
    return json.dumps(env).encode()


def _retyped(data: bytes) -> bytes:
    env = json.loads(data)
    env["payloadType"] = "application/json"
    return json.dumps(env).encode()


@pytest.mark.parametrize(
    ("mangle", "reason"),
    [
        (_tampered, "no signature verifies"),
        (_unsigned, "envelope is unsigned"),
        (_retyped, "payload type 'application/json' is not"),
        (lambda d: d[:40], "envelope is not JSON"),
    ],
    ids=["tampered", "unsigned", "payload-type", "unparsable"],
)
def test_envelope_failures_stop_before_the_payload(keys: Keys, mangle: Any, reason: str) -> None:
    """A tampered, unsigned, mistyped or unparsable envelope fails; its payload is not read."""
    data = mangle(signed(keys, statement(verdict="fail")))
    check = check_envelope(data, load_public_key(keys.public), DEMANDS, NOW, source="a", via="file")
    assert not check.ok
    assert check.attested is None
    assert len(check.reasons) == 1
    assert reason in check.reasons[0]


def test_wrong_key(keys: Keys) -> None:
    """An attestation signed by another key fails with the signature reason."""
    data = signed(keys, statement(), private="other_private")
    check = check_envelope(data, load_public_key(keys.public), DEMANDS, NOW, source="a", via="f")
    assert check.reasons
    assert "signed by another key" in check.reasons[0]


def test_verify_over_candidates(keys: Keys) -> None:
    """One good candidate verifies the digest; the others keep their reasons; an unreadable
    one is marked so; the JSON report is schema-valid."""
    good = signed(keys, statement())
    candidates = [
        Candidate("sha256:" + "03" * 32, "tag-schema", envelope=good, subject=IMAGE),
        Candidate("sha256:" + "01" * 32, "tag-schema", envelope=good, subject=OTHER),
        Candidate("sha256:" + "02" * 32, "tag-schema", error="its manifest could not be read"),
    ]
    result = verify("docker://r/app:v1", candidates, load_public_key(keys.public), DEMANDS, NOW)
    assert result.verified
    assert result.unreadable
    assert [c.ok for c in result.checks] == [True, False, False]
    assert "artifact manifest's subject is" in result.checks[1].reasons[0]
    assert result.checks[2].unreadable
    doc = report.to_dict(result)
    schema = json.loads(
        resources.files("pinguard").joinpath("schemas/verify-v1.schema.json").read_text()
    )
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(doc)
    assert doc["result"] == "verified"
    failing = dataclasses.replace(result, checks=result.checks[1:])
    assert report.to_dict(failing)["result"] == "unreadable"
    assert report.to_dict(dataclasses.replace(result, checks=()))["result"] == "failed"
    table = report.render_table(failing)
    assert "not verified" in table
    assert "could not be read" in table
