"""The replay cache: what replaying an image's layers computed, kept for the next audit.

Owns one entry per image chain: everything ``steps.build_result`` derives from the layer
analyses (each step with its changes, causes and unmet requirements, each step's snapshot
with the loader's resolutions, the incomplete items, the history notes, the final file
digests), so a warm audit reads one entry instead of every layer's analysis and replays
nothing. The key (``pinguard.cache.key.replay_key``, made in the one key module) covers the
entry format, the source of every module that takes part in the replay (``pinguard.audit``,
``pinguard.cache``, ``pinguard.layers``, ``pinguard.catalog``, ``pinguard.models``,
``pinguard.target``), the Python and ``packaging`` versions (PEP 440 order and markers), the
layer cache's key (the analyzers' names, versions and options) and limits, the platform, the
image config's canonical JSON (its history, Env and diff_ids) and the chain of layer digests
and diff_ids in order. Entries are kept in the one entry format
(``pinguard.cache.entry.EntryDir``: written atomically, sealed with the sha256 of their own
canonical JSON, as layer entries are); an entry that fails that check, or does not decode
into the models, is a miss. Values are encoded from the frozen models by their type hints,
and a distribution, environment or package record that several snapshots share is written
once and shared again when read, so an entry grows with what the image holds, not with its
number of steps times that. ``replay_store`` says where an audit's entry lives (a cache
directory, no layer on disk, no lazy read), ``from_replay`` the result an entry answers.
"""

from __future__ import annotations

import atexit
import dataclasses
import enum
import os
import types
import typing
import warnings
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pinguard.cache.entry import EntryDir
from pinguard.cache.key import REPLAY_FORMAT, replay_key
from pinguard.models import (
    AuditResult,
    Distribution,
    Environment,
    ImageInfo,
    Incomplete,
    Package,
    Snapshot,
    Step,
)
from pinguard.sources.interface import ResolvedImage

if TYPE_CHECKING:
    from pinguard.audit.options import AuditOptions

# written once per entry, referenced by index (an analyzer hands the states after a change
# the same records: a distribution of an environment is one record in every step)
_SHARED = (Distribution, Environment, Package)


@dataclasses.dataclass(frozen=True, slots=True)
class Replay:
    """What ``build_result`` computed from the analyses, apart from the source's facts."""

    steps: tuple[Step, ...]
    snapshots: tuple[Snapshot, ...]
    incomplete: tuple[Incomplete, ...]
    notes: tuple[str, ...]  # the history's notes (the source's own notes are not kept)
    file_digests: tuple[tuple[str, str], ...]


# --------------------------------------------------------------------------- encoding


_PLAIN = frozenset({str, int, float, bool, type(None)})


# How a field is encoded: most recursively; the long flat ones (RECORD rows, file lists) as
# they are: a tuple of strings, or of pairs of strings, is already what JSON writes as the
# same lists (a dense image's entry is mostly RECORD rows: 134,000 of them encoded at 0.43 s
# recursively, measured with py-spy; copied into lists, 7% of the parent's replay of the
# 1 GB dense image). The entry is only ever written as JSON.
_GENERIC, _FLAT = 0, 1
_FIELDS: dict[type, tuple[tuple[str, int], ...] | None] = {}


def _fields(cls: type) -> tuple[tuple[str, int], ...] | None:
    """(name, how) of each field of a dataclass type, in order (None: not a dataclass)."""
    try:
        return _FIELDS[cls]
    except KeyError:
        spec = None
        if dataclasses.is_dataclass(cls):
            hints = typing.get_type_hints(cls)
            how = {tuple[tuple[str, str], ...]: _FLAT, tuple[str, ...]: _FLAT}
            spec = tuple(
                (f.name, how.get(hints[f.name], _GENERIC)) for f in dataclasses.fields(cls)
            )
        _FIELDS[cls] = spec
        return spec


def _encode_fields(
    value: Any, spec: tuple[tuple[str, int], ...], shared: dict[int, int], table: list[Any]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, how in spec:
        v = getattr(value, name)
        if how == _FLAT:
            out[name] = v  # written by json as the lists it holds
        else:
            out[name] = _encode(v, shared, table)
    return out


def _encode(value: Any, shared: dict[int, int], table: list[Any]) -> Any:
    cls = type(value)
    if cls in _PLAIN:  # most values: returned as they are
        return value
    if cls is tuple or cls is list:
        return [_encode(v, shared, table) for v in value]
    spec = _fields(cls)
    if spec is not None:
        if isinstance(value, _SHARED):
            at = shared.get(id(value))
            if at is None:
                fields = _encode_fields(value, spec, shared, table)
                at = shared[id(value)] = len(table)
                table.append(fields)
            return at
        return _encode_fields(value, spec, shared, table)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple | list):
        return [_encode(v, shared, table) for v in value]
    return value  # str, int, bool, None, and direct_url's JSON as it was read


class _Context:
    """One entry being read: its table of shared values and those built so far."""

    def __init__(self, table: list[Any]) -> None:
        self.table = table
        self.built: dict[int, Any] = {}


_Decoder = typing.Callable[[Any, _Context], Any]


def _plain(kind: type) -> _Decoder:
    def decode(data: Any, ctx: _Context) -> Any:
        if not isinstance(data, kind):
            raise TypeError(f"expected {kind.__name__}")
        return data

    return decode


def _as_is(data: Any, ctx: _Context) -> Any:
    return data


@cache
def _decoder(tp: Any) -> _Decoder:
    """A decoder for values of type ``tp``, made once per type (reading is the warm path)."""
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        (inner_tp,) = [a for a in typing.get_args(tp) if a is not type(None)]
        inner = _decoder(inner_tp)
        return lambda data, ctx: None if data is None else inner(data, ctx)
    if origin is tuple:
        args = typing.get_args(tp)
        if args == (str, Ellipsis):

            def strings(data: Any, ctx: _Context) -> Any:
                out = tuple(data)
                if not all(type(v) is str for v in out):
                    raise TypeError("expected strings")
                return out

            return strings
        if args == (tuple[str, str], Ellipsis):

            def pairs(data: Any, ctx: _Context) -> Any:
                out = tuple((k, v) for k, v in data)
                if not all(type(k) is str and type(v) is str for k, v in out):
                    raise TypeError("expected pairs of strings")
                return out

            return pairs
        if len(args) == 2 and args[1] is Ellipsis:
            item = _decoder(args[0])
            return lambda data, ctx: tuple(item(d, ctx) for d in _list(data))
        items = [_decoder(a) for a in args]

        def fixed(data: Any, ctx: _Context) -> Any:
            if len(_list(data)) != len(items):
                raise TypeError(f"expected {len(items)} items")
            return tuple(f(d, ctx) for f, d in zip(items, data, strict=True))

        return fixed
    if origin is dict or tp is Any:
        return _as_is
    if isinstance(tp, typing.NewType):  # NormalizedName
        return _decoder(tp.__supertype__)
    if isinstance(tp, type) and issubclass(tp, _SHARED):
        build = _builder(typing.cast(type, tp))

        def shared(data: Any, ctx: _Context) -> Any:
            if type(data) is not int:
                raise TypeError(f"expected a table index for {tp.__name__}")
            if data not in ctx.built:
                ctx.built[data] = build(ctx.table[data], ctx)
            return ctx.built[data]

        return shared
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _builder(tp)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return lambda data, ctx: tp(data)
    if tp in (str, int, bool):
        return _plain(tp)
    raise TypeError(f"cannot decode {tp!r}")


def _list(data: Any) -> list[Any]:
    if not isinstance(data, list):
        raise TypeError("expected a list")
    return data


@cache
def _builder(cls: type) -> _Decoder:
    hints = typing.get_type_hints(cls)
    fields = tuple((f.name, _decoder(hints[f.name])) for f in dataclasses.fields(cls))
    names = {name for name, _ in fields}

    def build(data: Any, ctx: _Context) -> Any:
        if not isinstance(data, dict) or data.keys() != names:
            raise TypeError(f"expected the fields of {cls.__name__}")
        return cls(**{name: f(data[name], ctx) for name, f in fields})

    return build


def encode(replay: Replay) -> dict[str, Any]:
    """``replay`` as JSON-ready data (shared distributions and environments in ``table``):
    what ``StepEncoder`` gives when handed its steps one by one."""
    encoder = StepEncoder()
    for step, snapshot in zip(replay.steps, replay.snapshots, strict=True):
        encoder.step(step, snapshot)
    return encoder.finish(replay.incomplete, replay.notes, replay.file_digests)


class StepEncoder:
    """A replay entry's data, encoded a step at a time as the audit replays them
    (``steps.StepBuilder``), so most of the entry is encoded while later layers are still
    being read. Every value handed in must stay alive until ``finish``: shared values are
    known by id."""

    def __init__(self) -> None:
        self._shared: dict[int, int] = {}
        self._table: list[Any] = []
        self._steps: list[Any] = []
        self._snapshots: list[Any] = []

    def step(self, step: Step, snapshot: Snapshot) -> None:
        """One step of the history and the snapshot after it."""
        self._steps.append(_encode(step, self._shared, self._table))
        self._snapshots.append(_encode(snapshot, self._shared, self._table))

    def finish(
        self,
        incomplete: tuple[Incomplete, ...],
        notes: tuple[str, ...],
        file_digests: tuple[tuple[str, str], ...],
    ) -> dict[str, Any]:
        """The entry's data, as ``encode`` gives it for a ``Replay`` of the steps handed in
        and these fields."""
        rest = Replay((), (), incomplete, notes, file_digests)
        body = _encode(rest, self._shared, self._table)
        body["steps"] = self._steps
        body["snapshots"] = self._snapshots
        return {"format": REPLAY_FORMAT, "table": self._table, "replay": body}


def decode(data: dict[str, Any]) -> Replay:
    """The ``Replay`` that ``encode`` wrote; raises ``TypeError``/``KeyError`` when it is not."""
    if data.get("format") != REPLAY_FORMAT:
        raise TypeError("another entry format")
    table = data["table"]
    if not isinstance(table, list):
        raise TypeError("table is not a list")
    replay = _builder(Replay)(data["replay"], _Context(table))
    if not isinstance(replay, Replay):
        raise TypeError("not a replay")
    return replay


# --------------------------------------------------------------------------- the store


class ReplayCache:
    """``replay-<key>.json`` entries in the layer cache's directory (``EntryDir``)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._entries = EntryDir(directory, "replay")

    def get(self, key: str) -> Replay | None:
        data = self._entries.get(key)
        if data is None:
            return None
        try:
            return decode(data)
        except (ValueError, KeyError, TypeError, IndexError, AssertionError):
            return None

    def put(self, key: str, encoded: dict[str, Any]) -> None:
        """Store a replay as ``encode`` or ``StepEncoder.finish`` gives it."""
        self._entries.put(key, encoded)

    def put_behind(self, key: str, encoded: dict[str, Any]) -> None:
        """``put``, in a forked child process: the caller goes on (judges, renders) while
        the entry is encoded and written; ``wait_behind`` waits for it, and so does the
        process before it exits. Where there is no fork, ``put`` here and now."""
        fork = getattr(os, "fork", None)
        if fork is None:
            self.put(key, encoded)
            return
        with warnings.catch_warnings():
            # 3.12 warns of fork beside live threads (a progress bar's): the child runs none
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = fork()
        if pid == 0:  # the child: write, and leave without running the parent's exit code
            code = 0
            try:
                self.put(key, encoded)
            except BaseException:  # an entry not written is a miss, never a wrong answer
                code = 1
            os._exit(code)
        if not _BEHIND:
            atexit.register(wait_behind)
        _BEHIND.append(pid)


#: Children writing replay entries behind (``ReplayCache.put_behind``), not yet waited for.
_BEHIND: list[int] = []


def wait_behind() -> None:
    """Wait for every replay entry being written behind. A Ctrl-C meanwhile does not cut
    the wait short (the child, interrupted too, cleans up and exits at once)."""
    while _BEHIND:
        pid = _BEHIND[-1]
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
        except KeyboardInterrupt:
            continue
        _BEHIND.pop()


# --------------------------------------------------------------------------- the store


def replay_store(resolved: ResolvedImage, options: AuditOptions) -> tuple[ReplayCache, str] | None:
    """Where this image chain's replay entry lives, when it may have one: a cache directory,
    and no layer that is a directory on disk (its digest does not address its content)."""
    if options.cache_dir is None or any(layer.tree is not None for layer in resolved.layers):
        return None
    if options.layer_read == "lazy":
        return None  # the replay keeps no layer reads: a lazy audit reads its layer entries
    key = replay_key(options.layers_key(), resolved.platform, resolved.config, resolved.layers)
    return ReplayCache(options.cache_dir), key


def image_info(resolved: ResolvedImage) -> ImageInfo:
    """Which image a result names: the same for a built result and a replayed one."""
    return ImageInfo(
        reference=resolved.reference,
        manifest_digest=resolved.manifest_digest,
        platform=resolved.platform,
        transport=resolved.transport,
    )


def from_replay(resolved: ResolvedImage, replay: Replay) -> AuditResult:
    return AuditResult(
        image=image_info(resolved),
        steps=replay.steps,
        final=replay.snapshots[-1] if replay.snapshots else Snapshot(),
        snapshots=replay.snapshots,
        incomplete=replay.incomplete,
        notes=tuple(resolved.notes) + replay.notes,
        file_digests=replay.file_digests,
    )
