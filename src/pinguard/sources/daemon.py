"""``docker-daemon:REF``: an image held by a Docker Engine API daemon (docker or podman).

The daemon is reached at ``SourceOptions.docker_host``, else ``$DOCKER_HOST``, else
``unix:///var/run/docker.sock`` (``unix://`` sockets and ``tcp://``/``http://`` hosts), with a
small HTTP/1.1 client built on ``http.client`` and ``socket``. ``resolve()`` needs no export:
the diff ids and platform come from ``GET /images/{name}/json`` and the history from podman's
``/libpod/images/{name}/json`` (exact OCI history with ``empty_layer``) or, on docker, from
``GET /images/{name}/history``, where ``empty_layer`` is inferred from sizes and instructions.
Blobs exist only inside ``GET /images/{name}/get``, a ``docker save`` tar that is streamed once
and never written to disk: ``iter_blobs`` walks it sequentially and yields each wanted layer
as it passes, in archive order. Layers there are uncompressed, so a layer's digest is its diff
id and its size is unknown until read. Legacy exports that name layers ``<v1id>/layer.tar``
are hashed on a first pass and read on a second one.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import http.client
import io
import json
import os
import re
import socket
import tarfile
import urllib.parse
from collections.abc import Iterator, Sequence
from typing import Any, BinaryIO

from pinguard.errors import AuthError, ImageNotFound, InvalidReference, LayerError, SourceError
from pinguard.sources import manifest as mf
from pinguard.sources.interface import ImageSource, LayerRef, ResolvedImage, SourceOptions
from pinguard.sources.tarindex import normalize_member_name

DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"
_STREAM_BUFSIZE = 1 << 20
_NAMED_LAYER = re.compile(r"(?:blobs/sha256/([0-9a-f]{64}))|(?:([0-9a-f]{64})\.tar)")
_LEGACY_LAYER = re.compile(r"[^/]+/layer\.tar")
# Dockerfile instructions that change only the config, never the filesystem.
_METADATA_ONLY = re.compile(
    r"^(?:/bin/sh -c #\(nop\)\s*)?(?:ENV|LABEL|CMD|ENTRYPOINT|EXPOSE|USER|ARG|VOLUME|"
    r"STOPSIGNAL|HEALTHCHECK|SHELL|ONBUILD|MAINTAINER)\b",
    re.IGNORECASE,
)


class DaemonUnavailable(SourceError):
    """No daemon answers at the configured host."""


def docker_host(options: SourceOptions) -> str:
    """The daemon address in effect: options, then ``$DOCKER_HOST``, then the default socket."""
    return options.docker_host or os.environ.get("DOCKER_HOST") or DEFAULT_DOCKER_HOST


def unix_socket_path(host: str) -> str | None:
    """The socket path of a ``unix://`` host, else None."""
    return host[len("unix://") :] if host.startswith("unix://") else None


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._socket_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


class DaemonClient:
    """A minimal Docker Engine API client: one connection per request, no dependencies."""

    def __init__(self, host: str, timeout: float = 60.0) -> None:
        self.host = host
        self.timeout = timeout
        path = unix_socket_path(host)
        if path is not None:
            if not path:
                raise InvalidReference(f"invalid docker host {host!r}")
            self._unix: str | None = path
            self._netloc = ""
        else:
            parsed = urllib.parse.urlsplit(host)
            if parsed.scheme not in ("tcp", "http") or not parsed.netloc:
                raise InvalidReference(
                    f"unsupported docker host {host!r} (use unix://PATH or tcp://HOST:PORT)"
                )
            self._unix = None
            self._netloc = parsed.netloc

    def _connection(self) -> http.client.HTTPConnection:
        if self._unix is not None:
            return _UnixHTTPConnection(self._unix, self.timeout)
        return http.client.HTTPConnection(self._netloc, timeout=self.timeout)

    def request(self, path: str, what: str) -> http.client.HTTPResponse:
        """GET ``path``; return the open response on 2xx, else raise the mapped error."""
        conn = self._connection()
        try:
            conn.request("GET", path, headers={"Accept": "application/json"})
            response = conn.getresponse()
        except OSError as exc:
            conn.close()
            why = exc.strerror or str(exc) or type(exc).__name__
            raise DaemonUnavailable(
                f"could not reach the Docker daemon at {self.host!r}: {why}"
            ) from exc
        except http.client.HTTPException as exc:
            conn.close()
            raise SourceError(f"bad reply from the Docker daemon at {self.host!r}: {exc}") from exc
        if response.status < 300:
            return response
        try:
            body = response.read(64 << 10)
        finally:
            conn.close()
        message = _error_message(body) or response.reason
        if response.status == 404:
            raise ImageNotFound(f"{what}: {message}")
        if response.status in (401, 403):
            raise AuthError(f"{what}: the daemon refused access: {message}")
        raise SourceError(f"{what}: daemon answered {response.status}: {message}")

    def get_json(self, path: str, what: str) -> tuple[Any, http.client.HTTPResponse]:
        response = self.request(path, what)
        try:
            data = response.read()
        except (OSError, http.client.HTTPException) as exc:
            raise SourceError(f"{what}: reading the daemon's reply failed: {exc}") from exc
        finally:
            response.close()
        try:
            return json.loads(data), response
        except ValueError as exc:
            raise SourceError(f"{what}: the daemon's reply is not JSON: {exc}") from exc


def _error_message(body: bytes) -> str:
    try:
        doc = json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace").strip()[:500]
    if isinstance(doc, dict) and isinstance(doc.get("message"), str):
        return str(doc["message"])
    return ""


def _iso(created: Any) -> str | None:
    if isinstance(created, (int, float)) and created > 0:
        moment = _dt.datetime.fromtimestamp(created, tz=_dt.timezone.utc)
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    return created if isinstance(created, str) else None


def history_from_docker(
    entries: Sequence[Any], layer_count: int
) -> tuple[list[dict[str, Any]], bool]:
    """OCI history (oldest first) from ``/images/{name}/history`` (newest first).

    ``empty_layer`` is not in that API, so it is inferred: a zero-size entry is empty, or
    failing a count that matches the layers, a metadata-only instruction is. Returns the
    history and whether the inference matched the number of layers.
    """
    rows = [e for e in reversed(entries) if isinstance(e, dict)]

    def created_by(row: dict[str, Any]) -> str:
        value = row.get("CreatedBy")
        return value if isinstance(value, str) else ""

    by_size = [row.get("Size") == 0 for row in rows]
    by_instruction = [bool(_METADATA_ONLY.match(created_by(row).strip())) for row in rows]
    both = [s and i for s, i in zip(by_size, by_instruction, strict=True)]
    matched = True
    for guess in (by_size, by_instruction, both):
        if sum(not e for e in guess) == layer_count:
            empty = guess
            break
    else:
        matched = False
        empty = by_size
    history: list[dict[str, Any]] = []
    for row, is_empty in zip(rows, empty, strict=True):
        item: dict[str, Any] = {"created_by": created_by(row)}
        created = _iso(row.get("Created"))
        if created:
            item["created"] = created
        if isinstance(row.get("Comment"), str) and row["Comment"]:
            item["comment"] = row["Comment"]
        if is_empty:
            item["empty_layer"] = True
        history.append(item)
    return history, matched


class _ExportStream(io.RawIOBase):
    """One member of a running export, closing the export when closed (for ``open_blob``)."""

    def __init__(self, stream: BinaryIO, generator: Iterator[tuple[LayerRef, BinaryIO]]) -> None:
        super().__init__()
        self._stream = stream
        self._generator = generator

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        view = memoryview(buffer)
        data = self._stream.read(len(view))
        view[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._generator.close()  # type: ignore[attr-defined]
        super().close()


class DaemonSource(ImageSource):
    """An image in a Docker Engine API daemon (``docker-daemon:REF``)."""

    transport = "docker-daemon"
    parallel_safe = False

    def __init__(
        self,
        ref: str,
        options: SourceOptions | None = None,
        *,
        notes: Sequence[str] = (),
        display: str | None = None,
    ) -> None:
        if not ref or ref != ref.strip() or any(c in ref for c in "\x00\n\r\t ?#"):
            raise InvalidReference(f"invalid docker-daemon reference {'docker-daemon:' + ref!r}")
        self.options = options or SourceOptions()
        self.name = ref
        self.reference = display or f"{self.transport}:{ref}"
        self.client = DaemonClient(docker_host(self.options), self.options.timeout)
        self._quoted = urllib.parse.quote(ref, safe="/:@")
        self._notes = tuple(notes)
        self._libpod = False
        self._legacy_names: dict[str, str] = {}

    def inspect(self) -> dict[str, Any]:
        """``GET /images/{name}/json``; raises ``ImageNotFound`` when the daemon lacks it."""
        info, response = self.client.get_json(f"/images/{self._quoted}/json", self.reference)
        if not isinstance(info, dict):
            raise SourceError(f"{self.reference}: the daemon's image inspect is not an object")
        self._libpod = response.getheader("Libpod-Api-Version") is not None
        return info

    def _history(self, layer_count: int) -> tuple[list[dict[str, Any]], list[str]]:
        if self._libpod:
            try:
                doc, _ = self.client.get_json(f"/libpod/images/{self._quoted}/json", self.reference)
            except SourceError:
                doc = None
            history = doc.get("History") if isinstance(doc, dict) else None
            if isinstance(history, list) and all(isinstance(h, dict) for h in history):
                return history, []
        entries, _ = self.client.get_json(f"/images/{self._quoted}/history", self.reference)
        if not isinstance(entries, list):
            raise SourceError(f"{self.reference}: the daemon's image history is not a list")
        history, matched = history_from_docker(entries, layer_count)
        notes = (
            []
            if matched
            else ["daemon history could not be matched to the layers; empty_layer is a guess"]
        )
        return history, notes

    def resolve(self) -> ResolvedImage:
        info = self.inspect()
        rootfs = info.get("RootFS")
        layer_ids = rootfs.get("Layers") if isinstance(rootfs, dict) else None
        if layer_ids is None:
            raise SourceError(
                f"{self.reference}: the daemon's image inspect has no RootFS.Layers "
                "(an API too old to list layers); cannot tell which layers the image has"
            )
        if not isinstance(layer_ids, list) or not all(isinstance(x, str) for x in layer_ids):
            raise SourceError(f"{self.reference}: the daemon's RootFS.Layers is not a list")
        history, notes = self._history(len(layer_ids))
        config: dict[str, Any] = {
            "architecture": info.get("Architecture") or "",
            "os": info.get("Os") or "",
            "config": info.get("Config") if isinstance(info.get("Config"), dict) else {},
            "rootfs": {"type": "layers", "diff_ids": list(layer_ids)},
            "history": history,
        }
        if info.get("Variant"):
            config["variant"] = info["Variant"]
        for key, field in (("created", "Created"), ("author", "Author")):
            if isinstance(info.get(field), str) and info[field]:
                config[key] = info[field]
        platform = mf.check_single_platform(config, self.options.platform, self.reference)
        image_id = info.get("Id")
        if isinstance(image_id, str) and image_id:
            notes.append(f"image id {image_id if ':' in image_id else 'sha256:' + image_id}")
        return ResolvedImage(
            reference=self.reference,
            transport=self.transport,
            manifest_digest=None,
            platform=platform,
            config=config,
            layers=mf.layers_from_diff_ids(layer_ids),
            notes=self._notes + tuple(notes),
        )

    # -- blobs ---------------------------------------------------------------------------
    def _walk_export(
        self, pending: dict[str, LayerRef], legacy: dict[str, str] | None
    ) -> Iterator[tuple[LayerRef, BinaryIO]]:
        """One pass over the export. With ``legacy`` None, unnamed ``layer.tar`` members are
        hashed into ``self._legacy_names``; otherwise ``legacy`` maps member name -> digest."""
        response = self.client.request(f"/images/{self._quoted}/get", self.reference)
        try:
            buffered = io.BufferedReader(response, _STREAM_BUFSIZE)
            with tarfile.open(fileobj=buffered, mode="r|", bufsize=_STREAM_BUFSIZE) as tar:
                for member in tar:
                    if not pending:
                        break
                    if not member.isreg():
                        continue
                    name = normalize_member_name(member.name)
                    digest: str | None = None
                    if legacy is not None:
                        digest = legacy.get(name)
                    elif match := _NAMED_LAYER.fullmatch(name):
                        digest = "sha256:" + (match.group(1) or match.group(2))
                    elif _LEGACY_LAYER.fullmatch(name):
                        hasher = hashlib.sha256()
                        stream = tar.extractfile(member)
                        assert stream is not None
                        while chunk := stream.read(_STREAM_BUFSIZE):
                            hasher.update(chunk)
                        self._legacy_names[name] = "sha256:" + hasher.hexdigest()
                        continue
                    layer = pending.pop(digest, None) if digest else None
                    if layer is None:
                        continue
                    stream = tar.extractfile(member)
                    assert stream is not None
                    try:
                        yield layer, stream  # type: ignore[misc]
                    finally:
                        stream.close()
                    if not pending:
                        break
        except (tarfile.TarError, EOFError) as exc:
            raise LayerError(
                f"{self.reference}: the daemon's export is not a valid tar: {exc}"
            ) from exc
        except (OSError, http.client.HTTPException) as exc:
            raise SourceError(
                f"{self.reference}: reading the daemon's export failed: {exc}"
            ) from exc
        finally:
            response.close()

    def iter_blobs(self, layers: Sequence[LayerRef]) -> Iterator[tuple[LayerRef, BinaryIO]]:
        """Stream the export once, yielding each distinct wanted layer as it passes."""
        pending = {layer.digest: layer for layer in layers}
        self._legacy_names = {}
        yield from self._walk_export(pending, None)
        if pending and self._legacy_names:
            by_digest = {d: n for n, d in self._legacy_names.items() if d in pending}
            if by_digest:
                yield from self._walk_export(pending, {n: d for d, n in by_digest.items()})
        if pending:
            raise ImageNotFound(
                f"{self.reference}: the daemon's export has no layer " + ", ".join(sorted(pending))
            )

    def open_blob(self, layer: LayerRef) -> BinaryIO:
        """One layer, by running a whole export up to it (prefer ``iter_blobs``)."""
        generator = self.iter_blobs([layer])
        _, stream = next(generator)
        return io.BufferedReader(_ExportStream(stream, generator), _STREAM_BUFSIZE)
