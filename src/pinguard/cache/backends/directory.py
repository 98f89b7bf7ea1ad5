"""The directory backend of the shared layer cache: entry bytes as files in one directory.

``file:///PATH`` names a directory several workers share (one host's disk, or a network
file system): each entry is a file named like the Redis key's last part
(``pinguard.cache.store.entry_name``), written through a temporary file and renamed, so a
reader sees a whole entry or none; entries are readable by all (0644), as workers may run as other
users. It holds the same verified (optionally signed) entries as Redis and the registry, so
the fleet's checks apply to it alike. A directory that cannot be created, read or written
is ``CacheUnavailable``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from pinguard.cache.interface import MAX_ENTRY_BYTES, CacheUnavailable, EntryRejected

SUFFIX = ".entry"


class DirectoryBackend:
    """Entries as files under ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def describe(self) -> str:
        return f"file://{self.directory}"

    def load(self, name: str) -> bytes | None:
        path = self.directory / (name + SUFFIX)
        try:
            with path.open("rb") as fh:
                data = fh.read(MAX_ENTRY_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CacheUnavailable(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
        if len(data) > MAX_ENTRY_BYTES:
            raise EntryRejected(f"larger than {MAX_ENTRY_BYTES} bytes")
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
