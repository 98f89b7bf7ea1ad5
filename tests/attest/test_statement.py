"""The in-toto statement of an audit: fields by hand, schema-valid, canonical, read back."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from pinguard.attest.statement import (
    PREDICATE_TYPE,
    build_statement,
    policy_digests,
    read_statement,
    statement_bytes,
)
from pinguard.errors import AttestError, EnvelopeError
from pinguard.models import Finding, ImageInfo, Incomplete, Severity
from tests.factories import dist, environment, result, step

WHEN = _dt.datetime(2026, 11, 30, 8, 15, 0, tzinfo=_dt.timezone.utc)
DIGEST_HEX = "ab" * 32


def _schema(name: str) -> dict[str, Any]:
    text = resources.files("pinguard").joinpath(f"schemas/{name}").read_text()
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def _audited(**kw: Any) -> Any:
    r = result(
        environment(dist("torch", "2.12.1"), dist("nvidia-nccl-cu13", "2.30.3")),
        steps=[step(1), step(2)],
        **kw,
    )
    findings = (
        Finding(rule="downgrade", severity=Severity.WARNING, message="m1", package="x"),
        Finding(rule="downgrade", severity=Severity.ERROR, message="m2", waived=True),
    )
    image = ImageInfo(
        "docker://registry.example:5000/team/glm:v1",
        r.image.manifest_digest,
        r.image.platform,
        "docker",
    )
    return dataclasses.replace(r, findings=findings, image=image)


def _policy(tmp_path: Path, text: str = '[rules.downgrade]\nseverity = "error"\n') -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(text)
    return path


def test_statement_fields(tmp_path: Path) -> None:
    """Subject, types and the predicate's summary, written out by hand."""
    policy = _policy(tmp_path)
    statement = build_statement(
        _audited(),
        policies=policy_digests([policy]),
        fail_on=Severity.ERROR,
        allow_incomplete=False,
        now=WHEN,
    )
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["subject"] == [
        {"name": "registry.example:5000/team/glm", "digest": {"sha256": DIGEST_HEX}}
    ]
    assert statement["predicateType"] == "https://pinguard.dev/attestation/audit/v1"
    pred = statement["predicate"]
    assert pred["verdict"] == "pass"  # the error is waived; the warning is below --fail-on
    assert pred["failOn"] == "error"
    assert pred["timestamp"] == "2026-11-30T08:15:00Z"
    assert pred["platform"] == "linux/arm64"
    assert pred["pinguard"] == {"version": "0.1.0"}
    expected = hashlib.sha256(policy.read_bytes()).hexdigest()
    assert pred["policies"] == [{"path": str(policy), "digest": {"sha256": expected}}]
    assert pred["summary"] == {
        "findings": {"error": 0, "warning": 1, "info": 0, "waived": 1},
        "steps": 2,
        "environments": 1,
        "distributions": 2,
    }
    assert pred["audit"]["schema"] == "pinguard/audit/v1"
    assert pred["audit"]["image"]["manifest_digest"] == f"sha256:{DIGEST_HEX}"


def test_statement_and_embedded_audit_are_schema_valid(tmp_path: Path) -> None:
    """The statement validates against attest-v1, the embedded audit against audit-v1."""
    statement = build_statement(
        _audited(incomplete=[Incomplete("/x.dist-info", "no METADATA/PKG-INFO file")]),
        policies=policy_digests([_policy(tmp_path)]),
        fail_on=Severity.WARNING,
        allow_incomplete=True,
        now=WHEN,
    )
    schema = _schema("attest-v1.schema.json")
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(statement)
    jsonschema.Draft202012Validator(_schema("audit-v1.schema.json")).validate(
        statement["predicate"]["audit"]
    )
    assert statement["predicate"]["verdict"] == "fail"  # a warning at --fail-on warning
    assert statement["predicate"]["incomplete"] == [
        {"what": "/x.dist-info", "why": "no METADATA/PKG-INFO file"}
    ]
    broken = json.loads(json.dumps(statement))
    broken["subject"][0]["digest"]["sha256"] = "xyz"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(schema).validate(broken)


def test_statement_bytes_are_deterministic_apart_from_the_time(tmp_path: Path) -> None:
    """Two statements of one audit are the same bytes; only the timestamp moves them."""
    policies = policy_digests([_policy(tmp_path)])

    def make(now: _dt.datetime) -> bytes:
        statement = build_statement(
            _audited(), policies=policies, fail_on=Severity.ERROR, allow_incomplete=False, now=now
        )
        return statement_bytes(statement)

    one, two = make(WHEN), make(WHEN)
    later = make(WHEN + _dt.timedelta(hours=1))
    assert one == two
    reparsed = json.loads(one)
    assert json.dumps(reparsed, sort_keys=True, separators=(",", ":")).encode() == one
    assert later.replace(b"2026-11-30T09:15:00Z", b"2026-11-30T08:15:00Z") == one


def test_a_directory_has_nothing_to_attest() -> None:
    """No manifest digest (a dir: tree): AttestError naming the reference."""
    r = dataclasses.replace(_audited(), image=ImageInfo("dir:/srv/app", None, None, "dir"))
    with pytest.raises(AttestError, match=r"'dir:/srv/app' has no sha256 manifest digest"):
        build_statement(r, policies=(), fail_on=Severity.ERROR, allow_incomplete=False, now=WHEN)


def test_unreadable_policy_file_is_named(tmp_path: Path) -> None:
    """A policy file that vanished is an AttestError quoting its path."""
    with pytest.raises(AttestError, match=r"cannot read policy file '.*gone\.toml'"):
        policy_digests([tmp_path / "gone.toml"])


def test_read_statement_round_trip(tmp_path: Path) -> None:
    """What build_statement writes, read_statement reads back."""
    policy = _policy(tmp_path)
    payload = statement_bytes(
        build_statement(
            _audited(),
            policies=policy_digests([policy, policy]),
            fail_on=Severity.ERROR,
            allow_incomplete=False,
            now=WHEN,
        )
    )
    attested = read_statement(payload)
    assert attested.subject_digests == (f"sha256:{DIGEST_HEX}",)
    assert attested.predicate_type == PREDICATE_TYPE
    assert attested.verdict == "pass"
    assert attested.timestamp == WHEN
    assert attested.policy_digests == (hashlib.sha256(policy.read_bytes()).hexdigest(),)
    assert attested.platform == "linux/arm64"


def _statement(**changes: Any) -> bytes:
    doc: dict[str, Any] = {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": "x", "digest": {"sha256": DIGEST_HEX}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {"verdict": "pass"},
    }
    doc.update(changes)
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"{", "not JSON"),
        (b"[1]", "not a JSON object"),
        (_statement(_type="https://in-toto.io/Statement/v0.1"), "not an in-toto Statement v1"),
        (_statement(subject=[]), "has no subject"),
        (_statement(predicateType=7), "no string predicateType"),
        (_statement(predicate=[]), "predicate is not an object"),
        (_statement(), "predicate is malformed"),
    ],
)
def test_malformed_statements(payload: bytes, message: str) -> None:
    """Each malformed statement raises EnvelopeError naming what is wrong."""
    with pytest.raises(EnvelopeError, match=message):
        read_statement(payload)


def test_foreign_predicate_types_come_back_unread() -> None:
    """A statement of another predicate type is parsed only as far as subject and type."""
    attested = read_statement(_statement(predicateType="https://slsa.dev/provenance/v1"))
    assert attested.predicate_type == "https://slsa.dev/provenance/v1"
    assert attested.verdict is None
