"""Real registries for tests: Debian's ``docker-registry`` on 127.0.0.1, and small HTTP helpers.

``start_registry(workdir, auth=...)`` launches a ``docker-registry`` process on an ephemeral
loopback port with its own storage directory and a config YAML written here, in one of three
modes: ``"none"`` (anonymous), ``"htpasswd"`` (Basic auth, bcrypt file made by ``htpasswd``)
and ``"token"`` (the Bearer token flow: a ``TokenServer`` in this process checks Basic
credentials and issues RS256 JWTs signed by a throwaway key whose self-signed certificate is
the registry's ``rootcertbundle``, all made with ``openssl``). ``RegistryServer.push`` copies
an image into it with ``skopeo``; ``build_oci_layout`` writes a tiny single- or multi-platform
OCI layout to push. ``HTTPFront`` is a forwarding proxy that can fail the first requests
(503 + Retry-After) or redirect blob GETs elsewhere, and ``HeaderRecorder`` is a server that
records what it was sent; tests use them to prove retries and credential hygiene over real
HTTP, and to build transport faults for real (a TCP RST mid-blob, a stall, bytes past a
blob's size, raw answers no HTTP library would send). Every server binds 127.0.0.1 only and
is stopped by its ``stop()`` (or ``with``).
"""

from __future__ import annotations

import array
import base64
import contextlib
import fcntl
import http.client
import json
import os
import re
import secrets
import socket
import ssl
import struct
import subprocess
import termios
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal, TypeVar
from urllib.parse import parse_qs, urlsplit

from pinguard.testing.images import ImageWriter, layer_tar
from tests.infra.tools import require_root, require_tool

AuthMode = Literal["none", "htpasswd", "token"]
DEFAULT_USER = "pgtest"
DEFAULT_PASSWORD = "s3cret-Pa55-for-tests"
TOKEN_SERVICE = "pinguard-test-registry"
TOKEN_ISSUER = "pinguard-test-token-issuer"
_S = TypeVar("_S", bound="_Server")


def free_port() -> int:
    """An ephemeral TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


# --- small HTTP servers -----------------------------------------------------------------------


class _Server:
    """A ThreadingHTTPServer on 127.0.0.1 serving in a daemon thread."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], host: str = "127.0.0.1") -> None:
        self.httpd = ThreadingHTTPServer((host, 0), handler)
        self.httpd.daemon_threads = True
        self.httpd.owner = self  # type: ignore[attr-defined]
        self.host = host
        self.port = int(self.httpd.server_address[1])
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self: _S) -> _S:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    @property
    def owner(self) -> Any:
        return self.server.owner  # type: ignore[attr-defined]

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _forward(self, upstream: str, body: bytes) -> tuple[int, bytes, dict[str, str]]:
        """Send this request on to ``upstream`` (host:port); its status, body and headers."""
        conn = http.client.HTTPConnection(upstream, timeout=30)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
            conn.request(self.command, self.path, body=body or None, headers=headers)
            response = conn.getresponse()
            payload = response.read()
            out = {k: v for k, v in response.getheaders() if k.lower() not in _HOP_BY_HOP}
            return response.status, payload, out
        finally:
            conn.close()

    def _reply(
        self, status: int, body: bytes = b"", headers: Mapping[str, str] | None = None
    ) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


@dataclass(frozen=True)
class Recorded:
    """One request a helper server saw."""

    method: str
    path: str
    headers: dict[str, str]


class HeaderRecorder(_Server):
    """Serves ``blobs[path]`` and records every request's headers (e.g. on 127.0.0.2)."""

    def __init__(self, host: str = "127.0.0.2") -> None:
        self.blobs: dict[str, bytes] = {}
        self.requests: list[Recorded] = []
        super().__init__(_RecorderHandler, host)


class _RecorderHandler(_Handler):
    def do_GET(self) -> None:
        owner: HeaderRecorder = self.owner
        owner.requests.append(Recorded("GET", self.path, dict(self.headers.items())))
        body = owner.blobs.get(urlsplit(self.path).path)
        if body is None:
            self._reply(404, b"not here")
        else:
            self._reply(200, body, {"Content-Type": "application/octet-stream"})


_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "upgrade"}


class HTTPFront(_Server):
    """A forwarding proxy in front of ``upstream`` (``host:port``), with test behaviours.

    ``fail_first``: answer the first N requests with ``fail_status`` and ``Retry-After``.
    ``redirect_blobs_to``: answer authorised blob GETs with a 307 to that base URL
    (``{base}/v2/REPO/blobs/DIGEST``), as registries backed by object storage do.
    ``transform(path, body)``: rewrite GET response bodies (to serve tampered bytes).
    ``header_transform(path, body, headers)``: rewrite GET response headers after
    ``transform`` (a hostile registry that also sends a matching Docker-Content-Digest).
    ``break_blobs``: break the first N blob GET bodies after half their bytes, by closing
    the connection (``break_mode="truncate"``) or resetting it with a TCP RST ("reset").
    ``break_path(path)``: break only the blob GETs whose path it accepts (default: every
    blob GET). ``break_after(n)``: how many body bytes the n-th break (from 0) sends before
    it breaks (default: half the body). A reset closes the socket at once with ``SO_LINGER``
    {1, 0}: the client reads the bytes sent, then gets ``ECONNRESET`` (no FIN first).
    ``set_cookie``: a ``Set-Cookie`` value added to every response.
    ``stall(path)``: for a blob GET whose path it accepts, send the headers and half the
    body, then hold the connection open, sending nothing, until ``stop()`` (a registry
    that hangs mid-blob). ``stalled`` counts the connections so held.
    ``overrun(path)``: for a blob GET whose path it accepts, promise 1000 bytes more than
    the blob has, send the blob and one byte more, then hold the connection like ``stall``.
    ``raw(method, path)``: a ``RawAnswer`` to write to the socket as is instead of
    forwarding the request (a bad status line, a broken chunked body, a redirect loop), or
    None to forward it.
    ``drop_multi_range``: forward a request asking for several byte ranges without its
    ``Range`` header, so the whole blob comes back (200), as object-storage-backed
    registries and some fronts answer multi-range requests.
    Every request is kept in ``requests`` (headers included) for assertions."""

    def __init__(
        self,
        upstream: str,
        *,
        fail_first: int = 0,
        fail_status: int = 503,
        retry_after: str | None = "0",
        redirect_blobs_to: str | None = None,
        transform: Callable[[str, bytes], bytes] | None = None,
        header_transform: Callable[[str, bytes, dict[str, str]], dict[str, str]] | None = None,
        break_blobs: int = 0,
        break_mode: Literal["truncate", "reset"] = "truncate",
        break_path: Callable[[str], bool] | None = None,
        break_after: Callable[[int], int] | None = None,
        set_cookie: str | None = None,
        stall: Callable[[str], bool] | None = None,
        overrun: Callable[[str], bool] | None = None,
        raw: Callable[[str, str], RawAnswer | None] | None = None,
        drop_multi_range: bool = False,
    ) -> None:
        self.upstream = upstream
        self.drop_multi_range = drop_multi_range
        self.stall = stall
        self.overrun = overrun
        self.raw = raw
        self.break_path = break_path
        self.break_after = break_after
        self.breaks = 0  # bodies broken so far
        self.stalled = 0
        self.released = threading.Event()
        self.transform = transform
        self.header_transform = header_transform
        self.break_remaining = break_blobs
        self.break_mode = break_mode
        self.set_cookie = set_cookie
        self.fail_remaining = fail_first
        self.fail_status = fail_status
        self.retry_after = retry_after
        self.redirect_blobs_to = redirect_blobs_to
        self.requests: list[Recorded] = []
        self.lock = threading.Lock()
        super().__init__(_FrontHandler)

    def stop(self) -> None:
        self.released.set()
        super().stop()


@dataclass(frozen=True)
class RawAnswer:
    """Bytes ``HTTPFront`` writes to the client as they are, and what it does then: close the
    connection (FIN), reset it (RST) or hold it open sending nothing until the front stops."""

    data: bytes
    then: Literal["close", "reset", "hang"] = "close"


def _reset(sock: socket.socket) -> None:
    """Close ``sock`` with a TCP RST: ``SO_LINGER`` {1, 0}, then ``close()``, once every byte
    written was acknowledged by the client (``TIOCOUTQ``, the unsent and unacknowledged
    bytes, is 0; at most 10 s): an RST discards what is still queued for sending, so the
    client reads exactly the bytes written, then ``ECONNRESET``."""
    deadline = time.monotonic() + 10
    queued = array.array("i", [1])
    while time.monotonic() < deadline:
        fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, queued)
        if queued[0] == 0:
            break
        time.sleep(0.001)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


class _FrontHandler(_Handler):
    def _raw(self, answer: RawAnswer) -> None:
        owner: HTTPFront = self.owner
        self.wfile.write(answer.data)
        self.wfile.flush()
        self.close_connection = True
        if answer.then == "reset":
            _reset(self.connection)
        elif answer.then == "hang":
            with owner.lock:
                owner.stalled += 1
            owner.released.wait()

    def _handle(self) -> None:
        owner: HTTPFront = self.owner
        body = self._body()
        with owner.lock:
            owner.requests.append(Recorded(self.command, self.path, dict(self.headers.items())))
            failing = owner.fail_remaining > 0
            if failing:
                owner.fail_remaining -= 1
        if owner.drop_multi_range and "," in (self.headers.get("Range") or ""):
            del self.headers["Range"]
        answer = owner.raw(self.command, self.path) if owner.raw is not None else None
        if answer is not None:
            self._raw(answer)
            return
        if failing:
            headers = {"Retry-After": owner.retry_after} if owner.retry_after is not None else {}
            self._reply(owner.fail_status, b"try again later", headers)
            return
        if (
            owner.redirect_blobs_to
            and self.command == "GET"
            and "/blobs/" in self.path
            and self.headers.get("Authorization")
        ):
            self._reply(307, b"", {"Location": owner.redirect_blobs_to + self.path})
            return
        status, payload, out = self._forward(owner.upstream, body)
        if owner.transform is not None and self.command == "GET":
            payload = owner.transform(self.path, payload)
        if owner.header_transform is not None and self.command == "GET":
            out = owner.header_transform(self.path, payload, out)
        if owner.set_cookie is not None:
            out["Set-Cookie"] = owner.set_cookie
        with owner.lock:
            breaking = (
                owner.break_remaining > 0
                and self.command == "GET"
                and "/blobs/" in self.path
                and status == 200
                and (owner.break_path is None or owner.break_path(self.path))
            )
            nth = owner.breaks
            if breaking:
                owner.break_remaining -= 1
                owner.breaks += 1
        if breaking:
            cut = owner.break_after(nth) if owner.break_after is not None else len(payload) // 2
            self._break(status, payload, out, owner.break_mode, cut)
            return
        if (
            owner.overrun is not None
            and self.command == "GET"
            and "/blobs/" in self.path
            and status == 200
            and owner.overrun(self.path)
        ):
            self._overrun(status, payload, out)
            return
        if (
            owner.stall is not None
            and self.command == "GET"
            and "/blobs/" in self.path
            and status == 200
            and owner.stall(self.path)
        ):
            self._stall(status, payload, out)
            return
        self._reply(status, payload, out)

    def _stall(self, status: int, body: bytes, headers: Mapping[str, str]) -> None:
        """Promise the whole body, send half, then hang until the front stops."""
        owner: HTTPFront = self.owner
        self._send_half(status, body, headers)
        with owner.lock:
            owner.stalled += 1
        owner.released.wait()
        self.close_connection = True

    def _send_half(
        self, status: int, body: bytes, headers: Mapping[str, str], cut: int | None = None
    ) -> None:
        """Promise the whole body and send its first ``cut`` bytes (default: half)."""
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[: len(body) // 2 if cut is None else cut])
        self.wfile.flush()

    def _break(
        self, status: int, body: bytes, headers: Mapping[str, str], mode: str, cut: int
    ) -> None:
        """Promise the whole body, send ``cut`` bytes, then close or reset the connection."""
        self._send_half(status, body, headers, cut)
        self.close_connection = True
        if mode == "reset":
            # At once, with SO_LINGER {1, 0}: close() sends RST. (Left to the server, the
            # socket would be shut down for writing first, and the client would see a FIN.)
            _reset(self.connection)

    def _overrun(self, status: int, body: bytes, headers: Mapping[str, str]) -> None:
        """Promise 1000 bytes more than the blob, send it and one byte more, then hang."""
        owner: HTTPFront = self.owner
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body) + 1000))
        self.end_headers()
        self.wfile.write(body + b"\0")
        self.wfile.flush()
        with owner.lock:
            owner.stalled += 1
        owner.released.wait()
        self.close_connection = True

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _handle


class TokenServer(_Server):
    """A Bearer token issuer: Basic creds (or a refresh token) in, an RS256 JWT out.

    Anonymous requests get a valid token with no access, as Docker Hub does for private
    repositories. ``issued`` counts tokens handed out, per scope."""

    def __init__(
        self,
        workdir: Path,
        *,
        username: str = DEFAULT_USER,
        password: str = DEFAULT_PASSWORD,
        refresh_token: str | None = None,
    ) -> None:
        openssl = require_tool("openssl")
        workdir.mkdir(parents=True, exist_ok=True)
        self.key_path = workdir / "token-key.pem"
        self.cert_path = workdir / "token-cert.pem"
        subprocess.run(
            [
                openssl,
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "2",
                "-subj",
                "/CN=pinguard-test-token-issuer",
                "-keyout",
                str(self.key_path),
                "-out",
                str(self.cert_path),
            ],
            check=True,
            capture_output=True,
        )
        der = subprocess.run(
            [openssl, "x509", "-in", str(self.cert_path), "-outform", "DER"],
            check=True,
            capture_output=True,
        ).stdout
        self._openssl = openssl
        self._x5c = base64.b64encode(der).decode("ascii")
        self.username = username
        self.password = password
        self.refresh_token = refresh_token
        self.issued: dict[str, int] = {}
        self.requests: list[Recorded] = []
        self.lock = threading.Lock()
        super().__init__(_TokenHandler)

    @property
    def realm(self) -> str:
        return f"{self.url}/token"

    def make_token(self, subject: str, access: list[dict[str, Any]]) -> str:
        now = int(time.time())
        header = {"typ": "JWT", "alg": "RS256", "x5c": [self._x5c]}
        claims = {
            "iss": TOKEN_ISSUER,
            "sub": subject,
            "aud": TOKEN_SERVICE,
            "exp": now + 300,
            "nbf": now - 10,
            "iat": now,
            "jti": secrets.token_hex(8),
            "access": access,
        }
        signing_input = (
            _b64url(json.dumps(header).encode()) + "." + _b64url(json.dumps(claims).encode())
        )
        signature = subprocess.run(
            [self._openssl, "dgst", "-sha256", "-sign", str(self.key_path)],
            input=signing_input.encode(),
            check=True,
            capture_output=True,
        ).stdout
        return signing_input + "." + _b64url(signature)


def _parse_scopes(values: Sequence[str]) -> list[dict[str, Any]]:
    access = []
    for value in values:
        for scope in value.split(" "):
            parts = scope.split(":")
            if len(parts) >= 3:
                kind, name, actions = parts[0], ":".join(parts[1:-1]), parts[-1]
                access.append({"type": kind, "name": name, "actions": actions.split(",")})
    return access


class _TokenHandler(_Handler):
    def _grant(self, query: Mapping[str, list[str]], subject: str | None) -> None:
        owner: TokenServer = self.owner
        scopes = list(query.get("scope", []))
        access = _parse_scopes(scopes) if subject else []
        token = owner.make_token(subject or "", access)
        with owner.lock:
            key = " ".join(scopes)
            owner.issued[key] = owner.issued.get(key, 0) + 1
        body = json.dumps({"token": token, "access_token": token, "expires_in": 300})
        self._reply(200, body.encode(), {"Content-Type": "application/json"})

    def do_GET(self) -> None:
        owner: TokenServer = self.owner
        owner.requests.append(Recorded("GET", self.path, dict(self.headers.items())))
        parts = urlsplit(self.path)
        if parts.path != "/token":
            self._reply(404)
            return
        query = parse_qs(parts.query)
        header = self.headers.get("Authorization", "")
        if not header:
            self._grant(query, None)
            return
        expected = base64.b64encode(f"{owner.username}:{owner.password}".encode()).decode()
        if header != f"Basic {expected}":
            self._reply(401, b'{"details":"incorrect username or password"}')
            return
        self._grant(query, owner.username)

    def do_POST(self) -> None:
        owner: TokenServer = self.owner
        owner.requests.append(Recorded("POST", self.path, dict(self.headers.items())))
        form = parse_qs(self._body().decode())
        if (
            owner.refresh_token
            and form.get("grant_type") == ["refresh_token"]
            and form.get("refresh_token") == [owner.refresh_token]
        ):
            self._grant(form, owner.username)
        else:
            self._reply(401, b'{"error":"invalid_grant"}')


def tls_context(workdir: Path) -> tuple[ssl.SSLContext, Path]:
    """A server-side TLS context with a fresh self-signed ``openssl`` certificate for
    127.0.0.1, and the certificate's path (trust it with ``REQUESTS_CA_BUNDLE``, or not)."""
    openssl = require_tool("openssl")
    key, cert = workdir / "key.pem", workdir / "cert.pem"
    subprocess.run(
        [
            *(openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key)),
            *("-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1"),
            *("-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context, cert


@contextlib.contextmanager
def full_listener() -> Iterator[str]:
    """``127.0.0.1:PORT`` of a socket that listens but whose accept queue is full (a backlog
    of 0, filled by connections nobody accepts): the kernel drops a new connection's SYN,
    so connecting to it times out, as to a host that drops packets."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    fillers: list[socket.socket] = []
    try:
        server.bind(("127.0.0.1", 0))
        server.listen(0)
        address = server.getsockname()
        for _ in range(3):
            filler = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            filler.setblocking(False)
            fillers.append(filler)
            with contextlib.suppress(BlockingIOError):
                filler.connect(address)
        yield f"127.0.0.1:{address[1]}"
    finally:
        for filler in fillers:
            filler.close()
        server.close()


# --- the registry process -----------------------------------------------------------------------

#: One line of distribution's access log (gorilla's combined log format).
ACCESS_LINE = re.compile(
    r'^\S+ \S+ \S+ \[[^]]*\] "(?P<method>[A-Z]+) (?P<path>\S+) HTTP/[0-9.]+" '
    r"(?P<status>\d{3}) (?P<size>\d+|-)",
    re.MULTILINE,
)


@dataclass(frozen=True)
class AccessLine:
    """One request as the registry logged it: method, path, status, body bytes written."""

    method: str
    path: str
    status: int
    size: int

    @property
    def blob(self) -> str | None:
        """The digest of a ``/v2/REPO/blobs/DIGEST`` request, else None."""
        head, sep, digest = self.path.partition("/blobs/")
        return digest.split("?", 1)[0] if sep and head.startswith("/v2/") else None


@dataclass
class RegistryServer:
    """A running ``docker-registry``; ``address`` is ``127.0.0.1:PORT`` (plain HTTP)."""

    port: int
    root: Path
    process: subprocess.Popen[bytes]
    auth: AuthMode = "none"
    username: str | None = None
    password: str | None = None
    token_server: TokenServer | None = None
    log_path: Path | None = None
    extra: list[Any] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def ref(self, repo_and_tag: str) -> str:
        """``127.0.0.1:PORT/REPO:TAG``: a reference for RegistrySource (no ``docker://``)."""
        return f"{self.address}/{repo_and_tag}"

    def push(
        self,
        source: str,
        repo_and_tag: str,
        *,
        all_platforms: bool = False,
        format: str | None = None,  # skopeo --format: "oci" or "v2s2"
        zstd_chunked: bool = False,
    ) -> None:
        """``skopeo copy SOURCE docker://ADDRESS/REPO:TAG`` with this registry's credentials.

        ``zstd_chunked``: ``--dest-compress-format zstd:chunked``, with a private, empty
        blob-info cache (a tmpfs over /var/lib/containers/cache in a mount namespace of its
        own), since skopeo 1.9 otherwise reuses gzip blobs it knows the registry has."""
        skopeo = require_tool("skopeo")
        cmd = [skopeo, "--insecure-policy", "copy", "--dest-tls-verify=false", "--quiet"]
        if zstd_chunked:
            require_root()
            Path("/var/lib/containers/cache").mkdir(parents=True, exist_ok=True)
            mount = 'mount -t tmpfs none /var/lib/containers/cache && exec "$@"'
            cmd = [require_tool("unshare"), "-m", "sh", "-c", mount, "sh", *cmd]
            cmd += ["--dest-compress-format", "zstd:chunked"]
        if self.username is not None and self.password is not None:
            cmd.append(f"--dest-creds={self.username}:{self.password}")
        if all_platforms:
            cmd.append("--all")
        if format:
            cmd.append(f"--format={format}")
        cmd += [source, f"docker://{self.ref(repo_and_tag)}"]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(
                f"skopeo copy {source} -> {repo_and_tag} failed:\n{proc.stderr}\n"
                f"registry log:\n{self.log()}"
            )

    def log_mark(self) -> int:
        """Where the log ends now: ``requests(since=...)`` counts only what comes after."""
        return self.log_path.stat().st_size if self.log_path and self.log_path.exists() else 0

    def requests(self, since: int = 0) -> list[AccessLine]:
        """Every request the registry logged (``access_log=True``) after byte ``since`` of
        its log, in order: the registry's own count, not the client's."""
        if self.log_path is None:
            return []
        with self.log_path.open("rb") as fh:
            fh.seek(since)
            text = fh.read().decode(errors="replace")
        out = []
        for m in ACCESS_LINE.finditer(text):
            size = m.group("size")
            out.append(
                AccessLine(
                    m.group("method"),
                    m.group("path"),
                    int(m.group("status")),
                    int(size) if size.isdigit() else 0,
                )
            )
        return out

    def log(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.token_server is not None:
            self.token_server.stop()
        for item in self.extra:
            item.stop()

    def __enter__(self) -> RegistryServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _config_yaml(port: int, storage: Path, auth_block: str, *, access_log: bool = False) -> str:
    return (
        "version: 0.1\n"
        "log:\n"
        "  level: warn\n"
        "  accesslog:\n"
        f"    disabled: {'false' if access_log else 'true'}\n"
        "storage:\n"
        "  filesystem:\n"
        f"    rootdirectory: {storage}\n"
        "  delete:\n"
        "    enabled: true\n"
        "  maintenance:\n"
        "    uploadpurging:\n"
        "      enabled: false\n"
        "http:\n"
        f"  addr: 127.0.0.1:{port}\n"
        f"  secret: {secrets.token_hex(16)}\n"
        "health:\n"
        "  storagedriver:\n"
        "    enabled: false\n" + auth_block
    )


def _wait_ready(server: RegistryServer, deadline: float) -> bool:
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(f"{server.url}/v2/", timeout=2):
                return True
        except urllib.error.HTTPError as exc:
            if exc.code == 401:
                return True
        except OSError:
            pass
        time.sleep(0.05)
    return False


def start_registry(
    workdir: Path,
    *,
    auth: AuthMode = "none",
    username: str = DEFAULT_USER,
    password: str = DEFAULT_PASSWORD,
    refresh_token: str | None = None,
    extra_config: str = "",
    access_log: bool = False,
) -> RegistryServer:
    """Start ``docker-registry`` on 127.0.0.1 (ephemeral port) storing under ``workdir``.

    ``auth``: "none", "htpasswd" (Basic) or "token" (Bearer via a TokenServer that accepts
    ``username``/``password`` and, when given, ``refresh_token`` as an identity token).
    ``extra_config``: YAML appended to the config (``notifications:``, say).
    ``access_log``: the registry logs every request (``RegistryServer.requests()``).
    The caller stops it (``stop()`` or ``with``)."""
    binary = require_tool("docker-registry")
    workdir.mkdir(parents=True, exist_ok=True)
    storage = workdir / "storage"
    storage.mkdir(exist_ok=True)
    token_server: TokenServer | None = None
    auth_block = ""
    if auth == "htpasswd":
        htpasswd = require_tool("htpasswd")
        line = subprocess.run(
            [htpasswd, "-Bbn", username, password], check=True, capture_output=True, text=True
        ).stdout.strip()
        (workdir / "htpasswd").write_text(line + "\n")
        auth_block = (
            f"auth:\n  htpasswd:\n    realm: pinguard-test\n    path: {workdir / 'htpasswd'}\n"
        )
    elif auth == "token":
        token_server = TokenServer(
            workdir / "token", username=username, password=password, refresh_token=refresh_token
        )
        auth_block = (
            "auth:\n  token:\n"
            f"    realm: {token_server.realm}\n"
            f"    service: {TOKEN_SERVICE}\n"
            f"    issuer: {TOKEN_ISSUER}\n"
            f"    rootcertbundle: {token_server.cert_path}\n"
        )
    last_log = ""
    for _attempt in range(3):  # the port may be taken between free_port() and bind
        port = free_port()
        config = workdir / "config.yml"
        config.write_text(
            _config_yaml(port, storage, auth_block, access_log=access_log) + extra_config
        )
        log_path = workdir / "registry.log"
        with log_path.open("wb") as log_file:
            process = subprocess.Popen(
                [binary, "serve", str(config)],
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env={**os.environ, "OTEL_TRACES_EXPORTER": "none"},
            )
        server = RegistryServer(
            port=port,
            root=workdir,
            process=process,
            auth=auth,
            username=username if auth != "none" else None,
            password=password if auth != "none" else None,
            token_server=token_server,
            log_path=log_path,
        )
        if _wait_ready(server, time.monotonic() + 20):
            return server
        last_log = server.log()
        if process.poll() is None:
            process.kill()
            process.wait()
    if token_server is not None:
        token_server.stop()
    raise RuntimeError(f"docker-registry did not start:\n{last_log}")


@contextlib.contextmanager
def running_registry(workdir: Path, **kwargs: Any) -> Iterator[RegistryServer]:
    """``with running_registry(tmp) as reg:`` — start_registry, stopped on exit."""
    server = start_registry(workdir, **kwargs)
    try:
        yield server
    finally:
        server.stop()


# --- tiny OCI layouts -----------------------------------------------------------------------------


@dataclass(frozen=True)
class LayoutImage:
    """What ``build_oci_layout`` wrote for one platform."""

    platform: str  # "linux/amd64", "linux/arm64/v8"
    manifest_digest: str
    config_digest: str
    layers: tuple[tuple[str, bytes], ...]  # (digest, compressed bytes) in order
    diff_ids: tuple[str, ...]


@dataclass(frozen=True)
class Layout:
    """An OCI layout directory and what is in it; ``source`` is skopeo's ``oci:DIR:TAG``."""

    path: Path
    tag: str
    images: tuple[LayoutImage, ...]
    index_digest: str | None  # the nested index for multi-platform layouts

    @property
    def source(self) -> str:
        return f"oci:{self.path}:{self.tag}"


def build_oci_layout(
    path: Path,
    *,
    tag: str = "latest",
    platforms: Sequence[str] = ("linux/amd64",),
    layers: Sequence[Mapping[str, bytes]] | Callable[[str], Sequence[Mapping[str, bytes]]] = (
        {"etc/pinguard-test": b"hello\n"},
    ),
) -> Layout:
    """Write an OCI layout with one image per platform (a nested index when there are several).

    ``layers`` is a list of {path: bytes} (one gzip layer each), or a function of the
    platform string returning such a list so each platform gets different bytes."""
    writer = ImageWriter(path)
    images: list[LayoutImage] = []
    written = []
    for plat in platforms:
        specs = layers(plat) if callable(layers) else layers
        descs = [writer.layer(layer_tar(files, mtime=0)) for files in specs]
        history = [{"created_by": f"COPY layer {i}"} for i in range(len(specs))]
        image = writer.image(descs, history, platform=plat, env=("PATH=/usr/bin",))
        written.append(image)
        images.append(
            LayoutImage(
                platform=plat,
                manifest_digest=image.manifest.digest,
                config_digest=image.config.digest,
                layers=tuple((d.digest, writer.read(d.digest)) for d in image.layers),
                diff_ids=image.diff_ids,
            )
        )
    index, nested = writer.index(written, tag=tag, nested=len(written) > 1)
    writer.write_layout(index)
    index_digest = nested.digest if nested is not None else None
    return Layout(path=path, tag=tag, images=tuple(images), index_digest=index_digest)
