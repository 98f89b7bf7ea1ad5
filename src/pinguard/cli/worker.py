"""`pinguard worker`: a Celery worker that runs fleet audits (docs/fleet.md).

Runs ``celery worker`` on the ``pinguard`` queue of ``--broker`` in this process, with the
fleet app's settings (late acks, prefetch 1, the visibility timeout); each task audits one
reference with this worker's result store, shared layer cache, layer jobs, insecure
registries and attestation key; a task that finishes while the broker is gone waits for it
(``--broker-patience``) to store its state and acknowledge it. Before Celery starts, what
would fail every task or keep the worker from ever taking one is an error naming it: the
``fleet`` extra not installed (exit 2), a shared ``--cache`` without the fleet's signing
and trusted keys (2, unless ``--cache-unsigned``: any host that can write to the cache could
poison it), a bad key, a negative ``--broker-patience`` (2), a result store it cannot write
to (2), a broker it cannot reach (3).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from pinguard.cli.common import add_cache_options, cache_spec


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "worker",
        help="run a Celery worker that audits the images `pinguard fleet` enqueues",
        description="A Celery worker on a Redis broker: each task audits one image reference "
        "and writes its record to --results (a directory shared with `pinguard fleet`).",
    )
    p.add_argument("--broker", metavar="URL", help="redis://HOST:PORT/DB ($PINGUARD_BROKER_URL)")
    p.add_argument(
        "--results", type=Path, required=True, metavar="DIR", help="the shared result store"
    )
    p.add_argument("--jobs", type=int, default=1, help="layer processes per audit (default 1)")
    p.add_argument("--concurrency", type=int, default=1, help="audits at once (default 1)")
    p.add_argument("--pool", choices=("solo", "prefork"), default="solo")
    p.add_argument(
        "--visibility-timeout",
        type=int,
        metavar="SECONDS",
        help="redeliver a task unacknowledged this long; longer than the longest audit "
        "(default: $PINGUARD_VISIBILITY_TIMEOUT or 21600)",
    )
    p.add_argument(
        "--broker-patience",
        type=float,
        metavar="SECONDS",
        help="how long a finished task waits for a lost broker to store its state and "
        "acknowledge it, retrying with backoff (default: $PINGUARD_BROKER_PATIENCE or 300); "
        "then it is left to be delivered again",
    )
    p.add_argument(
        "--attest-key",
        type=Path,
        metavar="KEY.pem",
        help="sign each audit and attach it to the image when the task asks (--attest)",
    )
    p.add_argument("--insecure-registry", action="append", default=[], metavar="HOST")
    p.add_argument("--hostname", help="the worker's node name (celery -n)")
    cache = p.add_argument_group("shared layer cache")
    add_cache_options(cache)
    cache.add_argument(
        "--cache-unsigned",
        action="store_true",
        help="use --cache without --cache-sign-key and --cache-trust (by default refused: "
        "any host that can write to the cache could poison what the workers trust)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pinguard.errors import UsageError
    from pinguard.fleet.broker import broker_url, check_broker, require_extra

    require_extra("pinguard worker")
    from pinguard.fleet.app import QUEUE, make_app
    from pinguard.fleet.records import ResultStore
    from pinguard.fleet.task import (
        WorkerSettings,
        configure,
        patience_from,
        require_fleet_keys,
    )

    if args.attest_key is not None:
        from pinguard.signing.keys import load_private_key

        load_private_key(args.attest_key)  # a bad key fails now, not in every task
    cache = cache_spec(args)  # its key files are loaded here: a bad one fails now
    require_fleet_keys(cache, args.cache_unsigned)
    ResultStore(args.results).check_writable()  # as must the store every task writes to
    patience = args.broker_patience
    if patience is None:
        patience = patience_from(os.environ)
    elif not patience >= 0:
        raise UsageError(f"--broker-patience {patience:g}: expected seconds, not below 0")
    configure(
        WorkerSettings(
            results=args.results,
            cache=cache,
            jobs=max(1, args.jobs),
            insecure_registries=tuple(args.insecure_registry),
            attest_key=args.attest_key,
            broker_patience=patience,
        )
    )
    broker = broker_url(args.broker)
    app = make_app(broker, visibility_timeout=args.visibility_timeout)
    # a broker down at start is exit 3 now (Celery alone retries 100 times); one lost later
    # is Celery's to reconnect to, as a long-running worker must
    check_broker(app, broker, args.broker)
    argv = ["worker", "--pool", args.pool, "--concurrency", str(max(1, args.concurrency))]
    argv += ["-Q", QUEUE, "--loglevel", "INFO", "--without-gossip", "--without-mingle"]
    if args.hostname:
        argv += ["-n", args.hostname]
    app.worker_main(argv)
    return 0
