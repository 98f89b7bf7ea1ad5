"""A Docker Engine API socket for the tests: ``podman system service`` on a private path.

:func:`podman_service` starts ``podman system service --time=0 unix:///DIR/podman.sock``,
waits until ``GET /_ping`` answers ``OK`` over the socket, yields a :class:`PodmanService`
whose ``docker_host`` is the ``unix://`` URL to put in ``$DOCKER_HOST`` (or
``SourceOptions.docker_host``), and stops the service afterwards. It serves the same
containers-storage that buildah writes, so images the tests build are visible through it.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


class PodmanServiceError(RuntimeError):
    """The API service did not start or did not answer."""


@dataclass(frozen=True)
class PodmanService:
    """A running API service."""

    socket_path: Path
    pid: int
    log_path: Path

    @property
    def docker_host(self) -> str:
        return f"unix://{self.socket_path}"

    def get(self, path: str, timeout: float = 30.0) -> tuple[int, bytes]:
        """``GET path`` over the socket; returns (status, body). For tests of the fixture."""
        return unix_http_get(self.socket_path, path, timeout=timeout)


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, socket_path: Path, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._socket_path = str(socket_path)

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._socket_path)
        self.sock = sock


def unix_http_get(socket_path: Path, path: str, timeout: float = 30.0) -> tuple[int, bytes]:
    """One HTTP/1.1 GET over a unix socket."""
    conn = _UnixConnection(socket_path, timeout)
    try:
        conn.request("GET", path, headers={"Host": "docker"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


@contextlib.contextmanager
def podman_service(workdir: Path, startup_timeout: float = 60.0) -> Iterator[PodmanService]:
    """Run the service with its socket and log under ``workdir`` until the block ends."""
    workdir.mkdir(parents=True, exist_ok=True)
    sock = workdir / "podman.sock"
    log_path = workdir / "podman-service.log"
    with contextlib.suppress(FileNotFoundError):
        sock.unlink()
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            ["podman", "system", "service", "--time=0", f"unix://{sock}"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + startup_timeout
        while True:
            if proc.poll() is not None:
                raise PodmanServiceError(
                    f"podman system service exited {proc.returncode}:\n"
                    + log_path.read_text(errors="replace")[-4000:]
                )
            if sock.exists():
                try:
                    status, body = unix_http_get(sock, "/_ping", timeout=5)
                    if status == 200 and body.strip() == b"OK":
                        break
                except OSError:
                    pass
            if time.monotonic() > deadline:
                raise PodmanServiceError(
                    f"podman service did not answer /_ping within {startup_timeout}s:\n"
                    + log_path.read_text(errors="replace")[-4000:]
                )
            time.sleep(0.1)
        yield PodmanService(socket_path=sock, pid=proc.pid, log_path=log_path)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=20)
        with contextlib.suppress(FileNotFoundError):
            sock.unlink()
