"""Every OCI and Docker media type pinguard reads or writes, named once.

Manifests, indexes, image configs and layers of both families, the OCI empty descriptor
(the config of an artifact such as an attestation), the groups the sources test a document
against (``INDEX_TYPES``, ``MANIFEST_TYPES``, both together, ``IMAGE_CONFIG_TYPES``, the layer
prefixes) and the ``Accept`` header a registry pull sends, and pinguard's own layer cache entry
(its DSSE payload type, and its artifact and layer types in a registry cache). The manifest
parser, the registry client, the referrers code, containers-storage, the cache, the push
receiver and the test image writer all import them from here.
"""

from __future__ import annotations

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
OCI_EMPTY = "application/vnd.oci.empty.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar"
DOCKER_SCHEMA1 = frozenset(
    {
        "application/vnd.docker.distribution.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v1+prettyjws",
    }
)
INDEX_TYPES = frozenset({OCI_INDEX, DOCKER_LIST})
MANIFEST_TYPES = frozenset({OCI_MANIFEST, DOCKER_MANIFEST})
#: What a manifest reference may name: an index or a single image manifest, of either family.
MANIFEST_OR_INDEX_TYPES = INDEX_TYPES | MANIFEST_TYPES
IMAGE_CONFIG_TYPES = frozenset({OCI_CONFIG, DOCKER_CONFIG})
LAYER_TYPE_PREFIXES = ("application/vnd.oci.image.layer.", "application/vnd.docker.image.rootfs.")
#: What a registry pull accepts for a manifest: indexes first, then single manifests.
ACCEPT = ", ".join((OCI_INDEX, DOCKER_LIST, OCI_MANIFEST, DOCKER_MANIFEST))
#: A shared layer cache entry: its DSSE payload type and its layer's media type in a registry.
LAYER_CACHE_ENTRY = "application/vnd.pinguard.layer-cache-entry+json"
#: The artifact type of a layer cache entry's manifest in a registry cache repository.
LAYER_CACHE_ARTIFACT = "application/vnd.pinguard.layer-cache-entry.v1+json"
