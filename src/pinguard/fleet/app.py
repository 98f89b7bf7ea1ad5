"""The Celery app that runs fleet audits, and the settings that make redelivery safe.

A worker is ``pinguard worker --broker redis://...`` or, equivalently,
``PINGUARD_BROKER_URL=redis://... celery -A pinguard.fleet.app worker --pool solo``. The
broker and the result backend are Redis; results are only ``{"id", "exit_code",
"verdict"}`` (records live in the result store). Settings, each for a reason
(docs/fleet.md): ``task_acks_late`` with ``worker_prefetch_multiplier = 1`` and
``task_reject_on_worker_lost`` (a task is acknowledged only after it ran, so a worker killed
mid-audit leaves it to be delivered again, and no worker holds tasks it has not started);
the Redis transport's ``visibility_timeout`` (``PINGUARD_VISIBILITY_TIMEOUT``, default six
hours) must be longer than the longest audit, or a slow audit is delivered twice while it
runs (workers look for such tasks every tenth of it, at most every minute); Redis itself
must run with ``maxmemory-policy noeviction`` or it may drop queued tasks. An enqueuer's app
(``enqueuer=True``: ``fleet run``, ``fleet receive``) gives up on a broker that went away
after about a second, not Celery's 20, and its result backend connects within
``CONNECT_TIMEOUT`` and reads within ``ENQUEUER_READ_TIMEOUT`` (Celery: no connect timeout,
120 s reads), so a broker host that stops answering is noticed, not waited on: the receiver
answers 503 (``intake.PushIntake``) and ``fleet run`` rides the outage out on the result
store (``dispatch.wait``). A worker's app stores results through ``patience``'s backend
and acknowledges through its request class, so a task finished while the broker is gone
waits for it (``--broker-patience``) instead of failing into a traceback and a lost ack;
its task releases the image's push claim (``claims.py``) once the record is written.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any

from celery import Celery

from pinguard.fleet.broker import BROKER_ENV, CONNECT_TIMEOUT, DEFAULT_BROKER, broker_url
from pinguard.fleet.claims import Claims
from pinguard.fleet.records import record_id
from pinguard.fleet.task import audit_reference

__all__ = ["BROKER_ENV", "DEFAULT_BROKER", "QUEUE", "TASK_NAME", "app", "make_app"]

VISIBILITY_ENV = "PINGUARD_VISIBILITY_TIMEOUT"
DEFAULT_VISIBILITY_TIMEOUT = 6 * 3600
TASK_NAME = "pinguard.audit"
QUEUE = "pinguard"


#: an enqueuer's result backend retries a lost connection this way (Celery: 20 x 1 s)
ENQUEUER_RETRY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.5, "interval_max": 0.5}
#: an enqueuer's result backend read timeout, seconds (a GET of a small task state)
ENQUEUER_READ_TIMEOUT = 10.0
#: a worker's result backend and request classes: they ride out a lost broker
PATIENT_BACKEND = "pinguard.fleet.patience:PatientRedisBackend"
PATIENT_REQUEST = "pinguard.fleet.patience:PatientRequest"
#: a worker's result backend tries each call once: ``patience.ride_out`` retries it (Celery
#: would retry 20 times, logging a line each, then raise into a chained traceback)
WORKER_RETRY = {"max_retries": 0}


def make_app(
    broker: str | None = None,
    *,
    visibility_timeout: int | None = None,
    enqueuer: bool = False,
) -> Celery:
    """The Celery app on ``broker`` (default ``$PINGUARD_BROKER_URL``); ``enqueuer``: an app
    that only sends tasks and reads their results, and gives up on a lost broker soon."""
    broker = broker_url(broker)
    if visibility_timeout is None:
        visibility_timeout = int(os.environ.get(VISIBILITY_ENV) or DEFAULT_VISIBILITY_TIMEOUT)
    # a worker's backend is Celery's Redis backend storing through patience.ride_out
    backend = broker if enqueuer else f"{PATIENT_BACKEND}+{broker}"
    app = Celery("pinguard", broker=broker, backend=backend)
    transport: dict[str, Any] = {
        "visibility_timeout": visibility_timeout,
        # kombu sweeps for unacknowledged tasks past the timeout every interval x throttle
        # seconds (10 x 10 by default): one cheap sorted-set query, so sweep every
        # tenth of the timeout (at most a minute), not every 100 s
        "unacked_restore_interval": min(60, max(1, visibility_timeout // 10)),
        "unacked_restore_throttle": 1,
    }
    app.conf.update(
        task_acks_late=True,
        worker_prefetch_multiplier=1,
        task_reject_on_worker_lost=True,
        broker_transport_options=transport,
        result_backend_transport_options={
            **transport,
            "retry_policy": ENQUEUER_RETRY if enqueuer else WORKER_RETRY,
        },
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        task_track_started=True,
        task_default_queue=QUEUE,
        result_expires=7 * 24 * 3600,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        worker_cancel_long_running_tasks_on_connection_loss=False,
    )
    # both sides: a broker host that stops answering is noticed, not waited on for minutes
    app.conf.update(
        redis_socket_connect_timeout=CONNECT_TIMEOUT,
        redis_socket_timeout=ENQUEUER_READ_TIMEOUT,
    )
    if enqueuer:
        # a send to a broker that stopped answering gives up within seconds, not minutes
        app.conf.broker_transport_options = {
            **transport,
            "socket_connect_timeout": CONNECT_TIMEOUT,
            "socket_timeout": ENQUEUER_READ_TIMEOUT,
        }
    else:
        # Celery warns on every lost connection that late-ack tasks running then cannot be
        # acknowledged; a worker's can (PatientRequest rides the outage out). Its worker
        # logs warnings through ``py.warnings`` (and resets the warnings filters first)
        logging.getLogger("py.warnings").addFilter(_no_cancel_warning)
    # not shared: each app runs its own task, on its own broker (a shared task is added to
    # every app, and which of two apps' tasks a worker got would be chance)
    app.task(name=TASK_NAME, Request=PATIENT_REQUEST, bind=True, shared=False)(_audit)
    return app


def _audit(task: Any, reference: str, options: dict[str, Any]) -> dict[str, Any]:
    """The task: audit ``reference`` and write its record; then release the image's push
    claim on the broker the task came from (``claims.py``), so its next push is audited."""
    try:
        return audit_reference(reference, options)
    finally:
        _release(str(task.app.conf.broker_url), record_id(reference, options))


def _no_cancel_warning(record: logging.LogRecord) -> bool:
    return "we introduced an optional breaking change" not in record.getMessage()


_CLAIMS: dict[str, Claims] = {}


def _release(broker: str, rid: str) -> None:
    """Release the claim on ``rid``, riding out a lost broker; one line if it cannot."""
    from pinguard.fleet.patience import GaveUp, ride_out

    claims = _CLAIMS.get(broker)
    if claims is None:
        claims = _CLAIMS[broker] = Claims(broker)
    with contextlib.suppress(GaveUp):
        ride_out(
            f"releasing the push claim on record {rid}",
            lambda: claims.release(rid),
            "the claim lapses by itself after the visibility timeout",
        )


app = make_app()
