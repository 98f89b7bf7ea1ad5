"""Content digests (``sha256:<hex>``, ``sha512:<hex>``): parsed and validated in one place.

Every digest pinguard reads from outside (a manifest's descriptors, an index entry, a
reference ``@digest``, a config's ``rootfs.diff_ids``) passes through ``Digest.parse`` before
any URL or path is built from it or any bytes are compared with it. Only the two algorithms
the OCI image spec registers are accepted, with their exact lower-case hex length; anything
else (``md5:``, ``sha256:../../x``, a short or upper-case hex) raises ``InvalidDigest``
quoting the bad value.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from pinguard.errors import InvalidDigest

HEX_LENGTHS = {"sha256": 64, "sha512": 128}
_HEX = re.compile(r"[0-9a-f]+")


@dataclass(frozen=True, slots=True)
class Digest:
    """A validated content digest: ``algorithm`` (sha256 or sha512) and its lower-case hex."""

    algorithm: str
    hex: str

    def __post_init__(self) -> None:
        length = HEX_LENGTHS.get(self.algorithm)
        if length is None:
            raise InvalidDigest(f"unsupported digest algorithm {self.algorithm!r}")
        if len(self.hex) != length or not _HEX.fullmatch(self.hex):
            raise InvalidDigest(
                f"{self.algorithm} digest must be {length} lower-case hex digits, got {self.hex!r}"
            )

    @classmethod
    def parse(cls, text: object, what: str = "digest") -> Digest:
        """``"sha256:<64 hex>"`` -> ``Digest``; anything else raises ``InvalidDigest``."""
        if not isinstance(text, str):
            raise InvalidDigest(f"{what}: digest {text!r} is not a string")
        algorithm, sep, hexpart = text.partition(":")
        if not sep:
            raise InvalidDigest(f"{what}: {text!r} is not a digest (no algorithm)")
        try:
            return cls(algorithm, hexpart)
        except InvalidDigest as exc:
            raise InvalidDigest(f"{what}: invalid digest {text!r}: {exc}") from None

    @classmethod
    def of(cls, data: bytes, algorithm: str = "sha256") -> Digest:
        """The digest of ``data`` with ``algorithm``."""
        if algorithm not in HEX_LENGTHS:
            raise InvalidDigest(f"unsupported digest algorithm {algorithm!r}")
        return cls(algorithm, hashlib.new(algorithm, data).hexdigest())

    def hasher(self) -> hashlib._Hash:
        """A fresh hash object of this digest's algorithm, to feed streamed bytes."""
        return hashlib.new(self.algorithm)

    def matches(self, data: bytes) -> bool:
        """True when ``data`` hashes to this digest."""
        return hashlib.new(self.algorithm, data).hexdigest() == self.hex

    @property
    def relpath(self) -> str:
        """``blobs/<alg>/<hex>``: where an OCI layout stores the blob."""
        return f"blobs/{self.algorithm}/{self.hex}"

    def __str__(self) -> str:
        return f"{self.algorithm}:{self.hex}"


def is_digest(text: str) -> bool:
    """True when ``text`` parses as a ``Digest``."""
    try:
        Digest.parse(text)
    except InvalidDigest:
        return False
    return True
