"""Pushing to a registry, and reading the referrers API: what attestations need.

Functions over a ``RegistryClient`` (``client.py``, which authenticates
and retries): ``has_blob`` (HEAD), ``push_blob`` (POST, then one monolithic PUT, skipped when
the repository has the blob), ``push_manifest`` (PUT under a tag or digest) and
``referrers_page`` (one page of ``/v2/<name>/referrers/<digest>``, None where the registry has
no such API). An upload or a referrers page on another origin is refused, so credentials
never leave the registry. Any 2xx answers a push; else the registry's first error code and
message are quoted.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlencode, urlsplit

import requests

from pinguard.errors import SourceError
from pinguard.sources.manifest import sha256_digest
from pinguard.sources.registry.client import (
    MAX_MANIFEST_BYTES,
    TRANSPORT_ERRORS,
    RegistryClient,
    join_url,
    origin,
)


def has_blob(client: RegistryClient, digest: str) -> bool:
    """HEAD the blob: True when the repository already holds it."""
    what = f"blob {digest} of {client.ref.api_host}/{client.ref.repository}"
    response = client.request(client.blob_url(digest), {}, what=what, stream=True, method="HEAD")
    response.close()
    if response.status_code == 404:
        return False
    client.check_status(response, what)
    return True


def push_blob(client: RegistryClient, data: bytes) -> str:
    """Upload ``data`` as one blob (POST, then one monolithic PUT) unless the repository
    already has it; return its digest."""
    digest = sha256_digest(data)
    if has_blob(client, digest):
        return digest
    where = f"{client.ref.api_host}/{client.ref.repository}"
    start = f"{client.base_url}/v2/{client.ref.repository}/blobs/uploads/"
    what = f"starting a blob upload to {where}"
    response = client.request(
        start, {"Content-Length": "0"}, what=what, stream=False, method="POST"
    )
    response.close()
    _check_push(client, response, what)
    location = response.headers.get("Location")
    if not location:
        raise SourceError(f"registry {client.ref.api_host} started an upload with no Location")
    url = join_url(start, location, what, client.ref.api_host)
    if origin(url) != origin(client.base_url):
        raise SourceError(
            f"registry {client.ref.api_host} sent the upload to another host "
            f"{origin(url)[1]!r}; refusing to send credentials there"
        )
    url += ("&" if urlsplit(url).query else "?") + urlencode({"digest": digest})
    headers = {"Content-Type": "application/octet-stream", "Content-Length": str(len(data))}
    what = f"uploading blob {digest} to {where}"
    response = client.request(url, headers, what=what, stream=False, method="PUT", body=data)
    response.close()
    _check_push(client, response, what)
    return digest


def push_manifest(
    client: RegistryClient, reference: str, body: bytes, media_type: str
) -> Mapping[str, str]:
    """PUT a manifest under ``reference`` (a tag or its digest); return the response
    headers (``Docker-Content-Digest``, and ``OCI-Subject`` from registries with the
    referrers API)."""
    url = f"{client.base_url}/v2/{client.ref.repository}/manifests/{reference}"
    what = f"pushing manifest {reference} to {client.ref.api_host}/{client.ref.repository}"
    headers = {"Content-Type": media_type, "Content-Length": str(len(body))}
    response = client.request(url, headers, what=what, stream=False, method="PUT", body=body)
    response.close()
    _check_push(client, response, what)
    return response.headers  # case-insensitive


def referrers_page(
    client: RegistryClient, url: str, accept: str
) -> tuple[bytes, Mapping[str, str]] | None:
    """GET one page of the referrers API (``url`` absolute or ``/v2/...``); None on 404,
    which is how a registry without the API answers."""
    url = join_url(client.base_url, url, f"referrers of {client.ref.api_host}", client.ref.api_host)
    if origin(url) != origin(client.base_url):
        raise SourceError(f"registry {client.ref.api_host} paged referrers to another host")
    what = f"referrers {urlsplit(url).path} of {client.ref.api_host}"
    response = client.request(url, {"Accept": accept}, what=what, stream=True)
    if response.status_code == 404:
        response.close()
        return None
    client.check_status(response, what)
    try:
        body = client.read_limited(response, MAX_MANIFEST_BYTES, what)
    finally:
        response.close()
    return body, response.headers  # case-insensitive


def _check_push(client: RegistryClient, response: requests.Response, what: str) -> None:
    """Any 2xx is success; else the registry's first error code and message, quoted."""
    status = response.status_code
    if 200 <= status < 300:
        return
    if status == 401:
        raise client.auth.denied(401)
    if status == 403:
        raise client.auth.denied(403)
    detail = ""
    try:
        errors = response.json().get("errors") if response.content else None
        if isinstance(errors, list) and errors and isinstance(errors[0], dict):
            detail = f": {errors[0].get('code')} {errors[0].get('message')!r}"
    except (ValueError, AttributeError):
        pass
    except TRANSPORT_ERRORS:
        pass
    raise SourceError(f"{what}: registry answered HTTP {status}{detail}")
