"""A package index on 127.0.0.1 serving a directory of wheels, for pip and uv alike.

:func:`serve_index` starts a threaded ``http.server`` on an ephemeral loopback port that
answers the PEP 503 simple API (``/simple/`` and ``/simple/<project>/``, with ``#sha256=``
fragments and ``data-requires-python``), the PEP 691 JSON form of the same pages when the
client asks for ``application/vnd.pypi.simple.v1+json`` (uv does), and PEP 658/714 core
metadata next to each file (``/files/<wheel>.metadata``, advertised with both
``data-dist-info-metadata`` and ``data-core-metadata``). Pages are computed per request from
the directory, so wheels added while the server runs show up at once. Every request path is
recorded in :attr:`IndexServer.requests`, so a test can prove a build really used the index.
"""

from __future__ import annotations

import hashlib
import html
import json
import threading
import urllib.parse
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.parser import HeaderParser
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from packaging.utils import canonicalize_name, parse_wheel_filename

from tests.infra.wheels import core_metadata

JSON_TYPE = "application/vnd.pypi.simple.v1+json"
HTML_TYPE = "application/vnd.pypi.simple.v1+html"


@dataclass(frozen=True)
class _FileInfo:
    filename: str
    sha256: str
    metadata_sha256: str
    requires_python: str | None
    size: int


@dataclass
class IndexServer:
    """A running index: ``url`` is the simple root to give ``--index-url``."""

    directory: Path
    host: str
    port: int
    requests: list[str] = field(default_factory=list)

    @property
    def root(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT/simple`` (no trailing slash; pip and uv accept both)."""
        return f"{self.root}/simple"

    def requested(self, fragment: str) -> bool:
        """True when some request path so far contains ``fragment``."""
        return any(fragment in path for path in list(self.requests))


class _Catalog:
    """Hashes and metadata of the wheels in a directory, cached by (name, mtime, size)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._cache: dict[tuple[str, int, int], _FileInfo] = {}
        self._lock = threading.Lock()

    def files(self) -> dict[str, list[_FileInfo]]:
        projects: dict[str, list[_FileInfo]] = {}
        for path in sorted(self.directory.glob("*.whl")):
            try:
                name = parse_wheel_filename(path.name)[0]
            except ValueError:
                continue
            projects.setdefault(str(name), []).append(self._info(path))
        return projects

    def _info(self, path: Path) -> _FileInfo:
        st = path.stat()
        key = (path.name, st.st_mtime_ns, st.st_size)
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None:
            return cached
        data = path.read_bytes()
        meta = core_metadata(path)
        requires_python = HeaderParser().parsestr(meta.decode("utf-8")).get("Requires-Python")
        info = _FileInfo(
            filename=path.name,
            sha256=hashlib.sha256(data).hexdigest(),
            metadata_sha256=hashlib.sha256(meta).hexdigest(),
            requires_python=requires_python,
            size=len(data),
        )
        with self._lock:
            self._cache[key] = info
        return info


def _handler(catalog: _Catalog, server_state: IndexServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            """Stay quiet; the request log lives in ``IndexServer.requests``."""

        def do_HEAD(self) -> None:
            self._serve(head=True)

        def do_GET(self) -> None:
            self._serve(head=False)

        def _wants_json(self) -> bool:
            accept = self.headers.get("Accept", "")
            return JSON_TYPE in accept and (
                HTML_TYPE not in accept or accept.index(JSON_TYPE) < accept.index(HTML_TYPE)
            )

        def _send(self, status: int, body: bytes, ctype: str, head: bool) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            if not head:
                self.wfile.write(body)

        def _serve(self, head: bool) -> None:
            path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
            server_state.requests.append(path)
            parts = [p for p in path.split("/") if p]
            if parts in ([], ["simple"]):
                if parts == [] or not path.endswith("/"):
                    self._redirect("/simple/", head)
                    return
                self._root_page(head)
            elif len(parts) == 2 and parts[0] == "simple":
                if not path.endswith("/"):
                    self._redirect(f"/simple/{parts[1]}/", head)
                    return
                self._project_page(parts[1], head)
            elif len(parts) == 2 and parts[0] == "files":
                self._file(parts[1], head)
            else:
                self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain", head)

        def _redirect(self, location: str, head: bool) -> None:
            self.send_response(HTTPStatus.MOVED_PERMANENTLY)
            self.send_header("Location", location)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _root_page(self, head: bool) -> None:
            names = sorted(catalog.files())
            if self._wants_json():
                doc = {"meta": {"api-version": "1.1"}, "projects": [{"name": n} for n in names]}
                self._send(HTTPStatus.OK, json.dumps(doc).encode(), JSON_TYPE, head)
                return
            links = "".join(f'<a href="/simple/{n}/">{n}</a>\n' for n in names)
            body = _page("Simple index", links)
            self._send(HTTPStatus.OK, body, "text/html; charset=utf-8", head)

        def _project_page(self, raw_name: str, head: bool) -> None:
            name = canonicalize_name(raw_name)
            if name != raw_name:
                self._redirect(f"/simple/{name}/", head)
                return
            files = catalog.files().get(name)
            if files is None:
                self._send(HTTPStatus.NOT_FOUND, b"no such project\n", "text/plain", head)
                return
            if self._wants_json():
                doc = {
                    "meta": {"api-version": "1.1"},
                    "name": name,
                    "versions": sorted({str(parse_wheel_filename(f.filename)[1]) for f in files}),
                    "files": [
                        {
                            "filename": f.filename,
                            "url": f"/files/{urllib.parse.quote(f.filename)}",
                            "hashes": {"sha256": f.sha256},
                            "requires-python": f.requires_python,
                            "size": f.size,
                            # Only the PEP 714 key: pip 23.0 (Debian bookworm) crashes on
                            # a dict under the old "dist-info-metadata" key.
                            "core-metadata": {"sha256": f.metadata_sha256},
                        }
                        for f in files
                    ],
                }
                self._send(HTTPStatus.OK, json.dumps(doc).encode(), JSON_TYPE, head)
                return
            links = []
            for f in files:
                href = f"/files/{urllib.parse.quote(f.filename)}#sha256={f.sha256}"
                attrs = [
                    f'href="{html.escape(href)}"',
                    f'data-dist-info-metadata="sha256={f.metadata_sha256}"',
                    f'data-core-metadata="sha256={f.metadata_sha256}"',
                ]
                if f.requires_python:
                    attrs.append(f'data-requires-python="{html.escape(f.requires_python)}"')
                links.append(f"<a {' '.join(attrs)}>{html.escape(f.filename)}</a>\n")
            body = _page(f"Links for {name}", "".join(links))
            self._send(HTTPStatus.OK, body, "text/html; charset=utf-8", head)

        def _file(self, filename: str, head: bool) -> None:
            wheel_name = filename.removesuffix(".metadata")
            path = catalog.directory / wheel_name
            if "/" in wheel_name or not wheel_name.endswith(".whl") or not path.is_file():
                self._send(HTTPStatus.NOT_FOUND, b"no such file\n", "text/plain", head)
                return
            if filename.endswith(".metadata"):
                try:
                    body = core_metadata(path)
                except (zipfile.BadZipFile, ValueError):
                    self._send(HTTPStatus.NOT_FOUND, b"no metadata\n", "text/plain", head)
                    return
                self._send(HTTPStatus.OK, body, "application/octet-stream", head)
                return
            self._send(HTTPStatus.OK, path.read_bytes(), "application/octet-stream", head)

    return Handler


def _page(title: str, body: str) -> bytes:
    return (
        "<!DOCTYPE html>\n<html>\n<head>\n"
        '<meta name="pypi:repository-version" content="1.1">\n'
        f"<title>{html.escape(title)}</title>\n</head>\n<body>\n{body}</body>\n</html>\n"
    ).encode()


@contextmanager
def serve_index(directory: Path, host: str = "127.0.0.1") -> Iterator[IndexServer]:
    """Serve the wheels in ``directory`` until the block ends; yields the running index."""
    directory.mkdir(parents=True, exist_ok=True)
    state = IndexServer(directory=directory, host=host, port=0)
    httpd = ThreadingHTTPServer((host, 0), _handler(_Catalog(directory), state))
    httpd.daemon_threads = True
    state.port = int(httpd.server_address[1])
    thread = threading.Thread(target=httpd.serve_forever, name=f"index:{state.port}", daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)
