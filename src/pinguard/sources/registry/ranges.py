"""Reading parts of a registry blob: HTTP Range requests, several ranges per request.

Owns ``RangeFetcher``: given sorted, non-overlapping half-open byte ranges of one blob, it
asks for up to ``MAX_PARTS`` of them in one ``Range: bytes=a-b,c-d`` request and splits the
``multipart/byteranges`` answer (RFC 9110 section 14.6). Registries differ: a registry
backed by object storage, or a front that drops multi-range requests, answers with the
whole blob (200), with one part, or refuses (416); the fetcher then closes that answer
unread and asks for each range on its own, for this and every later call. A single-range
answer that is not exactly the range asked for raises ``RangesRefused``: the caller reads
the blob whole instead. Nothing here verifies content: the caller checks each part against
the digest that vouches for it. ``fetched`` counts the body bytes taken, ``requests`` the
requests sent.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

import requests

from pinguard.errors import SourceError
from pinguard.sources.registry.client import TRANSPORT_ERRORS, transport_reason

#: At most this many ranges in one request (keeps the Range header and each answer small).
MAX_PARTS = 64
_PART_SLACK = 512  # per part: the boundary line and headers a multipart answer adds
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


class RangesRefused(SourceError):
    """The server does not answer single Range requests as asked: read the blob whole."""


Opener = Callable[[Mapping[str, str]], requests.Response]  # headers -> a streamed response


def _header(ranges: Sequence[tuple[int, int]]) -> str:
    return "bytes=" + ",".join(f"{a}-{b - 1}" for a, b in ranges)


def _read(response: requests.Response, limit: int, what: str) -> bytes:
    """The raw body, at most ``limit`` bytes (more is an error: never read without bound)."""
    parts: list[bytes] = []
    total = 0
    while True:
        try:
            chunk = response.raw.read(min(1 << 20, limit + 1 - total), decode_content=False)
        except TRANSPORT_ERRORS as exc:
            raise SourceError(f"{what}: a range answer broke off: {transport_reason(exc)}") from exc
        if not chunk:
            return b"".join(parts)
        total += len(chunk)
        if total > limit:
            raise SourceError(f"{what}: the range answer is longer than the {limit} bytes asked")
        parts.append(bytes(chunk))


def split_multipart(body: bytes, boundary: str, what: str) -> dict[tuple[int, int], bytes]:
    """The parts of a ``multipart/byteranges`` body, by their half-open range."""
    out: dict[tuple[int, int], bytes] = {}
    marker = b"--" + boundary.encode("latin-1")
    at = body.find(marker)
    while at >= 0:
        at += len(marker)
        if body[at : at + 2] == b"--":
            return out
        head_end = body.find(b"\r\n\r\n", at)
        if head_end < 0:
            break
        head = body[at:head_end].decode("latin-1")
        m = next(
            (
                _CONTENT_RANGE.search(line)
                for line in head.split("\r\n")
                if line.lower().startswith("content-range:")
            ),
            None,
        )
        if m is None:
            raise SourceError(f"{what}: a multipart range answer has a part without a range")
        start, last = int(m.group(1)), int(m.group(2))
        data = body[head_end + 4 : head_end + 4 + last + 1 - start]
        if len(data) != last + 1 - start:
            raise SourceError(f"{what}: a multipart range answer ends inside a part")
        out[(start, last + 1)] = data
        at = body.find(marker, head_end + 4 + len(data))
    raise SourceError(f"{what}: a multipart range answer ends without its closing boundary")


class RangeFetcher:
    """Ranges of one blob through ``opener`` (one registry request per call)."""

    def __init__(self, opener: Opener, what: str) -> None:
        self._open = opener
        self._what = what
        self.multi = True  # until the server answers a multi-range request otherwise
        self.fetched = 0
        self.requests = 0

    def reopen(self, opener: Opener, what: str) -> None:
        """Read another blob of the same registry (what was learnt of it is kept)."""
        self._open = opener
        self._what = what

    def fetch(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """The bytes of each range, in the order given."""
        got: dict[tuple[int, int], bytes] = {}
        todo = list(ranges)
        while todo:
            batch, todo = todo[:MAX_PARTS], todo[MAX_PARTS:]
            if self.multi and len(batch) > 1:
                parts = self._multi(batch)
                if parts is not None:
                    got.update(parts)
                    continue
                self.multi = False
            for r in batch:
                got[r] = self._single(r)
        return [got[r] for r in ranges]

    def _multi(self, batch: Sequence[tuple[int, int]]) -> dict[tuple[int, int], bytes] | None:
        response = self._open({"Range": _header(batch)})
        self.requests += 1
        try:
            kind = response.headers.get("Content-Type", "")
            boundary = re.search(r'boundary="?([^";]+)"?', kind)
            if (
                response.status_code != 206
                or not kind.lower().startswith("multipart/byteranges")
                or boundary is None
            ):
                return None  # refused, or answered whole or as one part: ask singly
            limit = sum(b - a for a, b in batch) + _PART_SLACK * (len(batch) + 1)
            body = _read(response, limit, self._what)
        finally:
            response.close()
        self.fetched += len(body)
        parts = split_multipart(body, boundary.group(1), self._what)
        if set(parts) != set(batch):
            return None  # parts merged or missing: ask singly
        return parts

    def _single(self, r: tuple[int, int]) -> bytes:
        response = self._open({"Range": _header([r])})
        self.requests += 1
        try:
            m = _CONTENT_RANGE.fullmatch(response.headers.get("Content-Range", "").strip())
            if (
                response.status_code != 206
                or m is None
                or (int(m.group(1)), int(m.group(2)) + 1) != r
            ):
                raise RangesRefused(
                    f"{self._what}: asked for bytes {r[0]}-{r[1] - 1}, the registry answered "
                    f"HTTP {response.status_code} "
                    f"{response.headers.get('Content-Range', 'without a Content-Range')}"
                )
            body = _read(response, r[1] - r[0], self._what)
        finally:
            response.close()
        self.fetched += len(body)
        if len(body) != r[1] - r[0]:
            raise SourceError(f"{self._what}: the range {r[0]}-{r[1] - 1} ended short")
        return body
