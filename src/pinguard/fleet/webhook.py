"""Audit on push: the receiver of the distribution registry's ``notifications.endpoints``.

The registry POSTs an envelope ``{"events": [...]}`` (media type
``application/vnd.docker.distribution.events.v1+json``) to each endpoint, with the headers
its config names; the receiver demands ``Authorization: Bearer <token>`` (compared in
constant time) and answers 401 otherwise. ``audits_for`` picks the events worth an audit:
``action`` ``push`` of a manifest or index (by media type) under a tag, not a referrers tag
(``dispatch.is_referrers_tag``: the ``sha256-<hex>`` tag schema pinguard's own attestations
use, so attaching a result never triggers another audit). Each becomes
``docker://REGISTRY/REPO@DIGEST``: exactly what was pushed, REGISTRY as configured or else
the host of the event's ``target.url``. A body that is not an envelope is 400; when
enqueuing fails (the broker is down, or did not answer in time: ``intake.PushIntake``) the
answer is 503, and the registry retries the delivery (its ``threshold`` and ``backoff``).
The enqueue callback returns the references it coalesced into an audit already queued or
running (``Push.coalesced``). ``Receiver`` is the HTTP server (an address it cannot listen on
is a ``UsageError``); what it did, and why an enqueue failed, are handed to callbacks, so
only the CLI prints.
"""

from __future__ import annotations

import hmac
import json
import re
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from pinguard.errors import UsageError
from pinguard.fleet.dispatch import is_referrers_tag
from pinguard.sources.mediatypes import MANIFEST_OR_INDEX_TYPES
from pinguard.sources.reference import registry_reference

MAX_BODY = 1 << 20


@dataclass(frozen=True, slots=True)
class Push:
    """One event: an audit to enqueue (``reference`` set) or why it was ignored;
    ``coalesced``: an audit of it was already queued or running, and nothing was sent."""

    repository: str
    tag: str
    digest: str
    reference: str | None = None
    ignored: str | None = None
    coalesced: bool = False


def _host(event: Mapping[str, Any], target: Mapping[str, Any]) -> str:
    """Where the registry says the manifest is: ``target.url``'s host, else ``request.host``."""
    netloc = urlsplit(str(target.get("url") or "")).netloc
    if netloc:
        return netloc
    request = event.get("request")
    return str(request.get("host") or "") if isinstance(request, dict) else ""


def audits_for(envelope: Any, registry: str | None = None) -> list[Push]:
    """Each event of a notification envelope, as an audit or an ignored push; ``ValueError``
    when the body is no envelope. ``registry``: the registry's address as workers reach it
    (default: the host in the event's ``target.url``)."""
    if not isinstance(envelope, dict) or not isinstance(envelope.get("events"), list):
        raise ValueError("not a notification envelope: no events array")
    out = []
    for event in envelope["events"]:
        if not isinstance(event, dict) or event.get("action") != "push":
            continue  # pulls, deletes, mounts: nothing to audit
        target = event.get("target")
        if not isinstance(target, dict):
            continue
        repo = str(target.get("repository", ""))
        tag = str(target.get("tag") or "")
        digest = str(target.get("digest", ""))
        media = str(target.get("mediaType", ""))
        push = Push(repository=repo, tag=tag, digest=digest)
        if media not in MANIFEST_OR_INDEX_TYPES:
            continue  # a blob
        host = registry or _host(event, target)
        if not repo or not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
            out.append(_ignored(push, "no repository or sha256 digest"))
        elif not tag:
            out.append(_ignored(push, "pushed by digest, without a tag"))
        elif is_referrers_tag(tag):
            out.append(_ignored(push, "a referrers tag (an attestation or signature)"))
        elif not host:
            out.append(_ignored(push, "no registry address in the event (give --registry)"))
        else:
            out.append(
                Push(repo, tag, digest, reference=registry_reference(f"{host}/{repo}@{digest}"))
            )
    return out


def _ignored(push: Push, why: str) -> Push:
    return Push(push.repository, push.tag, push.digest, ignored=why)


#: enqueue these references; return the ones coalesced into an audit queued or running
Enqueue = Callable[[Sequence[str]], Collection[str]]
Report = Callable[[Push], None]
Failed = Callable[[Sequence[str], Exception], None]


class Receiver:
    """An HTTP server on ``host:port`` taking notifications at any path (POST)."""

    def __init__(
        self,
        host: str,
        port: int,
        token: str,
        registry: str | None,
        enqueue: Enqueue,
        report: Report | None = None,
        failed: Failed | None = None,
    ) -> None:
        self.token = token
        self.registry = registry
        self.enqueue = enqueue
        self.report = report or (lambda push: None)
        self.failed = failed or (lambda refs, exc: None)
        try:
            self.httpd = ThreadingHTTPServer((host, port), _Handler)
        except OSError as exc:  # the port taken, a host not of this machine or not resolved
            raise UsageError(
                f"--listen {host}:{port}: cannot listen there: {exc.strerror or exc}"
            ) from None
        self.httpd.daemon_threads = True
        self.httpd.receiver = self  # type: ignore[attr-defined]
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"{host!s}:{port}"

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def start(self) -> None:
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def authorized(self, headers: Mapping[str, str]) -> bool:
        value = next((v for k, v in headers.items() if k.lower() == "authorization"), "")
        scheme, _, given = value.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode(), self.token.encode()
        )


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the CLI reports what was enqueued; nothing else prints

    def _reply(self, status: int, text: str) -> None:
        body = (text + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        receiver: Receiver = self.server.receiver  # type: ignore[attr-defined]
        if not receiver.authorized(dict(self.headers.items())):
            self._reply(401, "unauthorized")
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self._reply(413, "too large")
            return
        try:
            pushes = audits_for(json.loads(self.rfile.read(length)), receiver.registry)
        except ValueError as exc:
            self._reply(400, str(exc))
            return
        refs = sorted({p.reference for p in pushes if p.reference is not None})
        try:
            coalesced = frozenset(receiver.enqueue(refs)) if refs else frozenset()
        except Exception as exc:  # any broker failure: 503, and the registry retries
            receiver.failed(refs, exc)
            self._reply(503, f"could not enqueue: {type(exc).__name__}")
            return
        for push in pushes:
            receiver.report(replace(push, coalesced=push.reference in coalesced))
        self._reply(200, f"enqueued {len(refs) - len(coalesced)}, coalesced {len(coalesced)}")

    def do_GET(self) -> None:
        self._reply(405, "POST notifications here")
