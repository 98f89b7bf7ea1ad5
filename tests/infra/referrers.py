"""A referrers API in front of Debian's docker-registry, answering as the distribution spec says.

Debian's ``docker-registry`` (distribution 2.8) has no referrers API, and no registry that has
one can be installed here (no zot or distribution 3 in Debian bookworm or on PyPI), so
``ReferrersFront`` adds the API to a real registry the way distribution-spec v1.1 documents it:
every request is forwarded to the registry (which stores the blobs and manifests for real);
a manifest ``PUT`` whose body has a ``subject`` is answered with ``OCI-Subject: <digest>`` and
remembered as a descriptor (``artifactType`` from the manifest, else its config media type;
the manifest's annotations copied); ``GET /v2/<name>/referrers/<digest>`` answers ``200`` with
an OCI image index of those descriptors (``Content-Type: application/vnd.oci.image.index.v1+json``),
``400`` for a malformed digest, filters by ``?artifactType=`` and says so with
``OCI-Filters-Applied: artifactType`` (unless ``apply_filters=False``), and pages with
``Link: <...>; rel="next"`` when ``page_size`` is set. It never writes a referrers tag.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from tests.infra.registry import Recorded, _Handler, _Server

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
_REFERRERS = re.compile(r"^/v2/(?P<name>.+)/referrers/(?P<digest>[^/]+)$")
_MANIFEST = re.compile(r"^/v2/(?P<name>.+)/manifests/(?P<reference>[^/]+)$")
_DIGEST = re.compile(r"^sha256:[a-f0-9]{64}$")


class ReferrersFront(_Server):
    """``docker-registry`` at ``upstream`` (host:port) plus the OCI 1.1 referrers API."""

    def __init__(
        self, upstream: str, *, apply_filters: bool = True, page_size: int | None = None
    ) -> None:
        self.upstream = upstream
        self.apply_filters = apply_filters
        self.page_size = page_size
        # (repository, subject digest) -> descriptors, in push order
        self.referrers: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self.requests: list[Recorded] = []
        self.lock = threading.Lock()
        super().__init__(_ReferrersHandler)


class _ReferrersHandler(_Handler):
    def _referrers(self, name: str, digest: str) -> None:
        owner: ReferrersFront = self.owner
        if not _DIGEST.match(digest):
            self._reply(400, b'{"errors":[{"code":"DIGEST_INVALID"}]}')
            return
        query = parse_qs(urlsplit(self.path).query)
        with owner.lock:
            found = list(owner.referrers.get((name, digest), []))
        headers = {"Content-Type": OCI_INDEX}
        wanted = query.get("artifactType", [None])[0]
        if wanted and owner.apply_filters:
            found = [d for d in found if d.get("artifactType") == wanted]
            headers["OCI-Filters-Applied"] = "artifactType"
        start = int(query.get("page", ["0"])[0])
        if owner.page_size is not None:
            page = found[start : start + owner.page_size]
            if start + owner.page_size < len(found):
                params = {"page": str(start + owner.page_size)}
                if wanted:
                    params["artifactType"] = wanted
                link = f"/v2/{name}/referrers/{digest}?{urlencode(params)}"
                headers["Link"] = f'<{link}>; rel="next"'
            found = page
        body = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": found})
        self._reply(200, body.encode(), headers)

    def _handle(self) -> None:
        owner: ReferrersFront = self.owner
        body = self._body()
        path = urlsplit(self.path).path
        with owner.lock:
            owner.requests.append(Recorded(self.command, self.path, dict(self.headers.items())))
        match = _REFERRERS.match(path)
        if match and self.command in ("GET", "HEAD"):
            self._referrers(match.group("name"), match.group("digest"))
            return
        status, payload, headers = self._forward(owner.upstream, body)
        manifest = _MANIFEST.match(path)
        if manifest and self.command == "PUT" and status == 201:
            doc = json.loads(body)
            subject = doc.get("subject") if isinstance(doc, dict) else None
            if isinstance(subject, dict) and isinstance(subject.get("digest"), str):
                descriptor: dict[str, Any] = {
                    "mediaType": doc.get("mediaType"),
                    "digest": "sha256:" + hashlib.sha256(body).hexdigest(),
                    "size": len(body),
                    "artifactType": doc.get("artifactType") or doc["config"]["mediaType"],
                }
                if doc.get("annotations"):
                    descriptor["annotations"] = doc["annotations"]
                key = (manifest.group("name"), subject["digest"])
                with owner.lock:
                    owner.referrers.setdefault(key, []).append(descriptor)
                headers["OCI-Subject"] = subject["digest"]
        self._reply(status, payload, headers)

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _handle
