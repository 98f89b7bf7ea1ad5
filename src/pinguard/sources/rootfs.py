"""``dir:PATH``: a root filesystem or a virtual environment on disk, audited as one layer.

``resolve()`` checks that the directory exists and returns a ``ResolvedImage`` with transport
``dir``, one history entry and one layer whose ``UnpackedTree`` names the directory (and the
in-image paths to leave out, such as pinguard's own install when the guard audits the image it
runs in). The layer analysis walks the tree in place, so the audit pipeline treats it like
any other source; there are no blobs to open.
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

from pinguard.errors import ImageNotFound, InvalidReference
from pinguard.sources.interface import (
    ImageSource,
    LayerRef,
    ResolvedImage,
    SourceOptions,
    UnpackedTree,
)

DIR_LAYER_DIGEST = "dir"  # names the one layer; a directory has no content digest


class DirSource(ImageSource):
    """A directory tree read in place, as an image of one layer."""

    transport = "dir"
    parallel_safe = False  # one layer: nothing to parallelise

    def __init__(
        self, ref: str, options: SourceOptions | None = None, *, exclude: tuple[str, ...] = ()
    ) -> None:
        if not ref:
            raise InvalidReference(f"dir: reference {'dir:' + ref!r} names no path")
        self.options = options or SourceOptions()
        self.reference = f"{self.transport}:{ref}"
        self.root = Path(ref)
        self.exclude = exclude

    def resolve(self) -> ResolvedImage:
        if not self.root.is_dir():
            raise ImageNotFound(f"{self.reference}: {str(self.root)!r} is not a directory")
        tree = UnpackedTree(root=str(self.root), exclude=self.exclude)
        return ResolvedImage(
            reference=self.reference,
            transport=self.transport,
            manifest_digest=None,
            platform=self.options.platform,
            config={"history": [{"created_by": f"(directory {self.root})"}]},
            layers=(LayerRef(digest=DIR_LAYER_DIGEST, size=None, tree=tree),),
        )

    def open_blob(self, layer: LayerRef) -> BinaryIO:
        raise ImageNotFound(f"{self.reference}: a directory has no layer blobs ({layer.digest})")
