"""Coalescing pushes: one audit of an image while one is queued or running.

A registry notifies every push, and a busy one pushes the same manifest again and again (a
tag moved, a CI job rerun, several tags of one build): each push used to become its own
audit. A **claim** is one Redis string on the broker, ``pinguard::queued::<record id>``
(the record id is the digest of reference and options that names the task's record,
``records.record_id``; a push's reference is ``docker://REGISTRY/REPO@DIGEST``), so there is
one claim per image and options:

* ``claim`` creates it, atomically (a script: only when it is absent), as
  ``sending <token>`` for ``SENDING_TTL`` seconds, before the task is sent; it answers what
  holds the claim otherwise;
* ``queued`` turns the caller's own ``sending`` claim into ``queued <task id>`` once the task
  is sent, for ``ttl`` seconds (no shorter than the visibility timeout, after which an
  unacknowledged task is delivered again, so a claim outlives every delivery of its task);
  a claim the worker already released meanwhile stays released;
* ``drop`` deletes the caller's own ``sending`` claim when the send failed;
* ``release`` deletes the claim, whoever holds it: the worker calls it once the task's
  record is written (or the task failed without one), so the next push is audited again.

A push whose claim is ``queued`` is coalesced into that audit: the image is immutable by
digest, so the audit queued or running reads exactly what was pushed. A claim that is still
``sending`` is not coalesced into (that send may fail, and a push coalesced into a failed
send would never be audited): the caller waits for it to turn ``queued`` or go away. Claims
live on the broker, so they share its fate: a broker restarted without its data has lost the
queued tasks and their claims together. Workers never look at claims, so a task delivered
again (its worker killed) runs again. Nothing here prints.
"""

from __future__ import annotations

import os
from typing import Any

from pinguard.fleet.broker import CONNECT_TIMEOUT

CLAIM_PREFIX = "pinguard::queued::"
#: seconds a sender may hold a claim before its task is sent: a sender that died (or whose
#: broker went away before it could drop the claim) holds the image no longer than this
SENDING_TTL = 10
#: seconds to wait for one answer from the broker
READ_TIMEOUT = 2.0

_CLAIM = """
local held = redis.call('GET', KEYS[1])
if held then return held end
redis.call('SET', KEYS[1], 'sending ' .. ARGV[1], 'EX', ARGV[2])
return false
"""
_QUEUED = """
if redis.call('GET', KEYS[1]) == 'sending ' .. ARGV[1] then
  redis.call('SET', KEYS[1], 'queued ' .. ARGV[2], 'EX', ARGV[3])
  return 1
end
return 0
"""
_DROP = """
if redis.call('GET', KEYS[1]) == 'sending ' .. ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class Claims:
    """The claims on the broker at ``url``. Every call is one round trip with short
    timeouts and no retries of its own; redis-py's and socket errors are raised as they are
    (``broker.broker_cause`` reads them)."""

    def __init__(self, url: str, *, timeout: float = READ_TIMEOUT) -> None:
        self.url = url
        self.timeout = timeout
        self._client: Any = None

    def client(self) -> Any:
        if self._client is None:
            import redis
            from redis.backoff import NoBackoff
            from redis.retry import Retry

            self._client = redis.Redis.from_url(
                self.url,
                socket_connect_timeout=min(CONNECT_TIMEOUT, self.timeout),
                socket_timeout=self.timeout,
                retry=Retry(NoBackoff(), 0),
                decode_responses=True,
            )
        return self._client

    def claim(self, rid: str, token: str) -> str | None:
        """Claim ``rid`` for ``token``: None when it is now ours (``sending``), else what
        holds it (``sending <token>`` or ``queued <task id>``)."""
        held = self.client().eval(_CLAIM, 1, CLAIM_PREFIX + rid, token, SENDING_TTL)
        return None if held is None else str(held)

    def queued(self, rid: str, token: str, task_id: str, ttl: int) -> bool:
        """Our ``sending`` claim on ``rid`` is now ``queued <task_id>`` for ``ttl`` seconds;
        False when it was no longer ours (released by the worker, or lapsed)."""
        key = CLAIM_PREFIX + rid
        return bool(self.client().eval(_QUEUED, 1, key, token, task_id, max(1, ttl)))

    def drop(self, rid: str, token: str) -> None:
        """Delete our ``sending`` claim on ``rid`` (the send failed)."""
        self.client().eval(_DROP, 1, CLAIM_PREFIX + rid, token)

    def release(self, rid: str) -> None:
        """Delete the claim on ``rid``, whoever holds it: its record is written."""
        self.client().delete(CLAIM_PREFIX + rid)

    def holder(self, rid: str) -> str | None:
        """What holds ``rid`` now (tests and diagnostics), or None."""
        held = self.client().get(CLAIM_PREFIX + rid)
        return None if held is None else str(held)


def new_token() -> str:
    """A sender's token: unguessable, so no other sender can take its claim for its own."""
    return os.urandom(12).hex()
