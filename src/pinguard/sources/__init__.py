"""Image sources: one class per transport behind ``ImageSource`` (``interface``), a
reference's text read by ``reference`` and opened by ``resolve`` (``open_source``); the
registry client is the ``registry`` package. Re-exports only.
"""

from pinguard.sources.interface import (
    ImageSource,
    LayerRef,
    ResolvedImage,
    SourceOptions,
    UnpackedTree,
)
from pinguard.sources.reference import (
    KINDS,
    REGISTRY_PREFIX,
    TRANSPORTS,
    ImageReference,
    image_name,
    is_docker_reference,
    is_registry_reference,
    registry_reference,
    split_transport,
    strip_registry_prefix,
)
from pinguard.sources.resolve import DAEMON_NOTE, REGISTRY_NOTE, open_source, resolve_reference

__all__ = [
    "DAEMON_NOTE",
    "KINDS",
    "REGISTRY_NOTE",
    "REGISTRY_PREFIX",
    "TRANSPORTS",
    "ImageReference",
    "ImageSource",
    "LayerRef",
    "ResolvedImage",
    "SourceOptions",
    "UnpackedTree",
    "image_name",
    "is_docker_reference",
    "is_registry_reference",
    "open_source",
    "registry_reference",
    "resolve_reference",
    "split_transport",
    "strip_registry_prefix",
]
