"""The in-toto Statement v1 that pinguard signs, and reading one back.

``build_statement`` turns a judged ``AuditResult`` into a statement whose ``subject`` is the
image's manifest digest (named by its repository) and whose predicate (``PREDICATE_TYPE``,
versioned; JSON Schema ``schemas/attest-predicate-v1.schema.json``) holds the verdict and how
it was reached (``failOn``, ``allowIncomplete`` and what could not be read), the digests of
the policy files (every file a policy extends included), pinguard's version, the platform,
the time, a summary a deploy check can read at a glance, and the whole audit document
(``pinguard/audit/v1``). ``statement_bytes`` is the canonical JSON (sorted keys, no spaces),
so two attestations of one image differ only in the timestamp. ``read_statement`` parses a
statement into ``AttestedAudit`` or raises ``EnvelopeError`` saying what is wrong.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pinguard import __version__
from pinguard.errors import AttestError, EnvelopeError
from pinguard.models import AuditResult, Severity

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://pinguard.dev/attestation/audit/v1"
KNOWN_PREDICATE_TYPES = frozenset({PREDICATE_TYPE})


@dataclass(frozen=True, slots=True)
class PolicyDigest:
    """One policy file as attested: the path as given and its SHA-256 (hex)."""

    path: str
    sha256: str


def policy_digests(files: Sequence[str | os.PathLike[str]]) -> tuple[PolicyDigest, ...]:
    """SHA-256 of each policy file, sorted by digest then path; ``AttestError`` if unreadable."""
    out = []
    for f in files:
        try:
            data = Path(f).read_bytes()
        except OSError as exc:
            raise AttestError(f"cannot read policy file {str(f)!r}: {exc.strerror or exc}") from exc
        out.append(PolicyDigest(path=str(f), sha256=hashlib.sha256(data).hexdigest()))
    return tuple(sorted(set(out), key=lambda p: (p.sha256, p.path)))


def format_time(when: _dt.datetime) -> str:
    """RFC 3339 in UTC with second precision: ``2026-12-01T09:00:00Z``."""
    return when.astimezone(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def subject_name(result: AuditResult) -> str:
    """The repository the image lives in (no tag or digest), or the reference as given."""
    ref = result.image.reference
    if ref.startswith("docker://"):
        from pinguard.sources.reference import parse_reference

        parsed = parse_reference(ref[len("docker://") :])
        return f"{parsed.registry}/{parsed.repository}"
    return ref


def build_statement(
    result: AuditResult,
    *,
    policies: Sequence[PolicyDigest],
    fail_on: Severity | None,
    allow_incomplete: bool,
    now: _dt.datetime,
    allow_no_python: bool = False,
) -> dict[str, Any]:
    """The statement for a judged audit. Raises ``AttestError`` when the image has no
    manifest digest to name (a ``dir:`` tree)."""
    from pinguard.report import json as json_report
    from pinguard.report.options import RenderOptions

    digest = result.image.manifest_digest
    if not digest or not digest.startswith("sha256:"):
        raise AttestError(
            f"{result.image.reference!r} has no sha256 manifest digest to attest "
            f"(got {digest!r}); attest an image, not a directory"
        )
    options = RenderOptions(
        fail_on=fail_on, allow_incomplete=allow_incomplete, allow_no_python=allow_no_python
    )
    audit = json_report.to_dict(result, options)
    active = [f for f in result.findings if not f.waived]
    counts = {s.value: sum(1 for f in active if f.severity is s) for s in Severity}
    counts["waived"] = sum(1 for f in result.findings if f.waived)
    platform = str(result.image.platform) if result.image.platform else None
    predicate = {
        "verdict": options.verdict(result),
        "failOn": fail_on.value if fail_on is not None else "never",
        "allowIncomplete": allow_incomplete,
        "incomplete": sorted(
            ({"what": i.what, "why": i.why} for i in result.incomplete),
            key=lambda i: (i["what"], i["why"]),
        ),
        "policies": [{"path": p.path, "digest": {"sha256": p.sha256}} for p in policies],
        "image": {"reference": result.image.reference, "digest": digest, "platform": platform},
        "platform": platform,
        "pinguard": {"version": __version__},
        "timestamp": format_time(now),
        "summary": {
            "findings": counts,
            "steps": len(result.steps),
            "environments": len(result.final.environments),
            "distributions": sum(len(e.distributions) for e in result.final.environments),
        },
        "audit": audit,
    }
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": subject_name(result), "digest": {"sha256": digest.split(":", 1)[1]}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": predicate,
    }


def statement_bytes(statement: dict[str, Any]) -> bytes:
    """Canonical JSON: sorted keys, no spaces, UTF-8."""
    return json.dumps(statement, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass(frozen=True, slots=True)
class AttestedAudit:
    """What a verifier reads from a statement (already known to be signed)."""

    subject_digests: tuple[str, ...]  # "sha256:<hex>" for every subject
    predicate_type: str
    verdict: str | None = None
    incomplete: tuple[str, ...] = ()
    allow_incomplete: bool = False
    policy_digests: tuple[str, ...] = ()  # hex, sorted
    timestamp: _dt.datetime | None = None
    platform: str | None = None
    version: str | None = None


def parse_time(text: str) -> _dt.datetime:
    """An RFC 3339 timestamp (``Z`` or an offset) as an aware datetime."""
    value = text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text
    when = _dt.datetime.fromisoformat(value)
    if when.tzinfo is None:
        raise ValueError(f"timestamp {text!r} has no time zone")
    return when


def read_statement(payload: bytes) -> AttestedAudit:
    """Parse a statement; unknown predicate types come back with only subject and type."""
    try:
        doc = json.loads(payload)
    except (ValueError, UnicodeDecodeError) as exc:
        raise EnvelopeError(f"the payload is not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise EnvelopeError("the payload is not a JSON object")
    if doc.get("_type") != STATEMENT_TYPE:
        raise EnvelopeError(
            f"the payload is not an in-toto Statement v1 (_type {doc.get('_type')!r})"
        )
    subjects = doc.get("subject")
    if not isinstance(subjects, list) or not subjects:
        raise EnvelopeError("the statement has no subject")
    digests = []
    for s in subjects:
        d = s.get("digest") if isinstance(s, dict) else None
        if isinstance(d, dict) and isinstance(d.get("sha256"), str):
            digests.append(f"sha256:{d['sha256'].lower()}")
    predicate_type = doc.get("predicateType")
    if not isinstance(predicate_type, str):
        raise EnvelopeError(f"the statement has no string predicateType: {predicate_type!r:.60}")
    if predicate_type not in KNOWN_PREDICATE_TYPES:
        return AttestedAudit(subject_digests=tuple(digests), predicate_type=predicate_type)
    pred = doc.get("predicate")
    if not isinstance(pred, dict):
        raise EnvelopeError("the statement's predicate is not an object")
    try:
        verdict = pred["verdict"]
        incomplete = tuple(f"{i['what']}: {i['why']}" for i in pred["incomplete"])
        policies = tuple(sorted({str(p["digest"]["sha256"]) for p in pred["policies"]}))
        timestamp = parse_time(str(pred["timestamp"]))
        allow = pred["allowIncomplete"]
        version = pred["pinguard"]["version"]
        platform = pred.get("platform")
    except (KeyError, TypeError, ValueError) as exc:
        raise EnvelopeError(f"the predicate is malformed: {type(exc).__name__}: {exc}") from exc
    if not isinstance(verdict, str) or not isinstance(allow, bool):
        raise EnvelopeError(f"the predicate's verdict {verdict!r:.40} is not a string")
    return AttestedAudit(
        subject_digests=tuple(digests),
        predicate_type=predicate_type,
        verdict=verdict,
        incomplete=incomplete,
        allow_incomplete=allow,
        policy_digests=policies,
        timestamp=timestamp,
        platform=platform if isinstance(platform, str) else None,
        version=str(version),
    )
