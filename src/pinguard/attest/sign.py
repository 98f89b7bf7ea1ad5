"""A judged audit to its signed attestation: statement, DSSE signature, and the push to the
image's registry. The one path that ``pinguard attest`` and the fleet's workers
(``fleet/attest.py``) both take, so that an attestation made either way is the same document.

``sign_result`` builds the in-toto statement of a judged ``AuditResult`` (``statement.py``),
signs it as a DSSE envelope with the caller's key, and, given ``push_to`` (a registry
reference, ``HOST/REPO[:TAG|@DIGEST]``), attaches the envelope to the audited manifest in
that repository (``store.py``: OCI referrers, or the ``sha256-<hex>`` tag schema). What may
be attested at all (a verdict that judges something, an incomplete audit) is the callers'
decision, made before; nothing here prints or exits.
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pinguard.attest.statement import (
    PREDICATE_TYPE,
    build_statement,
    format_time,
    policy_digests,
    statement_bytes,
)
from pinguard.models import AuditResult, Severity
from pinguard.signing import dsse

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric import ec

    from pinguard.sources.interface import SourceOptions
    from pinguard.sources.registry import Attached


@dataclass(frozen=True)
class Signed:
    """A signed attestation: the statement, its DSSE envelope (JSON text), and where it was
    attached (None when it was not pushed)."""

    statement: dict[str, Any]
    envelope: str
    attached: Attached | None = None

    @property
    def verdict(self) -> str:
        verdict: str = self.statement["predicate"]["verdict"]
        return verdict


def sign_result(
    result: AuditResult,
    key: ec.EllipticCurvePrivateKey,
    *,
    policy_files: Sequence[str | os.PathLike[str]],
    fail_on: Severity | None,
    allow_incomplete: bool,
    allow_no_python: bool,
    now: _dt.datetime,
    push_to: str | None = None,
    source_options: SourceOptions | None = None,
) -> Signed:
    """``result``'s statement signed with ``key``; with ``push_to``, also attached to
    ``result``'s manifest digest in that registry repository (read with ``source_options``)."""
    statement = build_statement(
        result,
        policies=policy_digests(policy_files),
        fail_on=fail_on,
        allow_incomplete=allow_incomplete,
        allow_no_python=allow_no_python,
        now=now,
    )
    envelope = dsse.sign(statement_bytes(statement), key).to_json()
    if push_to is None:
        return Signed(statement, envelope)
    from pinguard.attest.store import push_attestation
    from pinguard.sources.interface import SourceOptions
    from pinguard.sources.registry import RegistrySource

    source = RegistrySource(push_to, source_options or SourceOptions())
    try:
        attached = push_attestation(
            source,
            str(result.image.manifest_digest),
            envelope.encode(),
            predicate_type=PREDICATE_TYPE,
            created=format_time(now),
        )
    finally:
        source.close()
    return Signed(statement, envelope, attached)
