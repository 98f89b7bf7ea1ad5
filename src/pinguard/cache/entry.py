"""The one entry format of the local caches, and a directory of entries by kind.

An entry is canonical JSON (sorted keys, no spaces) with ``content``, the sha256 of that
JSON, written as its first key (``seal``); ``unseal`` checks the digest over the bytes as
stored and returns None for anything else, so an entry cut short, altered after it was
written (even into valid JSON) or written by another format is a miss, never a wrong answer.
``EntryDir`` keeps sealed entries of one kind in a directory as ``<kind>-<key>.json``, each
carrying its own key (an entry copied under another name is a miss too), written atomically
(``pinguard.fileio.atomic_write``) so two runs sharing a directory never see half an entry.
``default_cache_dir`` is where the local cache lives when no ``--cache-dir`` is given.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from pinguard.fileio import atomic_write

_SEALED = re.compile(rb'\{"content":"(sha256:[0-9a-f]{64})"[,}]')


def default_cache_dir() -> Path:
    """The user's cache directory for pinguard's local entries."""
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("pinguard")) / "layers"


def seal(data: dict[str, object]) -> str:
    """An entry's text: its canonical JSON (sorted keys, no spaces) with ``content``, the
    sha256 of that JSON, written as the first key."""
    body = json.dumps(data, separators=(",", ":"), sort_keys=True)
    digest = "sha256:" + hashlib.sha256(body.encode("utf-8")).hexdigest()
    return f'{{"content":"{digest}"' + ("}" if body == "{}" else "," + body[1:])


def unseal(raw: bytes) -> dict[str, Any] | None:
    """The entry ``seal`` wrote, without ``content``; None when the text is not a sealed
    entry or its digest does not match. The digest is checked over the bytes as stored, so
    reading an entry does not serialise it again (0.24 s of a 9 MB replay entry's 0.75 s)."""
    found = _SEALED.match(raw)
    if found is None:
        return None
    body = b"{" + raw[found.end() :] if raw[found.end() - 1 : found.end()] == b"," else b"{}"
    if "sha256:" + hashlib.sha256(body).hexdigest() != found.group(1).decode():
        return None
    data = json.loads(body)
    return data if isinstance(data, dict) else None


class EntryDir:
    """Sealed entries of one ``kind`` in ``directory``, named ``<kind>-<key>.json``."""

    def __init__(self, directory: Path, kind: str) -> None:
        if not kind.isidentifier():
            raise ValueError(f"not an entry kind: {kind!r}")
        self.directory = directory
        self.kind = kind

    def path(self, key: str) -> Path:
        if not key.isalnum():
            raise ValueError(f"not a key: {key!r}")
        return self.directory / f"{self.kind}-{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        """The entry stored under ``key``, without its key; None when there is none or it
        does not check out (unreadable, altered, or stored under another key)."""
        try:
            data = unseal(self.path(key).read_bytes())
        except (OSError, ValueError):
            return None
        if data is None or data.pop("key", None) != key:
            return None
        return data

    def put(self, key: str, data: dict[str, Any]) -> None:
        """Store ``data`` (JSON-ready) under ``key``."""
        self.directory.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path(key), seal({**data, "key": key}))
