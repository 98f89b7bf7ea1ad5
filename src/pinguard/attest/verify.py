"""Verifying attestations for one image digest; every check's outcome is data.

``check_envelope`` runs the checks on one envelope in order and stops at the first that
leaves nothing trustworthy to read (parse, payload type, signature, statement): a payload
whose signature does not verify is never read further. After it: the statement must name
the image digest as its one subject and its predicate must record an audit of that digest,
the predicate type must be one pinguard knows, the verdict must be ``pass``, the recorded
finding counts are re-judged at the caller's threshold (``Demands.fail_on``: an attestation
made at a looser ``--fail-on`` passes only when its counts pass here; one without counts
fails), the image must have a Python environment (unless the caller allows none) and a
policy other than ``--policy none`` must have judged it, nothing may have been left unread
(unless the caller allows it), the attested policy digests must equal the caller's (when
given), and the attestation must be younger than ``max_age`` and not from the future.
``verify`` runs it over every candidate and says whether one passed, whether any could not
be read, and why each one failed.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric import ec

from pinguard.attest.statement import (
    KNOWN_PREDICATE_TYPES,
    THRESHOLDS,
    AttestedAudit,
    looser,
    read_statement,
    threshold_name,
)
from pinguard.attest.store import Candidate
from pinguard.errors import EnvelopeError
from pinguard.models import Severity
from pinguard.signing import dsse

CLOCK_SKEW = _dt.timedelta(minutes=5)


@dataclass(frozen=True, slots=True)
class Demands:
    """What the caller requires of an attestation, beyond a valid signature."""

    image_digest: str
    policy_digests: tuple[str, ...] | None = None  # hex; None: any policy
    max_age: _dt.timedelta | None = None
    allow_incomplete: bool = False
    # the threshold the recorded findings are judged at here (None: never, verdict only)
    fail_on: Severity | None = Severity.ERROR
    allow_no_python: bool = False


@dataclass(frozen=True, slots=True)
class AttestationCheck:
    """One attestation and the outcome of checking it (``reasons`` empty: it passed)."""

    source: str  # the artifact manifest digest, or the envelope file
    via: str  # "referrers-api", "tag-schema" or "file"
    reasons: tuple[str, ...]
    unreadable: bool = False  # it could not be read at all
    attested: AttestedAudit | None = None  # set once the signature verified

    @property
    def ok(self) -> bool:
        return not self.reasons


@dataclass(frozen=True, slots=True)
class VerifyResult:
    """All attestations found for one image digest."""

    reference: str
    image_digest: str
    checks: tuple[AttestationCheck, ...]
    fail_on: str = "error"  # the threshold the attestations were judged at here

    @property
    def verified(self) -> bool:
        return any(c.ok for c in self.checks)

    @property
    def unreadable(self) -> bool:
        return any(c.unreadable for c in self.checks)


def _age(delta: _dt.timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds >= 86400:
        return f"{seconds / 86400:.1f}d"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds}s"


def check_statement(
    attested: AttestedAudit, demands: Demands, now: _dt.datetime
) -> tuple[str, ...]:
    """The reasons a signed statement does not satisfy ``demands`` (empty: it does)."""
    reasons: list[str] = []
    if demands.image_digest not in attested.subject_digests:
        named = ", ".join(attested.subject_digests) or "no sha256 digest"
        reasons.append(f"its subject is {named}, not the image {demands.image_digest}")
    if attested.predicate_type not in KNOWN_PREDICATE_TYPES:
        reasons.append(f"unknown predicate type {attested.predicate_type!r}")
        return tuple(reasons)
    if attested.subject_count != 1:
        reasons.append(
            f"it names {attested.subject_count} subjects; a pinguard attestation names the one "
            "image it audited"
        )
    if attested.image_digest is None:
        reasons.append("its predicate names no image digest (image.digest)")
    elif attested.image_digest != demands.image_digest:
        reasons.append(
            f"its predicate records an audit of {attested.image_digest}, not of the image "
            f"{demands.image_digest}"
        )
    if attested.verdict != "pass":
        reasons.append(f"the attested verdict is {attested.verdict!r}, not 'pass'")
    reasons.extend(_judgement(attested, demands))
    if attested.incomplete and not demands.allow_incomplete:
        reasons.append(
            f"the audit could not read everything ({len(attested.incomplete)} item(s), "
            f"first: {attested.incomplete[0]}); --allow-incomplete accepts that"
        )
    if demands.policy_digests is not None and attested.policy_digests != demands.policy_digests:
        reasons.append(
            "the attested policy digests "
            f"{[d[:12] for d in attested.policy_digests]} differ from the given policy files' "
            f"{[d[:12] for d in demands.policy_digests]}: the policy changed since"
        )
    if attested.timestamp is not None:
        age = now - attested.timestamp
        if age < -CLOCK_SKEW:
            reasons.append(f"its timestamp {attested.timestamp.isoformat()} is in the future")
        elif demands.max_age is not None and age > demands.max_age:
            reasons.append(
                f"it is {_age(age)} old ({attested.timestamp.isoformat()}), older than "
                f"--max-age {_age(demands.max_age)}"
            )
    return tuple(reasons)


def _counted(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {severity}" for severity, n in counts.items())


def _judgement(attested: AttestedAudit, demands: Demands) -> list[str]:
    """Re-judge the recorded audit at the caller's threshold and allowances: the reasons it
    fails here. Whatever is missing or malformed fails (an older or hand-made statement)."""
    reasons = []
    required = threshold_name(demands.fail_on)
    judged_at = attested.fail_on
    if judged_at is None:
        reasons.append("it records no threshold (failOn) its verdict was reached at")
    elif judged_at not in THRESHOLDS:
        reasons.append(f"its threshold failOn {judged_at!r} is not one of {', '.join(THRESHOLDS)}")
    counts = attested.findings
    if counts is None or attested.environments is None:
        reasons.append(
            "it records no finding counts per severity and environments (predicate.summary), "
            f"so it cannot be judged at --fail-on {required}; attest the image again"
        )
        return reasons
    over = counts.at_or_above(required)
    if over and judged_at in THRESHOLDS and looser(str(judged_at), required):
        reasons.append(
            f"it was judged at --fail-on {judged_at}, looser than --fail-on {required} here, "
            f"and records {_counted(over)} finding(s), which fail at {required}"
        )
    elif over:
        reasons.append(
            f"it records {_counted(over)} finding(s), which fail at --fail-on {required}"
        )
    own = counts.at_or_above(str(judged_at)) if judged_at in THRESHOLDS else {}
    if attested.verdict == "pass" and own:
        reasons.append(
            f"it contradicts itself: verdict 'pass' at --fail-on {judged_at} with "
            f"{_counted(own)} finding(s)"
        )
    if attested.environments == 0 and not demands.allow_no_python:
        how = " (attested with --allow-no-python)" if attested.allow_no_python else ""
        reasons.append(
            f"the audit found no Python environment in the image{how}; --allow-no-python "
            "accepts that"
        )
    if attested.policy_source == "none":
        reasons.append("it was judged under --policy none (an inventory): no rule could fail it")
    return reasons


def check_envelope(
    data: bytes,
    key: ec.EllipticCurvePublicKey,
    demands: Demands,
    now: _dt.datetime,
    *,
    source: str,
    via: str,
) -> AttestationCheck:
    """Check one envelope's bytes against the key and the demands."""
    try:
        envelope = dsse.parse(data)
        if envelope.payload_type != dsse.IN_TOTO_PAYLOAD_TYPE:
            raise EnvelopeError(
                f"payload type {envelope.payload_type!r} is not {dsse.IN_TOTO_PAYLOAD_TYPE!r}"
            )
        payload = dsse.verify(envelope, key)
        attested = read_statement(payload)
    except EnvelopeError as exc:
        return AttestationCheck(source=source, via=via, reasons=(str(exc),))
    return AttestationCheck(
        source=source,
        via=via,
        reasons=check_statement(attested, demands, now),
        attested=attested,
    )


def verify(
    reference: str,
    candidates: Sequence[Candidate],
    key: ec.EllipticCurvePublicKey,
    demands: Demands,
    now: _dt.datetime,
) -> VerifyResult:
    """Check every candidate found in a registry for ``demands.image_digest``."""
    checks = []
    for c in candidates:
        if c.error is not None or c.envelope is None:
            checks.append(
                AttestationCheck(
                    source=c.digest,
                    via=c.via,
                    reasons=(c.error or "it has no envelope",),
                    unreadable=True,
                )
            )
            continue
        if c.subject != demands.image_digest:
            checks.append(
                AttestationCheck(
                    source=c.digest,
                    via=c.via,
                    reasons=(
                        f"its artifact manifest's subject is {c.subject!r}, "
                        f"not the image {demands.image_digest}",
                    ),
                )
            )
            continue
        checks.append(check_envelope(c.envelope, key, demands, now, source=c.digest, via=c.via))
    return _result(reference, demands, checks)


def _result(reference: str, demands: Demands, checks: list[AttestationCheck]) -> VerifyResult:
    return VerifyResult(
        reference=reference,
        image_digest=demands.image_digest,
        checks=tuple(sorted(checks, key=lambda c: (not c.ok, c.source))),
        fail_on=threshold_name(demands.fail_on),
    )
