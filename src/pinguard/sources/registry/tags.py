"""A repository's tags through the distribution API: ``GET /v2/<name>/tags/list``.

Follows the ``Link: <...>; rel="next"`` pagination distribution answers with ``?n=``, reads
each page with the same limits, retries and authentication as manifests, and returns the
tags sorted. Used by ``pinguard fleet`` to audit every tag of a repository.
"""

from __future__ import annotations

import json
import re
from urllib.parse import urljoin

from pinguard.errors import SourceError
from pinguard.sources.registry.pull import RegistrySource

PAGE = 1000
MAX_PAGE_BYTES = 4 << 20
MAX_PAGES = 100
_NEXT = re.compile(r'<([^>]+)>\s*;\s*rel="?next"?')


def list_tags(source: RegistrySource) -> list[str]:
    """Every tag of ``source``'s repository, sorted."""
    repo = source.ref.repository
    url: str | None = f"{source.base_url}/v2/{repo}/tags/list?n={PAGE}"
    tags: set[str] = set()
    pages = 0
    while url is not None:
        pages += 1
        if pages > MAX_PAGES:
            raise SourceError(f"the tag list of {repo} has more than {MAX_PAGES} pages")
        what = f"the tag list of {source.ref.api_host}/{repo}"
        body, headers = source.client.get_small(
            url, {"Accept": "application/json"}, MAX_PAGE_BYTES, what
        )
        try:
            doc = json.loads(body)
        except ValueError as exc:
            raise SourceError(f"{what} is not JSON: {exc}") from None
        listed = doc.get("tags") if isinstance(doc, dict) else None
        if listed is not None and not isinstance(listed, list):
            raise SourceError(f"{what} has no tag array")
        tags.update(str(t) for t in listed or ())
        match = _NEXT.search(headers.get("Link", ""))
        url = urljoin(url, match.group(1)) if match else None
    return sorted(tags)
