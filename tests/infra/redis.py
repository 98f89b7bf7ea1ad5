"""A real ``redis-server`` for tests: 127.0.0.1, an ephemeral port, its own directory.

``start_redis(workdir, password=...)`` writes a config (no persistence, ``maxmemory-policy
noeviction`` as a Celery broker needs, ``requirepass`` when a password is given) and waits
until the server answers PING. ``RedisServer.stop()`` ends it (SIGTERM, then SIGKILL) and
``restart()`` starts it again on the same port, for the cache-down and restarted faults.
Under ``CI=true`` a missing ``redis-server`` fails the test (``require_tool``).
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.infra.registry import free_port
from tests.infra.tools import require_tool


@dataclass
class RedisServer:
    """A running ``redis-server``; ``url`` is ``redis://[:PASSWORD@]127.0.0.1:PORT/0``."""

    port: int
    workdir: Path
    password: str | None
    process: subprocess.Popen[bytes] | None = None

    def url(self, db: int = 0, *, with_password: bool = True) -> str:
        auth = f":{self.password}@" if self.password and with_password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/{db}"

    def _config(self) -> Path:
        lines = [
            "bind 127.0.0.1",
            f"port {self.port}",
            f"dir {self.workdir}",
            'save ""',
            "appendonly no",
            "maxmemory-policy noeviction",
            f"logfile {self.workdir / 'redis.log'}",
        ]
        if self.password:
            lines.append(f"requirepass {self.password}")
        path = self.workdir / "redis.conf"
        path.write_text("\n".join(lines) + "\n")
        return path

    def start(self) -> None:
        binary = require_tool("redis-server")
        self.process = subprocess.Popen(
            [binary, str(self._config())], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            if self._ping():
                return
            time.sleep(0.05)
        log = self.workdir / "redis.log"
        raise RuntimeError(f"redis-server did not start: {log.read_text() if log.exists() else ''}")

    def _ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                answer = sock.recv(64)
        except OSError:
            return False
        return answer.startswith((b"+PONG", b"-NOAUTH"))

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def restart(self) -> None:
        self.stop()
        self.start()


def start_redis(workdir: Path, *, password: str | None = None) -> RedisServer:
    """Start ``redis-server`` on 127.0.0.1 (ephemeral port) in ``workdir``."""
    workdir.mkdir(parents=True, exist_ok=True)
    last: Exception | None = None
    for _attempt in range(3):  # the port may be taken between free_port() and bind
        server = RedisServer(port=free_port(), workdir=workdir, password=password)
        try:
            server.start()
        except RuntimeError as exc:
            server.stop()
            last = exc
            continue
        return server
    raise RuntimeError(str(last))


@contextlib.contextmanager
def running_redis(workdir: Path, **kwargs: str | None) -> Iterator[RedisServer]:
    """``with running_redis(tmp) as r:`` — start_redis, stopped on exit."""
    server = start_redis(workdir, **kwargs)
    try:
        yield server
    finally:
        server.stop()
