"""The one read-only, seekable window of ``size`` bytes: position, seek and tell, once.

``Window`` keeps the position (``SEEK_SET``/``SEEK_CUR``/``SEEK_END`` against ``size``,
never below 0) and reports itself readable and seekable; a subclass says where the bytes
come from by implementing ``readinto`` for the current position and advancing it.
``SliceReader``, the one subclass, is the window ``[offset, offset+size)`` of a file on its
own handle (a blob inside an image archive); a new reader of a byte range subclasses
``Window`` the same way rather than keeping a position of its own.
"""

from __future__ import annotations

import io
from pathlib import Path

from pinguard.errors import LayerError


class Window(io.RawIOBase):
    """A read-only, seekable file of ``size`` bytes; subclasses implement ``readinto``."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self._size = size
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def remaining(self) -> int:
        """Bytes from the position to the end (0 at or past it)."""
        return max(0, self._size - self._pos)


class SliceReader(Window):
    """The window ``[offset, offset+size)`` of a file, on its own handle."""

    def __init__(self, path: Path, offset: int, size: int) -> None:
        super().__init__(size)
        self._file = open(path, "rb")  # noqa: SIM115 - owned by this object, closed in close()
        self._start = offset

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        remaining = self.remaining()
        if remaining <= 0:
            return 0
        view = memoryview(buffer)
        want = min(len(view), remaining)
        self._file.seek(self._start + self._pos)
        n = self._file.readinto(view[:want])
        if not n:
            raise LayerError(f"{self._file.name}: archive truncated inside a member")
        self._pos += n
        return n

    def close(self) -> None:
        if not self.closed:
            self._file.close()
        super().close()
