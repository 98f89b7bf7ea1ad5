"""A real ``redis-server`` for tests: 127.0.0.1, an ephemeral port, its own directory.

``start_redis(workdir, password=...)`` writes a config (no persistence, ``maxmemory-policy
noeviction`` as a Celery broker needs, ``requirepass`` when a password is given) and waits
until the server answers PING. ``RedisServer.stop()`` ends it (SIGTERM, then SIGKILL) and
``restart()`` starts it again on the same port, for the cache-down and restarted faults;
``AOFRedis`` persists every write to its append-only file, as a broker should run, and
``kill9()`` SIGKILLs it (a broker lost and restarted).
``tls_files(dir)`` makes a CA and a server certificate for 127.0.0.1 with ``openssl``;
given as ``tls``, the server listens with TLS only (``tls-port``), and with
``tls_clients=True`` demands a client certificate signed by that CA.
Under ``CI=true`` a missing ``redis-server`` fails the test (``require_tool``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.infra.registry import free_port
from tests.infra.tools import require_tool


@dataclass
class RedisServer:
    """A running ``redis-server``; ``url`` is ``redis://[:PASSWORD@]127.0.0.1:PORT/0``."""

    port: int
    workdir: Path
    password: str | None
    process: subprocess.Popen[bytes] | None = None
    tls: TLSFiles | None = None
    tls_clients: bool = False
    # redis-server options after the config file, as a command line gives them (they win)
    extra_args: tuple[str, ...] = ()

    def url(self, db: int = 0, *, with_password: bool = True) -> str:
        auth = f":{self.password}@" if self.password and with_password else ""
        scheme = "rediss" if self.tls else "redis"
        return f"{scheme}://{auth}127.0.0.1:{self.port}/{db}"

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
        if self.tls is not None:
            lines[1] = "port 0"
            lines += [
                f"tls-port {self.port}",
                f"tls-cert-file {self.tls.server_cert}",
                f"tls-key-file {self.tls.server_key}",
                f"tls-ca-cert-file {self.tls.ca}",
                f"tls-auth-clients {'yes' if self.tls_clients else 'no'}",
            ]
        path = self.workdir / "redis.conf"
        path.write_text("\n".join(lines) + "\n")
        return path

    def start(self) -> None:
        binary = require_tool("redis-server")
        self.process = subprocess.Popen(
            [binary, str(self._config()), *self.extra_args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
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
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as raw:
                sock = raw
                if self.tls is not None:
                    context = ssl.create_default_context(cafile=str(self.tls.ca))
                    if self.tls_clients:
                        context.load_cert_chain(self.tls.client_cert, self.tls.client_key)
                    sock = context.wrap_socket(raw, server_hostname="127.0.0.1")
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


@dataclass(frozen=True)
class TLSFiles:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, all PEM."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def tls_files(directory: Path) -> TLSFiles:
    """Make a throwaway CA and certificates with ``openssl`` (EC P-256, one day)."""
    openssl = require_tool("openssl")
    directory.mkdir(parents=True, exist_ok=True)

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], check=True, capture_output=True, cwd=directory)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1"]
    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-subj", "/CN=test CA")
    for name, ext in (("server", "subjectAltName=IP:127.0.0.1"), ("client", "")):
        run(
            "req", *ec[:-2], "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}"
        )
        extfile = directory / f"{name}.ext"
        extfile.write_text(ext + "\n" if ext else "basicConstraints=CA:FALSE\n")
        run(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-out",
            f"{name}.pem",
            "-extfile",
            str(extfile),
        )
    return TLSFiles(
        ca=directory / "ca.pem",
        server_cert=directory / "server.pem",
        server_key=directory / "server.key",
        client_cert=directory / "client.pem",
        client_key=directory / "client.key",
    )


def start_redis(
    workdir: Path,
    *,
    password: str | None = None,
    tls: TLSFiles | None = None,
    tls_clients: bool = False,
    extra_args: Sequence[str] = (),
) -> RedisServer:
    """Start ``redis-server`` on 127.0.0.1 (ephemeral port) in ``workdir``; ``extra_args``
    follow the config file on its command line (a compose file's ``command``, say)."""
    workdir.mkdir(parents=True, exist_ok=True)
    last: Exception | None = None
    for _attempt in range(3):  # the port may be taken between free_port() and bind
        server = RedisServer(
            port=free_port(),
            workdir=workdir,
            password=password,
            tls=tls,
            tls_clients=tls_clients,
            extra_args=tuple(extra_args),
        )
        try:
            server.start()
        except RuntimeError as exc:
            server.stop()
            last = exc
            continue
        return server
    raise RuntimeError(str(last))


@contextlib.contextmanager
def running_redis(workdir: Path, **kwargs: Any) -> Iterator[RedisServer]:
    """``with running_redis(tmp) as r:`` — start_redis, stopped on exit."""
    server = start_redis(workdir, **kwargs)
    try:
        yield server
    finally:
        server.stop()


@dataclass
class AOFRedis(RedisServer):
    """A ``redis-server`` that persists every write to its append-only file (fsync every
    second, Redis's default), as a broker should run, and can be killed with SIGKILL."""

    def _config(self) -> Path:
        path = super()._config()
        text = path.read_text().replace("appendonly no", "appendonly yes\nappendfsync everysec")
        path.write_text(text)
        return path

    def kill9(self) -> None:
        assert self.process is not None
        assert self.process.poll() is None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)
