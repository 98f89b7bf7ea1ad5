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
must run with ``maxmemory-policy noeviction`` or it may drop queued tasks.
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery

from pinguard.fleet.task import audit_reference

BROKER_ENV = "PINGUARD_BROKER_URL"
VISIBILITY_ENV = "PINGUARD_VISIBILITY_TIMEOUT"
DEFAULT_BROKER = "redis://127.0.0.1:6379/0"
DEFAULT_VISIBILITY_TIMEOUT = 6 * 3600
TASK_NAME = "pinguard.audit"
QUEUE = "pinguard"


def make_app(broker: str | None = None, *, visibility_timeout: int | None = None) -> Celery:
    """The Celery app on ``broker`` (default ``$PINGUARD_BROKER_URL``)."""
    broker = broker or os.environ.get(BROKER_ENV) or DEFAULT_BROKER
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
        result_backend_transport_options=transport,
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
    app.task(name=TASK_NAME)(audit_reference)
    return app


app = make_app()
