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
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pinguard.cache.entry import EntryDir, default_cache_dir
from pinguard.cache.key import RESULT_FORMAT, result_key

if TYPE_CHECKING:
    import argparse

    from pinguard.policy.model import Policy
    from pinguard.sources.interface import ImageSource, ResolvedImage

KIND = "result"


@dataclass
class Lookup:
    """What ``lookup`` found: on a hit the report and its exit code; on a miss the source it
    opened and resolved (None when the command cannot be answered from the cache), for the
    audit to go on with, and where ``keep`` stores the result."""

    report: str | None = None
    code: int = 0
    source: ImageSource | None = None
    resolved: ResolvedImage | None = None
    entries: EntryDir | None = None
    key: str = ""

    def keep(self, report: str, code: int, policy: Policy, today: _dt.date) -> None:
        """Store the report a miss rendered, judged by ``policy`` on ``today``."""
        if self.entries is None:
            return
        self.entries.put(
            self.key,
            {
                "format": RESULT_FORMAT,
                "report": report,
                "exit": code,
                "policy": [list(pair) for pair in policy.source.files],
                "valid": list(_window(policy, today)),
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
    entries = EntryDir(args.cache_dir or default_cache_dir(), KIND)
    key = _key(args, resolved)
    found = entries.get(key)
    if found is not None and _holds(found, _dt.date.today()):
        source.close()
        return Lookup(report=found["report"], code=found["exit"])
    return Lookup(source=source, resolved=resolved, entries=entries, key=key)


def _key(args: argparse.Namespace, resolved: ResolvedImage) -> str:
    """``result_key`` of this command line: its options, what policy discovery reads and the
    Dockerfile's digest."""
    return result_key(
        {k: v for k, v in sorted(vars(args).items()) if k != "func"},
        resolved,
        policy=_discovered(args),
        dockerfile=_file_digest(args.dockerfile) if args.dockerfile else "",
    )


def _discovered(args: argparse.Namespace) -> str:
    """What policy discovery reads, when no ``--policy`` is given (the file it finds is then
    checked by digest on a hit, as every policy file is)."""
    if args.policy:
        return ""
    from pinguard.policy.discovery import discovery_inputs

    return json.dumps(discovery_inputs())


def _file_digest(path: str) -> str:
    try:
        return "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError as exc:
        return f"unreadable: {exc.strerror or exc}"


def _window(policy: Policy, today: _dt.date) -> tuple[str, str]:
    """The dates (ISO, inclusive; "" for unbounded) around ``today`` in which every waiver of
    ``policy`` that has expired stays expired and every other stays in force."""
    expired = [w.expires for w in policy.waivers if w.expired(today)]
    active = [w.expires for w in policy.waivers if not w.expired(today)]
    lo = (max(expired) + _dt.timedelta(days=1)).isoformat() if expired else ""
    hi = min(active).isoformat() if active else ""
    return lo, hi


def _holds(entry: dict[str, Any], today: _dt.date) -> bool:
    """Whether a stored result still answers: its format, today inside its window, and every
    policy file it was judged by unchanged (a built-in inside a zipapp is the package's own,
    covered by the key)."""
    try:
        if entry.get("format") != RESULT_FORMAT:
            return False
        if not isinstance(entry["report"], str) or type(entry["exit"]) is not int:
            return False
        lo, hi = entry["valid"]
        day = today.isoformat()
        if (lo and day < lo) or (hi and day > hi):
            return False
        for file, digest in entry["policy"]:
            if not file.startswith("builtin:") and _file_digest(file) != digest:
                return False
    except (KeyError, TypeError, ValueError, AttributeError):
        return False
    return True
