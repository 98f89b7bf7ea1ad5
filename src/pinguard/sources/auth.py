"""Registry credentials from a docker ``config.json``, as docker and skopeo read them.

The config lives in ``$DOCKER_CONFIG/config.json`` (default ``~/.docker/config.json``), or
in the directory ``SourceOptions.docker_config`` names. For a registry host the lookup
order is: ``credHelpers[host]``, then ``credsStore``, then ``auths`` (a base64 ``auth``
of ``user:password``, or ``username``/``password``, and an optional ``identitytoken``).
Helpers speak the docker-credential-helpers protocol: ``docker-credential-NAME get`` with
the server URL on stdin, a JSON object ``{ServerURL, Username, Secret}`` on stdout, where
a username of ``<token>`` means the secret is an identity (refresh) token. Secrets never
appear in ``repr``, error messages or logs; errors say where credentials came from.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pinguard.errors import AuthError, ConfigError
from pinguard.sources.reference import DOCKER_HUB, DOCKER_HUB_AUTH_KEY

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
