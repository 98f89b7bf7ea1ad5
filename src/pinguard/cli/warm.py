"""The result cache: a warm audit answered with the very report a cold one rendered.

A report is a function of the image (its manifest, config and layers, as the source
resolves them), the command line, the working directory, the policy files, the date (a
waiver expires) and the code that made it (every file of the ``pinguard`` package, the
Python running it and the distributions installed beside it). ``lookup`` resolves the image
(the manifest and the config: what every audit fetches first, and the least a warm audit
can do, since a tag may have moved), hashes all of that but the policy files' content and the
date into ``pinguard.cache.key.result_key`` (the one key module), and reads
the ``result`` entry of that key from the cache directory (``pinguard.cache.entry.EntryDir``,
sealed and checked like every entry). A hit also needs every policy file the report was
judged by (``extend``-ed ones included) to have the digest it had, and today to lie in the
window in which no waiver of that policy changed state; then the stored report is written as
the cold audit wrote it and its exit code returned, without importing the audit pipeline,
the policy engine or a renderer. On a miss the audit goes on with the source already
resolved, and ``Lookup.keep`` stores what it rendered. No entry is read or kept for a lazy
read (a pass is confirmed by a full read), with a shared cache (its notes are this run's),
with ``--no-cache``, for a ``dir:`` root filesystem (its digest does not address its
content) or for the table drawn on stdout (a terminal's width and colours are its own).

``answer`` is the same hit for an image resolved from local files alone (an ``oci:``
layout), taken before the command line is even parsed: ``Lookup.keep`` also stores a
``quick`` entry under ``pinguard.cache.key.quick_key`` of the command line as given, naming
the result entry and the files the image was resolved from (and the Dockerfile read) with
their digests. ``answer`` finds it, re-reads those files, and writes the result entry's report
when every digest is the same and the result entry holds as above: the same bytes as the
``lookup`` hit, without argparse, the source modules or a resolve. Anything else, from a
missing entry to a file that changed, leaves the command to ``main``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from pinguard.cache.entry import EntryDir, default_cache_dir
from pinguard.cache.key import QUICK_FORMAT, RESULT_FORMAT, quick_key, result_key
from pinguard.cli.output import emit, what_report

# ``typing.TYPE_CHECKING`` without importing typing (2 ms of a warm audit): mypy reads the name
TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    import datetime as _dt
    from collections.abc import Sequence
    from typing import Any

    from pinguard.policy.model import Policy
    from pinguard.sources.interface import ImageSource, ResolvedImage

KIND = "result"
QUICK = "quick"


class Lookup:
    """What ``lookup`` found: on a hit the report and its exit code; on a miss the source it
    opened and resolved (None when the command cannot be answered from the cache), for the
    audit to go on with, and where ``keep`` stores the result (and, when the image was
    resolved from local files alone, the quick entry of the command line: ``quick`` its
    key, ``inputs`` the files with their digests)."""

    __slots__ = (
        "code",
        "emit",
        "entries",
        "inputs",
        "key",
        "quick",
        "report",
        "resolved",
        "source",
    )

    def __init__(
        self,
        report: str | None = None,
        code: int = 0,
        source: ImageSource | None = None,
        resolved: ResolvedImage | None = None,
        entries: EntryDir | None = None,
        key: str = "",
        quick: str = "",
        inputs: tuple[tuple[str, str], ...] = (),
        emit: tuple[str | None, str] = (None, ""),
    ) -> None:
        self.report = report
        self.code = code
        self.source = source
        self.resolved = resolved
        self.entries = entries
        self.key = key
        self.quick = quick
        self.inputs = inputs
        self.emit = emit

    def keep(self, report: str, code: int, policy: Policy, today: _dt.date) -> None:
        """Store the report a miss rendered, judged by ``policy`` on ``today`` (then the
        quick entry that names it)."""
        if self.entries is None:
            return
        self.entries.put(
            self.key,
            {
                "format": RESULT_FORMAT,
                "exit": code,
                "policy": [list(pair) for pair in policy.source.files],
                "valid": list(_window(policy, today)),
            },
            attachment=report.encode("utf-8"),
        )
        if self.quick:
            EntryDir(self.entries.directory, QUICK).put(
                self.quick,
                {
                    "format": QUICK_FORMAT,
                    "result": self.key,
                    "inputs": [list(pair) for pair in self.inputs],
                    "output": self.emit[0],
                    "what": self.emit[1],
                },
            )


def cacheable(args: argparse.Namespace) -> bool:
    """Whether this ``pinguard audit`` command line may be answered from a result entry."""
    return not (
        args.no_cache
        or getattr(args, "shared_cache", None)
        or getattr(args, "layer_read", "full") != "full"
        or (args.format == "table" and not args.output)
    )


def lookup(args: argparse.Namespace) -> Lookup:
    """The result entry for ``pinguard audit``'s ``args``, or the resolved source to audit.

    Raises what resolving the image raises (``SourceError`` and the like)."""
    if not cacheable(args):
        return Lookup()
    from pinguard.cli.common import source_options
    from pinguard.sources import open_source

    source = open_source(args.reference, source_options(args))
    try:
        resolved = source.resolve()
    except BaseException:
        source.close()
        raise
    if any(layer.tree is not None for layer in resolved.layers):
        return Lookup(source=source, resolved=resolved)  # a directory: its digest says nothing
    import datetime as _dt

    entries = EntryDir(args.cache_dir or default_cache_dir(), KIND)
    # read once for both keys: what policy discovery reads, and the Dockerfile
    discovered = _discovered_inputs()
    dockerfile = _file_digest(args.dockerfile) if args.dockerfile else ""
    key = _key(args, resolved, discovered=discovered, dockerfile=dockerfile)
    found = _result(entries, key, _dt.date.today())
    if found is not None:
        source.close()
        return Lookup(report=found[0], code=found[1])
    quick, inputs = _quick(args, source, discovered=discovered, dockerfile=dockerfile)
    return Lookup(
        source=source,
        resolved=resolved,
        entries=entries,
        key=key,
        quick=quick,
        inputs=inputs,
        emit=(args.output, what_report(args.format)),
    )


def _quick(
    args: argparse.Namespace, source: ImageSource, *, discovered: str, dockerfile: str
) -> tuple[str, tuple[tuple[str, str], ...]]:
    """The quick key of the command line ``main`` parsed into ``args``, and the files the
    image and the Dockerfile (``dockerfile``: its digest) were read from, with their
    digests; ("", ()) when the image was not resolved from local files alone."""
    read = source.resolution_inputs()
    argv = getattr(args, "argv", None)
    if read is None or argv is None:
        return "", ()
    inputs = list(read)
    if args.dockerfile:
        inputs.append((os.path.abspath(args.dockerfile), dockerfile))
    return quick_key(argv, policy=discovered), tuple(inputs)


def answer(argv: Sequence[str]) -> int | None:
    """Answer ``pinguard`` + ``argv`` from its quick entry: the stored report written where
    and as the parsed command line wrote it, and its exit code; None when the entry, a file
    it names or its result entry is missing or changed, or cannot be read (``main`` then
    parses and runs the command). Only writing the report can fail here, as it fails there."""
    try:
        hit = _quick_hit(argv)
    except Exception:  # whatever went wrong, the full command decides
        return None
    if hit is None:
        return None
    report, output, what, code = hit
    emit(report, output, what)
    return code


def _quick_hit(argv: Sequence[str]) -> tuple[str, str | None, str, int] | None:
    """The report, where and as what to write it, and the exit code, when ``argv``'s quick
    entry, the digests of the files it names and its result entry all hold."""
    import time

    entries = _cache_dir(argv)
    if entries is None:
        return None
    quick = EntryDir(entries, QUICK).get(quick_key(argv, policy=_discovered_inputs()))
    if quick is None or quick.get("format") != QUICK_FORMAT:
        return None
    output, what, inputs = quick["output"], quick["what"], quick["inputs"]
    if not (output is None or isinstance(output, str)) or not isinstance(what, str):
        return None
    for path, digest in inputs:
        if _file_digest(path) != digest:
            return None
    found = _result(EntryDir(entries, KIND), quick["result"], time.strftime("%Y-%m-%d"))
    if found is None:
        return None
    return found[0], output, what, found[1]


def _result(entries: EntryDir, key: str, today: _dt.date | str) -> tuple[str, int] | None:
    """The report and exit code of the result entry ``key``, when it holds ``today``
    (``_holds``) and its report is the one it names."""
    found = entries.get(key)
    if found is None or not _holds(found, today):
        return None
    report = entries.attached(key, found)
    if report is None:
        return None
    code: int = found["exit"]
    return report.decode("utf-8"), code


def _cache_dir(argv: Sequence[str]) -> Path | None:
    """The cache directory ``argv`` names (``--cache-dir D``), or the default one; None for
    ``--no-cache``. Read without the parser: a command line it reads otherwise than argparse
    does finds no quick entry of its own key there, and ``main`` runs it."""
    if "--no-cache" in argv:
        return None
    given = _option(argv, "--cache-dir")
    return Path(given) if given else default_cache_dir()


def _option(argv: Sequence[str], name: str) -> str | None:
    """The value of the last ``--name V`` or ``--name=V`` in ``argv``."""
    value = None
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(name + "="):
            value = arg[len(name) + 1 :]
    return value


def _discovered_inputs() -> str:
    """What policy discovery reads from the working directory up (both keys name it)."""
    from pinguard.policy.discovery import discovery_inputs

    return json.dumps(discovery_inputs())


def _key(
    args: argparse.Namespace, resolved: ResolvedImage, *, discovered: str, dockerfile: str
) -> str:
    """``result_key`` of this command line: its options, what policy discovery reads
    (``discovered``) when no ``--policy`` is given (the file it finds is then checked by
    digest on a hit, as every policy file is) and the Dockerfile's digest."""
    return result_key(
        {k: v for k, v in sorted(vars(args).items()) if k not in ("func", "argv")},
        resolved,
        policy="" if args.policy else discovered,
        dockerfile=dockerfile,
    )


def _file_digest(path: str) -> str:
    try:
        return "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError as exc:
        return f"unreadable: {exc.strerror or exc}"


def _window(policy: Policy, today: _dt.date) -> tuple[str, str]:
    """The dates (ISO, inclusive; "" for unbounded) around ``today`` in which every waiver of
    ``policy`` that has expired stays expired and every other stays in force."""
    import datetime as _dt

    expired = [w.expires for w in policy.waivers if w.expired(today)]
    active = [w.expires for w in policy.waivers if not w.expired(today)]
    lo = (max(expired) + _dt.timedelta(days=1)).isoformat() if expired else ""
    hi = min(active).isoformat() if active else ""
    return lo, hi


def _holds(entry: dict[str, Any], today: _dt.date | str) -> bool:
    """Whether a stored result still answers: its format, today (a date, or its ISO form)
    inside its window, and every policy file it was judged by unchanged (a built-in inside a
    zipapp is the package's own, covered by the key)."""
    try:
        if entry.get("format") != RESULT_FORMAT:
            return False
        if type(entry["exit"]) is not int:
            return False
        lo, hi = entry["valid"]
        day = today if isinstance(today, str) else today.isoformat()
        if (lo and day < lo) or (hi and day > hi):
            return False
        for file, digest in entry["policy"]:
            if not file.startswith("builtin:") and _file_digest(file) != digest:
                return False
    except (KeyError, TypeError, ValueError, AttributeError):
        return False
    return True
