"""``dir:PATH``: a root filesystem or a virtual environment on disk, audited as one state.

There are no layers and no blobs: ``resolve()`` checks that the directory exists and returns
a ``ResolvedImage`` with transport ``dir`` and no layers, and the audit engine walks ``root``
itself. The single state has no build history, so it is reported as one step.
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

from pinguard.errors import ImageNotFound, InvalidReference
from pinguard.sources.interface import ImageSource, LayerRef, ResolvedImage, SourceOptions


class DirSource(ImageSource):
    """A directory tree read in place; ``root`` is what the audit engine walks."""

    transport = "dir"

    def __init__(self, ref: str, options: SourceOptions | None = None) -> None:
        if not ref:
            raise InvalidReference(f"dir: reference {'dir:' + ref!r} names no path")
        self.options = options or SourceOptions()
        self.reference = f"{self.transport}:{ref}"
        self.root = Path(ref)

    def resolve(self) -> ResolvedImage:
        if not self.root.is_dir():
            raise ImageNotFound(f"{self.reference}: {str(self.root)!r} is not a directory")
        return ResolvedImage(
            reference=self.reference,
            transport=self.transport,
            manifest_digest=None,
            platform=self.options.platform,
            config={},
            layers=(),
            notes=(f"directory {str(self.root.resolve())!r} audited as one state",),
        )

    def open_blob(self, layer: LayerRef) -> BinaryIO:
        raise ImageNotFound(f"{self.reference}: a directory has no layer blobs ({layer.digest})")
