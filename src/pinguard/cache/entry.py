"""The one entry format of every cache, and a directory of entries by kind.

An entry is canonical JSON (sorted keys, no spaces) with ``content``, the sha256 of that
JSON, written as its first key (``seal``); ``unseal`` checks the digest over the bytes as
stored and returns None for anything else (a shared layer entry is the same, inside a DSSE
envelope when signed: ``pinguard.cache.signed``), so an entry cut short, altered after it was
written (even into valid JSON) or written by another format is a miss, never a wrong answer.
``EntryDir`` keeps sealed entries of one kind in a directory as ``<kind>-<key>.json``, each
carrying its own key (an entry copied under another name is a miss too), written atomically
and a piece at a time (``write_sealed``: the same bytes, without the whole text in memory),
so two runs sharing a directory never see half an entry. ``default_cache_dir`` is where the
local cache lives when no ``--cache-dir`` is given.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

from pinguard.errors import OutputError

# ``typing.TYPE_CHECKING`` without importing typing (2 ms of a warm audit): mypy reads the name
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Any, BinaryIO

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

    def put(self, key: str, data: dict[str, Any], attachment: bytes | None = None) -> None:
        """Store ``data`` (JSON-ready) under ``key``: the bytes ``seal`` gives, written a
        piece at a time (``write_sealed``). ``attachment``: bytes kept beside the entry as
        they are (``<kind>-<key>.bin``, written first), the entry naming their sha256, so a
        reader takes them without decoding them from JSON (``attached``)."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            where = str(self.directory)
            raise OutputError(f"cannot write {where!r}: {exc.strerror or exc}") from exc
        if attachment is not None:
            path = self.path(key).with_suffix(".bin")
            try:
                _write_atomically(path, lambda out: out.write(attachment))
            except OSError as exc:
                raise OutputError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from exc
            data = {**data, "attachment": "sha256:" + hashlib.sha256(attachment).hexdigest()}
        write_sealed(self.path(key), {**data, "key": key})

    def attached(self, key: str, entry: dict[str, Any]) -> bytes | None:
        """The attachment of the entry ``get`` gave for ``key``: its bytes when they have
        the sha256 the entry names, else None (missing, altered or never attached)."""
        digest = entry.get("attachment")
        if not isinstance(digest, str):
            return None
        try:
            data = self.path(key).with_suffix(".bin").read_bytes()
        except (OSError, ValueError):
            return None
        return data if "sha256:" + hashlib.sha256(data).hexdigest() == digest else None


def _pieces(value: Any, depth: int) -> Iterator[str]:
    """The canonical JSON of ``value`` (as ``seal`` writes it) in pieces: the objects and
    arrays of its first ``depth`` levels are taken apart, everything below is one piece."""
    if depth and isinstance(value, dict) and all(type(k) is str for k in value):
        yield "{"
        for i, name in enumerate(sorted(value)):
            yield f"{',' if i else ''}{json.dumps(name)}:"
            yield from _pieces(value[name], depth - 1)
        yield "}"
    elif depth and isinstance(value, list):
        yield "["
        for i, item in enumerate(value):
            if i:
                yield ","
            yield from _pieces(item, depth - 1)
        yield "]"
    else:
        yield json.dumps(value, separators=(",", ":"), sort_keys=True)


def write_sealed(path: Path, data: dict[str, Any]) -> None:
    """Write ``seal(data)`` to ``path`` atomically without holding it in memory: the
    canonical JSON is encoded a piece at a time (``_pieces``) into a temporary file while its
    digest is taken, then the header and that body are copied into the entry's own temporary
    file, which replaces ``path``. A replay entry of tens of MB then costs no more memory than
    its largest piece, and is encoded once."""
    try:
        _write_sealed(path, data)
    except OSError as exc:
        raise OutputError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from exc


def _write_atomically(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """What ``write`` writes, to ``path`` through a temporary file beside it, flushed to disk,
    then renamed over ``path``; the temporary file is removed if anything fails."""
    import tempfile

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            write(out)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write_sealed(path: Path, data: dict[str, Any]) -> None:
    import shutil  # here: a warm audit reads an entry and writes none
    import tempfile

    h = hashlib.sha256()
    with tempfile.TemporaryFile(dir=path.parent) as body:
        size = 0
        for piece in _pieces(data, 3):
            chunk = piece.encode("utf-8")
            h.update(chunk)
            body.write(chunk)
            size += len(chunk)
        body.seek(1)  # past the body's "{": the header takes its place
        head = f'{{"content":"sha256:{h.hexdigest()}"' + ("}" if size == 2 else ",")

        def write(out: BinaryIO) -> None:
            out.write(head.encode("ascii"))
            if size > 2:
                shutil.copyfileobj(body, out, 1 << 20)

        _write_atomically(path, write)
