"""Rendering a ``VerifyResult`` (`pinguard.attest.verify`): a plain-text table and the
versioned JSON document. It lives in attest/, beside what it renders, so that report/ never
imports attest/ (attest embeds report.json's audit document, so it sits above report/).

The JSON (schema ``pinguard/verify/v1``, shipped as ``schemas/verify-v1.schema.json``) names
the threshold the attestations were judged at here and lists every attestation found for the
image digest with its reasons, the threshold it was attested at and the findings it records;
the order is the result's (passing first, then by artifact digest), so one registry state
gives the same bytes.
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
        "fail_on": a.fail_on if a else None,
        "findings": a.findings.to_dict() if a and a.findings else None,
        "complete": not a.incomplete if a and a.verdict is not None else None,
        "no_python": a.environments == 0 if a and a.environments is not None else None,
    }


def to_dict(result: VerifyResult) -> dict[str, Any]:
    return {
        "schema": SCHEMA_ID,
        "reference": result.reference,
        "image_digest": result.image_digest,
        "result": outcome(result),
        "fail_on": result.fail_on,
        "attestations": [_check_dict(c) for c in result.checks],
    }


def render_json(result: VerifyResult) -> str:
    return json.dumps(to_dict(result), indent=2, sort_keys=True) + "\n"


def render_table(result: VerifyResult) -> str:
    lines = [
        f"{result.reference}",
        f"  digest {result.image_digest}",
        f"  judged here at --fail-on {result.fail_on}",
    ]
    if not result.checks:
        lines.append("  no attestation is attached to this digest")
    for check in result.checks:
        mark = "ok  " if check.ok else ("READ" if check.unreadable else "FAIL")
        a = check.attested
        detail = ""
        if a is not None and a.verdict is not None:
            when = a.timestamp.isoformat() if a.timestamp else "?"
            policies = ",".join(d[:12] for d in a.policy_digests) or "none"
            counts = a.findings
            found = (
                f"{counts.error} error, {counts.warning} warning, {counts.info} info"
                if counts
                else "no counts"
            )
            detail = (
                f"  verdict {a.verdict} at fail-on {a.fail_on or '?'} ({found}), {when}, "
                f"policies {policies}"
            )
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
