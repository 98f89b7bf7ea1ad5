"""`pinguard attest REF --policy FILE --key KEY [--push] [-o FILE]`: audit, sign, attach.

Audits REF with the audit's options, judges it, and signs the in-toto statement of the
result as a DSSE envelope. ``-o`` writes the envelope (atomically); ``--push`` attaches it to
the image's manifest in its registry as an OCI 1.1 referrer; with neither it goes to stdout.
An image that could not be read fully is never attested (exit 3) unless
``--allow-incomplete``, and then the predicate says so. Exit 0 when the attested verdict is
``pass``, 1 when it is ``fail`` (the attestation is written either way: it records the truth).
``--fail-on never`` is refused (exit 2): it would sign ``pass`` whatever the audit found.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import sys

from pinguard.cli.common import (
    FAIL_ON,
    add_image_options,
    add_policy_options,
    judge,
    run_audit,
    source_options,
)
from pinguard.cli.output import write_stdout
from pinguard.errors import EXIT_IMAGE, UsageError
from pinguard.fileio import atomic_write
from pinguard.policy.load import load_run_policy


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "attest",
        help="audit an image and sign the result as an in-toto attestation",
        description="Audit REF, judge it against --policy, and sign the result as an in-toto "
        "Statement v1 in a DSSE envelope (ECDSA P-256). --push attaches it to the image in its "
        "registry (OCI referrers API, or the sha256-<hex> tag schema); -o writes it to a file.",
    )
    p.add_argument("reference", metavar="REF")
    p.add_argument(
        "--key",
        required=True,
        metavar="KEY.pem",
        help="PKCS#8 PEM ECDSA P-256 private key (encrypted: passphrase in $PINGUARD_KEY_PASSWORD)",
    )
    p.add_argument(
        "--push", action="store_true", help="attach the attestation to the image (docker://)"
    )
    p.add_argument("-o", "--output", metavar="FILE", help="write the DSSE envelope here")
    add_image_options(p)
    add_policy_options(p)
    p.set_defaults(func=run)


def attestation_time() -> _dt.datetime:
    """Now, or ``$SOURCE_DATE_EPOCH`` when set (reproducible builds)."""
    raw = os.environ.get("SOURCE_DATE_EPOCH")
    if raw:
        try:
            return _dt.datetime.fromtimestamp(int(raw), tz=_dt.timezone.utc)
        except (ValueError, OverflowError, OSError):
            raise UsageError(f"SOURCE_DATE_EPOCH is not a Unix time: {raw!r}") from None
    return _dt.datetime.now(tz=_dt.timezone.utc)


def run(args: argparse.Namespace) -> int:
    from pinguard.attest.sign import sign_result
    from pinguard.attest.statement import require_judgement
    from pinguard.signing.keys import load_private_key

    if not args.policy or "none" in args.policy:
        raise UsageError("attest needs --policy FILE: an attestation names the policy it judged")
    require_judgement(FAIL_ON[args.fail_on], None)  # --fail-on never: exit 2 before the audit
    from pinguard.errors import ImageNotFound
    from pinguard.sources import registry_reference, resolve_reference

    try:
        target = resolve_reference(args.reference)  # a bad reference or a missing file: at once
    except ImageNotFound as exc:  # only a local path is missing before anything is fetched
        if not args.push:
            raise
        raise UsageError(
            f"--push needs a registry reference (docker://HOST/REPO:TAG); {args.reference} "
            f"names a local path ({exc})"
        ) from None
    registry_name = target.registry_name
    if args.push and registry_name is None:
        raise UsageError(
            f"--push needs a registry reference (docker://HOST/REPO:TAG); {args.reference} is "
            f"a {target.kind}"
        )
    now = attestation_time()
    key = load_private_key(args.key)
    policy = load_run_policy(args.policy)
    # --push attests the registry's copy, where it is attached: a bare NAME is read there
    audited = registry_reference(registry_name) if args.push and registry_name else args.reference
    result = judge(run_audit(args, audited), args, policy)
    if result.incomplete and not args.allow_incomplete:
        from pinguard.cli import err

        first = result.incomplete[0]
        err(
            f"not attesting {args.reference}: {len(result.incomplete)} thing(s) could not be "
            f"read (first: {first.what}: {first.why}); --allow-incomplete attests anyway and "
            "the predicate says so"
        )
        return EXIT_IMAGE
    signed = sign_result(
        result,
        key,
        policy_files=policy.files,
        fail_on=FAIL_ON[args.fail_on],
        allow_incomplete=args.allow_incomplete,
        allow_no_python=args.allow_no_python,
        now=now,
        push_to=registry_name if args.push else None,
        source_options=source_options(args),
    )
    if args.output:
        atomic_write(args.output, signed.envelope)
    if signed.attached is not None:
        attached = signed.attached
        how = f"tag {attached.tag}" if attached.tag else "the referrers API"
        digest = result.image.manifest_digest
        print(f"attached {attached.digest} to {digest} (via {how})", file=sys.stderr)
    if not args.output and not args.push:
        write_stdout(signed.envelope, "the attestation")
    print(f"attested verdict: {signed.verdict}", file=sys.stderr)
    return 0 if signed.verdict == "pass" else 1
