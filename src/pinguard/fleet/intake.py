"""The push receiver's enqueue: one audit per image at a time, and an answer in time.

``PushIntake.submit(refs)`` is what ``fleet receive`` does with the references of one
notification envelope. For each it takes the image's claim on the broker (``claims.py``):
a claim already ``queued`` means an audit of that image is queued or running, and the push
is **coalesced** into it (nothing sent); otherwise the task is sent and the claim marked
``queued``; the worker releases it once the record is written, so a later push is audited
again. A claim another request is still ``sending`` is waited for (it turns ``queued``, or
goes away and is taken). ``submit`` returns the references coalesced.

The registry waits ``timeout`` (5 s in docs/deploy/registry-config.yml) for an answer and
retries what was not answered 200. So whatever the broker does (refuses connections, stops
answering, comes back), ``submit`` returns or raises within ``answer_within`` seconds
(default 3): the work runs on a small pool of threads and is waited for that long, and a
broker that fails or does not answer in time raises ``BrokerUnreachable`` (the receiver
answers 503). A broker found unreachable is not asked again by every request: until it
answers, one request a second (``PROBE_EVERY``) tries it and the others are answered 503 at
once, so a burst of pushes during an outage costs no waiting. Work still running past its
deadline finishes or fails on its own thread: a task it sends after all is in the queue
with its claim, and the registry's retry of that push is coalesced into it. ``notify`` is
told when the broker is lost and when it is back. Nothing here prints.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from pinguard.errors import PinguardError
from pinguard.fleet.broker import BrokerUnreachable, broker_cause, describe
from pinguard.fleet.claims import Claims, new_token
from pinguard.fleet.records import record_id

#: seconds within which every request is answered (the registry's timeout is 5 s)
ANSWER_WITHIN = 3.0
#: while the broker is unreachable, one request in this many seconds tries it again
PROBE_EVERY = 1.0
#: seconds between two looks at a claim another request is sending
POLL = 0.05
#: threads that talk to the broker (a burst waits for one; past its deadline it is a 503)
THREADS = 8


class ClaimBusy(PinguardError):
    """Another request was still sending the image's task when the deadline came (503:
    the registry retries, and finds it queued)."""


class PushIntake:
    """Coalescing, deadline-bound enqueues of pushed references on ``app``'s broker."""

    def __init__(
        self,
        app: Any,
        broker: str,
        options: Mapping[str, Any],
        *,
        given: str | None = None,
        answer_within: float = ANSWER_WITHIN,
        claim_ttl: int | None = None,
        notify: Callable[[str], None] | None = None,
    ) -> None:
        from pinguard.fleet.app import DEFAULT_VISIBILITY_TIMEOUT

        self.app = app
        self.where = describe(broker, given)
        self.options = dict(options)
        self.answer_within = answer_within
        if claim_ttl is None:  # no shorter than the visibility timeout the workers use
            transport = app.conf.broker_transport_options or {}
            claim_ttl = int(transport.get("visibility_timeout") or DEFAULT_VISIBILITY_TIMEOUT)
        self.claim_ttl = claim_ttl
        self.claims = Claims(broker)
        self.notify = notify or (lambda _text: None)
        self._pool = ThreadPoolExecutor(THREADS, thread_name_prefix="pinguard-enqueue")
        self._lock = threading.Lock()
        self._lost: str | None = None  # why the broker is unreachable, while it is
        self._lost_at = 0.0
        self._next_try = 0.0
        self._trying = False

    def submit(self, refs: Sequence[str]) -> frozenset[str]:
        """Enqueue an audit of each reference not already queued or running; the ones
        coalesced. ``BrokerUnreachable`` (or ``ClaimBusy``) within ``answer_within``."""
        trial = self._admit()
        try:
            # waiting on another request's send stops a little before the answer is due, so
            # that wait is a ClaimBusy, never mistaken for a broker that did not answer
            deadline = time.monotonic() + max(0.1, self.answer_within - 0.5)
            future = self._pool.submit(self._enqueue, list(refs), deadline)
            try:
                coalesced = future.result(timeout=self.answer_within)
            except FutureTimeout:
                future.cancel()  # not started yet: never sent; started: finishes on its own
                raise self._fail(f"no answer within {self.answer_within:g} s") from None
            except ClaimBusy:
                self._back()  # the broker answered
                raise
            except Exception as exc:
                cause = exc.cause if isinstance(exc, _Lost) else broker_cause(exc)
                if cause is None:
                    raise
                raise self._fail(cause) from None
            self._back()
            return coalesced
        finally:
            if trial:
                with self._lock:
                    self._trying = False

    def unreachable(self, cause: str) -> None:
        """The broker could not be reached before any push (the caller said so): the next
        push tries it at once, and the broker's return is told."""
        with self._lock:
            self._lost, self._lost_at, self._next_try = cause, time.monotonic(), 0.0

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- the broker's state ----------------------------------------------------------------

    def _admit(self) -> bool:
        """Whether this request may try the broker: always while it is reachable; while it
        is not, one request at a time, once every ``PROBE_EVERY`` seconds (True: this one)."""
        with self._lock:
            if self._lost is None:
                return False
            now = time.monotonic()
            if self._trying or now < self._next_try:
                raise BrokerUnreachable(
                    f"could not reach the broker {self.where}: {self._lost} (unreachable for "
                    f"{now - self._lost_at:.0f} s; tried again once a second)"
                )
            self._trying = True
            self._next_try = now + PROBE_EVERY
            return True

    def _fail(self, cause: str) -> BrokerUnreachable:
        now = time.monotonic()
        with self._lock:
            first = self._lost is None
            if first:
                self._lost_at = now
            self._lost = cause
            self._next_try = now + PROBE_EVERY
        if first:
            self.notify(
                f"lost the broker {self.where} ({cause}); pushes are answered 503 at once "
                f"until it answers again (tried once a second)"
            )
        return BrokerUnreachable(f"could not reach the broker {self.where}: {cause}")

    def _back(self) -> None:
        with self._lock:
            lost, self._lost = self._lost, None
            since = self._lost_at
        if lost is not None:
            self.notify(f"the broker is back after {time.monotonic() - since:.0f} s")

    # -- on a pool thread ------------------------------------------------------------------

    def _enqueue(self, refs: list[str], deadline: float) -> frozenset[str]:
        from pinguard.fleet.app import TASK_NAME

        coalesced = set()
        for ref in refs:
            rid = record_id(ref, self.options)
            token = new_token()
            while True:
                held = self._call(self.claims.claim, rid, token)
                if held is None:
                    break  # ours: send it
                if held.startswith("queued "):
                    coalesced.add(ref)
                    break
                if time.monotonic() + POLL >= deadline:  # another request is sending it
                    raise ClaimBusy(
                        f"another request is still enqueuing {ref}; the registry's retry "
                        "finds it queued"
                    )
                time.sleep(POLL)
            if ref in coalesced:
                continue
            try:
                sent = self.app.send_task(TASK_NAME, args=(ref, dict(self.options)))
            except Exception:
                try:
                    self.claims.drop(rid, token)
                except Exception as exc:  # the claim lapses by itself (SENDING_TTL)
                    if broker_cause(exc) is None:
                        raise
                raise
            try:
                self.claims.queued(rid, token, str(sent.id), self.claim_ttl)
            except Exception as exc:  # sent, and the broker gone since: the claim lapses
                if broker_cause(exc) is None:
                    raise
        return frozenset(coalesced)

    @staticmethod
    def _call(fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:
            cause = broker_cause(exc)
            if cause is None:
                raise
            raise _Lost(cause) from None


class _Lost(Exception):
    """A broker error on a pool thread, with its cause."""

    def __init__(self, cause: str) -> None:
        super().__init__(cause)
        self.cause = cause
