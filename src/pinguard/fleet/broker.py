"""What the fleet's commands check before any work: the ``fleet`` extra, and the broker.

``require_extra(command)`` raises ``FleetExtraMissing`` (exit 2, ``pip install
'pinguard[fleet]'``) when Celery, kombu or redis-py cannot be imported (pinguard installed
without the extra), before anything imports them. ``broker_url`` is the broker a command
uses (``--broker``, else ``$PINGUARD_BROKER_URL``, else the default) and ``redact`` its URL
without a password, as every message names it. ``check_broker(app, url)`` connects once with
a short timeout and raises ``BrokerUnreachable`` (exit 3) naming the broker and the cause:
left to itself Celery retries for 20 s (an enqueuer's result backend) or 100 times (a
worker starting) and ends in chained tracebacks. ``on_broker(url)`` turns what a call on the
broker raises when it went away later (kombu's, redis-py's and socket errors, and Celery's
``RuntimeError`` over one of them) into the same error; ``broker_cause(exc)`` says whether
an exception is such an error, and its cause, for callers that ride out a lost broker
(``dispatch.wait``) instead of failing; ``probe(app)`` is ``check_broker`` as a question.
This module imports none of them at load time; nothing here prints.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pinguard.errors import EXIT_UNREACHABLE, PinguardError, UsageError

BROKER_ENV = "PINGUARD_BROKER_URL"
DEFAULT_BROKER = "redis://127.0.0.1:6379/0"
EXTRA = "pip install 'pinguard[fleet]'"
#: modules the fleet's commands need, all from the ``fleet`` extra
EXTRA_MODULES = ("celery", "kombu", "redis")
#: seconds to wait for the broker to accept a connection
CONNECT_TIMEOUT = 2.0


class FleetExtraMissing(UsageError):
    """Celery or redis-py is not installed: pinguard was installed without ``[fleet]``."""


class BrokerUnreachable(PinguardError):
    """The broker could not be reached (refused, timed out, name not resolved, or it
    refused the credentials): exit 3, like any host a command needs."""

    exit_code = EXIT_UNREACHABLE


def require_extra(command: str) -> None:
    """Raise ``FleetExtraMissing`` unless every module of the ``fleet`` extra imports."""
    for name in EXTRA_MODULES:
        try:
            __import__(name)
        except ImportError:
            raise FleetExtraMissing(
                f"{command} needs Celery and redis-py, which are not installed "
                f"(no module {name!r}): {EXTRA}"
            ) from None


def broker_url(given: str | None) -> str:
    """``--broker``, else ``$PINGUARD_BROKER_URL``, else the default broker."""
    return given or os.environ.get(BROKER_ENV) or DEFAULT_BROKER


def redact(url: str) -> str:
    """``url`` with its password (if any) replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{user}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def describe(url: str, given: str | None = None) -> str:
    """The broker as messages name it; says how to choose another when it is the default."""
    text = redact(url)
    if given is None and not os.environ.get(BROKER_ENV):
        text += f" (the default: give --broker URL or set {BROKER_ENV})"
    return text


def _cause(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text.rstrip(".")


def _errors() -> tuple[type[BaseException], ...]:
    from kombu.exceptions import OperationalError
    from redis.exceptions import RedisError

    return (OperationalError, RedisError, OSError)


def broker_cause(exc: BaseException) -> str | None:
    """The cause, when ``exc`` is what a call on a broker that went away raises (kombu's,
    redis-py's or a socket error, or Celery's ``RuntimeError`` over one); else None."""
    errors = _errors()
    if isinstance(exc, errors):
        return _cause(exc)
    if isinstance(exc, RuntimeError) and isinstance(exc.__cause__, errors):
        return _cause(exc.__cause__)
    return None


@contextlib.contextmanager
def on_broker(url: str, given: str | None = None) -> Iterator[None]:
    """Inside: a broker error is ``BrokerUnreachable`` naming the broker and its cause."""
    errors = _errors()
    try:
        yield
    except errors as exc:
        raise BrokerUnreachable(
            f"could not reach the broker {describe(url, given)}: {_cause(exc)}"
        ) from None
    except RuntimeError as exc:  # Celery's "retry limit exceeded", over the real cause
        if not isinstance(exc.__cause__, errors):
            raise
        raise BrokerUnreachable(
            f"could not reach the broker {describe(url, given)}: {_cause(exc.__cause__)}"
        ) from None


def check_broker(app: Any, url: str, given: str | None = None) -> None:
    """Connect to ``app``'s broker once (``CONNECT_TIMEOUT``); ``BrokerUnreachable`` if not."""
    with on_broker(url, given):
        connection = app.connection_for_write(connect_timeout=CONNECT_TIMEOUT)
        try:
            connection.ensure_connection(max_retries=1, interval_start=0, interval_step=0)
        finally:
            connection.release()


def probe(app: Any) -> str | None:
    """None when ``app``'s broker takes a connection now (``CONNECT_TIMEOUT``); else why not."""
    try:
        connection = app.connection_for_write(connect_timeout=CONNECT_TIMEOUT)
        try:
            connection.ensure_connection(max_retries=1, interval_start=0, interval_step=0)
        finally:
            connection.release()
    except Exception as exc:  # only a broker error is an answer; any other is raised
        cause = broker_cause(exc)
        if cause is None:
            raise
        return cause
    return None
