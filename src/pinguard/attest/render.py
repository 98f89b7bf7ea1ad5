"""Rendering a ``VerifyResult`` (`pinguard.attest.verify`): a plain-text table and the
versioned JSON document. It lives in attest/, beside what it renders, so that report/ never
imports attest/ (attest embeds report.json's audit document, so it sits above report/).

The JSON (schema ``pinguard/verify/v1``, shipped as ``schemas/verify-v1.schema.json``) lists
every attestation found for the image digest with its reasons; the order is the result's
(passing first, then by artifact digest), so one registry state gives the same bytes.
"""

from __future__ import annotations

import json
from typing import Any

from pinguard.attest.verify import AttestationCheck, VerifyResult

SCHEMA_ID = "pinguard/verify/v1"


def outcome(result: VerifyResult) -> str:
    """``verified``, ``unreadable`` (none passed and one could not be read) or ``failed``."""
    if result.verified:
        return "verified"
    return "unreadable" if result.unreadable else "failed"


def _check_dict(check: AttestationCheck) -> dict[str, Any]:
    a = check.attested
    return {
        "source": check.source,
        "via": check.via,
        "ok": check.ok,
        "unreadable": check.unreadable,
        "reasons": list(check.reasons),
        "predicate_type": a.predicate_type if a else None,
        "verdict": a.verdict if a else None,
        "timestamp": a.timestamp.isoformat() if a and a.timestamp else None,
        "policy_digests": list(a.policy_digests) if a else [],
        "platform": a.platform if a else None,
        "pinguard_version": a.version if a else None,
    }


def to_dict(result: VerifyResult) -> dict[str, Any]:
    return {
        "schema": SCHEMA_ID,
        "reference": result.reference,
        "image_digest": result.image_digest,
        "result": outcome(result),
        "attestations": [_check_dict(c) for c in result.checks],
    }


def render_json(result: VerifyResult) -> str:
    return json.dumps(to_dict(result), indent=2, sort_keys=True) + "\n"


def render_table(result: VerifyResult) -> str:
    lines = [f"{result.reference}", f"  digest {result.image_digest}"]
    if not result.checks:
        lines.append("  no attestation is attached to this digest")
    for check in result.checks:
        mark = "ok  " if check.ok else ("READ" if check.unreadable else "FAIL")
        a = check.attested
        detail = ""
        if a is not None and a.verdict is not None:
            when = a.timestamp.isoformat() if a.timestamp else "?"
            policies = ",".join(d[:12] for d in a.policy_digests) or "none"
            detail = f"  verdict {a.verdict}, {when}, policies {policies}"
        lines.append(f"  {mark} {check.source} ({check.via}){detail}")
        lines.extend(f"         - {reason}" for reason in check.reasons)
    verdict = {
        "verified": "verified: an attestation satisfies every check",
        "failed": "not verified: no attestation satisfies every check",
        "unreadable": "not verified: no attestation satisfies every check, and some could not "
        "be read",
    }[outcome(result)]
    lines.append(verdict)
    return "\n".join(lines) + "\n"
