"""Authentication to a registry: credentials from a docker ``config.json``, as docker and
skopeo read them, and the answer to a registry's ``WWW-Authenticate`` challenge.

The config lives in ``$DOCKER_CONFIG/config.json`` (default ``~/.docker/config.json``), or
in the directory ``SourceOptions.docker_config`` names. For a registry host the lookup
order is: ``credHelpers[host]``, then ``credsStore``, then ``auths`` (a base64 ``auth``
of ``user:password``, or ``username``/``password``, and an optional ``identitytoken``).
Helpers speak the docker-credential-helpers protocol: ``docker-credential-NAME get`` with
the server URL on stdin, a JSON object ``{ServerURL, Username, Secret}`` on stdout, where
a username of ``<token>`` means the secret is an identity (refresh) token. Secrets never
appear in ``repr``, error messages or logs; errors say where credentials came from.

``RegistryAuth`` is one repository's authentication state, held by the client
(``client.RegistryClient``): it answers a 401's challenge with the Bearer token flow (tokens
cached per scope, fetched with Basic credentials or an identity token when the config has
them, else anonymously) or plain Basic, gives the ``Authorization`` header each request
carries, and words a refusal (``denied``). The token request itself goes through the
client's transport (``TokenTransport``), so it has the same retries and host rules.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlencode, urlsplit

import requests

from pinguard.errors import AuthError, ConfigError, SourceError
from pinguard.sources.reference import DOCKER_HUB, DOCKER_HUB_AUTH_KEY, DockerReference

log = logging.getLogger("pinguard.sources.registry")

MAX_TOKEN_BYTES = 1024 * 1024

_NOT_FOUND_MESSAGE = "credentials not found in native keychain"
_HELPER_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class Credentials:
    """A username/password pair or an identity token; the secrets stay out of ``repr``."""

    username: str = ""
    password: str = field(default="", repr=False)
    identity_token: str = field(default="", repr=False)
    origin: str = ""  # where they came from, safe to print: "config.json auths[host]"

    @property
    def has_basic(self) -> bool:
        return bool(self.username or self.password)

    def basic_header(self) -> str:
        raw = f"{self.username}:{self.password}".encode()
        return "Basic " + base64.b64encode(raw).decode("ascii")


def docker_config_dir(configured: str | None = None) -> Path:
    """The directory holding config.json: ``configured``, ``$DOCKER_CONFIG`` or ``~/.docker``."""
    if configured:
        return Path(configured)
    env = os.environ.get("DOCKER_CONFIG")
    if env:
        return Path(env)
    return Path.home() / ".docker"


def load_docker_config(configured: str | None = None) -> dict[str, Any]:
    """Read config.json; a missing file is an empty config, a malformed one a ConfigError."""
    path = docker_config_dir(configured) / "config.json"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"cannot read docker config {str(path)!r}: {exc.strerror}") from None
    try:
        data = json.loads(text)
    except ValueError:
        # The parser's message may quote the file's content, which holds secrets.
        raise ConfigError(f"docker config {str(path)!r} is not valid JSON") from None
    if not isinstance(data, dict):
        raise ConfigError(f"docker config {str(path)!r} is not a JSON object")
    return data


def _normalize_key(key: str) -> str:
    """``https://host:port/v1/`` -> ``host:port``, the way docker matches ``auths`` keys."""
    for prefix in ("https://", "http://"):
        if key.startswith(prefix):
            key = key[len(prefix) :]
            break
    return key.split("/", 1)[0].lower()


def _candidate_keys(registry: str) -> tuple[str, ...]:
    if registry == DOCKER_HUB:
        return (DOCKER_HUB_AUTH_KEY, "index.docker.io", "docker.io", "registry-1.docker.io")
    return (registry,)


def server_url(registry: str) -> str:
    """The server URL handed to credential helpers for a registry host."""
    return DOCKER_HUB_AUTH_KEY if registry == DOCKER_HUB else registry


def run_credential_helper(name: str, registry: str) -> Credentials | None:
    """Ask ``docker-credential-NAME`` for the registry's credentials; None when it has none."""
    import subprocess  # here: only a configured helper needs it

    program = f"docker-credential-{name}"
    origin = f"credential helper {program!r}"
    try:
        proc = subprocess.run(
            [program, "get"],
            input=server_url(registry).encode(),
            capture_output=True,
            timeout=_HELPER_TIMEOUT,
            check=False,
        )
    except FileNotFoundError:
        raise AuthError(f"{origin} for {registry} is not on PATH") from None
    except subprocess.TimeoutExpired:
        raise AuthError(f"{origin} for {registry} did not answer in time") from None
    except OSError as exc:
        raise AuthError(f"{origin} for {registry} could not run: {exc.strerror}") from None
    if proc.returncode != 0:
        out = (proc.stdout + proc.stderr).decode(errors="replace")
        if _NOT_FOUND_MESSAGE in out:
            return None
        # Never echo the helper's output: it may contain a secret.
        raise AuthError(f"{origin} for {registry} failed with exit status {proc.returncode}")
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        raise AuthError(f"{origin} for {registry} printed something that is not JSON") from None
    if not isinstance(data, dict):
        raise AuthError(f"{origin} for {registry} printed something that is not a JSON object")
    username = str(data.get("Username") or "")
    secret = str(data.get("Secret") or "")
    if not username and not secret:
        return None
    if username == "<token>":
        return Credentials(identity_token=secret, origin=origin)
    return Credentials(username=username, password=secret, origin=origin)


def _from_auths_entry(entry: Any, origin: str, host: str) -> Credentials | None:
    if not isinstance(entry, dict):
        return None
    username = str(entry.get("username") or "")
    password = str(entry.get("password") or "")
    encoded = entry.get("auth")
    if isinstance(encoded, str) and encoded:
        bad = f"{origin}: the 'auth' for host {host!r} is not base64 of user:password"
        try:
            decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise ConfigError(f"{bad} (not valid base64)") from None
        if ":" not in decoded:
            raise ConfigError(f"{bad} (no ':' between user and password)")
        username, _, password = decoded.partition(":")
    token = str(entry.get("identitytoken") or "")
    if not (username or password or token):
        return None
    return Credentials(username=username, password=password, identity_token=token, origin=origin)


def lookup_credentials(registry: str, configured_dir: str | None = None) -> Credentials | None:
    """Find credentials for ``registry`` (a host as in the reference, e.g. ``docker.io``)."""
    config = load_docker_config(configured_dir)
    config_file = str(docker_config_dir(configured_dir) / "config.json")
    keys = _candidate_keys(registry)
    wanted = {_normalize_key(k) for k in keys}

    helpers = config.get("credHelpers")
    if isinstance(helpers, dict):
        for key, helper in helpers.items():
            if isinstance(helper, str) and helper and _normalize_key(str(key)) in wanted:
                return run_credential_helper(helper, registry)

    store = config.get("credsStore")
    if isinstance(store, str) and store:
        found = run_credential_helper(store, registry)
        if found is not None:
            return found

    auths = config.get("auths")
    if isinstance(auths, dict):
        # Exact keys first, then keys written with a scheme or path.
        for key in keys:
            if key in auths:
                found = _from_auths_entry(auths[key], f"{config_file!r} auths[{key!r}]", registry)
                if found is not None:
                    return found
        for key, entry in sorted(auths.items()):
            if _normalize_key(str(key)) in wanted:
                found = _from_auths_entry(entry, f"{config_file!r} auths[{key!r}]", registry)
                if found is not None:
                    return found
    return None


# --- challenges and tokens --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Challenge:
    """One ``WWW-Authenticate`` challenge: its scheme and auth-params."""

    scheme: str  # lower case: "bearer", "basic"
    params: Mapping[str, str]


_CHALLENGE_START = re.compile(r"\s*,?\s*([A-Za-z][A-Za-z0-9!#$%&'*+.^_`|~-]*)(?=\s|$|,)")
_PARAM = re.compile(r'\s*,?\s*([A-Za-z0-9!#$%&\'*+.^_`|~-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^,\s]*)')


def parse_www_authenticate(header: str) -> list[Challenge]:
    """Parse ``Bearer realm="...",service="...",scope="a,b"`` (several challenges allowed)."""
    challenges: list[Challenge] = []
    pos = 0
    while pos < len(header):
        start = _CHALLENGE_START.match(header, pos)
        if start is None or header[start.end() : start.end() + 1] == "=":
            break
        scheme = start.group(1).lower()
        pos = start.end()
        params: dict[str, str] = {}
        while True:
            # A param is name=value; a bare token followed by space starts the next challenge.
            match = _PARAM.match(header, pos)
            if match is None:
                break
            value = match.group(2)
            if value.startswith('"'):
                value = re.sub(r"\\(.)", r"\1", value[1:-1])
            params[match.group(1).lower()] = value
            pos = match.end()
        challenges.append(Challenge(scheme=scheme, params=params))
    return challenges


@dataclass(slots=True)
class _Token:
    value: str
    expires: float


class TokenTransport(Protocol):
    """What fetching a token needs from the client: its host rule and its requests."""

    def plain_http_allowed(self, hostport: str) -> bool: ...

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
    ) -> requests.Response: ...

    def read_limited(self, response: requests.Response, limit: int, what: str) -> bytes: ...


class RegistryAuth:
    """One repository's authentication: credentials read once, Bearer tokens per scope, or
    Basic once the registry asked for it. Holds no connection, so it pickles with the client."""

    def __init__(self, ref: DockerReference, docker_config: str | None) -> None:
        self.ref = ref
        self.docker_config = docker_config
        self.scope = f"repository:{ref.repository}:pull"
        self._tokens: dict[str, _Token] = {}
        self._basic = False  # the registry asked for Basic auth
        self._credentials: Credentials | None = None
        self._credentials_loaded = False

    def credentials(self) -> Credentials | None:
        if not self._credentials_loaded:
            self._credentials = lookup_credentials(self.ref.registry, self.docker_config)
            self._credentials_loaded = True
        return self._credentials

    def header(self) -> str | None:
        """The ``Authorization`` header for the next request, if any."""
        token = self._tokens.get(self.scope)
        if token is not None and token.expires > time.time():
            return f"Bearer {token.value}"
        if self._basic:
            creds = self.credentials()
            if creds is not None and creds.has_basic:
                return creds.basic_header()
        return None

    def forget_token(self) -> None:
        """Drop our scope's token (expired or revoked: the registry answered 401)."""
        self._tokens.pop(self.scope, None)

    def _no_creds_hint(self) -> str:
        config = docker_config_dir(self.docker_config) / "config.json"
        return f"no credentials for {self.ref.registry} in {str(config)!r}"

    def denied(self, status: int) -> AuthError:
        creds = self.credentials()
        what = f"{self.ref.repository} on {self.ref.api_host}"
        if status == 403:
            return AuthError(f"registry denied access to {what} (HTTP 403)")
        if creds is None:
            return AuthError(
                f"registry requires authentication for {what}: {self._no_creds_hint()}"
            )
        return AuthError(f"registry refused the credentials from {creds.origin} for {what}")

    def authenticate(self, header: str | None, transport: TokenTransport) -> None:
        """Answer a 401: set up Basic or fetch a Bearer token for our scope."""
        challenges = parse_www_authenticate(header or "")
        by_scheme = {c.scheme: c for c in challenges}
        bearer, basic = by_scheme.get("bearer"), by_scheme.get("basic")
        if bearer is not None and bearer.params.get("realm"):
            self._fetch_token(bearer, transport)
            return
        if basic is not None:
            creds = self.credentials()
            if creds is None or not creds.has_basic:
                raise AuthError(
                    f"registry {self.ref.api_host} requires Basic authentication for "
                    f"{self.ref.repository}: {self._no_creds_hint()}"
                )
            self._basic = True
            return
        raise AuthError(
            f"registry {self.ref.api_host} answered 401 with no usable authentication challenge"
        )

    def _fetch_token(self, challenge: Challenge, transport: TokenTransport) -> None:
        realm = challenge.params["realm"]
        parts = urlsplit(realm)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise AuthError(f"registry {self.ref.api_host} named an invalid token realm")
        if parts.scheme == "http" and not transport.plain_http_allowed(parts.netloc):
            raise AuthError(
                f"registry {self.ref.api_host} named a plain-HTTP token realm on "
                f"{parts.hostname}; refusing to send credentials over HTTP"
            )
        scope = challenge.params.get("scope") or self.scope
        service = challenge.params.get("service")
        creds = self.credentials()
        query: dict[str, str] = {"scope": scope}
        if service:
            query["service"] = service
        method, data, auth = "GET", None, None
        if creds is not None and creds.identity_token:
            method = "POST"
            data = {
                "grant_type": "refresh_token",
                "refresh_token": creds.identity_token,
                "client_id": "pinguard",
                **query,
            }
            url = realm
        else:
            url = realm + ("&" if parts.query else "?") + urlencode(query)
            if creds is not None and creds.has_basic:
                auth = creds.basic_header()
        what = f"token for {self.ref.repository} from {parts.netloc}"
        response = transport.send_with_retries(
            method, url, {}, auth, what=what, stream=True, data=data
        )
        try:
            if response.status_code in (401, 403):
                if creds is None:
                    raise AuthError(
                        f"token server for {self.ref.api_host} refused anonymous access to "
                        f"{self.ref.repository}: {self._no_creds_hint()}"
                    )
                raise AuthError(
                    f"token server for {self.ref.api_host} refused the credentials from "
                    f"{creds.origin}"
                )
            if response.status_code != 200:
                raise SourceError(
                    f"token server for {self.ref.api_host} answered HTTP {response.status_code}"
                )
            raw = transport.read_limited(
                response, MAX_TOKEN_BYTES, f"token answer for {self.ref.api_host}"
            )
            try:
                body = json.loads(raw)
            except ValueError:
                raise SourceError(
                    f"token server for {self.ref.api_host} answered something that is not JSON"
                ) from None
        finally:
            response.close()
        value = body.get("token") or body.get("access_token") if isinstance(body, dict) else None
        if not isinstance(value, str) or not value:
            raise SourceError(f"token server for {self.ref.api_host} answered no token")
        expires_in = body.get("expires_in")
        lifetime = float(expires_in) if isinstance(expires_in, (int, float)) else 60.0
        token = _Token(value=value, expires=time.time() + max(lifetime - 5.0, 1.0))
        self._tokens[self.scope] = token
        self._tokens[scope] = token
        log.debug("got a registry token for %s (%s)", self.ref.api_host, scope)
