"""`pinguard verify REF --key KEY.pub`: is this digest attested, signed, passing, current?

REF is read as the audit reads it (``sources.resolve_reference``). A registry reference
(``docker://HOST/REPO:TAG``, or a bare ``HOST/REPO:TAG``, which verify looks up in the
registry, where attestations live) is resolved to a manifest digest (``--platform`` picks from
an index, as the audit does), and the attestations attached to that digest are found
(referrers API, then the referrers tag schema). ``--attestation FILE`` envelopes are checked
instead, and then REF may also be a local image (an OCI or docker archive, a layout): its
manifest digest is what they must name. A local REF without ``--attestation`` is a usage error
(exit 2) saying what REF is; it is never taken for a registry host. Each envelope is checked
by ``pinguard.attest.verify``. Exit 0 when one attestation satisfies every check, 1 when none
does (each one's reasons are shown; also when there is none), 3 when the image or its
referrers cannot be read, or when none passed and one of them could not be read. It never
audits the image: it re-judges the findings each attestation records at ``--fail-on``
(default ``error``), whatever threshold the attestation was made at.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import re
import sys
from pathlib import Path

from pinguard.cli.common import FAIL_ON, source_options
from pinguard.cli.output import write_output
from pinguard.errors import EXIT_FINDINGS, EXIT_IMAGE, EXIT_PASS, UsageError
from pinguard.report.formats import VERIFY_FORMATS

_DURATION = re.compile(r"([0-9]+)([smhdw])")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str) -> _dt.timedelta:
    """``30d``, ``12h``, ``90m``, ``3600s``, ``2w``."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}; e.g. 30d, 12h, 90m")
    return _dt.timedelta(seconds=int(match.group(1)) * _UNIT[match.group(2)])


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "verify",
        help="check that an image digest carries a valid, passing pinguard attestation",
        description="Resolve REF (docker://HOST/REPO:TAG or @DIGEST) to its digest and check "
        "the attestations attached to it: DSSE signature with --key, subject digest, predicate "
        "type, verdict, the recorded findings judged at --fail-on, and optionally the policy "
        "files and the age. With --attestation FILE, "
        "REF may also be a local image (an OCI or docker archive, a layout). Exit 0 verified, "
        "1 not verified, 2 usage, 3 unreadable.",
    )
    p.add_argument("reference", metavar="REF")
    p.add_argument("--key", required=True, metavar="KEY.pub", help="PEM ECDSA P-256 public key")
    p.add_argument(
        "--policy",
        action="append",
        default=[],
        metavar="FILE",
        help="require the attested policy files to be these (repeatable)",
    )
    p.add_argument("--max-age", type=parse_duration, metavar="AGE", help="e.g. 30d, 12h")
    p.add_argument("-f", "--format", choices=VERIFY_FORMATS, default="table")
    p.add_argument("-o", "--output", metavar="FILE", help="write the report here (atomically)")
    p.add_argument(
        "--attestation",
        action="append",
        default=[],
        metavar="FILE",
        help="check these envelope files instead of the registry's attestations",
    )
    p.add_argument(
        "--allow-incomplete",
        action="store_true",
        help="accept attestations of audits that could not read everything",
    )
    p.add_argument(
        "--fail-on",
        choices=sorted(FAIL_ON),
        default="error",
        help="judge each attestation's recorded findings at this threshold: it fails when it "
        "records an unwaived finding at or above it, whatever --fail-on it was attested at "
        "(default: error)",
    )
    p.add_argument(
        "--allow-no-python",
        action="store_true",
        help="accept attestations of images without a Python environment",
    )
    p.add_argument("--platform", help="os/arch[/variant] to pick from a multi-platform image")
    p.add_argument("--insecure-registry", action="append", default=[], metavar="HOST")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pinguard.attest import render as report
    from pinguard.attest.statement import policy_digests
    from pinguard.attest.store import find_attestations
    from pinguard.attest.verify import Demands, VerifyResult, check_envelope, verify
    from pinguard.signing.keys import load_public_key
    from pinguard.sources import ImageSource, open_source, registry_reference, resolve_reference
    from pinguard.sources.registry import RegistrySource

    key = load_public_key(args.key)
    wanted: tuple[str, ...] | None = None
    if args.policy:
        from pinguard.policy.load import load_policy

        policy = load_policy(*args.policy)
        wanted = tuple(sorted({d.sha256 for d in policy_digests(policy.files)}))
    envelopes: list[tuple[str, bytes]] = []
    for name in args.attestation:
        try:
            envelopes.append((name, Path(name).read_bytes()))
        except OSError as exc:
            raise UsageError(f"cannot read --attestation {name!r}: {exc.strerror}") from exc
    image = resolve_reference(args.reference)
    if image.registry_name is None and not envelopes:
        raise UsageError(
            f"verify needs a registry reference to find attestations; {args.reference} is a "
            f"{image.kind} (check envelope files against it with --attestation FILE, or name "
            "the image as docker://HOST/REPO:TAG)"
        )
    now = _dt.datetime.now(tz=_dt.timezone.utc)
    source: ImageSource
    if image.registry_name is not None:
        source = RegistrySource(image.registry_name, source_options(args))
        display = registry_reference(image.registry_name)
    else:
        source = open_source(args.reference, source_options(args))
        display = image.canonical
    try:
        digest = source.resolve().manifest_digest
        if not digest:
            raise UsageError(f"{args.reference!r} resolved to no manifest digest")
        demands = Demands(
            image_digest=digest,
            policy_digests=wanted,
            max_age=args.max_age,
            allow_incomplete=args.allow_incomplete,
            fail_on=FAIL_ON[args.fail_on],
            allow_no_python=args.allow_no_python,
        )
        if envelopes:
            checks = tuple(
                check_envelope(data, key, demands, now, source=name, via="file")
                for name, data in envelopes
            )
            result = VerifyResult(display, digest, checks, fail_on=args.fail_on)
        else:
            assert isinstance(source, RegistrySource)  # a local image needs --attestation
            result = verify(display, find_attestations(source, digest), key, demands, now)
    finally:
        source.close()
    text = report.render_json(result) if args.format == "json" else report.render_table(result)
    if args.output:
        write_output(args.output, text, f"the {args.format} verification report")
    else:
        sys.stdout.write(text)
    if result.verified:
        return EXIT_PASS
    return EXIT_IMAGE if result.unreadable else EXIT_FINDINGS
