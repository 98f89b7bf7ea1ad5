"""Every transport fault ends in one ``SourceError`` line (exit 3) naming object, host and cause.

The faults are built for real in front of the real ``docker-registry``: ``HTTPFront`` resets
a blob with a TCP RST (``SO_LINGER`` {1, 0}, no FIN first) on every attempt, stalls, sends
one byte past a blob's size and hangs, or writes raw answers no HTTP library would send (a
bad status line, a header line of 70,000 bytes, 101 headers, a broken chunk length, a body
cut short, a gzip body that is not gzip, a redirect loop, redirects to an invalid URL, to
``ftp:`` and to ``https:`` with no host); a stopped front refuses connections, a listener
with a full accept queue makes the connection time out, a stopped front named in
``$HTTP_PROXY`` is a dead proxy, TLS is spoken to a plain-HTTP front and to a TLS front
whose ``openssl`` certificate nobody trusts. What cannot be provoked this way is covered by a
table over both exception trees (``requests.exceptions`` and ``urllib3.exceptions``, and
``http.client``'s, enumerated, not listed by hand). Expected messages are written by hand.
"""

from __future__ import annotations

import http.client
import inspect
import random
import re
from pathlib import Path
from types import ModuleType

import pytest
import requests
import urllib3

from pinguard.audit.options import AuditOptions
from pinguard.audit.pipeline import audit_image
from pinguard.cli import main
from pinguard.errors import BlobVerificationError, SourceError
from pinguard.sources.interface import LayerRef, SourceOptions
from pinguard.sources.registry import TRANSPORT_ERRORS, RegistrySource, transport_reason
from tests.infra.registry import (
    HTTPFront,
    Layout,
    RawAnswer,
    RegistryServer,
    build_oci_layout,
    full_listener,
    tls_context,
)
from tests.sources.conftest import Images

pytestmark = pytest.mark.integration

MIB = 1 << 20
#: One retry, short timeouts: every fault below fails each attempt the same way.
FAST = SourceOptions(max_retries=1, timeout=2.0)


@pytest.fixture(scope="module")
def big(registry: RegistryServer, tmp_path_factory: pytest.TempPathFactory) -> Layout:
    """app/big:v1, one layer of 3 MiB of incompressible bytes (the blob is read in 1 MiB
    chunks, so a reset past 2 MiB leaves bytes delivered to skip on the next attempt)."""
    data = random.Random(22).randbytes(3 * MIB)
    layout = build_oci_layout(tmp_path_factory.mktemp("big") / "l", layers=[{"opt/big": data}])
    registry.push(layout.source, "app/big:v1")
    return layout


def _layer_ref(layout: Layout) -> LayerRef:
    digest, blob = layout.images[0].layers[0]
    return LayerRef(digest=digest, size=len(blob))


def _one_line(exc: SourceError, *parts: str) -> str:
    """``exc`` as the CLI prints it: exit 3, one line, naming every one of ``parts``."""
    message = str(exc)
    assert exc.exit_code == 3
    assert "\n" not in message
    for part in parts:
        assert part in message, (part, message)
    return message


def _resolve_error(address: str, options: SourceOptions = FAST, *, https: bool = False) -> str:
    source = RegistrySource(f"{address}/app/single:v1", options)
    if https:
        source.base_url = f"https://{address}"  # loopback is plain HTTP unless told
    with pytest.raises(SourceError) as info:
        source.resolve()
    return _one_line(info.value, f"manifest v1 of {address}/app/single", address)


# --- blobs: reset, stall, one byte too many ------------------------------------------------------


def test_reset_mid_blob_on_every_attempt_is_one_line_exit_3(
    registry: RegistryServer, big: Layout, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 22: an RST in the middle of the layer on every attempt (after 2.5 MiB, then
    after 1 MiB, inside the bytes the next attempt skips) ends in exit 3 and one line."""
    layer = _layer_ref(big)
    with HTTPFront(
        registry.address,
        break_blobs=100,
        break_mode="reset",
        break_path=lambda path: path.endswith(layer.digest),
        break_after=lambda n: 5 * MIB // 2 if n == 0 else MIB,
    ) as front:
        code = main(["audit", f"docker://{front.address}/app/big:v1", "--no-cache"])
        out, err = capsys.readouterr()
        gets = [r for r in front.requests if r.path.endswith(layer.digest)]
    assert code == 3
    assert out == ""
    assert err.count("\n") == 1
    assert re.fullmatch(
        # 2 MiB: the two whole 1 MiB reads before the first reset; every later attempt is
        # reset inside the 2 MiB it skips
        f"pinguard: error: reading blob {layer.digest} of {front.address}/app/big failed "
        r"after 2097152 bytes \(5 attempts\): ProtocolError: ConnectionResetError "
        r"\(Connection reset by peer\)\n",
        err,
    ), err
    assert len(gets) == 5  # the first attempt and max_retries (4) more


def test_reset_while_skipping_is_one_more_attempt(registry: RegistryServer, big: Layout) -> None:
    """A reset inside the bytes an attempt skips is retried like any other: after two
    resets (the second one before the bytes already delivered) the blob arrives whole."""
    layer = _layer_ref(big)
    with HTTPFront(
        registry.address,
        break_blobs=2,
        break_mode="reset",
        break_path=lambda path: path.endswith(layer.digest),
        break_after=lambda n: 5 * MIB // 2 if n == 0 else MIB,
    ) as front:
        source = RegistrySource(f"{front.address}/app/big:v1", SourceOptions(max_retries=2))
        with source.open_blob(layer) as stream:
            assert stream.read() == big.images[0].layers[0][1]
        assert len([r for r in front.requests if r.path.endswith(layer.digest)]) == 3


def test_stall_mid_blob_is_a_read_timeout(registry: RegistryServer, images: Images) -> None:
    digest, blob = images.single.images[0].layers[1]
    with HTTPFront(registry.address, stall=lambda path: path.endswith(digest)) as front:
        source = RegistrySource(
            f"{front.address}/app/single:v1", SourceOptions(max_retries=1, timeout=0.5)
        )
        with pytest.raises(SourceError) as info, source.open_blob(LayerRef(digest, len(blob))) as s:
            s.read()
        assert front.stalled == 2
    _one_line(
        info.value,
        f"reading blob {digest} of {front.address}/app/single failed after 0 bytes "
        "(2 attempts): ReadTimeoutError: TimeoutError (timed out)",
    )


def test_one_byte_past_the_size_then_a_stall_is_refused_at_once(
    registry: RegistryServer, images: Images
) -> None:
    """Issue 22: the layer, one byte more, then nothing (the front promised 1000 bytes more
    and hangs). Reading stops at size + 1 and refuses the blob; had it waited for the
    rest, the read timeout would have ended it with a different error."""
    digest = images.single.images[0].layers[1][0]
    with HTTPFront(registry.address, overrun=lambda path: path.endswith(digest)) as front:
        options = AuditOptions(source=SourceOptions(max_retries=0, timeout=5.0))
        with pytest.raises(BlobVerificationError) as info:
            audit_image(f"docker://{front.address}/app/single:v1", options=options)
        assert front.stalled == 1
    size = len(images.single.images[0].layers[1][1])
    _one_line(info.value, f"blob {digest} of layer 2 is larger than its declared size {size}")


# --- requests that fail: raw answers, refusals, timeouts, proxies, TLS -------------------------

CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"


def _redirect(location: bytes) -> RawAnswer:
    return RawAnswer(
        b"HTTP/1.1 307 Temporary Redirect\r\nLocation: " + location + b"\r\n"
        b"Content-Length: 0\r\nConnection: close\r\n\r\n"
    )


RAW_FAULTS = {
    "closed before answering": (RawAnswer(b""), "ConnectionError: RemoteDisconnected"),
    "reset before answering": (
        RawAnswer(b"", then="reset"),
        "ConnectionError: ConnectionResetError (Connection reset by peer)",
    ),
    "bad status line": (
        RawAnswer(b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n"),
        "failed after 2 attempts: ConnectionError: BadStatusLine",
    ),
    "header line too long": (
        RawAnswer(b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 70000 + b"\r\n\r\n"),
        "ConnectionError: LineTooLong",
    ),
    "too many headers": (
        RawAnswer(b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(101))),
        "ConnectionError: HTTPException",
    ),
    "invalid chunk length": (
        RawAnswer(CHUNKED + b"zz\r\n"),
        "failed after 0 bytes: ChunkedEncodingError: InvalidChunkLength",
    ),
    "body cut short": (
        RawAnswer(b'HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n{"schemaVersion"'),
        "failed after 0 bytes: ChunkedEncodingError: IncompleteRead",
    ),
    "gzip body that is not gzip": (
        RawAnswer(
            b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 9\r\n\r\nnot gzip!"
        ),
        "ContentDecodingError: zlib.error",
    ),
    "no answer": (RawAnswer(b"", then="hang"), "ReadTimeout: TimeoutError (timed out)"),
    "redirect loop": (
        _redirect(b"/v2/app/single/manifests/v1"),
        "too many redirects (more than 10)",
    ),
    "redirect to an invalid URL": (_redirect(b"http://[::1/x"), "not a valid URL"),
    "redirect to ftp": (_redirect(b"ftp://127.0.0.1/x"), "failed: InvalidSchema"),
    "redirect to no host": (_redirect(b"https:///v2/x"), "failed: InvalidURL"),
}


@pytest.mark.parametrize("fault", sorted(RAW_FAULTS))
def test_raw_answer_faults_are_one_line(registry: RegistryServer, fault: str) -> None:
    answer, expected = RAW_FAULTS[fault]
    options = SourceOptions(max_retries=1, timeout=0.5 if answer.then == "hang" else 2.0)
    with HTTPFront(
        registry.address, raw=lambda method, path: answer if "/manifests/" in path else None
    ) as front:
        message = _resolve_error(front.address, options)
    assert expected in message


def test_raw_fault_in_a_blob_stream_is_one_line(registry: RegistryServer, images: Images) -> None:
    """A chunked blob answer with a broken chunk length, read through the blob stream."""
    digest, blob = images.single.images[0].layers[1]
    answer = RawAnswer(CHUNKED + b"5\r\nabcde\r\nzz\r\n")
    with HTTPFront(
        registry.address, raw=lambda method, path: answer if path.endswith(digest) else None
    ) as front:
        source = RegistrySource(f"{front.address}/app/single:v1", FAST)
        with pytest.raises(SourceError) as info, source.open_blob(LayerRef(digest, len(blob))) as s:
            s.read()
    _one_line(
        info.value,
        f"reading blob {digest} of {front.address}/app/single failed after ",
        "(2 attempts): ProtocolError: IncompleteRead",
    )


def test_connection_refused(registry: RegistryServer) -> None:
    front = HTTPFront(registry.address)
    front.stop()  # nothing listens on its port any more
    message = _resolve_error(front.address)
    assert f"could not reach {front.address}: connection refused (after 2 attempts)" in message


def test_connect_timeout() -> None:
    with full_listener() as address:
        message = _resolve_error(address, SourceOptions(max_retries=0, timeout=0.5))
    assert f"could not reach {address}: connection timed out (after 1 attempt)" in message


def test_dead_proxy(registry: RegistryServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """requests takes proxies from the environment: a proxy that refuses is a ProxyError."""
    proxy = HTTPFront(registry.address)
    proxy.stop()
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("http_proxy", proxy.url)
    message = _resolve_error(registry.address)
    assert "ProxyError: ConnectionRefusedError (Connection refused)" in message


def test_tls_to_a_plain_http_registry(registry: RegistryServer) -> None:
    with HTTPFront(registry.address) as front:
        message = _resolve_error(front.address, https=True)
    assert "failed after 2 attempts: SSLError: SSLError (" in message


def test_tls_certificate_nobody_trusts(registry: RegistryServer, tmp_path: Path) -> None:
    context, _cert = tls_context(tmp_path)
    with HTTPFront(registry.address) as front:
        front.httpd.socket = context.wrap_socket(front.httpd.socket, server_side=True)
        message = _resolve_error(front.address, https=True)
    assert "SSLError: SSLCertVerificationError (self" in message  # "self-signed certificate"


# --- the whole exception trees ---------------------------------------------------------------


def _tree(module: ModuleType) -> list[type[BaseException]]:
    """Every exception class a module defines (its warnings are never raised)."""
    return [
        cls
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if issubclass(cls, BaseException)
        and not issubclass(cls, Warning)
        and cls.__module__ == module.__name__
    ]


TREE = [
    *_tree(requests.exceptions),
    *_tree(urllib3.exceptions),
    *_tree(http.client),
]


def test_the_trees_are_enumerated() -> None:
    """The table below is every class, not a hand-picked few."""
    names = {cls.__name__ for cls in TREE}
    assert len(TREE) > 50
    assert {"ChunkedEncodingError", "ProtocolError", "InvalidChunkLength", "LineTooLong"} <= names


@pytest.mark.parametrize("cls", TREE, ids=lambda cls: f"{cls.__module__}.{cls.__name__}")
def test_every_class_is_a_transport_error_with_a_one_line_reason(
    cls: type[BaseException],
) -> None:
    """Each class is caught where the registry sends a request or reads a body, and its
    reason is one line starting with the class name."""
    exc = cls.__new__(cls)
    BaseException.__init__(exc, "x")
    assert isinstance(exc, TRANSPORT_ERRORS)
    reason = transport_reason(exc)
    assert reason.startswith(cls.__name__)
    assert "\n" not in reason


def test_reason_follows_the_chain_and_never_shows_a_url() -> None:
    """requests' ConnectionError(MaxRetryError(reason=NewConnectionError from
    ConnectionRefusedError)), as requests builds it for a refused connection, with a
    pre-signed URL: the reason names the root cause and leaves the URL out."""
    refused = ConnectionRefusedError(111, "Connection refused")
    new_conn = urllib3.exceptions.NewConnectionError(None, "Failed to establish: x")  # type: ignore[arg-type]
    new_conn.__cause__ = refused
    url = "https://bucket.example/blob?X-Amz-Signature=s3cr3t"
    wrapped = requests.ConnectionError(
        urllib3.exceptions.MaxRetryError(None, url, reason=new_conn)  # type: ignore[arg-type]
    )
    reason = transport_reason(wrapped)
    assert reason == "ConnectionError: ConnectionRefusedError (Connection refused)"
    assert "s3cr3t" not in reason
