"""The Redis backend of the shared layer cache: entry bytes under ``pinguard::layer::<name>``.

Like trivy's ``fanal::blob::<key>``, one Redis string per layer analysis, named by the layer
digest and the full cache key (``pinguard.cache.verified.entry_name``), written with ``SET
... EX ttl`` when a TTL is set. An in-flight claim on a layer is ``SET
pinguard::inflight::<name> TOKEN NX PX ttl``, extended and dropped by small scripts that act
only while TOKEN still holds it. ``redis://`` is plain TCP, ``rediss://`` TLS (a CA bundle,
and a client certificate and key for mutual TLS); AUTH takes the password from the URL or
from ``$PINGUARD_CACHE_PASSWORD``. Short connect and read timeouts: a cache that is down
must cost an audit seconds, not minutes. Every Redis error becomes ``CacheUnavailable``, and
so does redis-py not being installed (pinguard without the ``fleet`` extra): the audit notes
it and goes on without the shared cache. The client is made on first use and dropped when
pickled (the pipeline's worker processes).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pinguard.cache.interface import CacheUnavailable

PREFIX = "pinguard::layer::"
LOCK_PREFIX = "pinguard::inflight::"
# drop or extend a claim only while it is still ours (another audit may hold it by now)
_UNLOCK = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
)
_REFRESH = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0"
)
PASSWORD_ENV = "PINGUARD_CACHE_PASSWORD"
CONNECT_TIMEOUT = 2.0
READ_TIMEOUT = 10.0


class RedisBackend:
    """Entries in Redis at ``url``."""

    def __init__(
        self,
        url: str,
        *,
        ttl: int = 0,
        tls_ca: Path | None = None,
        tls_cert: Path | None = None,
        tls_key: Path | None = None,
    ) -> None:
        self.url = url
        self.ttl = ttl
        self.tls_ca = tls_ca
        self.tls_cert = tls_cert
        self.tls_key = tls_key
        self._client: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def describe(self) -> str:
        """The URL without any password."""
        parts = urlsplit(self.url)
        host = parts.hostname or ""
        netloc = f"{host}:{parts.port}" if parts.port else host
        return urlunsplit((parts.scheme, netloc, parts.path, "", ""))

    def client(self) -> Any:
        if self._client is None:
            redis = _redis()
            kwargs: dict[str, Any] = {
                "socket_connect_timeout": CONNECT_TIMEOUT,
                "socket_timeout": READ_TIMEOUT,
            }
            if PASSWORD_ENV in os.environ and not urlsplit(self.url).password:
                kwargs["password"] = os.environ[PASSWORD_ENV]
            if self.url.startswith("rediss://"):
                if self.tls_ca is not None:
                    kwargs["ssl_ca_certs"] = str(self.tls_ca)
                if self.tls_cert is not None:
                    kwargs["ssl_certfile"] = str(self.tls_cert)
                if self.tls_key is not None:
                    kwargs["ssl_keyfile"] = str(self.tls_key)
            self._client = redis.Redis.from_url(self.url, **kwargs)
        return self._client

    def load(self, name: str) -> bytes | None:
        value = self._call("get", PREFIX + name)
        return bytes(value) if value is not None else None

    def save(self, name: str, data: bytes) -> None:
        self._call("set", PREFIX + name, data, ex=self.ttl or None)

    def lock(self, name: str, token: str, ttl_ms: int) -> bool:
        return bool(self._call("set", LOCK_PREFIX + name, token, nx=True, px=ttl_ms))

    def refresh(self, name: str, token: str, ttl_ms: int) -> bool:
        return bool(self._call("eval", _REFRESH, 1, LOCK_PREFIX + name, token, ttl_ms))

    def unlock(self, name: str, token: str) -> None:
        self._call("eval", _UNLOCK, 1, LOCK_PREFIX + name, token)

    def locked(self, name: str) -> bool:
        return bool(self._call("exists", LOCK_PREFIX + name))

    def _call(self, command: str, *args: Any, **kwargs: Any) -> Any:
        client = self.client()
        try:
            return getattr(client, command)(*args, **kwargs)
        except (_redis().RedisError, OSError) as exc:
            raise CacheUnavailable(f"{type(exc).__name__}: {exc}") from None


def _redis() -> Any:
    """The ``redis`` module; ``CacheUnavailable`` saying what to install when it is not."""
    try:
        import redis
    except ImportError:
        raise CacheUnavailable("redis-py is not installed: pip install 'pinguard[fleet]'") from None
    return redis
