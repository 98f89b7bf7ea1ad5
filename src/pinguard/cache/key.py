"""Every cache key pinguard makes: the one digest over a key's parts, and what each key covers.

Every cache entry pinguard keeps is named by ``digest_of(parts)``: the sha256 over each part
followed by a NUL (so two parts never run together into a third). The four keys are made
here, each from its own parts: ``layer_key`` (a layer analysis: the entry format, the source
of ``pinguard.layers`` and ``pinguard.cache``, the analyzers' parts that the catalog
registry hands over, the layer limits and a lazy read's suffix), ``replay_key`` (an image
chain replayed: the layer key, the platform, Python and ``packaging``, the source of every
module a replay runs, the config and the chain of layer digests), ``result_key`` (a
rendered report: every file of the package, Python and what is installed beside it, the
working directory, the command line and the resolved image) and ``quick_key`` (a command line
as given, before it is parsed: the package's files by ``package_fingerprint``, Python, what is
installed, the working directory, the machine, the environment pinguard reads and what
policy discovery reads). ``source_digest`` hashes a
module's source (every module of a package), so a change to the code invalidates its entries
without anyone remembering a version bump; ``package_digest`` hashes every file of a
package, data included (built-in policies, schemas, templates). Both read through
``os.scandir`` when the package is a directory on disk and through ``importlib.resources``
when it is not, so they work inside a zipapp too (the in-build guard runs from
``pinguard.pyz``). Nothing here imports another pinguard module (the
types below are for the checker only), so a warm audit makes its key without the pipeline.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from functools import cache
from importlib import import_module
from pathlib import Path

# ``typing.TYPE_CHECKING`` without importing typing (2 ms of a warm audit): mypy reads the name
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping, Sequence
    from importlib.abc import Traversable  # importlib.resources.abc from 3.11 on
    from types import ModuleType
    from typing import Any

    from pinguard.sources.interface import LayerRef, ResolvedImage
    from pinguard.target import Platform

#: The layout of a layer entry (2: "streamed"; 3: "content" digest; 4: "name_flags"; 5: the
#: local cache's entry is the shared one, layer, key and analyzers beside the analysis).
LAYER_FORMAT = "5"
#: Packages whose every module's source is part of the layer key: the code that makes an
#: analysis and the entry format it is kept in (the catalog's comes in through the
#: registry's parts: ``pinguard.catalog.Analyzers.key``).
LAYER_PRODUCERS = ("pinguard.layers", "pinguard.cache")
#: The layout of a replay entry (2: snapshots without ``debs``, Debian packages being generic
#: ``packages`` records since 8b74810, and every distribution of an environment too since
#: 81b19bd, each record written once in the shared table like a distribution).
REPLAY_FORMAT = "2"
#: Modules whose source is part of the replay key: all the code a replay runs.
REPLAYERS = (
    "pinguard.audit",
    "pinguard.cache",
    "pinguard.layers",
    "pinguard.catalog",
    "pinguard.models",
    "pinguard.target",
)
#: The layout of a result entry (2: the report beside the entry, ``EntryDir.put``'s
#: attachment, read without decoding 0.6 MB of escaped JSON: 3 ms of a warm audit's 40).
RESULT_FORMAT = "2"
#: The layout of a quick entry (``cli/warm.py``: a command line's result entry and inputs).
QUICK_FORMAT = "1"
#: The environment variables pinguard reads, and the prefixes of those it reads by prefix
#: (a Dockerfile's ``PIP_*`` and ``UV_*`` settings): part of the quick key, which stands for
#: the parsed command line (tests/cache/test_key.py finds every variable the source names
#: and checks that it is here).
READ_ENVIRONMENT = (
    "DOCKER_CONFIG",
    "DOCKER_HOST",
    "HOME",
    "PATH",
    "SOURCE_DATE_EPOCH",
    "TZ",
    "VIRTUAL_ENV",
    "XDG_CACHE_HOME",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
)
READ_ENVIRONMENT_PREFIXES = ("PINGUARD_", "PIP_", "UV_")


def digest_of(parts: Iterable[str]) -> str:
    """The sha256 (hex) over ``parts``, each followed by a NUL."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode("utf-8", "surrogateescape") + b"\0")
    return h.hexdigest()


def _walk(package: str, keep: tuple[str, ...] | None) -> list[tuple[str, bytes]]:
    """(name, bytes) of every file below ``package`` whose name ends in one of ``keep``
    (None: every file), sorted by path; ``__pycache__`` is never entered."""
    out: list[tuple[str, bytes]] = []
    on_disk = _directory(package)
    if on_disk is not None:  # most installs: os.scandir, 4x less time than below
        _scan(on_disk, f"{package}/", keep, out)
        return out
    from importlib import resources  # here: it imports zipfile, which a disk install skips

    root = resources.files(package)

    def walk(node: Traversable, prefix: str) -> None:
        for child in sorted(node.iterdir(), key=lambda c: c.name):
            if child.is_dir():
                if child.name != "__pycache__":
                    walk(child, f"{prefix}{child.name}/")
            elif keep is None or child.name.endswith(keep):
                out.append((f"{package}/{prefix}{child.name}", child.read_bytes()))

    walk(root, "")
    return out


def _directory(package: str) -> str | None:
    """The directory on disk that holds the imported package ``package`` (what
    ``importlib.resources.files`` gives as a ``Path``), or None (inside a zipapp, say)."""
    module = import_module(package)
    paths = list(getattr(module, "__path__", None) or ())
    if len(paths) == 1 and os.path.isdir(paths[0]):
        return str(paths[0])
    return None


def _scan(
    directory: str, prefix: str, keep: tuple[str, ...] | None, out: list[tuple[str, bytes]]
) -> None:
    """``_walk`` of a directory on disk (the same names, order and bytes)."""
    for name, entry in _entries(directory, prefix):
        if keep is None or entry.name.endswith(keep):
            with open(entry.path, "rb") as fh:
                out.append((name, fh.read()))


def _entries(directory: str, prefix: str) -> Iterator[tuple[str, os.DirEntry[str]]]:
    """(``prefix`` + path, entry) of every file below ``directory`` on disk, sorted by path;
    ``__pycache__`` is never entered."""
    with os.scandir(directory) as it:
        entries = sorted(it, key=lambda e: e.name)
    for entry in entries:
        if entry.is_dir():
            if entry.name != "__pycache__":
                yield from _entries(entry.path, f"{prefix}{entry.name}/")
        else:
            yield prefix + entry.name, entry


def _sources(module: ModuleType) -> list[tuple[str, bytes]]:
    """(name, bytes) of a module's source; for a package, of every module file below it."""
    file = getattr(module, "__file__", None)
    if file is None:
        raise RuntimeError(f"module {module.__name__!r} has no file: cannot key the cache")
    if not hasattr(module, "__path__"):
        loader = getattr(module.__spec__, "loader", None)
        get_data = getattr(loader, "get_data", None)  # a file on disk or inside a zipapp
        return [(module.__name__, get_data(file) if get_data else Path(file).read_bytes())]
    out = _walk(module.__name__, (".py", ".pyc"))
    if not out:
        raise RuntimeError(f"package {module.__name__!r} has no module files to key the cache")
    return out


def _digest(files: Iterable[tuple[str, bytes]]) -> str:
    h = hashlib.sha256()
    for name, data in files:
        h.update(f"{name}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


@cache
def source_digest(module: ModuleType) -> str:
    """sha256 over the source of ``module`` (all of it, for a package)."""
    return _digest(_sources(module))


@cache
def package_digest(package: str) -> str:
    """sha256 over every file of the package named ``package`` (modules and data alike),
    read without importing any module below it."""
    return _digest(_walk(package, None))


def code_parts(names: Iterable[str]) -> list[str]:
    """``name=<source digest>`` of each module or package named (imported to find its
    files)."""
    return [f"{name}={source_digest(import_module(name))}" for name in names]


def layer_key(analyzer_parts: Iterable[str]) -> str:
    """The layer entry key of these analyzers: the format, the producers' source, then the
    catalog registry's ``analyzer_parts``, cut to 16 hex digits (a valid OCI tag with the
    layer digest before it)."""
    parts = [f"format={LAYER_FORMAT}", *code_parts(LAYER_PRODUCERS), *analyzer_parts]
    return digest_of(parts)[:16]


def layer_store_key(analyzers: str, limits: str, *, lazy: bool) -> str:
    """The key a layer store is opened with: the analyzers' ``layer_key``, the limits, and a
    lazy read's own suffix, so an analysis read from a TOC never answers for a full read."""
    return f"{analyzers}-{limits}{'-lazy' if lazy else ''}"


def replay_key(
    layers_key: str,
    platform: Platform | None,
    config: Mapping[str, Any],
    layers: Sequence[LayerRef],
) -> str:
    """The replay entry key for this image chain replayed by this code with these
    analyzers (``layers_key``: the layer store's key)."""
    import packaging  # orders versions and evaluates markers: another release may judge otherwise

    parts = [
        f"replay={REPLAY_FORMAT}",
        layers_key,
        repr(platform),
        f"python={sys.version_info[:3]}",
        f"packaging={packaging.__version__}",
        *code_parts(REPLAYERS),
        json.dumps(config, sort_keys=True, separators=(",", ":")),
    ]
    for layer in layers:
        parts += [layer.digest, layer.diff_id or ""]
    return digest_of(parts)


def result_key(
    command: Mapping[str, Any], resolved: ResolvedImage, *, policy: str, dockerfile: str
) -> str:
    """The result entry key: everything a report depends on but the policy files' content
    and the date (``command``: the parsed command line; ``policy``: what policy discovery
    reads; ``dockerfile``: the digest of the Dockerfile read, if any)."""
    parts = [
        f"result={RESULT_FORMAT}",
        f"pinguard={package_digest('pinguard')}",
        f"python={sys.version}",
        *_installed(),
        f"cwd={os.getcwd()}",
        json.dumps(command, sort_keys=True, default=str),
        f"policy={policy}",
        f"dockerfile={dockerfile}",
        _image(resolved),
    ]
    return digest_of(parts)


def quick_key(argv: Sequence[str], *, policy: str) -> str:
    """The quick entry key of the command line ``argv`` as given (before it is parsed): the
    package's files by ``package_fingerprint``, Python and what is installed beside it, the
    working directory, the machine, the environment pinguard reads and what policy discovery
    reads (``policy``). Equal keys parse to the same command line and options, since the
    parse is a function of these; the image and the Dockerfile are checked apart, by the
    digests of the files they were read from."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k in READ_ENVIRONMENT or k.startswith(READ_ENVIRONMENT_PREFIXES)
    }
    parts = [
        f"quick={QUICK_FORMAT}",
        f"pinguard={package_fingerprint('pinguard')}",
        f"python={sys.version}",
        f"executable={sys.executable}",
        *_installed(),
        f"cwd={os.getcwd()}",
        f"machine={os.uname().machine if hasattr(os, 'uname') else sys.platform}",
        json.dumps(env, sort_keys=True),
        json.dumps(list(argv)),
        f"policy={policy}",
    ]
    return digest_of(parts)


def package_fingerprint(package: str) -> str:
    """The files of ``package`` on disk by path, size, modification and change time
    (nanoseconds): what a quick key must read of the code in a fraction of the time the
    content takes (175 stats against reading 1.5 MB). Writing any file changes its change
    time, whatever its content and modification time are set to after. A package not on
    disk (inside a zipapp) is keyed by its content, ``package_digest``."""
    directory = _directory(package)
    if directory is None:
        return package_digest(package)
    stats: list[str] = []
    for name, entry in _entries(directory, f"{package}/"):
        st = entry.stat()
        stats.append(f"{name}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}")
    return digest_of(stats)


def _image(resolved: ResolvedImage) -> str:
    """The resolved image as canonical JSON: all a report reads of it."""
    return json.dumps(
        {
            "reference": resolved.reference,
            "transport": resolved.transport,
            "manifest": resolved.manifest_digest,
            "platform": repr(resolved.platform),
            "config": resolved.config,
            "layers": [
                [layer.digest, layer.size, layer.media_type, layer.diff_id, layer.annotations]
                for layer in resolved.layers
            ],
            "notes": resolved.notes,
        },
        sort_keys=True,
        separators=(",", ":"),
    )


def _installed() -> list[str]:
    """The distributions installed where this Python imports from (name and version are in a
    ``.dist-info`` directory's name): a renderer's or ``packaging``'s upgrade is a miss."""
    out: list[str] = []
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        out.extend(f"{entry}/{n}" for n in sorted(n for n in names if n.endswith(".dist-info")))
    return out
