"""The in-toto Statement v1 that pinguard signs, and reading one back.

``build_statement`` turns a judged ``AuditResult`` into a statement whose ``subject`` is the
image's manifest digest (named by its repository) and whose predicate (``PREDICATE_TYPE``,
versioned; JSON Schema ``schemas/attest-v1.schema.json``) holds the verdict and how it was
reached (the threshold ``failOn``, ``allowIncomplete``, ``allowNoPython`` and what could not
be read), the digests of the policy files (every file a policy extends included), pinguard's
version, the platform, the time, a summary (unwaived findings per severity, environments) from
which a verifier re-judges the audit at its own threshold, and the whole audit document
(``pinguard/audit/v1``). It refuses to sign a verdict that judged nothing: ``--fail-on never``
or ``--policy none`` (``require_judgement``). ``statement_bytes`` is the canonical JSON
(sorted keys, no spaces), so two attestations of one image differ only in the timestamp.
``read_statement`` parses a statement into ``AttestedAudit`` or raises ``EnvelopeError``
saying what is wrong.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from pinguard import __version__
from pinguard.errors import AttestError, EnvelopeError
from pinguard.models import AuditResult, Severity
from pinguard.sources.reference import (
    is_registry_reference,
    parse_reference,
    strip_registry_prefix,
)

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://pinguard.dev/attestation/audit/v1"
KNOWN_PREDICATE_TYPES = frozenset({PREDICATE_TYPE})

# --fail-on thresholds, strictest first: a threshold fails everything at or above it.
THRESHOLDS = ("info", "warning", "error", "never")


def threshold_name(fail_on: Severity | None) -> str:
    """``error``, ``warning``, ``info``, or ``never`` for None."""
    return fail_on.value if fail_on is not None else "never"


def looser(attested: str, required: str) -> bool:
    """Whether threshold ``attested`` lets through something ``required`` fails (both names
    in ``THRESHOLDS``: info strictest < warning < error < never loosest)."""
    return THRESHOLDS.index(attested) > THRESHOLDS.index(required)


def require_judgement(fail_on: Severity | None, policy_kind: str | None) -> None:
    """Raise ``AttestError`` for a run whose verdict would judge nothing: ``--fail-on never``
    signs ``pass`` whatever the audit found, ``--policy none`` has no rule that could fail it.
    Any verifier that reads only the verdict (another DSSE tool, a cosign policy, an older
    pinguard) would take such an attestation for a passing audit."""
    if fail_on is None:
        raise AttestError(
            "--fail-on never judges nothing: the attestation would say 'pass' whatever the "
            "audit found; attest at --fail-on error, warning or info (verify re-judges the "
            "recorded finding counts at its own --fail-on)"
        )
    if policy_kind == "none":
        raise AttestError(
            "--policy none judges nothing (an inventory): an attestation names the policy it judged"
        )


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
    if is_registry_reference(ref):
        parsed = parse_reference(strip_registry_prefix(ref))
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
    manifest digest to name (a ``dir:`` tree), or when the verdict would judge nothing
    (``require_judgement``)."""
    from pinguard.report import json as json_report
    from pinguard.report.options import RenderOptions

    require_judgement(fail_on, result.policy.kind if result.policy is not None else None)
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
        "failOn": threshold_name(fail_on),
        "allowIncomplete": allow_incomplete,
        "allowNoPython": allow_no_python,
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
class FindingCounts:
    """The unwaived findings per severity an attestation records, and the waived ones."""

    error: int
    warning: int
    info: int
    waived: int = 0

    def at_or_above(self, threshold: str) -> dict[str, int]:
        """The severities a ``threshold`` fails that have findings: ``{"error": 2}``."""
        if threshold == "never":
            return {}
        counts = {"error": self.error, "warning": self.warning, "info": self.info}
        failed = THRESHOLDS[THRESHOLDS.index(threshold) : THRESHOLDS.index("never")]
        return {s: counts[s] for s in reversed(failed) if counts[s]}

    def to_dict(self) -> dict[str, int]:
        return {
            "error": self.error,
            "warning": self.warning,
            "info": self.info,
            "waived": self.waived,
        }


@dataclass(frozen=True, slots=True)
class AttestedAudit:
    """What a verifier reads from a statement (already known to be signed). The fields from
    ``fail_on`` on are None where the statement does not hold them (or not as the schema
    says): a verifier treats that as failing, never as passing."""

    subject_digests: tuple[str, ...]  # "sha256:<hex>" for every subject
    predicate_type: str
    verdict: str | None = None
    incomplete: tuple[str, ...] = ()
    allow_incomplete: bool = False
    policy_digests: tuple[str, ...] = ()  # hex, sorted
    timestamp: _dt.datetime | None = None
    platform: str | None = None
    version: str | None = None
    subject_count: int = 0  # subjects listed, with or without a sha256 digest
    fail_on: str | None = None  # the threshold the verdict was reached at, as written
    findings: FindingCounts | None = None
    environments: int | None = None  # Python environments found (0: no Python at all)
    allow_no_python: bool | None = None
    image_digest: str | None = None  # the predicate's image.digest
    policy_source: str | None = None  # the audit's policy.source: given, default, none, ...


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
    fail_on = pred.get("failOn")
    summary = pred.get("summary")
    summary = summary if isinstance(summary, dict) else {}
    environments = summary.get("environments")
    allow_no_python = pred.get("allowNoPython")
    image = pred.get("image")
    image_digest = image.get("digest") if isinstance(image, dict) else None
    audit = pred.get("audit")
    policy = audit.get("policy") if isinstance(audit, dict) else None
    policy_source = policy.get("source") if isinstance(policy, dict) else None
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
        subject_count=len(subjects),
        fail_on=fail_on if isinstance(fail_on, str) else None,
        findings=_finding_counts(summary.get("findings")),
        environments=environments if _is_count(environments) else None,
        allow_no_python=allow_no_python if isinstance(allow_no_python, bool) else None,
        image_digest=image_digest.lower() if isinstance(image_digest, str) else None,
        policy_source=policy_source if isinstance(policy_source, str) else None,
    )


def _is_count(value: object) -> TypeGuard[int]:
    return type(value) is int and value >= 0


def _finding_counts(value: object) -> FindingCounts | None:
    """``summary.findings`` when it holds a count for every severity, else None."""
    if not isinstance(value, dict):
        return None
    if not all(_is_count(value.get(s.value)) for s in Severity):
        return None
    waived = value.get("waived")
    return FindingCounts(
        error=value["error"],
        warning=value["warning"],
        info=value["info"],
        waived=waived if _is_count(waived) else 0,
    )
