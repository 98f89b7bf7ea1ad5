"""The contract every analyzer implements, and the values it exchanges with the catalog.

An analyzer has two halves. The per-layer half runs inside the layer walk and is cached with
the layer: ``wants(path)`` returns the ``pinguard.layers.tar`` flags for a regular file
(CAPTURE its bytes, HASH its content, STREAM its content chunk by chunk to the consumer
``open_stream(path, size)`` returns; several flags may be combined, SKIP is 0), and the
consumer's ``close()`` value is kept in the layer analysis. The per-state half,
``session()``, is kept up to date as layers are applied (``update`` with the merged files and
the paths a layer touched) and adds what it found to the snapshot (``contribute``). A session
that needs what other analyzers found in the same state (the native analyzer joins each
library to the wheel or package that owns it) says so with a post-state hook,
``after_state``: it runs once every session has contributed to the state's parts, so no
analyzer depends on the order of the analyzer list.

An analyzer is a frozen dataclass whose fields are its options: its ``name``, ``version``,
``repr`` (so its options) and the source of the module that defines it are all part of the
layer cache key, so nothing an analyzer does can be served from a stale cache entry.
"""

from __future__ import annotations

import abc
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from pinguard.errors import LayerError
from pinguard.layers.tar import MemberStream, PartReader
from pinguard.models import (
    DebPackage,
    Environment,
    Incomplete,
    NativeLibrary,
    Package,
    Platform,
    Resolution,
    debs_of,
)
from pinguard.target import platform_machine


@dataclass(frozen=True, slots=True)
class AnalyzerOptions:
    """What a run asks of the analyzers (built once from the audit options)."""

    verify_records: bool = False


class StateView(abc.ABC):
    """The merged view of the layers applied so far, as analyzers read it."""

    @property
    @abc.abstractmethod
    def files(self) -> Mapping[str, bytes]:
        """Captured files by absolute path."""

    @property
    @abc.abstractmethod
    def streamed(self) -> Mapping[str, Mapping[str, object]]:
        """Per streamed path: {analyzer name: what its member consumer returned}."""

    @property
    @abc.abstractmethod
    def links(self) -> Mapping[str, str]:
        """Symlinks and hard links an analyzer flagged LINK: path -> target as stored."""

    def prepared(self, analyzer: str) -> Mapping[str, object]:
        """What ``analyzer``'s ``prepare`` made of the captured files, by path (for files that
        landed where their layer stored them); possibly of a file a later layer replaced, so a
        session checks that a value still describes the file it finds (the same bytes object).
        None here (the default): every file is parsed again."""
        return {}


@dataclass(slots=True)
class SnapshotParts:
    """What the sessions of one state add up to; the catalog turns it into a ``Snapshot``."""

    environments: list[Environment] = field(default_factory=list)
    incomplete: list[Incomplete] = field(default_factory=list)
    native: list[NativeLibrary] = field(default_factory=list)
    os_release: tuple[tuple[str, str], ...] = ()  # os-release(5) KEY=value pairs, sorted
    packages: list[Package] = field(default_factory=list)  # generic records of any kind
    resolutions: list[Resolution] = field(default_factory=list)  # by consumer, NEEDED order

    @property
    def debs(self) -> tuple[DebPackage, ...]:
        """The Debian packages contributed so far (records of kind ``deb``), as typed views."""
        return debs_of(self.packages)


@dataclass(frozen=True, slots=True)
class ImageFacts:
    """What a post-state hook may know of the image beyond its states."""

    env: tuple[str, ...] = ()  # the image config's Env, KEY=value strings
    machine: str = "x86_64"  # platform_machine of the image's platform

    @classmethod
    def of(cls, config: Mapping[str, object], platform: Platform | None) -> ImageFacts:
        """From an image config document (``{"config": {"Env": [...]}}``) and platform."""
        inner = config.get("config")
        env = inner.get("Env") if isinstance(inner, dict) else None
        return cls(
            tuple(str(e) for e in env) if isinstance(env, list) else (),
            platform_machine(platform) if platform is not None else "x86_64",
        )


@dataclass(frozen=True, slots=True)
class StepFacts:
    """The step that made a state, as post-state hooks see it."""

    layer: str = ""  # the digest of the layer applied last ("" outside an audit)
    written: Collection[str] = ()  # the paths that layer streamed, as stored
    image: ImageFacts = ImageFacts()


class AnalyzerSession(abc.ABC):
    """One analyzer's incremental view of one audit's states."""

    @abc.abstractmethod
    def update(self, state: StateView, touched: Sequence[str]) -> None:
        """Re-read what changed: ``touched`` are the paths a layer added or removed."""

    @abc.abstractmethod
    def contribute(self, state: StateView, parts: SnapshotParts) -> None:
        """Add this analyzer's findings for the current state to ``parts``."""

    def after_state(self, state: StateView, parts: SnapshotParts, step: StepFacts) -> None:
        """The post-state hook: runs once every session has contributed to this state's
        ``parts``, so it may read what other analyzers found (environments, packages) and add
        what needs them, and the step and image around the state. It reads the others'
        ``contribute`` only, never another hook's additions. The default does nothing."""
        return


class Analyzer(abc.ABC):
    """One kind of thing pinguard catalogs (Python distributions, Debian packages, ...)."""

    name: ClassVar[str]  # unique; keys its streamed results
    version: ClassVar[str]  # bump when its output changes meaning (the source is keyed too)

    @classmethod
    @abc.abstractmethod
    def create(cls, options: AnalyzerOptions) -> Analyzer:
        """The analyzer configured for one run."""

    @abc.abstractmethod
    def wants(self, path: str) -> int:
        """SKIP, or CAPTURE / HASH / STREAM flags for the regular file at ``path``.

        Called once per layer member: keep it cheap (a set lookup before any parsing)."""

    def open_stream(self, path: str, size: int) -> MemberStream:
        """The consumer for a member ``wants`` flagged STREAM (``size`` bytes will follow)."""
        raise LayerError(f"analyzer {self.name!r} asked to stream {path!r} but consumes no streams")

    def open_parts(self, path: str, size: int, digest: str) -> PartReader | None:
        """For a STREAM member of a layer that can be read in parts (zstd:chunked), a
        reader of only the parts needed, giving the same summary as ``open_stream``'s
        consumer; ``digest`` is the content's, vouched for by the layer's table of contents.
        None (the default): the member is read whole and streamed."""
        return None

    def prepare(self, files: Mapping[str, bytes]) -> dict[str, object]:
        """Parse, in the worker process that read a layer, what a state will need of the
        files this layer captured, by path (picklable values); the session finds them in
        ``StateView.prepared``. The default prepares nothing."""
        return {}

    @abc.abstractmethod
    def session(self) -> AnalyzerSession:
        """A fresh per-audit state for replaying layers."""
