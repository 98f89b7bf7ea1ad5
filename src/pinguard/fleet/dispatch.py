"""Enqueue fleet audits and wait for them: the enqueuer's side of ``app.py``.

``references_from`` gathers what to audit (the command line, a file of references, every
tag of a registry repository but the referrers tags, ``is_referrers_tag``: attestations and
signatures, never images), each read here by the one reference resolver (``sendable``: bad
syntax or a missing path fails before anything is enqueued, a local path is sent as its
absolute path), de-duplicated and sorted. ``enqueue`` sends one task per
reference, noting the name of the record it will write and that record file as it was
before (``ResultStore.stamp``). ``wait`` collects the records: the result store holds the
truth (workers write it whatever happens to the broker), so a record written since the task
was sent is its answer; the result backend (the broker's Redis) is asked only for what the
store cannot say, a task that failed unexpectedly (an ``error`` record, exit 1). A broker
lost while waiting is ridden out until the deadline: the store is still read, the broker
probed about once a second, and the backend asked again once it is back (``notify`` is told
of both). An image whose task has not finished by the deadline is ``pending`` (exit 1), so
the summary always has every image; when the broker is still unreachable then,
``BrokerLost`` carries every record, the pending ones with exit 3 (a host that could not be
reached), for the caller to report before it fails.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pinguard.errors import EXIT_FINDINGS, EXIT_UNREACHABLE, UsageError
from pinguard.fleet.broker import BrokerUnreachable, broker_cause, probe
from pinguard.fleet.records import ImageRecord, ResultStore, record_id

#: seconds between two looks at the store and the backend, and between two broker probes
POLL = 0.2
PROBE_EVERY = 1.0

#: the OCI referrers tag schema (``sha256-<hex>``, what ``pinguard attest --push`` and
#: fleet attestations write on a registry without the referrers API) and cosign's
#: ``sha256-<hex>.sig`` / ``.att`` / ``.sbom``
_REFERRERS_TAG = re.compile(r"^sha(256|512)-[0-9a-f]+(\..*)?$")


def is_referrers_tag(tag: str) -> bool:
    """Whether ``tag`` holds an image's referrers (attestations, signatures), not an image:
    neither ``fleet run --repository`` nor the push receiver audits it."""
    return _REFERRERS_TAG.match(tag) is not None


def sendable(reference: str) -> str:
    """``reference`` as a task carries it to a worker: read here by the one resolver every
    command uses (``sources.resolve_reference``), so bad syntax (``InvalidReference``, exit
    2) or a path that names nothing (``ImageNotFound``, exit 3) fails before anything is
    enqueued; a local path, with or without its transport, becomes its transport and
    absolute path (``oci-archive:/work/out/app.tar``), which a worker reads from the same
    filesystem whatever its own directory. Other references are sent as given."""
    from pinguard.sources import resolve_reference
    from pinguard.sources.reference import PATH_TRANSPORTS, split_path

    ref = resolve_reference(reference)
    if ref.transport not in PATH_TRANSPORTS:
        return reference
    path, sep, tail = split_path(ref.transport, ref.rest)
    absolute = os.path.abspath(path)
    if ":" in absolute:
        raise UsageError(
            f"image reference {reference!r}: its absolute path {absolute!r} holds ':', which "
            "a reference cannot carry to a worker"
        )
    return f"{ref.transport}:{absolute}{sep}{tail}"


def references_from(
    references: Sequence[str],
    files: Sequence[Path] = (),
    repositories: Sequence[str] = (),
    insecure_registries: tuple[str, ...] = (),
) -> list[str]:
    """The references to audit: given, listed in files (one a line, ``#`` comments), each
    as ``sendable`` makes it (so a bad one fails here), and ``docker://HOST/REPO:TAG`` for
    every tag of each repository but its referrers tags."""
    given = list(references)
    for path in files:
        try:
            text = path.read_text()
        except OSError as exc:
            raise UsageError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
        for raw in text.splitlines():
            line = raw.split("#", 1)[0].strip()
            if line:
                given.append(line)
    out = {sendable(ref) for ref in given}
    if repositories:
        from pinguard.sources.interface import SourceOptions
        from pinguard.sources.reference import registry_reference, strip_registry_prefix
        from pinguard.sources.registry import RegistrySource, list_tags

        for repo in repositories:
            name = strip_registry_prefix(repo)
            source = RegistrySource(name, SourceOptions(insecure_registries=insecure_registries))
            try:
                out.update(
                    registry_reference(f"{name}:{tag}")
                    for tag in list_tags(source)
                    if not is_referrers_tag(tag)
                )
            finally:
                source.close()
    if not out:
        raise UsageError("nothing to audit: give references, --file or --repository")
    return sorted(out)


@dataclass(frozen=True, slots=True)
class Enqueued:
    """One task sent: the reference it audits, the Celery task id, the name of the record
    it writes (``record_id``) and that record file's stamp before it was sent (None: there
    was none, or no store was given)."""

    reference: str
    task_id: str
    record: str = ""
    before: tuple[int, ...] | None = None


def enqueue(
    app: Any,
    references: Iterable[str],
    options: Mapping[str, Any],
    store: ResultStore | None = None,
) -> list[Enqueued]:
    from pinguard.fleet.app import TASK_NAME

    out = []
    for ref in references:
        rid = record_id(ref, options)
        before = store.stamp(rid) if store is not None else None
        sent = app.send_task(TASK_NAME, args=(ref, dict(options)))
        out.append(Enqueued(ref, sent.id, rid, before))
    return out


class BrokerLost(BrokerUnreachable):
    """The broker was still unreachable when ``wait`` ran out of time with audits pending:
    exit 3. ``records`` has every task's record (the pending ones with exit 3), for the
    report; ``lost_for`` is how long it had been unreachable."""

    def __init__(self, cause: str, records: list[ImageRecord], lost_for: float) -> None:
        super().__init__(cause)
        self.cause = cause
        self.records = records
        self.lost_for = lost_for


def _fresh(task: Enqueued, store: ResultStore) -> ImageRecord | None:
    """The record the task wrote, when the store has one written since it was sent."""
    if not task.record:
        return None
    stamp = store.stamp(task.record)
    if stamp is None or stamp == task.before:
        return None
    try:
        return store.read(task.record)
    except (ValueError, KeyError, TypeError):
        return None  # not a record (yet): asked again next time


def wait(
    app: Any,
    tasks: Sequence[Enqueued],
    store: ResultStore,
    timeout: float,
    notify: Callable[[str], None] | None = None,
) -> list[ImageRecord]:
    """Each task's record, waiting at most ``timeout`` seconds in all; ``BrokerLost`` when
    audits are pending at the deadline and the broker is unreachable then."""
    tell = notify or (lambda _text: None)
    start = time.monotonic()
    deadline = start + timeout
    records: dict[str, ImageRecord] = {}
    pending = list(tasks)
    lost: str | None = None  # why the broker is unreachable, while it is
    lost_at = next_probe = 0.0
    while pending:
        still = []
        for task in pending:
            record = _fresh(task, store)
            if record is None and lost is None:
                try:
                    result = app.AsyncResult(task.task_id)
                    if result.ready():
                        record = _record(task, result, store)
                except Exception as exc:
                    cause = broker_cause(exc)
                    if cause is None:
                        raise
                    lost, lost_at, next_probe = cause, time.monotonic(), time.monotonic()
                    tell(
                        f"lost the broker ({cause}); waiting for it, and reading the result "
                        f"store {store.directory}, for at most {deadline - lost_at:.0f} s more"
                    )
            if record is None:
                still.append(task)
            else:
                records[task.task_id] = record
        pending = still
        now = time.monotonic()
        if not pending or now >= deadline:
            break
        if lost is not None and now >= next_probe:
            cause = probe(app)
            if cause is None:
                tell(f"the broker is back after {now - lost_at:.0f} s")
                lost = None
                continue
            lost, next_probe = cause, time.monotonic() + PROBE_EVERY
        time.sleep(min(POLL, max(0.0, deadline - time.monotonic())))
    for task in pending:
        if lost is None:
            why = f"not finished within {timeout:g} s (task {task.task_id})"
        else:
            why = (
                f"not finished within {timeout:g} s (task {task.task_id}); the broker has been "
                f"unreachable for the last {time.monotonic() - lost_at:.0f} s ({lost})"
            )
        records[task.task_id] = ImageRecord(
            reference=task.reference,
            verdict="pending",
            exit_code=EXIT_FINDINGS if lost is None else EXIT_UNREACHABLE,
            error=why,
        )
    out = [records[t.task_id] for t in tasks]
    if pending and lost is not None:
        raise BrokerLost(lost, out, time.monotonic() - lost_at)
    return out


def _record(task: Enqueued, result: Any, store: ResultStore) -> ImageRecord:
    if result.successful():
        value = result.result
        rid = value.get("id") if isinstance(value, dict) else None
        record = store.read(str(rid)) if rid else None
        if record is not None:
            return record
        why = f"task {task.task_id} finished but its record {rid!r} is not in {store.directory}"
    else:
        why = f"task {task.task_id} failed: {result.result!r:.300}"
    return ImageRecord(
        reference=task.reference, verdict="error", exit_code=EXIT_FINDINGS, error=why
    )
