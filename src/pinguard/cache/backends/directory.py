"""The directory backend: layer entries as files in one directory, local or shared.

It holds the per-user cache (``--cache-dir``: ``pinguard.cache.store.LocalCache``, unsigned,
entries of any size) and a shared one (``file:///PATH``: a directory several workers share,
on one host's disk or a network file system, with the fleet's checks as for Redis and the
registry). Each entry is a file named like the Redis key's last part
(``pinguard.cache.verified.entry_name``) plus ``.entry``, written through a temporary file
and renamed, so a reader sees a whole entry or none; entries are readable by all (0644), as
workers may run as other users. A directory that cannot be created, read or written is
``CacheUnavailable``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from pinguard.cache.interface import MAX_ENTRY_BYTES, CacheUnavailable, EntryRejected

SUFFIX = ".entry"


class DirectoryBackend:
    """Entries as files under ``directory``."""

    def __init__(self, directory: Path, *, limit: int | None = MAX_ENTRY_BYTES) -> None:
        self.directory = directory
        self.limit = limit  # the most bytes an entry may hold (None: no bound)

    def describe(self) -> str:
        return f"file://{self.directory}"

    def load(self, name: str) -> bytes | None:
        path = self.directory / (name + SUFFIX)
        try:
            with path.open("rb") as fh:
                data = fh.read() if self.limit is None else fh.read(self.limit + 1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CacheUnavailable(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
        if self.limit is not None and len(data) > self.limit:
            raise EntryRejected(f"larger than {self.limit} bytes")
        return data

    def save(self, name: str, data: bytes) -> None:
        tmp = None
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=f".{name}.", suffix=".tmp")
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.chmod(tmp, 0o644)  # other workers (other users) read it; mkstemp made it 0600
            os.replace(tmp, self.directory / (name + SUFFIX))
        except OSError as exc:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
            raise CacheUnavailable(
                f"cannot write to {str(self.directory)!r}: {exc.strerror or exc}"
            ) from None
