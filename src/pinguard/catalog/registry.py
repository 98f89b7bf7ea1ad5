"""The analyzer registry: which analyzers run, what the layer walk keeps for them, the key.

``ANALYZERS`` lists the analyzer classes pinguard runs (in any order: see ``Catalog``);
adding an analyzer is one entry here plus its module in ``pinguard/catalog/``. ``Analyzers``
is the set configured for one run: it gives the layer walk one selector (every analyzer's
flags, OR-ed) and one stream opener (fanning a member out to each analyzer that asked to
stream it, keeping {analyzer name: result}), the layer cache key (see
``pinguard.cache.key.layer_key``: the source of this package, and every analyzer's name,
version, options and the source of the module defining it), and a fresh ``Catalog`` for
replaying layers.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

from pinguard.cache.key import layer_key, source_digest
from pinguard.catalog.conda import CondaAnalyzer
from pinguard.catalog.dpkg import DpkgAnalyzer
from pinguard.catalog.interface import (
    Analyzer,
    AnalyzerOptions,
    SnapshotParts,
    StateView,
    StepFacts,
)
from pinguard.catalog.native.analyzer import NativeAnalyzer
from pinguard.catalog.python import PythonAnalyzer
from pinguard.layers.analysis import LayerAnalysis
from pinguard.layers.tar import SKIP, STREAM, MemberStream, PartReader, Selector
from pinguard.models import Snapshot, package_order

#: Every analyzer pinguard runs. Their order changes no result: a session that needs what
#: the others found reads it in its post-state hook (``AnalyzerSession.after_state``).
ANALYZERS: tuple[type[Analyzer], ...] = (
    PythonAnalyzer,
    DpkgAnalyzer,
    CondaAnalyzer,
    NativeAnalyzer,
)


class _FanOut:
    """One member's content handed to each analyzer that asked to stream it."""

    __slots__ = ("_streams",)

    def __init__(self, streams: dict[str, MemberStream]) -> None:
        self._streams = streams

    def update(self, chunk: memoryview, /) -> None:
        for stream in self._streams.values():
            stream.update(chunk)

    def close(self) -> object:
        return {name: stream.close() for name, stream in self._streams.items()}


class _PartsFanOut:
    """One member read in parts for each analyzer that asked: the union of their gaps."""

    __slots__ = ("_readers",)

    def __init__(self, readers: dict[str, PartReader]) -> None:
        self._readers = readers

    def gaps(self) -> list[tuple[int, int]]:
        return sorted({g for r in self._readers.values() for g in r.gaps()})

    def feed_at(self, at: int, chunk: bytes, /) -> None:
        for reader in self._readers.values():
            for lo, hi in reader.gaps():
                if at <= lo and hi <= at + len(chunk):
                    reader.feed_at(lo, chunk[lo - at : hi - at])

    def close(self) -> object:
        return {name: reader.close() for name, reader in self._readers.items()}


@dataclass(frozen=True, slots=True)
class Analyzers:
    """The analyzers configured for one run."""

    members: tuple[Analyzer, ...]

    @classmethod
    def for_options(
        cls, options: AnalyzerOptions, classes: Sequence[type[Analyzer]] = ANALYZERS
    ) -> Analyzers:
        members = tuple(c.create(options) for c in classes)
        names = [a.name for a in members]
        if len(set(names)) != len(names):
            raise ValueError(f"analyzer names must be unique: {names!r}")
        return cls(members)

    def selector(self) -> Selector:
        """Flags for one path: what any analyzer asked for (called once per tar member)."""
        fns = tuple(a.wants for a in self.members)
        if len(fns) == 1:
            return fns[0]

        def select(path: str) -> int:
            want = SKIP
            for fn in fns:
                want |= fn(path)
            return want

        return select

    def open_stream(self, path: str, size: int) -> MemberStream:
        """The consumer for a STREAM member: each analyzer that asked, by name."""
        return _FanOut(
            {a.name: a.open_stream(path, size) for a in self.members if a.wants(path) & STREAM}
        )

    def open_parts(self, path: str, size: int, digest: str) -> PartReader | None:
        """A reader of the parts a STREAM member's analyzers need, when every analyzer
        that streams it can read parts (``Analyzer.open_parts``); else None."""
        readers: dict[str, PartReader] = {}
        for a in self.members:
            if a.wants(path) & STREAM:
                reader = a.open_parts(path, size, digest)
                if reader is None:
                    return None
                readers[a.name] = reader
        return _PartsFanOut(readers) if readers else None

    def prepare(self, analysis: LayerAnalysis) -> None:
        """Each analyzer's ``prepare`` of the layer's captured files, kept on ``analysis``
        (run where the layer was read, so the parent replaying states parses less)."""
        for a in self.members:
            made = a.prepare(analysis.files)
            if made:
                analysis.prepared[a.name] = made

    def versions(self) -> tuple[str, ...]:
        """``name=version`` of each analyzer, sorted (stated in shared cache entries)."""
        return tuple(sorted(f"{a.name}={a.version}" for a in self.members))

    def key(self) -> str:
        """The layer cache key for what these analyzers keep from a layer."""
        package = sys.modules["pinguard.catalog"]  # every module of it: protocol, registry, ...
        parts = [f"{package.__name__}={source_digest(package)}"]
        for a in self.members:
            module = sys.modules[type(a).__module__]
            parts.append(f"{a.name}={a.version};{a!r};{source_digest(module)}")
        return layer_key(parts)

    def catalog(self) -> Catalog:
        return Catalog(self)


class Catalog:
    """What the analyzers found in a state, kept up to date as layers are applied."""

    def __init__(self, analyzers: Analyzers) -> None:
        self._sessions = tuple(a.session() for a in analyzers.members)

    def update(self, state: StateView, touched: Sequence[str]) -> None:
        """Re-read what changed: ``touched`` are the paths a layer added or removed."""
        for session in self._sessions:
            session.update(state, touched)

    def snapshot(self, state: StateView, step: StepFacts | None = None) -> Snapshot:
        """The state's snapshot: every session's contribution, then every post-state hook
        (``AnalyzerSession.after_state``), each list put in an order of its own, so the
        order of the analyzers changes nothing."""
        parts = SnapshotParts()
        for session in self._sessions:
            session.contribute(state, parts)
        for session in self._sessions:
            session.after_state(state, parts, step or StepFacts())
        return Snapshot(
            environments=tuple(sorted(parts.environments, key=lambda e: e.path)),
            incomplete=tuple(sorted(parts.incomplete, key=lambda i: (i.what, i.why))),
            native=tuple(sorted(parts.native, key=lambda lib: lib.path)),
            resolutions=tuple(parts.resolutions),
            os_release=parts.os_release,
            packages=tuple(sorted(parts.packages, key=package_order)),
        )
