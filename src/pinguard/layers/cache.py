"""The per-layer analysis cache: its entry format and its full key.

A layer's analysis never changes for a given digest and the code that produced it, so a
second audit of the same image reads no layer again. The key (``cache_key``) covers all of
that code without anyone having to remember a version bump: the entry format version, a
digest of the source of every module in ``pinguard.layers`` (verifier, inflater, tar walk,
whiteout recording, this format), and the parts the analyzer registry adds (the source of
its package: the analyzers, their protocol and registry; each analyzer's name, explicit version,
options, and the source of the module that defines it, so an analyzer living elsewhere is
covered too). Entries are JSON files written atomically (``pinguard.fileio.atomic_write``),
so two runs sharing a cache directory never see a half-written entry. Each entry carries
the sha256 of its own canonical JSON (``"content"``), checked on read: an unreadable entry,
or one altered after it was written (even into valid JSON), is treated as missing.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from functools import cache
from importlib import import_module, resources
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from importlib.abc import Traversable  # importlib.resources.abc from 3.11 on

from pinguard.fileio import atomic_write
from pinguard.layers.analysis import LayerAnalysis

FORMAT = "4"  # the JSON layout of an entry (2: "streamed"; 3: "content" digest; 4: "name_flags")

#: Packages whose every module's source is part of the key: the code that makes an analysis.
#: (The catalog's comes in through the registry's parts: layers/ never imports upwards.)
PRODUCERS = ("pinguard.layers",)


def default_cache_dir() -> Path:
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("pinguard")) / "layers"


def _sources(module: ModuleType) -> list[tuple[str, bytes]]:
    """(name, bytes) of a module's source; for a package, of every module file below it."""
    file = getattr(module, "__file__", None)
    if file is None:
        raise RuntimeError(f"module {module.__name__!r} has no file: cannot key the layer cache")
    path = Path(file)
    if not hasattr(module, "__path__"):
        loader = getattr(module.__spec__, "loader", None)
        get_data = getattr(loader, "get_data", None)  # a file on disk or inside a zipapp
        return [(module.__name__, get_data(file) if get_data else path.read_bytes())]
    # importlib.resources walks a package on disk and inside a zipapp alike (the in-build
    # guard runs from pinguard.pyz, where the files are no paths)
    out: list[tuple[str, bytes]] = []

    def walk(node: Traversable, prefix: str) -> None:
        for child in sorted(node.iterdir(), key=lambda c: c.name):
            if child.is_dir():
                if child.name != "__pycache__":
                    walk(child, f"{prefix}{child.name}/")
            elif child.name.endswith((".py", ".pyc")):
                out.append((f"{module.__name__}/{prefix}{child.name}", child.read_bytes()))

    walk(resources.files(module.__name__), "")
    if not out:
        raise RuntimeError(f"package {module.__name__!r} has no module files to key the cache")
    return out


@cache
def source_digest(module: ModuleType) -> str:
    """sha256 over the source of ``module`` (all of it, for a package)."""
    h = hashlib.sha256()
    for name, data in _sources(module):
        h.update(f"{name}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def cache_key(parts: Iterable[str]) -> str:
    """The entry key: the format, the producers' source, then the registry's ``parts``."""
    h = hashlib.sha256(f"format={FORMAT}\0".encode())
    for name in PRODUCERS:
        module = import_module(name)
        h.update(f"{module.__name__}={source_digest(module)}\0".encode())
    for part in parts:
        h.update(part.encode("utf-8") + b"\0")
    return h.hexdigest()[:16]


class LayerCache:
    """A directory of ``<algo>-<hex>.<key>.json`` files."""

    def __init__(self, directory: Path, key: str) -> None:
        self.directory = directory
        self.key = key

    def _path(self, digest: str) -> Path:
        algo, _, hexpart = digest.partition(":")
        if not hexpart or not hexpart.isalnum() or not algo.isalnum():
            raise ValueError(f"not a digest: {digest!r}")
        return self.directory / f"{algo}-{hexpart}.{self.key}.json"

    def get(self, digest: str) -> LayerAnalysis | None:
        try:
            data = unseal(self._path(digest).read_bytes())
            if data is None:
                return None
            analysis = LayerAnalysis.from_json(data)
        except (OSError, ValueError, KeyError, TypeError, AssertionError, AttributeError):
            return None
        return analysis if analysis.digest == digest else None

    def put(self, analysis: LayerAnalysis) -> None:
        target = self._path(analysis.digest)
        text = seal(analysis.to_json())
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(target, text)

    def report(self) -> tuple[str, ...]:
        """Nothing to report: an unreadable or altered entry here is quietly a miss."""
        return ()


_SEALED = re.compile(rb'\{"content":"(sha256:[0-9a-f]{64})"[,}]')


def seal(data: dict[str, object]) -> str:
    """An entry's text: its canonical JSON (sorted keys, no spaces) with ``content``, the
    sha256 of that JSON, written as the first key."""
    body = json.dumps(data, separators=(",", ":"), sort_keys=True)
    digest = "sha256:" + hashlib.sha256(body.encode("utf-8")).hexdigest()
    return f'{{"content":"{digest}"' + ("}" if body == "{}" else "," + body[1:])


def unseal(raw: bytes) -> dict[str, Any] | None:
    """The entry ``seal`` wrote, without ``content``; None when the text is not a sealed
    entry or its digest does not match. The digest is checked over the bytes as stored, so
    reading an entry does not serialise it again (0.24 s of a 9 MB replay entry's 0.75 s)."""
    found = _SEALED.match(raw)
    if found is None:
        return None
    body = b"{" + raw[found.end() :] if raw[found.end() - 1 : found.end()] == b"," else b"{}"
    if "sha256:" + hashlib.sha256(body).hexdigest() != found.group(1).decode():
        return None
    data = json.loads(body)
    return data if isinstance(data, dict) else None
