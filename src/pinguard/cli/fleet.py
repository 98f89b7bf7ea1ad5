"""`pinguard fleet run|report`: audit many images on the workers; report the fleet.

``run`` enqueues one task per reference (arguments, ``--file``, every tag of each
``--repository``), waits up to ``--timeout``, and reports the records; ``report`` renders
what the result store holds (audits on push included). Both print the matrix of images x
the packages that matter, failing images first, as a table, JSON or HTML, and exit with
the fleet's worst code: 3 when an image could not be read, 1 when one failed, else 0. A
broker that cannot be reached when ``run`` starts is exit 3 at once; one lost while ``run``
waits is ridden out until ``--timeout`` (the result store still read): the report then lists
every image, done or pending, and ``run`` exits 3 when the broker is still gone.
``--attest`` with a verdict that judges nothing (``--fail-on never``, ``--policy none``) is
refused before anything is enqueued (exit 2), as ``pinguard attest`` refuses it, and so is
a reference the one resolver refuses (bad syntax exit 2, a path that names nothing exit 3);
a local path is sent as its absolute path. ``receive`` takes the registry's push
notifications (``fleet.webhook``): pushes of an image already queued or being audited are
coalesced into that audit, and every push is answered within ``--answer-within`` seconds,
503 when the broker did not take it (``fleet.intake``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from pinguard.cli.common import FAIL_ON
from pinguard.cli.output import write_output
from pinguard.fleet.summary import DEFAULT_PACKAGES
from pinguard.report.formats import FLEET_FORMAT_NAMES


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "fleet",
        help="audit many images on `pinguard worker`s and report the fleet",
        description="Fan audits out to Celery workers and report images x packages.",
    )
    fsub = p.add_subparsers(dest="fleet_command", metavar="ACTION", required=True)
    r = fsub.add_parser("run", help="enqueue audits, wait, report")
    r.add_argument("references", nargs="*", metavar="REF")
    r.add_argument("--file", type=Path, action="append", default=[], help="references, one a line")
    r.add_argument(
        "--repository",
        action="append",
        default=[],
        metavar="docker://HOST/REPO",
        help="every tag of this repository (the registry's tag list)",
    )
    r.add_argument("--broker", metavar="URL", help="redis://HOST:PORT/DB ($PINGUARD_BROKER_URL)")
    r.add_argument("--timeout", type=float, default=3600.0, metavar="SECONDS")
    r.add_argument("--policy", action="append", default=[], metavar="FILE")
    r.add_argument("--target", action="append", default=[], metavar="T")
    r.add_argument("--platform")
    r.add_argument("--fail-on", choices=tuple(FAIL_ON), default="error")
    r.add_argument("--allow-incomplete", action="store_true")
    r.add_argument("--allow-no-python", action="store_true")
    r.add_argument("--attest", action="store_true", help="workers attach signed attestations")
    r.add_argument("--insecure-registry", action="append", default=[], metavar="HOST")
    _report_options(r)
    r.set_defaults(func=run)
    w = fsub.add_parser(
        "receive",
        help="receive the registry's push notifications and enqueue audits",
        description="An HTTP endpoint for the distribution registry's notifications.endpoints: "
        "each manifest pushed under a tag is enqueued as docker://REGISTRY/REPO@DIGEST "
        "(docs/fleet.md).",
    )
    w.add_argument("--listen", default="127.0.0.1:8780", metavar="HOST:PORT")
    w.add_argument(
        "--token-file",
        type=Path,
        required=True,
        metavar="FILE",
        help="the bearer token the registry sends (Authorization: Bearer TOKEN)",
    )
    w.add_argument(
        "--registry",
        metavar="HOST[:PORT]",
        help="the registry's address as the workers reach it (default: the host in each "
        "event's target URL)",
    )
    w.add_argument("--broker", metavar="URL", help="redis://HOST:PORT/DB ($PINGUARD_BROKER_URL)")
    w.add_argument(
        "--answer-within",
        type=_seconds,
        default=3.0,
        metavar="SECONDS",
        help="answer 503 when the broker has not taken a push's tasks within this long "
        "(default 3; keep it below the registry's notification timeout, 5s in the docs)",
    )
    w.add_argument("--policy", action="append", default=[], metavar="FILE")
    w.add_argument("--fail-on", choices=tuple(FAIL_ON), default="error")
    w.add_argument("--allow-incomplete", action="store_true")
    w.add_argument("--allow-no-python", action="store_true")
    w.add_argument("--attest", action="store_true", help="workers attach signed attestations")
    w.set_defaults(func=receive)
    s = fsub.add_parser("report", help="report what the result store holds")
    _report_options(s)
    s.set_defaults(func=report)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected seconds above 0, got {text!r}")
    return value


def _report_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--results", type=Path, required=True, metavar="DIR", help="the result store")
    p.add_argument(
        "--package",
        action="append",
        default=[],
        metavar="PATTERN",
        help=f"a package column (fnmatch; default: {' '.join(DEFAULT_PACKAGES)})",
    )
    p.add_argument("-f", "--format", choices=FLEET_FORMAT_NAMES, default="table")
    p.add_argument("-o", "--output", metavar="FILE")


def _emit(args: argparse.Namespace, records: list) -> int:  # type: ignore[type-arg]
    from pinguard.fleet.render import FLEET_FORMATS
    from pinguard.fleet.summary import summarize

    summary = summarize(records, tuple(args.package) or DEFAULT_PACKAGES)
    text = FLEET_FORMATS[args.format](summary)
    if args.output:
        write_output(args.output, text, f"the {args.format} fleet report")
    else:
        sys.stdout.write(text)
    return summary.exit_code


def _task_options(args: argparse.Namespace) -> dict[str, object]:
    return {
        "policy": [str(Path(p).resolve()) if p != "none" else p for p in args.policy],
        "targets": list(getattr(args, "target", ())),
        "platform": getattr(args, "platform", None),
        "fail_on": args.fail_on,
        "allow_incomplete": args.allow_incomplete,
        "allow_no_python": args.allow_no_python,
        "attest": args.attest,
    }


def _check_policy(args: argparse.Namespace) -> None:
    """Load the policy files here first: a typo'd ``--policy`` is one error now, not an
    error record for every image the workers audit."""
    if not args.policy:
        return  # the workers' own default or discovered policy: nothing to check here
    from pinguard.policy.load import load_run_policy

    load_run_policy(list(args.policy))


def _check_attest(args: argparse.Namespace) -> None:
    """``--attest`` under a verdict that judges nothing is refused here, before anything is
    enqueued: the workers would refuse to sign it, an error record for every image."""
    if not args.attest:
        return
    from pinguard.attest.statement import require_judgement
    from pinguard.errors import AttestError
    from pinguard.fleet.task import FAIL_ON

    try:
        require_judgement(FAIL_ON[args.fail_on], "none" if "none" in args.policy else None)
    except AttestError as exc:
        raise AttestError(f"--attest: {exc}") from None


def run(args: argparse.Namespace) -> int:
    from pinguard.fleet.broker import (
        BrokerUnreachable,
        broker_url,
        check_broker,
        describe,
        on_broker,
        require_extra,
    )

    _check_attest(args)
    require_extra("pinguard fleet run")
    from pinguard.fleet.app import make_app
    from pinguard.fleet.dispatch import BrokerLost, enqueue, references_from, wait
    from pinguard.fleet.records import ResultStore

    refs = references_from(
        args.references, args.file, args.repository, tuple(args.insecure_registry)
    )
    _check_policy(args)
    options = _task_options(args)
    broker = broker_url(args.broker)
    app = make_app(broker, enqueuer=True)
    check_broker(app, broker, args.broker)
    store = ResultStore(args.results)
    store.check_readable()
    with on_broker(broker, args.broker):
        tasks = enqueue(app, refs, options, store)
    print(f"enqueued {len(tasks)} audit(s)", file=sys.stderr, flush=True)

    def notify(text: str) -> None:
        print(f"warning: {text}", file=sys.stderr, flush=True)

    try:
        records = wait(app, tasks, store, args.timeout, notify)
    except BrokerLost as exc:
        _emit(args, exc.records)  # what is done and what is pending, by name
        pending = sum(r.verdict == "pending" for r in exc.records)
        raise BrokerUnreachable(
            f"could not reach the broker {describe(broker, args.broker)}: {exc.cause} "
            f"(unreachable for the last {exc.lost_for:.0f} s of --timeout {args.timeout:g}; "
            f"{len(tasks) - pending} of {len(tasks)} audit(s) done, {pending} pending; what "
            f"the workers finish still lands in the result store: pinguard fleet report "
            f"--results {args.results})"
        ) from None
    return _emit(args, records)


def report(args: argparse.Namespace) -> int:
    from pinguard.fleet.records import ResultStore

    store = ResultStore(args.results)
    store.check_readable()
    return _emit(args, store.all())


def receive(args: argparse.Namespace) -> int:
    from pinguard.errors import PinguardError, UsageError
    from pinguard.fleet.broker import broker_url, describe, probe, require_extra

    _check_attest(args)
    require_extra("pinguard fleet receive")
    from pinguard.fleet.app import make_app
    from pinguard.fleet.intake import PushIntake
    from pinguard.fleet.webhook import Push, Receiver

    try:
        token = args.token_file.read_text().strip()
    except OSError as exc:
        raise UsageError(
            f"cannot read --token-file {str(args.token_file)!r}: {exc.strerror or exc}"
        ) from None
    if len(token) < 16:
        raise UsageError("--token-file: the token must be at least 16 characters")
    host, sep, port = args.listen.rpartition(":")
    if not sep or not port.isdigit():
        raise UsageError(f"--listen {args.listen!r}: expected HOST:PORT")
    _check_policy(args)
    broker = broker_url(args.broker)
    app = make_app(broker, enqueuer=True)
    options = _task_options(args)

    def say(line: str) -> None:  # one write per line: request threads print at once
        sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def notify(text: str) -> None:
        say(f"warning: {text}")

    intake = PushIntake(
        app,
        broker,
        options,
        given=args.broker,
        answer_within=args.answer_within,
        notify=notify,
    )

    def report(push: Push) -> None:
        where = f"{push.repository}:{push.tag}@{push.digest}"
        if push.reference is None:
            say(f"ignored {where}: {push.ignored}")
        elif push.coalesced:
            say(
                f"coalesced {push.reference} (pushed as {where}): an audit of it is already "
                "queued or running"
            )
        else:
            say(f"enqueued {push.reference} (pushed as {where})")

    def failed(refs: Sequence[str], exc: Exception) -> None:
        why = str(exc) if isinstance(exc, PinguardError) else f"{type(exc).__name__}: {exc}"
        say(f"answered 503 (the registry retries): could not enqueue {len(refs)} audit(s): {why}")

    server = Receiver(host, int(port), token, args.registry, intake.submit, report, failed)
    cause = probe(app)
    if cause is not None:  # it may come up later: pushes are answered 503 until then
        say(
            f"warning: could not reach the broker {describe(broker, args.broker)}: {cause}; "
            "pushes are answered 503 until it can"
        )
        intake.unreachable(cause)
    say(f"listening on {server.address}")
    try:
        server.serve_forever()
    finally:
        server.httpd.server_close()
        intake.close()
    return 0
