"""Package URLs as the analyzers write them: the purl spec's encoding, without a library.

An analyzer builds its records' purls where it reads them (``pkg:deb``, ``pkg:pypi``), so the
reports only copy them. This module owns the encoding those purls share, written to give the
very strings ``packageurl-python`` (which the SBOM writers use) gives for the same parts:
each part percent-encoded but for ``/`` and ``:``, the name lower-cased for the types that
fold case (``pkg:pypi`` also turns ``_`` into ``-``), namespace segments split on ``/``,
qualifier keys lower-cased and sorted, empty qualifiers left out. The catalog needs no SBOM
library for it (``tests/catalog/test_purl.py`` holds the two to the same strings).
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import quote

#: purl types whose names (and namespaces) are case-insensitive, as packageurl-python folds them.
_FOLDED = frozenset({"pypi"})


def _encode(part: str) -> str:
    return quote(part, safe="/:")


def package_url(
    kind: str,
    name: str,
    version: str | None = None,
    namespace: str | None = None,
    qualifiers: Mapping[str, str] | None = None,
) -> str:
    """``pkg:<kind>/<namespace>/<name>@<version>?<qualifiers>`` (parts left out when empty)."""
    out = f"pkg:{kind}/"
    if namespace:
        segments = [s for s in namespace.strip().strip("/").split("/") if s.strip()]
        if kind in _FOLDED:
            segments = [s.lower() for s in segments]
        if segments:
            out += "/".join(_encode(s) for s in segments) + "/"
    clean = _encode(name).strip().strip("/")
    if kind in _FOLDED:
        clean = clean.lower()
    if kind == "pypi":
        clean = clean.replace("_", "-")
    out += clean
    if version and (v := _encode(version.strip())):
        out += f"@{v}"
    pairs = sorted(
        (key.strip().lower(), _encode(value))
        for key, value in (qualifiers or {}).items()
        if key.strip() and value and value.strip()
    )
    if pairs:
        out += "?" + "&".join(f"{key}={value}" for key, value in pairs)
    return out
