"""The registry client's transport: one HTTP conversation with one repository of a registry
speaking the OCI distribution API v2.

``RegistryClient`` sends every request pulling and pushing make, authenticated by its
``auth`` (``auth.RegistryAuth``: the registry's ``WWW-Authenticate`` challenge answered with a
Bearer token or Basic credentials, the token fetched through this transport). Plain HTTP is
used only for loopback hosts and hosts named in ``insecure_registries``. Requests retry with
exponential backoff on 429, 5xx and connection errors, honouring ``Retry-After``, at most
``max_retries`` times; a name that does not resolve is never retried (a DNS answer does not
change in seconds) and a refused connection at most ``REFUSED_RETRIES`` times (about 1.5 s),
so a mistyped or absent host fails fast. Redirects are followed by hand so the
``Authorization`` header never leaves the registry's origin, and no credential ever appears in
an error message or a log line. The HTTP session is created lazily per process, so a client
can be pickled or used after ``fork``.

Every error the HTTP stack can raise (the whole ``requests.exceptions`` and
``urllib3.exceptions`` trees, ``http.client``'s and the socket's ``OSError``s, listed once in
``TRANSPORT_ERRORS``) is caught where a request is sent or a body read and becomes one
``SourceError`` line naming the object, the host and the innermost cause
(``transport_reason``), never a traceback. A host that could not be reached at all (the name
does not resolve, the connection is refused or times out) is ``RegistryUnreachable``:
``could not reach HOST: CAUSE (after N attempts)``, the wording the README documents for exit
3. Pulling is ``pull.py``'s, pushing ``push.py``'s; both go through this client.
"""

from __future__ import annotations

import email.utils
import http.client
import http.cookiejar
import ipaddress
import logging
import os
import random
import socket
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

import requests
import urllib3

from pinguard.digest import Digest
from pinguard.errors import ImageNotFound, SourceError
from pinguard.sources.interface import SourceOptions
from pinguard.sources.reference import DockerReference, parse_reference
from pinguard.sources.registry.auth import RegistryAuth

log = logging.getLogger("pinguard.sources.registry")

MAX_MANIFEST_BYTES = 4 * 1024 * 1024
MAX_REDIRECTS = 10
MAX_RETRY_AFTER = 60.0
BACKOFF_BASE = 0.5
BACKOFF_CAP = 30.0
BLOB_BUFFER = 1024 * 1024
REFUSED_RETRIES = 2  # a refused connection: a registry restarting, not one worth waiting for
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_NOT_RETRYABLE_5XX = frozenset({501, 505})

#: What requests, urllib3 and the sockets below them raise while a request is sent or its
#: body read: the whole ``requests.exceptions`` tree, the whole ``urllib3.exceptions`` tree
#: (a raw body read raises those unwrapped), ``http.client``'s (urllib3 wraps them, but not
#: on every path), ``OSError`` (a socket, ``ssl.SSLError``, a timeout) and urllib3's one
#: exception outside its ``HTTPError`` tree (``ProxySchemeUnsupported``, a ``ValueError``).
#: Every call into the HTTP stack here catches exactly these;
#: tests/sources/test_transport_errors.py checks that each class of both trees is among them.
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    requests.RequestException,
    urllib3.exceptions.HTTPError,
    urllib3.exceptions.ProxySchemeUnsupported,
    http.client.HTTPException,
    OSError,
)
#: Errors worth another attempt: the connection failed, timed out or broke mid-answer. Any
#: other transport error (an invalid URL or redirect target, an unsupported scheme, a body
#: that cannot be decoded) would fail the same way again.
_RETRYABLE_ERRORS: tuple[type[BaseException], ...] = (
    requests.ConnectionError,
    requests.Timeout,
    requests.exceptions.ChunkedEncodingError,
)
# --- hosts and challenges -------------------------------------------------------------


def is_loopback(hostname: str) -> bool:
    """localhost, 127.0.0.0/8 and ::1."""
    host = hostname.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def origin(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    netloc = parts.netloc.lower().rsplit("@", 1)[-1]
    return parts.scheme.lower(), netloc


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return min(float(value), MAX_RETRY_AFTER)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return min(max(when.timestamp() - time.time(), 0.0), MAX_RETRY_AFTER)


def _backoff(attempt: int) -> float:
    delay: float = min(BACKOFF_CAP, BACKOFF_BASE * (2**attempt))
    return delay + random.uniform(0, delay / 10)  # jitter, not crypto


def _retryable(status: int) -> bool:
    return status == 429 or (status >= 500 and status not in _NOT_RETRYABLE_5XX)


def _inner(exc: BaseException) -> BaseException | None:
    """The error ``exc`` wraps: urllib3's ``reason`` (``MaxRetryError``, ``ProxyError``),
    ``__cause__``, or an exception among its ``args`` (requests' ``ConnectionError(e)``,
    urllib3's ``ProtocolError('Connection broken', ConnectionResetError(...))``)."""
    reason = getattr(exc, "reason", None)
    if isinstance(reason, BaseException):
        return reason
    if exc.__cause__ is not None:
        return exc.__cause__
    return next((a for a in exc.args if isinstance(a, BaseException)), None)


def transport_reason(exc: BaseException) -> str:
    """A one-line account of a transport error: its class and the innermost cause, e.g.
    ``ProtocolError: ConnectionResetError (Connection reset by peer)``.

    Only class names, errno texts and OpenSSL reason codes are shown, never ``str(exc)``:
    requests and urllib3 put URLs in their messages, and a redirect target's query may carry
    a pre-signed credential."""
    root, seen = exc, {id(exc)}
    while (inner := _inner(root)) is not None and id(inner) not in seen:
        seen.add(id(inner))
        root = inner
    text = type(exc).__name__
    if root is not exc:
        name = type(root).__name__
        text += f": {type(root).__module__}.{name}" if name == "error" else f": {name}"
    detail = ""
    if isinstance(root, ssl.SSLError):
        detail = str(getattr(root, "verify_message", "") or root.reason or "")
    elif isinstance(root, OSError):
        detail = root.strerror or ""
    if isinstance(root, TimeoutError) and not detail:
        detail = "timed out"
    return f"{text} ({detail})" if detail else text


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and every error it wraps, outermost first."""
    chain, seen = [exc], {id(exc)}
    while (inner := _inner(chain[-1])) is not None and id(inner) not in seen:
        seen.add(id(inner))
        chain.append(inner)
    return chain


@dataclass(frozen=True, slots=True)
class Unreachable:
    """Why a host could not be reached at all, and how often that is worth retrying."""

    cause: str  # "connection refused", "name does not resolve: Name or service not known"
    retries: int | None  # at most this many more attempts; None: the client's max_retries


def unreachable(exc: BaseException) -> Unreachable | None:
    """Why ``exc`` means no connection was ever made to the host (its name does not
    resolve, the connection was refused or timed out, no route), else None: the host answered
    and the conversation failed, or a proxy (not the host) could not be reached."""
    chain = _chain(exc)
    if any(
        isinstance(e, (requests.exceptions.ProxyError, urllib3.exceptions.ProxyError))
        for e in chain
    ):
        return None
    for e in chain:
        if isinstance(e, socket.gaierror):
            return Unreachable(f"name does not resolve: {e.strerror or e}", 0)
    if any(isinstance(e, ConnectionRefusedError) for e in chain):
        return Unreachable("connection refused", REFUSED_RETRIES)
    # urllib3's NewConnectionError is a ConnectTimeoutError: ask for it first
    failed = next((e for e in chain if isinstance(e, urllib3.exceptions.NewConnectionError)), None)
    if failed is not None:
        root = chain[-1]
        why = root.strerror if isinstance(root, OSError) and root.strerror else ""
        return Unreachable(why[:1].lower() + why[1:] if why else transport_reason(exc), None)
    if any(
        isinstance(e, (requests.exceptions.ConnectTimeout, urllib3.exceptions.ConnectTimeoutError))
        for e in chain
    ):
        return Unreachable("connection timed out", None)
    return None


class RegistryUnreachable(SourceError):
    """No connection could be made to a registry host (``could not reach HOST``, exit 3)."""


def attempts(n: int) -> str:
    return "1 attempt" if n == 1 else f"{n} attempts"


def join_url(url: str, location: str, what: str, host: str) -> str:
    """``location`` (a redirect or upload target) made absolute against ``url``."""
    try:
        target = urljoin(url, location)
        urlsplit(target).port  # noqa: B018 - raises ValueError on a port that is not one
    except ValueError:
        # not quoted: a location may carry a pre-signed credential in its query
        raise SourceError(f"{what}: {host} sent a location that is not a valid URL") from None
    return target


class BrokenBody(SourceError):
    """A response body that broke off while being read (reset, truncated)."""


class _NoCookies(http.cookiejar.DefaultCookiePolicy):
    """Store no cookie: the distribution API is stateless, and a cookie a registry sets would
    otherwise be sent to every port of that host (cookies ignore ports) and to redirects."""

    def set_ok(self, cookie: http.cookiejar.Cookie, request: Any) -> bool:
        return False

    def return_ok(self, cookie: http.cookiejar.Cookie, request: Any) -> bool:
        return False


class _NoNetrc(requests.auth.AuthBase):
    """An explicit no-op auth, so requests never adds ~/.netrc credentials on its own."""

    def __call__(self, r: requests.PreparedRequest) -> requests.PreparedRequest:
        return r


# --- the client ------------------------------------------------------------------------


class RegistryClient:
    """Requests to one repository of a registry (``HOST/REPO[:TAG][@DIGEST]`` names it),
    authenticated as the registry asks; every error is one ``SourceError`` line."""

    def __init__(self, ref: str, options: SourceOptions | None = None) -> None:
        self.reference = ref
        self.ref: DockerReference = parse_reference(ref)
        self.options = options or SourceOptions()
        self.scheme = "http" if self.plain_http_allowed(self.ref.api_host) else "https"
        self.base_url = f"{self.scheme}://{self.ref.api_host}"
        self.auth = RegistryAuth(self.ref, self.options.docker_config)
        self._sessions: dict[int, requests.Session] = {}

    # pickling: sessions are per process and never cross a process boundary
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_sessions"] = {}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return f"RegistryClient({self.reference!r})"

    @property
    def where(self) -> str:
        """``HOST/REPO``, as errors name the repository."""
        return f"{self.ref.api_host}/{self.ref.repository}"

    def blob_url(self, digest: str) -> str:
        checked = Digest.parse(digest, f"blob of {self.where}")
        return f"{self.base_url}/v2/{self.ref.repository}/blobs/{checked}"

    def manifest_url(self, reference: str) -> str:
        return f"{self.base_url}/v2/{self.ref.repository}/manifests/{reference}"

    def plain_http_allowed(self, hostport: str) -> bool:
        """Plain HTTP only to a loopback host or one named in ``insecure_registries``."""
        hostname = urlsplit(f"//{hostport}").hostname or hostport
        if is_loopback(hostname):
            return True
        insecure = {h.lower() for h in self.options.insecure_registries}
        return hostport.lower() in insecure or hostname.lower() in insecure

    def _session(self) -> requests.Session:
        pid = os.getpid()
        session = self._sessions.get(pid)
        if session is None:
            # Sessions inherited through fork share sockets with the parent: drop, never reuse.
            session = requests.Session()
            session.cookies.set_policy(_NoCookies())
            session.headers["User-Agent"] = "pinguard (+https://github.com/pinguard)"
            self._sessions = {pid: session}
        return session

    def close(self) -> None:
        session = self._sessions.pop(os.getpid(), None)
        if session is not None:
            session.close()

    # --- HTTP ---------------------------------------------------------------------------

    def _send(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        auth: str | None,
        *,
        what: str,
        stream: bool,
        data: Mapping[str, str] | bytes | None = None,
    ) -> requests.Response:
        """One request, redirects followed by hand; Authorization stays on its origin."""
        start = origin(url)
        carry_auth = auth is not None
        session = self._session()
        for _hop in range(MAX_REDIRECTS + 1):
            request_headers = dict(headers)
            if carry_auth and auth is not None:
                request_headers["Authorization"] = auth
            try:
                response = session.request(
                    method,
                    url,
                    headers=request_headers,
                    data=data,
                    stream=stream,
                    allow_redirects=False,
                    timeout=self.options.timeout,
                    auth=_NoNetrc(),
                )
            except TRANSPORT_ERRORS:
                raise
            except ValueError:
                # requests parses a redirect's Location even when not following it, and
                # urllib.parse raises a plain ValueError ("Invalid IPv6 URL")
                raise SourceError(
                    f"{what}: {urlsplit(url).netloc} sent a location that is not a valid URL"
                ) from None
            location = response.headers.get("Location")
            if response.status_code not in _REDIRECTS or not location:
                return response
            response.close()
            target = join_url(url, location, what, urlsplit(url).netloc)
            if urlsplit(url).scheme == "https" and urlsplit(target).scheme != "https":
                raise SourceError(
                    f"{self.ref.api_host} redirected from https to {urlsplit(target).scheme}; "
                    "refusing to continue without TLS"
                )
            url = target
            if origin(url) != start:
                carry_auth = False  # never again on this chain, even back on the origin
            if response.status_code == 303 or (
                response.status_code in (301, 302) and method == "POST"
            ):
                method, data = "GET", None
            log.debug("following a redirect to %s", origin(url)[1])
        raise SourceError(
            f"{what}: too many redirects (more than {MAX_REDIRECTS}) from {self.ref.api_host}"
        )

    def send_with_retries(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        auth: str | None,
        *,
        what: str,
        stream: bool,
        data: Mapping[str, str] | bytes | None = None,
    ) -> requests.Response:
        """``_send`` again after a retryable status or transport error, with backoff. Any
        transport error, at the last attempt or not worth another, is a ``SourceError``
        naming ``what``, the host and the cause."""
        attempt = 0
        while True:
            try:
                response = self._send(
                    method, url, headers, auth, what=what, stream=stream, data=data
                )
            except TRANSPORT_ERRORS as exc:
                host = urlsplit(url).netloc
                if not isinstance(exc, _RETRYABLE_ERRORS):
                    raise SourceError(
                        f"{what}: request to {host} failed: {transport_reason(exc)}"
                    ) from exc
                never = unreachable(exc)
                limit = self.options.max_retries
                if never is not None and never.retries is not None:
                    limit = min(limit, never.retries)
                if never is not None and attempt >= limit:
                    raise RegistryUnreachable(
                        f"{what}: could not reach {host}: {never.cause} "
                        f"(after {attempts(attempt + 1)})"
                    ) from exc
                if attempt >= limit:
                    raise SourceError(
                        f"{what}: request to {host} failed after {attempts(attempt + 1)}: "
                        f"{transport_reason(exc)}"
                    ) from exc
                delay = _backoff(attempt)
            else:
                if not _retryable(response.status_code) or attempt >= self.options.max_retries:
                    return response
                after = _retry_after(response.headers.get("Retry-After"))
                delay = _backoff(attempt) if after is None else after
                log.debug(
                    "HTTP %s from %s; retrying in %.1fs",
                    response.status_code,
                    urlsplit(url).netloc,
                    delay,
                )
                response.close()
            attempt += 1
            time.sleep(delay)

    def request(
        self,
        url: str,
        headers: Mapping[str, str],
        *,
        what: str,
        stream: bool,
        method: str = "GET",
        body: bytes | None = None,
    ) -> requests.Response:
        """One registry request (GET unless told) for ``what`` (named in every error):
        retries, then one authentication round on a 401."""
        authenticated = False
        while True:
            response = self.send_with_retries(
                method, url, headers, self.auth.header(), what=what, stream=stream, data=body
            )
            if response.status_code != 401 or origin(response.url) != origin(url):
                if response.status_code == 403 and origin(response.url) == origin(url):
                    response.close()
                    raise self.auth.denied(403)
                return response
            challenge = response.headers.get("WWW-Authenticate")
            response.close()
            if authenticated:
                raise self.auth.denied(401)
            self.auth.forget_token()  # an expired or revoked token
            self.auth.authenticate(challenge, self)
            authenticated = True

    def read_limited(self, response: requests.Response, limit: int, what: str) -> bytes:
        length = response.headers.get("Content-Length")
        if length is not None and length.isdigit() and int(length) > limit:
            raise SourceError(f"{what} is too large ({length} bytes)")
        chunks: list[bytes] = []
        total = 0
        try:
            for chunk in response.iter_content(65536):
                total += len(chunk)
                if total > limit:
                    raise SourceError(f"{what} is larger than {limit} bytes")
                chunks.append(chunk)
        except TRANSPORT_ERRORS as exc:
            raise BrokenBody(
                f"reading {what} failed after {total} bytes: {transport_reason(exc)}"
            ) from exc
        return b"".join(chunks)

    def get_small(
        self, url: str, headers: Mapping[str, str], limit: int, what: str
    ) -> tuple[bytes, requests.structures.CaseInsensitiveDict[str]]:
        """GET a document read whole (manifest, config); a body that breaks off is fetched
        again, at most ``max_retries`` times."""
        attempt = 0
        while True:
            response = self.request(url, headers, what=what, stream=True)
            self.check_status(response, what)
            try:
                return self.read_limited(response, limit, what), response.headers
            except BrokenBody:
                if attempt >= self.options.max_retries:
                    raise
                log.debug("%s broke off; fetching it again", what)
            finally:
                response.close()
            attempt += 1

    def check_status(self, response: requests.Response, what: str) -> None:
        if response.status_code == 200:
            return
        status = response.status_code
        response.close()
        if status == 404:
            raise ImageNotFound(f"{what} not found (HTTP 404)")
        if status == 401:
            raise self.auth.denied(401)
        raise SourceError(f"registry {self.ref.api_host} answered HTTP {status} for {what}")
