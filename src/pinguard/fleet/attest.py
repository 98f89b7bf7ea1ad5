"""Fleet audits land as the same signed attestations ``pinguard attest --push`` attaches.

``attest_result`` signs the in-toto statement of a judged audit with the worker's key and
attaches it to the image's manifest in its registry (OCI referrers, or the ``sha256-<hex>``
tag schema), so ``pinguard verify`` finds it. An incomplete audit is attested only with
``allow_incomplete`` (the predicate says so), as ``pinguard attest`` does; a reference that is
not in a registry (``docker://``) is not attested. A run whose verdict judges nothing
(``--fail-on never``, ``--policy none``) is refused with ``AttestError`` before anything is
signed, as ``pinguard attest`` refuses it, so the worker records an error, never a pass with
an attestation of a looser judgement. Returns the attestation's digest.
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

from pinguard.errors import AttestError
from pinguard.models import AuditResult, Severity
from pinguard.policy.model import Policy
from pinguard.sources.reference import is_registry_reference, strip_registry_prefix


def attest_result(
    result: AuditResult,
    policy: Policy,
    key_path: Path,
    reference: str,
    *,
    fail_on: Severity | None,
    allow_incomplete: bool,
    allow_no_python: bool,
    insecure_registries: tuple[str, ...] = (),
) -> str | None:
    from pinguard.attest.sign import sign_result
    from pinguard.attest.statement import require_judgement
    from pinguard.signing.keys import load_private_key
    from pinguard.sources.interface import SourceOptions

    if not is_registry_reference(reference) or result.image.manifest_digest is None:
        return None
    try:
        require_judgement(fail_on, policy.source.kind)
    except AttestError as exc:
        raise AttestError(f"not attesting {reference}: {exc}") from None
    if result.incomplete and not allow_incomplete:
        return None
    signed = sign_result(
        result,
        load_private_key(key_path),
        policy_files=policy.files,
        fail_on=fail_on,
        allow_incomplete=allow_incomplete,
        allow_no_python=allow_no_python,
        now=_dt.datetime.now(tz=_dt.timezone.utc),
        push_to=strip_registry_prefix(reference),
        source_options=SourceOptions(insecure_registries=insecure_registries),
    )
    assert signed.attached is not None  # pushed: push_to was given
    return signed.attached.digest
