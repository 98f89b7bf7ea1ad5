"""The ``docker://`` transport: pulling images from a registry (OCI distribution API v2).

``RegistrySource`` fetches the manifest (OCI image manifest or index, Docker v2 schema2
manifest or manifest list), picks one platform from an index, verifies every manifest it
fetched by digest, reads and verifies the image config, and opens layer blobs as raw
streams for ``pinguard.layers.blob`` to verify while they stream: a stream that breaks is
resumed where it stopped (``_ResponseStream``), and a blob is never read past its
descriptor's size plus one byte, so an oversized blob is refused as soon as that byte
arrives; ``read_ranges`` reads parts of a blob (``ranges.py``). Every request goes through
``client`` (``client.py``: transport, retries, redirects; ``auth.py``: authentication);
pushing is ``push.py``'s.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, BinaryIO

import requests
import urllib3

from pinguard.digest import Digest
from pinguard.errors import BlobVerificationError, ImageNotFound, SourceError
from pinguard.sources import manifest as mf
from pinguard.sources.interface import ImageSource, LayerRef, ResolvedImage, SourceOptions
from pinguard.sources.manifest import descriptor_platform, platform_from_config, verify_bytes
from pinguard.sources.mediatypes import (
    ACCEPT,
    INDEX_TYPES,
    MANIFEST_OR_INDEX_TYPES,
    OCI_INDEX,
    OCI_MANIFEST,
)
from pinguard.sources.reference import REGISTRY_TRANSPORT, registry_reference
from pinguard.sources.registry.client import (
    MAX_MANIFEST_BYTES,
    TRANSPORT_ERRORS,
    RegistryClient,
    attempts,
    transport_reason,
)
from pinguard.sources.registry.ranges import RangeFetcher
from pinguard.target import Platform, host_platform, platform_matches

log = logging.getLogger("pinguard.sources.registry")

MAX_CONFIG_BYTES = 64 * 1024 * 1024
MAX_INDEX_DEPTH = 4
BLOB_BUFFER = 1024 * 1024


class _ResponseStream(io.RawIOBase):
    """The raw (undecoded) body of a streamed blob response; ``close`` releases it.

    A read that fails mid-body (any of ``TRANSPORT_ERRORS``), or an end of body before
    ``size`` bytes (or before the response's Content-Length), reopens the blob with
    ``opener`` and skips the bytes already delivered, at most ``retries`` times; a failure
    while reopening or skipping counts as one more attempt. Past that it raises
    ``SourceError`` naming the blob, its host and the cause. With ``size`` known, no more
    than ``size + 1`` bytes are ever read: that one byte too many is enough for the verifier
    to refuse the blob, so a server that sends it and stalls is not waited for. The caller's
    digest check covers the whole."""

    def __init__(
        self,
        opener: Callable[[], requests.Response],
        what: str,
        retries: int = 0,
        size: int | None = None,
    ) -> None:
        super().__init__()
        self._opener = opener
        self._what = what
        self._retries_left = retries
        self._attempts = 1
        self._size = size
        self._response: requests.Response | None = opener()
        self._delivered = 0
        self._expected = size if size is not None else _content_length(self._response)

    def readable(self) -> bool:
        return True

    def _read(self, n: int) -> bytes:
        if self._response is None:
            self._reopen()
        assert self._response is not None
        if self._size is not None:
            n = min(n, self._size + 1 - self._delivered)
            if n <= 0:
                return b""  # one byte past the size was delivered: the verifier refuses it
        data = self._response.raw.read(n, decode_content=False)
        if not data and self._expected is not None and self._delivered < self._expected:
            raise urllib3.exceptions.IncompleteRead(self._delivered, self._expected)
        return bytes(data)

    def _reopen(self) -> None:
        """A fresh response positioned after the bytes already delivered."""
        if self._response is not None:
            self._response.close()
        self._response = None
        response = self._opener()
        self._response = response
        skip = self._delivered
        while skip > 0:
            chunk = response.raw.read(min(skip, BLOB_BUFFER), decode_content=False)
            if not chunk:
                raise urllib3.exceptions.IncompleteRead(self._delivered - skip, self._delivered)
            skip -= len(chunk)

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        while True:
            try:
                data = self._read(len(view))
                break
            except TRANSPORT_ERRORS as exc:
                if self._response is not None:
                    self._response.close()
                    self._response = None  # the next attempt reopens
                if self._retries_left <= 0:
                    raise SourceError(
                        f"reading {self._what} failed after {self._delivered} bytes "
                        f"({attempts(self._attempts)}): {transport_reason(exc)}"
                    ) from exc
                self._retries_left -= 1
                self._attempts += 1
                log.debug("%s broke after %d bytes; fetching it again", self._what, self._delivered)
        n = len(data)
        view[:n] = data
        self._delivered += n
        return n

    def close(self) -> None:
        if not self.closed and self._response is not None:
            self._response.close()
        super().close()


def _content_length(response: requests.Response) -> int | None:
    value = response.headers.get("Content-Length")
    return int(value) if value is not None and value.isdigit() else None


# --- the source --------------------------------------------------------------------------


class RegistrySource(ImageSource):
    """One image in a registry, addressed as ``HOST/REPO:TAG`` or ``HOST/REPO@DIGEST``."""

    parallel_safe = True

    def __init__(self, ref: str, options: SourceOptions | None = None) -> None:
        self.client = RegistryClient(ref, options)
        self.reference = ref
        self.ref = self.client.ref
        self.options = self.client.options
        self._ranges: RangeFetcher | None = None

    def __repr__(self) -> str:
        return f"RegistrySource({self.reference!r})"

    @property
    def display(self) -> str:
        return registry_reference(self.reference)

    @property
    def scheme(self) -> str:
        """``https``, or ``http`` for a loopback or insecure registry."""
        return self.client.scheme

    @property
    def base_url(self) -> str:
        """``scheme://host[:port]`` every request starts from (the client's)."""
        return self.client.base_url

    @base_url.setter
    def base_url(self, value: str) -> None:
        self.client.base_url = value

    def close(self) -> None:
        self.client.close()

    # --- manifests and blobs ------------------------------------------------------------

    def _fetch_manifest(self, reference: str, accept: str = ACCEPT) -> tuple[bytes, str, str]:
        """Return (bytes, media type, digest) of a manifest, verified against its digest.

        By digest: the bytes must hash to it. By tag: when the registry sends
        ``Docker-Content-Digest``, the bytes must hash to that."""
        wanted = Digest.parse(reference, "manifest reference") if ":" in reference else None
        url = self.client.manifest_url(str(wanted or reference))
        what = f"manifest {reference} of {self.ref.api_host}/{self.ref.repository}"
        body, headers = self.client.get_small(url, {"Accept": accept}, MAX_MANIFEST_BYTES, what)
        content_type = headers.get("Content-Type", "").split(";")[0].strip()
        header = headers.get("Docker-Content-Digest")
        claimed = Digest.parse(header, f"{what}: Docker-Content-Digest") if header else None
        if wanted is not None and claimed is not None and claimed != wanted:
            raise BlobVerificationError(
                f"{what}: the registry's Docker-Content-Digest is {claimed}, not {wanted}"
            )
        expected = wanted or claimed
        if expected is not None:
            actual = Digest.of(body, expected.algorithm)
            if actual != expected:
                raise BlobVerificationError(
                    f"{what}: the registry sent bytes with digest {actual}, expected {expected}"
                )
            digest = str(expected)
        else:
            digest = str(Digest.of(body))
        return body, content_type, digest

    def _parse_manifest(
        self, body: bytes, content_type: str, what: str, descriptor_type: str = ""
    ) -> tuple[dict[str, Any], str]:
        data = mf.parse_json_document(body, what)
        kind = mf.document_kind(
            data, what, content_type=content_type, descriptor_type=descriptor_type
        )
        media_type = data.get("mediaType") or content_type or descriptor_type
        if media_type not in MANIFEST_OR_INDEX_TYPES:
            media_type = OCI_INDEX if kind == "index" else OCI_MANIFEST
        if (media_type in INDEX_TYPES) != (kind == "index"):
            raise SourceError(f"{what} is ambiguous: its shape disagrees with {media_type!r}")
        return data, str(media_type)

    def _select(self, index: Mapping[str, Any], what: str) -> tuple[dict[str, Any], Platform]:
        wanted = self.options.platform or host_platform()
        entries: list[tuple[dict[str, Any], Platform]] = []
        for desc in index.get("manifests") or []:
            if not isinstance(desc, dict):
                continue
            annotations = desc.get("annotations") or {}
            if isinstance(annotations, dict) and annotations.get("vnd.docker.reference.type"):
                continue  # attestations and other non-image entries
            plat = descriptor_platform(desc)
            if plat is None or plat.os == "unknown":
                continue
            entries.append((desc, plat))
        matching = [(d, p) for d, p in entries if platform_matches(wanted, p)]
        if not matching:
            available = sorted({str(p) for _, p in entries})
            listing = ", ".join(available) if available else "none"
            raise ImageNotFound(f"{what} has no image for platform {wanted}; available: {listing}")
        # Exact spelling first, then normalised, then index order.
        exact = [(d, p) for d, p in matching if p == wanted]
        return (exact or matching)[0]

    def _fetch_config(self, digest: str) -> dict[str, Any]:
        what = f"config {digest} of {self.ref.api_host}/{self.ref.repository}"
        expected = Digest.parse(digest, what)
        body, _headers = self.client.get_small(
            self.client.blob_url(digest), {}, MAX_CONFIG_BYTES, what
        )
        actual = Digest.of(body, expected.algorithm)
        if actual != expected:
            raise BlobVerificationError(f"{what}: the registry sent bytes with digest {actual}")
        return mf.parse_json_document(body, what)

    def platforms(self) -> tuple[Platform, ...]:
        """The platforms of the index the reference names (one when it is an image)."""
        body, content_type, digest = self._fetch_manifest(self.ref.manifest_reference)
        what = f"{self.display} (manifest {digest})"
        manifest, media_type = self._parse_manifest(body, content_type, what)
        if media_type not in INDEX_TYPES:
            return super().platforms()
        found: list[Platform] = []
        for desc in manifest.get("manifests") or []:
            if not isinstance(desc, dict):
                continue
            annotations = desc.get("annotations") or {}
            if isinstance(annotations, dict) and annotations.get("vnd.docker.reference.type"):
                continue
            plat = descriptor_platform(desc)
            if plat is not None and plat.os != "unknown" and plat not in found:
                found.append(plat)
        return tuple(found)

    def resolve(self) -> ResolvedImage:
        """Fetch the manifest (choosing a platform from an index) and the image config."""
        notes: list[str] = []
        reference = self.ref.manifest_reference
        descriptor_type = ""
        chosen_platform: Platform | None = None
        for _depth in range(MAX_INDEX_DEPTH):
            body, content_type, digest = self._fetch_manifest(reference)
            what = f"{self.display} (manifest {digest})"
            manifest, media_type = self._parse_manifest(body, content_type, what, descriptor_type)
            if media_type not in INDEX_TYPES:
                break
            desc, chosen_platform = self._select(manifest, self.display)
            child = desc.get("digest")
            if not isinstance(child, str):
                raise SourceError(f"{what}: an index entry has no digest")
            reference = str(Digest.parse(child, f"{what} index entry"))
            child_type = desc.get("mediaType")
            descriptor_type = child_type if isinstance(child_type, str) else ""
        else:
            raise SourceError(f"{self.display}: indexes nested too deeply")

        mf.check_image_manifest(manifest, what)
        config_desc = mf.config_descriptor(manifest, what)
        config = self._fetch_config(config_desc["digest"])

        config_platform = platform_from_config(config)
        if chosen_platform is None:
            chosen_platform = config_platform
            wanted = self.options.platform
            if (
                wanted is not None
                and chosen_platform is not None
                and not platform_matches(wanted, chosen_platform)
            ):
                raise ImageNotFound(
                    f"{self.display} has no image for platform {wanted}; "
                    f"available: {chosen_platform}"
                )
            if (
                wanted is None
                and chosen_platform is not None
                and not platform_matches(host_platform(), chosen_platform)
            ):
                notes.append(
                    f"single-platform image for {chosen_platform}, not this machine's "
                    f"{host_platform()}"
                )
        return ResolvedImage(
            reference=self.display,
            transport=REGISTRY_TRANSPORT,
            manifest_digest=digest,
            platform=chosen_platform,
            config=config,
            layers=mf.layers_from_manifest(manifest, config, what),
            notes=tuple(notes),
        )

    def open_blob(self, layer: LayerRef) -> BinaryIO:
        """Stream one blob as stored; the caller verifies its digest and size.

        A stream that breaks or ends short (a reset connection, a truncated body) is fetched
        again from the start, at most ``max_retries`` times, skipping what was already
        delivered; past that it raises ``SourceError``."""
        what = f"blob {layer.digest} of {self.ref.api_host}/{self.ref.repository}"
        url = self.client.blob_url(layer.digest)

        def opener() -> requests.Response:
            response = self.client.request(url, {}, what=what, stream=True)
            self.client.check_status(response, what)
            return response

        stream = _ResponseStream(opener, what, self.options.max_retries, layer.size)
        return io.BufferedReader(stream, buffer_size=BLOB_BUFFER)

    def read_ranges(self, layer: LayerRef, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """Parts of one blob by HTTP Range requests (``ranges.py``: several
        ranges per request, one by one where the registry will not)."""
        what = f"blob {layer.digest} of {self.ref.api_host}/{self.ref.repository}"
        url = self.client.blob_url(layer.digest)

        def opener(headers: Mapping[str, str]) -> requests.Response:
            return self.client.request(url, headers, what=what, stream=True)

        if self._ranges is None:
            self._ranges = RangeFetcher(opener, what)
        self._ranges.reopen(opener, what)
        return self._ranges.fetch(ranges)

    # --- raw reads (attestations; see referrers.py) --------------------------------------

    def manifest_bytes(self, reference: str, accept: str = ACCEPT) -> tuple[bytes, str, str]:
        """(bytes, Content-Type, digest) of the manifest ``reference`` (a tag or a digest),
        verified as every manifest is (``_fetch_manifest``); ``ImageNotFound`` on a 404."""
        return self._fetch_manifest(reference, accept)

    def blob_bytes(self, digest: str, limit: int) -> bytes:
        """A whole small blob (at most ``limit`` bytes), verified against ``digest``."""
        what = f"blob {digest} of {self.ref.api_host}/{self.ref.repository}"
        body, _ = self.client.get_small(self.client.blob_url(digest), {}, limit, what)
        verify_bytes(body, digest, what)
        return body
