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
answers 503 (``broker.on_broker`` says which broker and why) and ``fleet run`` rides the
outage out on the result store (``dispatch.wait``).
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery

from pinguard.fleet.broker import BROKER_ENV, CONNECT_TIMEOUT, DEFAULT_BROKER, broker_url
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
    app = Celery("pinguard", broker=broker, backend=broker)
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
        result_backend_transport_options=(
            {**transport, "retry_policy": ENQUEUER_RETRY} if enqueuer else transport
        ),
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
    if enqueuer:
        app.conf.update(
            redis_socket_connect_timeout=CONNECT_TIMEOUT,
            redis_socket_timeout=ENQUEUER_READ_TIMEOUT,
        )
    app.task(name=TASK_NAME)(audit_reference)
    return app


app = make_app()
