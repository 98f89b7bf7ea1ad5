"""A worker rides out a short broker outage after an audit: the result, the ack, the claim.

What a worker does with the broker once an audit's record is written (the record goes to the
result store first, whatever the broker does) is three calls: release the image's push
claim (``claims.release``), store the task's state in the result backend, and acknowledge
the message (late acks). With the broker gone (restarted, failed over) each used to fail at
once: Celery logged a chained traceback ("Exception raised outside body: ConnectionError")
and the acknowledgement was lost, so the finished task was delivered again after the
visibility timeout and audited twice. Here each call is retried until the broker is back:
``ride_out`` tries it with backoff (0.25 s doubling to 5 s) for at most the worker's
patience (``--broker-patience``, ``PINGUARD_BROKER_PATIENCE``, default 300 s) counted from
the start of the outage, so the three calls of one outage share one bound. It logs one line
when the outage starts (``lost the broker (CAUSE) while acknowledging task ID; retrying
until it is back, for at most 300 s``) and, should the bound pass, one line saying it gave
up and what that costs; never a traceback. ``PatientRedisBackend`` is Celery's Redis result
backend storing through ``ride_out`` (its own retries, which log a line each, are turned off
by the app), and ``PatientRequest`` the task request acknowledging through it; the worker's
app names both (``app.py``).

Under ``--pool solo`` (the default) the task runs inside the consumer's loop, so the ack is
sent on the channel the task came from before the consumer notices the lost connection;
once it is acknowledged the consumer reconnects as it always does. Nothing here prints:
lines go to the ``pinguard.fleet.worker`` logger, which the Celery worker writes to its log.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from celery.backends.redis import RedisBackend
from celery.worker.request import Request

from pinguard.errors import PinguardError
from pinguard.fleet.broker import broker_cause

T = TypeVar("T")

log = logging.getLogger("pinguard.fleet.worker")

FIRST_DELAY = 0.25
MAX_DELAY = 5.0


class GaveUp(Exception):
    """The broker stayed away for the whole patience; the line saying so is logged."""


class _Outage:
    """The worker's view of the broker: when it was found gone, and whether the bound
    passed. Shared by the calls of one outage, so it is logged once and bounded once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.since: float | None = None
        self.gave_up = False

    def failed(self, what: str, cause: str, patience: float, cost: str) -> float:
        """Note a failed call; the seconds left to retry it (``GaveUp`` when none)."""
        now = time.monotonic()
        with self.lock:
            if self.since is None:
                self.since, self.gave_up = now, False
                log.warning(
                    "lost the broker (%s) while %s; retrying until it is back, for at most %.0f s",
                    cause,
                    what,
                    patience,
                )
            left = self.since + patience - now
            if self.gave_up or left <= 0:
                if not self.gave_up:
                    self.gave_up = True
                    log.error(
                        "the broker has been unreachable for %.0f s (%s): gave up %s; %s",
                        now - self.since,
                        cause,
                        what,
                        cost,
                    )
                raise GaveUp(what)
            return left

    def back(self) -> None:
        with self.lock:
            self.since, self.gave_up = None, False


_OUTAGE = _Outage()


def patience() -> float:
    """Seconds this worker waits for a lost broker (its settings, else the environment)."""
    from pinguard.fleet.task import DEFAULT_PATIENCE, patience_from, settings

    try:
        return settings().broker_patience
    except PinguardError:  # a plain celery worker without its settings: the task says so
        try:
            return patience_from(os.environ)
        except PinguardError:
            return DEFAULT_PATIENCE


def ride_out(what: str, call: Callable[[], T], cost: str, bound: float | None = None) -> T:
    """``call()``, retried while it fails because the broker is unreachable, for at most
    ``bound`` seconds (default ``patience()``) from the start of the outage; ``GaveUp``
    then. Any other error is raised as it is."""
    bound = patience() if bound is None else bound
    delay = FIRST_DELAY
    while True:
        try:
            value = call()
        except Exception as exc:
            cause = broker_cause(exc)
            if cause is None:
                raise
            left = _OUTAGE.failed(what, cause, bound, cost)
            time.sleep(min(delay, left))
            delay = min(delay * 2, MAX_DELAY)
            continue
        _OUTAGE.back()
        return value


class PatientRedisBackend(RedisBackend):  # type: ignore[misc]  # Celery is untyped
    """Celery's Redis result backend, storing each task state through ``ride_out``: a
    state that still cannot be stored when the bound passes is left unstored (the record,
    which ``fleet run`` reads first, is in the result store already)."""

    def store_result(
        self,
        task_id: str,
        result: Any,
        state: str,
        traceback: Any = None,
        request: Any = None,
        **kwargs: Any,
    ) -> Any:
        def store() -> Any:
            return super(PatientRedisBackend, self).store_result(
                task_id, result, state, traceback, request, **kwargs
            )

        try:
            return ride_out(
                f"storing the {state} state of task {task_id}",
                store,
                "its record is in the result store, where fleet run and fleet report read it",
            )
        except GaveUp:
            return result


class PatientRequest(Request):  # type: ignore[misc]  # Celery is untyped
    """A task request whose late acknowledgement rides out a lost broker (``ride_out``);
    when the bound passes it is left unacknowledged, and the broker delivers the task again
    after the visibility timeout (its record is written again: one result)."""

    acknowledged: bool

    def acknowledge(self) -> None:
        if self.acknowledged:
            return
        with contextlib.suppress(GaveUp):
            ride_out(
                f"acknowledging task {self.task_id}",
                self._message.ack,
                "the broker delivers it again, at the latest after the visibility timeout "
                "(the same record is written again)",
            )
        self.acknowledged = True
