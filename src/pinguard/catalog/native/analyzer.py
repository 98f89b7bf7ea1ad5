"""Native shared objects in a state: which ones there are, their owners, and the analyzer.

This module owns what the catalog records about ELF shared objects: which paths count as
shared objects (``wants``), the consumer that streams each one through
``pinguard.catalog.native.elf.ElfScanner`` (SONAME, NEEDED, RPATH/RUNPATH, banner, digest,
read from the stream in whatever order the file lays them out), dpkg's ``.list`` files,
the ``/etc/ld.so.conf(.d)`` files it captures, and per state, in the session's post-state
hook, each library joined to its owner (``libraries``), the layer that last wrote it and the
loader's resolutions (``pinguard.catalog.native.loader``).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from pinguard.catalog.interface import (
    Analyzer,
    AnalyzerOptions,
    AnalyzerSession,
    SnapshotParts,
    StateView,
    StepFacts,
)
from pinguard.catalog.native.elf import BANNERS, ElfFacts, ElfScanner, scan_bytes
from pinguard.catalog.native.loader import FileView, StepResolver, is_ld_so_conf
from pinguard.catalog.native.preload import PRELOAD_SOURCES
from pinguard.layers.tar import CAPTURE, LINK, SKIP, STREAM, MemberStream, PartReader
from pinguard.models import DebPackage, Distribution, Environment, Incomplete, NativeLibrary

VERSION = "2"

__all__ = ["BANNERS", "ElfFacts", "ElfScanner", "scan_bytes"]  # re-exported: the ELF reader

_SO_NAME = re.compile(r"^[^/]+\.so(\.[0-9][0-9A-Za-z_.]*)?$")
_EXT_TAG = re.compile(r"\.(cpython-\d+[^./]*|abi3)\.so$")  # PEP 3149 / PEP 384 suffixes


def wants(path: str) -> bool:
    """Shared objects worth reading: ``lib*.so[.N]`` anywhere, other ``*.so[.N]`` in a
    Python environment or a ``lib*`` directory tree.

    Library names (``lib*``) and extension modules with an ABI tag (``*.cpython-311-…so``,
    ``*.abi3.so``: a symlinked site-packages may put them in any directory) count wherever
    they are, since ``ld.so.conf`` and RPATHs may name any directory (not below
    ``/usr/share``, ``/proc``, ``/sys``, ``/dev``); other shared objects (extension modules such as
    ``_C.cpython-311-x86_64-linux-gnu.so``) count when a directory on their path is a
    ``site-packages``/``dist-packages`` or starts with ``lib`` (``/usr/lib``, ``/lib64``,
    ``/opt/x/lib``).
    """
    base = path[path.rfind("/") + 1 :]
    if ".so" not in base or not _SO_NAME.match(base):
        return False
    if base.startswith("lib") or _EXT_TAG.search(base):
        return not path.startswith(("/proc/", "/sys/", "/dev/", "/usr/share/"))
    for part in path.split("/")[1:-1]:
        if part.startswith("lib") or part in {"site-packages", "dist-packages"}:
            return True
    return False


DPKG_INFO = "/var/lib/dpkg/info/"


def is_dpkg_list(path: str) -> bool:
    """``/var/lib/dpkg/info/<package>[:<arch>].list``: the files a package installed."""
    return path.startswith(DPKG_INFO) and path.endswith(".list") and path.count("/") == 5


def wants_link(path: str) -> bool:
    """Symlinks the resolver follows: library names, and directories that may be on a path.

    Kept: what ``wants`` keeps, and links with at most three components (``/lib``,
    ``/usr/local/cuda``, ``/etc/alternatives/cuda``) or whose name starts with ``lib``
    (``/usr/local/cuda/lib64`` -> ``targets/x86_64-linux/lib``).
    """
    if wants(path):
        return True
    base = path[path.rfind("/") + 1 :]
    return path.count("/") <= 3 or base.startswith("lib")


def list_libraries(data: bytes) -> tuple[str, ...]:
    """The shared-object paths a dpkg ``.list`` file names (the rest is not kept)."""
    out = []
    for raw in data.decode("utf-8", "surrogateescape").splitlines():
        path = raw.strip()
        if path.startswith("/") and wants(path):
            out.append(posixpath.normpath(path))
    return tuple(sorted(set(out)))


class ListStream:
    """A member consumer for a dpkg ``.list`` file: keeps only its shared-object lines."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def update(self, chunk: memoryview, /) -> None:
        self._parts.append(bytes(chunk))

    def close(self) -> object:
        return list(list_libraries(b"".join(self._parts)))


def _package_of_list(path: str) -> str:
    """``/var/lib/dpkg/info/libnccl2:amd64.list`` -> ``libnccl2``."""
    base = path[len(DPKG_INFO) : -len(".list")]
    return base.split(":", 1)[0]


def _resolver(
    view: FileView, reals: dict[str, str | None] | None = None
) -> Callable[[str], str | None]:
    """``view.resolve`` that resolves each directory once: a path whose last component is
    no link resolves to its directory, resolved, plus that component (what ``resolve``
    gives, without walking the directory's components again for every file in it).
    ``reals`` keeps each answer by path (valid while the view's links stay the same)."""
    links = view.links
    known: dict[str, str | None] = {} if reals is None else reals

    def real(path: str) -> str | None:
        if path in known:
            return known[path]
        parent, _, base = path.rpartition("/")
        if not parent or base in {"", ".", ".."}:
            found = view.resolve(path)
        else:
            where = view.resolve(parent)  # view.memo: each directory resolved once
            if where is None:
                found = None  # a loop in the directory part is a loop in the path
            else:
                found = where + base if where == "/" else where + "/" + base
                if found in links:
                    found = view.resolve(path)
        known[path] = found
        return found

    return real


#: A distribution's RECORD entries that name shared objects: (distribution, entries) by
#: ``id`` of the distribution, which the entry holds (so the id is not reused meanwhile).
LibraryRecords = dict[int, tuple[Distribution, tuple[tuple[str, str], ...]]]


def _library_records(
    dist: Distribution, memo: LibraryRecords | None
) -> tuple[tuple[str, str], ...]:
    if memo is not None:
        held = memo.get(id(dist))
        if held is not None and held[0] is dist:
            return held[1]
    # ".so" first: most rows are no shared object, and the test costs no call
    found = tuple((path, digest) for path, digest in dist.record if ".so" in path and wants(path))
    if memo is not None:
        memo[id(dist)] = (dist, found)
    return found


def libraries(
    elf: Mapping[str, ElfFacts],
    view: FileView,
    environments: Sequence[Environment],
    debs: Sequence[DebPackage],
    dpkg_lists: Mapping[str, Iterable[str]],
    layers: Mapping[str, str] | None = None,
    memo: LibraryRecords | None = None,
    reals: dict[str, str | None] | None = None,
) -> tuple[NativeLibrary, ...]:
    """The native libraries of a state, each with its owner, sorted by path.

    ``elf`` holds the facts of every streamed shared object (by path), ``dpkg_lists`` the
    library paths of each ``.list`` file (by the list's path), ``layers`` the digest of the
    layer that last wrote each path (filled by the audit). A wheel owns a file its RECORD
    lists; else a package whose ``.list`` names it (through symlinked directories such as
    ``/lib`` -> ``usr/lib``); else it has no owner. ``memo`` keeps each distribution's
    library entries from one state to the next (the distributions a layer left alone are
    the same objects), ``reals`` each path's resolution (while the links stay the same).
    """
    if not elf:
        return ()  # nothing to own: no RECORD or file list need be resolved
    resolve_path = _resolver(view, reals)
    wheel: dict[str, tuple[Environment, str, str, str]] = {}
    for env in environments:
        for dist in env.distributions:
            for path, digest in _library_records(dist, memo):
                real = resolve_path(path) or path
                wheel.setdefault(real, (env, dist.name, dist.raw_version, digest))
    versions = {d.name: d.version for d in debs}
    deb: dict[str, tuple[str, str]] = {}
    for list_path, paths in sorted(dpkg_lists.items()):
        package = _package_of_list(list_path)
        if package not in versions:
            continue  # a .list left by a removed package
        for listed in paths:
            real = resolve_path(listed) or listed
            deb.setdefault(real, (package, versions[package]))
    out: list[NativeLibrary] = []
    for path, facts in sorted(elf.items()):
        kind = owner = version = environment = record = None
        if path in wheel:
            env, name, version, digest = wheel[path]
            kind, owner, environment, record = "wheel", str(name), env.path, digest or None
        elif path in deb:
            kind = "deb"
            owner, version = deb[path]
        out.append(
            NativeLibrary(
                path=path,
                digest=facts.digest,
                size=facts.size,
                layer=(layers or {}).get(path, ""),
                soname=facts.soname,
                needed=facts.needed,
                rpath=facts.rpath,
                runpath=facts.runpath,
                library=facts.library,
                version=facts.version,
                owner_kind=kind,
                owner=owner,
                owner_version=version,
                owner_environment=environment,
                record_digest=record,
                problem=facts.problem,
            )
        )
    return tuple(out)


class ElfStream:
    """The layer walk's consumer for one shared object: an ``ElfScanner`` behind
    ``MemberStream``; its summary is the ``ElfFacts`` as JSON (None: not an ELF file)."""

    __slots__ = ("_scanner",)

    def __init__(self, path: str, size: int) -> None:
        self._scanner = ElfScanner(size, posixpath.basename(path))

    def update(self, chunk: memoryview, /) -> None:
        self._scanner.feed(chunk)

    def close(self) -> object:
        facts = self._scanner.finish()
        return None if facts is None else facts.to_json()


class ElfParts:
    """The same facts as ``ElfStream`` from only the parts of the object they lie in (the
    ELF header, program headers, dynamic segment and wanted strings), read at random from a
    layer that allows it; the content digest is the one its table of contents vouches for."""

    __slots__ = ("_scanner",)

    def __init__(self, path: str, size: int, digest: str) -> None:
        self._scanner = ElfScanner(size, posixpath.basename(path), digest=digest)

    def gaps(self) -> list[tuple[int, int]]:
        return self._scanner.gaps()

    def feed_at(self, at: int, chunk: bytes, /) -> None:
        self._scanner.feed_at(at, chunk)

    def close(self) -> object:
        facts = self._scanner.finish()
        return None if facts is None else facts.to_json()


@dataclass(frozen=True, slots=True)
class NativeAnalyzer(Analyzer):
    """ELF shared objects, the links to them, ld.so.conf and dpkg's file lists."""

    name = "native"
    version = VERSION

    @classmethod
    def create(cls, options: AnalyzerOptions) -> NativeAnalyzer:
        return cls()

    def wants(self, path: str) -> int:
        if path.endswith(PRELOAD_SOURCES) and "-packages/" in path:
            return CAPTURE  # what torch and CuPy load themselves (preload.py)
        if ".so" in path:
            if wants(path):
                return STREAM | LINK
            if path.endswith(".conf") and is_ld_so_conf(path):
                return CAPTURE
        if path.endswith(".list") and is_dpkg_list(path):
            return STREAM
        if path.count("/") <= 3 or path[path.rfind("/") + 1 :].startswith("lib"):
            return LINK  # a directory link the resolver may need (only links honour it)
        return SKIP

    def open_stream(self, path: str, size: int) -> MemberStream:
        if is_dpkg_list(path):
            return ListStream()
        return ElfStream(path, size)

    def open_parts(self, path: str, size: int, digest: str) -> PartReader | None:
        if is_dpkg_list(path):
            return None  # a file list: read whole
        return ElfParts(path, size, digest)

    def session(self) -> NativeSession:
        return NativeSession()


class NativeSession(AnalyzerSession):
    """Recomputes the libraries of a state from what the layers streamed (cheap: facts
    are already parsed). Owners are joined, and the loader's search run, in the post-state
    hook, once the Python and dpkg sessions have contributed the state's environments and
    packages: RECORDs and dpkg lists change from one state to the next."""

    def __init__(self) -> None:
        # what the last state's streamed results were read into, kept while the same
        # result objects are there: path -> (result, facts), and the distributions' libraries
        self._facts: dict[str, tuple[object, ElfFacts]] = {}
        self._records: LibraryRecords = {}
        # this state's ELF facts and dpkg lists (contribute), for the post-state hook
        self._elf: dict[str, ElfFacts] = {}
        self._lists: dict[str, list[str]] = {}
        # the layer that last wrote each library of the last state
        self._layers: dict[str, str] = {}
        # the links of the last state, and what was resolved through them: kept from one
        # state to the next while a layer changes no link (most layers change none)
        self._links: dict[str, str] = {}
        self._resolved: dict[str, str | None] = {}  # FileView.resolve's, by path
        self._reals: dict[str, str | None] = {}  # libraries' resolver's, by path
        self._loader = StepResolver()  # the last state's resolutions, while its inputs hold

    def update(self, state: StateView, touched: Sequence[str]) -> None:
        return None

    def contribute(self, state: StateView, parts: SnapshotParts) -> None:
        elf: dict[str, ElfFacts] = {}
        lists: dict[str, list[str]] = {}
        known = self._facts
        read: dict[str, tuple[object, ElfFacts]] = {}
        for path, results in state.streamed.items():
            value = results.get(NativeAnalyzer.name)
            if value is None:
                continue
            if is_dpkg_list(path):
                assert isinstance(value, list)
                lists[path] = [str(v) for v in value]
            else:
                assert isinstance(value, dict)
                held = known.get(path)
                if held is not None and held[0] is value:
                    facts = held[1]
                else:
                    facts = ElfFacts.from_json(value)
                read[path] = (value, facts)
                elf[path] = facts
                if facts.problem is not None:
                    parts.incomplete.append(Incomplete(path, facts.problem))
        self._facts = read
        self._elf, self._lists = elf, lists

    def after_state(self, state: StateView, parts: SnapshotParts, step: StepFacts) -> None:
        """Each library joined to its owner among the environments and Debian packages the
        other sessions found, with the layer that last wrote it (this step's for what its
        layer streamed), and where ld.so finds each watched or twice-provided NEEDED."""
        live = {id(d) for env in parts.environments for d in env.distributions}
        self._records = {k: v for k, v in self._records.items() if k in live}
        if state.links != self._links:  # a layer changed a link: every answer may change
            self._links = dict(state.links)
            self._resolved, self._reals = {}, {}
        # the same answers as state_view(state): the ELF facts are the dict-valued results
        view = FileView(frozenset(self._elf), self._links, self._resolved)
        written = set(step.written)
        before = self._layers
        layers = {p: step.layer if p in written else before.get(p, "") for p in self._elf}
        self._layers = layers
        libs = libraries(
            self._elf,
            view,
            parts.environments,
            parts.debs,
            self._lists,
            layers,
            self._records,
            self._reals,
        )
        parts.native.extend(libs)
        if libs:
            environments = sorted(parts.environments, key=lambda e: e.path)
            parts.resolutions.extend(
                self._loader.resolve(
                    libs, view, state.files, environments, step.image.env, step.image.machine
                )
            )


def state_view(state: StateView) -> FileView:
    """The shared objects and links of a state, as the resolver walks them."""
    files = frozenset(
        p for p, r in state.streamed.items() if isinstance(r.get(NativeAnalyzer.name), dict)
    )
    return FileView(files, dict(state.links))
