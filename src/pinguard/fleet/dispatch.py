"""Enqueue fleet audits and wait for them: the enqueuer's side of ``app.py``.

``references_from`` gathers what to audit (the command line, a file of references, every
tag of a registry repository but the referrers tags, ``is_referrers_tag``: attestations and
signatures, never images), de-duplicated and sorted. ``enqueue`` sends one task per
reference; ``wait`` collects their records from the result store as tasks finish, and gives
an image whose task has not finished by the deadline a ``pending`` record, and one whose task
failed unexpectedly an ``error`` record (exit 1), so the summary always has every image.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pinguard.errors import EXIT_FINDINGS, UsageError
from pinguard.fleet.records import ImageRecord, ResultStore

#: the OCI referrers tag schema (``sha256-<hex>``, what ``pinguard attest --push`` and
#: fleet attestations write on a registry without the referrers API) and cosign's
#: ``sha256-<hex>.sig`` / ``.att`` / ``.sbom``
_REFERRERS_TAG = re.compile(r"^sha(256|512)-[0-9a-f]+(\..*)?$")


def is_referrers_tag(tag: str) -> bool:
    """Whether ``tag`` holds an image's referrers (attestations, signatures), not an image:
    neither ``fleet run --repository`` nor the push receiver audits it."""
    return _REFERRERS_TAG.match(tag) is not None


def references_from(
    references: Sequence[str],
    files: Sequence[Path] = (),
    repositories: Sequence[str] = (),
    insecure_registries: tuple[str, ...] = (),
) -> list[str]:
    """The references to audit: given, listed in files (one a line, ``#`` comments), and
    ``docker://HOST/REPO:TAG`` for every tag of each repository but its referrers tags."""
    out = set(references)
    for path in files:
        try:
            text = path.read_text()
        except OSError as exc:
            raise UsageError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
        for raw in text.splitlines():
            line = raw.split("#", 1)[0].strip()
            if line:
                out.add(line)
    if repositories:
        from pinguard.sources.interface import SourceOptions
        from pinguard.sources.registry import RegistrySource
        from pinguard.sources.tags import list_tags

        for repo in repositories:
            name = repo.removeprefix("docker://")
            source = RegistrySource(name, SourceOptions(insecure_registries=insecure_registries))
            try:
                out.update(
                    f"docker://{name}:{tag}"
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
    """One task sent: the reference it audits and the Celery task id."""

    reference: str
    task_id: str


def enqueue(app: Any, references: Iterable[str], options: Mapping[str, Any]) -> list[Enqueued]:
    from pinguard.fleet.app import TASK_NAME

    return [
        Enqueued(ref, app.send_task(TASK_NAME, args=(ref, dict(options))).id) for ref in references
    ]


def wait(
    app: Any, tasks: Sequence[Enqueued], store: ResultStore, timeout: float
) -> list[ImageRecord]:
    """Each task's record, waiting at most ``timeout`` seconds in all."""
    deadline = time.monotonic() + timeout
    records: dict[str, ImageRecord] = {}
    pending = list(tasks)
    while pending and time.monotonic() < deadline:
        still = []
        for task in pending:
            result = app.AsyncResult(task.task_id)
            if not result.ready():
                still.append(task)
                continue
            records[task.task_id] = _record(task, result, store)
        pending = still
        if pending:
            time.sleep(0.2)
    for task in pending:
        records[task.task_id] = ImageRecord(
            reference=task.reference,
            verdict="pending",
            exit_code=EXIT_FINDINGS,
            error=f"not finished within {timeout:g} s (task {task.task_id})",
        )
    return [records[t.task_id] for t in tasks]


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
