"""Options and wiring shared by the subcommands: image, index, policy and build-arg options,
running an audit with progress bars, loading and applying the policy, the exit code.

Building a parser imports nothing the audit needs (the pipeline, the values, the cache
store): those are imported where they are used, so a warm audit (``cli/warm.py``) that
answers from its result entry never loads them."""

from __future__ import annotations

import argparse
import datetime as _dt
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pinguard.cache.entry import default_cache_dir
from pinguard.cache.interface import LOCK_TTL, LOCK_WAIT
from pinguard.errors import IncompleteAudit, UsageError
from pinguard.layers.limits import LayerLimits

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import TaskID

    from pinguard.audit.options import AuditOptions
    from pinguard.cache.store import CacheSpec
    from pinguard.models import AuditResult, Platform, Severity
    from pinguard.policy.model import Policy
    from pinguard.repair.resolve import IndexOptions
    from pinguard.sources.interface import ImageSource, LayerRef, ResolvedImage, SourceOptions


#: ``--fail-on`` names -> the name of the ``Severity`` member they stand for.
_FAIL_ON_NAMES: dict[str, str | None] = {
    "error": "ERROR",
    "warning": "WARNING",
    "info": "INFO",
    "never": None,
}


class _FailOn(Mapping[str, "Severity | None"]):
    """``--fail-on`` names -> the lowest severity that fails (None: ``never``); the values
    are loaded when first read, so building a parser does not load them."""

    def __getitem__(self, name: str) -> Severity | None:
        from pinguard.models import Severity

        member = _FAIL_ON_NAMES[name]
        return None if member is None else Severity[member]

    def __iter__(self) -> Iterator[str]:
        return iter(_FAIL_ON_NAMES)

    def __len__(self) -> int:
        return len(_FAIL_ON_NAMES)


FAIL_ON: Mapping[str, Severity | None] = _FailOn()


def parse_platform(text: str) -> Platform:
    """``--platform os/arch[/variant]``; a malformed value is a usage error (exit 2)."""
    from pinguard.target import parse_platform as parse

    try:
        return parse(text)
    except ValueError as exc:
        raise UsageError(f"--platform: {exc}; e.g. linux/arm64") from None


def add_image_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("image")
    g.add_argument("--platform", help="os/arch[/variant] to pick from a multi-platform image")
    g.add_argument(
        "--insecure-registry",
        action="append",
        default=[],
        metavar="HOST",
        help="allow plain HTTP for this registry (loopback registries always may)",
    )
    g.add_argument(
        "--cache-dir", type=Path, help="per-layer analysis cache (default: user cache dir)"
    )
    g.add_argument("--no-cache", action="store_true", help="neither read nor write the layer cache")
    add_cache_options(g)
    g.add_argument(
        "--verify-records", action="store_true", help="hash every installed file against RECORD"
    )
    g.add_argument(
        "--jobs", type=int, default=0, help="layer worker processes (default: one per core)"
    )
    g.add_argument(
        "--layer-read",
        choices=("full", "lazy"),
        default="full",
        help="full: stream every layer and prove its DiffID (default); lazy: read a "
        "zstd:chunked layer from its table of contents and only the chunks the analyzers "
        "need, each verified against the TOC (the DiffID is not proven; other layers, or "
        "one that does not verify, are read in full). A lazy read may fail the gate; a pass "
        "is confirmed by reading the lazily read layers in full, unless --allow-unproven",
    )
    g.add_argument(
        "--allow-unproven",
        action="store_true",
        help="with --layer-read lazy: take a pass on layers whose DiffIDs were not proven "
        "without the full read that confirms it; the verdict is then 'unproven', which no "
        "gate, attestation or fleet record counts as a pass (exit 0 for this command only)",
    )
    defaults = LayerLimits()
    g.add_argument(
        "--max-metadata-size",
        type=_positive_int,
        default=defaults.max_capture,
        metavar="BYTES",
        help="a metadata file above this is not read and the audit is incomplete "
        f"(default: {defaults.max_capture})",
    )
    g.add_argument(
        "--max-layer-size",
        type=_positive_int,
        default=defaults.max_size,
        metavar="BYTES",
        help=f"a layer inflating past this is an error (default: {defaults.max_size})",
    )
    g.add_argument(
        "--max-inflation",
        type=_positive_int,
        default=defaults.max_ratio,
        metavar="RATIO",
        help="a layer inflating more than RATIO bytes per stored byte (past "
        f"{defaults.ratio_floor} bytes) is an error (default: {defaults.max_ratio})",
    )


def add_cache_options(g: argparse._ActionsContainer) -> None:
    """The shared layer cache: ``--cache URL`` and its keys, TTL and TLS files."""
    g.add_argument(
        "--cache",
        metavar="URL",
        dest="shared_cache",
        help="a shared layer cache instead of the directory: redis://[:PASS@]HOST:PORT/DB, "
        "rediss://... (TLS), registry://HOST/REPO (a cache repository) or file:///DIR (a "
        "directory workers share); every entry is "
        "verified on read (docs/fleet.md)",
    )
    g.add_argument(
        "--cache-ttl", type=int, default=0, metavar="SECONDS", help="entry lifetime (0: none)"
    )
    g.add_argument(
        "--cache-sign-key", type=Path, metavar="KEY.pem", help="sign cache entries (fleet key)"
    )
    g.add_argument(
        "--cache-trust",
        type=Path,
        action="append",
        default=[],
        metavar="KEY.pub",
        help="use only cache entries signed by this key (repeatable)",
    )
    g.add_argument(
        "--cache-lock-ttl",
        type=float,
        default=LOCK_TTL,
        metavar="SECONDS",
        help="an in-flight claim on an uncached layer lapses this long after its holder "
        f"stops extending it (Redis; default {LOCK_TTL:g})",
    )
    g.add_argument(
        "--cache-lock-wait",
        type=float,
        default=LOCK_WAIT,
        metavar="SECONDS",
        help="wait at most this long for another worker's analysis of a layer, then analyse "
        f"it here too (default {LOCK_WAIT:g})",
    )
    g.add_argument("--cache-tls-ca", type=Path, metavar="PEM", help="rediss:// CA bundle")
    g.add_argument("--cache-tls-cert", type=Path, metavar="PEM", help="rediss:// client cert")
    g.add_argument("--cache-tls-key", type=Path, metavar="PEM", help="rediss:// client key")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def add_index_options(g: argparse._ActionsContainer) -> None:
    """Where a resolver looks for distributions (the options pip and uv spell the same)."""
    g.add_argument("--index-url", metavar="URL")
    g.add_argument("--extra-index-url", action="append", default=[], metavar="URL")
    g.add_argument("--find-links", action="append", default=[], metavar="DIR|URL")
    # the names of uv's strategies (resolve.uv.INDEX_STRATEGIES, not imported here: building
    # the parser must not import the resolver, which the in-build pinguard.pyz does not ship)
    g.add_argument(
        "--index-strategy", choices=("first-index", "unsafe-first-match", "unsafe-best-match")
    )


def index_options(args: argparse.Namespace) -> IndexOptions:
    """The ``IndexOptions`` the index flags of ``add_index_options`` describe."""
    from pinguard.repair.resolve import IndexOptions

    return IndexOptions(
        index_url=args.index_url,
        extra_index_urls=tuple(args.extra_index_url),
        find_links=tuple(args.find_links),
        index_strategy=args.index_strategy,
    )


def add_policy_options(
    p: argparse.ArgumentParser,
    *,
    fail_on: str = "error",
    incomplete: bool = True,
    guard: bool = False,
) -> None:
    """The policy options: ``--policy``, ``--target``, ``--fail-on`` (default ``fail_on``),
    ``--allow-incomplete`` and ``--allow-no-python`` (when something can be incomplete) and
    ``--require-guard``
    (with ``guard``: for the commands that lint Dockerfiles)."""
    g = p.add_argument_group("policy")
    g.add_argument(
        "--policy",
        action="append",
        default=[],
        metavar="FILE",
        help="policy file (repeatable; default: pinguard.toml or [tool.pinguard] if found; "
        "none: no policy, an inventory)",
    )
    g.add_argument(
        "--target", action="append", default=[], metavar="T", help="build target, e.g. sm_121"
    )
    g.add_argument(
        "--fail-on",
        choices=sorted(FAIL_ON),
        default=fail_on,
        help=f"lowest severity that fails (default: {fail_on})",
    )
    if incomplete:
        g.add_argument(
            "--allow-incomplete",
            action="store_true",
            help="do not fail when something could not be read",
        )
        g.add_argument(
            "--allow-no-python",
            action="store_true",
            help="do not fail when the image has no Python environment (a base image audited "
            "on purpose)",
        )
    if guard:
        g.add_argument(
            "--require-guard",
            action="store_true",
            help="report install steps not followed by `pinguard guard` (rule missing-guard; "
            "also on when the policy sets require_guard = true)",
        )


def add_build_arg_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--build-arg",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a build argument, as `docker build --build-arg` would pass it",
    )


def build_args(args: argparse.Namespace) -> dict[str, str]:
    """The ``--build-arg NAME=VALUE`` values; one without ``=`` is a usage error."""
    values: dict[str, str] = {}
    for item in args.build_arg:
        name, eq, value = item.partition("=")
        if not name or not eq:
            raise UsageError(f"invalid --build-arg {item!r}: expected NAME=VALUE")
        values[name] = value
    return values


class _RichProgress:
    """Draws one bar per layer on stderr, advancing as bytes flow, with rate and ETA."""

    def __init__(self, console: Console) -> None:
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=True,
        )
        self._tasks: dict[str, TaskID] = {}

    def layers(self, todo: Sequence[LayerRef], cached: int) -> None:
        if todo:
            self._progress.start()
        for layer in todo:
            self._tasks[layer.digest] = self._progress.add_task(
                f"layer {layer.digest.split(':')[-1][:12]}", total=layer.size
            )

    def advance(self, layer: LayerRef, nbytes: int) -> None:
        self._progress.advance(self._tasks[layer.digest], nbytes)

    def done(self, layer: LayerRef) -> None:
        task = self._tasks[layer.digest]
        self._progress.update(task, completed=layer.size or 0, total=layer.size or 0)

    def stop(self) -> None:
        self._progress.stop()


def source_options(args: argparse.Namespace) -> SourceOptions:
    """The transport settings the image options (``add_image_options``) describe."""
    from pinguard.sources.interface import SourceOptions

    return SourceOptions(
        platform=parse_platform(args.platform) if args.platform else None,
        insecure_registries=tuple(args.insecure_registry),
    )


def cache_spec(args: argparse.Namespace) -> CacheSpec | None:
    """The shared cache the ``--cache`` options describe (None: the directory cache);
    key files are loaded here, so a bad one is an error before any audit."""
    if not getattr(args, "shared_cache", None) or getattr(args, "no_cache", False):
        return None
    from pinguard.cache.signed import FleetKeys
    from pinguard.cache.store import CacheSpec

    spec = CacheSpec(
        url=args.shared_cache,
        keys=FleetKeys(signing_key=args.cache_sign_key, trusted=tuple(args.cache_trust)),
        ttl=max(0, args.cache_ttl),
        tls_ca=args.cache_tls_ca,
        tls_cert=args.cache_tls_cert,
        tls_key=args.cache_tls_key,
        insecure=tuple(getattr(args, "insecure_registry", ())),
        lock_ttl=max(1.0, args.cache_lock_ttl),
        lock_wait=max(0.0, args.cache_lock_wait),
    )
    spec.open("check", ()).check_keys()
    return spec


def audit_options(args: argparse.Namespace) -> AuditOptions:
    """The ``AuditOptions`` the image options describe."""
    from pinguard.audit.options import AuditOptions  # here: a warm audit never loads it

    return AuditOptions(
        source=source_options(args),
        cache_dir=None if args.no_cache else (args.cache_dir or default_cache_dir()),
        shared_cache=cache_spec(args),
        verify_records=args.verify_records,
        jobs=max(0, args.jobs),
        layer_read=getattr(args, "layer_read", "full"),
        limits=LayerLimits(
            max_capture=args.max_metadata_size,
            max_size=args.max_layer_size,
            max_ratio=args.max_inflation,
        ),
    )


def run_audit(
    args: argparse.Namespace,
    reference: str,
    *,
    opened: tuple[ImageSource, ResolvedImage] | None = None,
    write_behind: bool = False,
) -> AuditResult:
    """Audit ``reference`` as ``args`` ask, drawing progress bars on a terminal; ``opened``:
    the source of that reference, already opened and resolved (``cli/warm.py`` resolved it
    to look its result up), which the audit goes on with and closes; ``write_behind``: the
    replay entry is written by a child process while the caller goes on, and the caller
    waits for it (``pinguard.audit.replay.wait_behind``) before it returns."""
    import dataclasses

    from pinguard.audit.pipeline import audit_image, audit_source

    try:
        options = dataclasses.replace(audit_options(args), write_behind=write_behind)
    except BaseException:
        if opened is not None:
            opened[0].close()
        raise

    def audit(progress: _RichProgress | None) -> AuditResult:
        if opened is None:
            return audit_image(reference, options=options, progress=progress)
        source, resolved = opened
        return audit_source(source, options, progress, resolved=resolved)

    if sys.stderr.isatty():  # progress bars only for a person watching (rich: imported then)
        from rich.console import Console

        err = Console(stderr=True)
        progress = _RichProgress(err)
        try:
            return audit(progress)
        finally:
            progress.stop()
    return audit(None)


def judge(
    result: AuditResult,
    args: argparse.Namespace,
    policy: Policy | None = None,
    *,
    confirm: bool = True,
    today: _dt.date | None = None,
) -> AuditResult:
    """Apply the policy (given, or from files, discovered, or the built-in default).

    A lazy read that would pass is confirmed (``confirm``): the image is audited again with
    every layer read in full and its DiffID proven, and that audit is judged and returned, so
    a TOC that lies cannot pass a gate. A lazy read that fails is returned as it is (failing
    fast is what lazy is for), and so is an unproven pass under ``--allow-unproven``.
    ``today`` decides which waivers have expired (default: the local date)."""
    import dataclasses

    from pinguard.policy.engine import evaluate
    from pinguard.policy.load import load_run_policy

    if policy is None:
        policy = load_run_policy(args.policy)
    findings = evaluate(
        result,
        policy,
        targets=tuple(args.target),
        today=today or _dt.date.today(),
        file_digests=dict(result.file_digests) if args.verify_records else None,
    )
    judged = dataclasses.replace(result, findings=tuple(findings), policy=policy.source)
    if confirm and judged.unproven and _verdict(judged, args, allow_unproven=True) != "fail":
        if getattr(args, "allow_unproven", False):
            return judged
        full = argparse.Namespace(**{**vars(args), "layer_read": "full"})
        confirmed = judge(
            run_audit(full, result.image.reference), full, policy, confirm=False, today=today
        )
        note = (
            f"the lazy read's pass was confirmed by a full read: {len(judged.unproven)} "
            "layer(s) streamed whole and their DiffIDs proven"
        )
        return dataclasses.replace(confirmed, notes=(*confirmed.notes, note))
    return judged


def require_complete(result: AuditResult, args: argparse.Namespace, output: str) -> None:
    """Refuse to build ``output`` from an audit that could not read everything, or found no
    Python at all, unless ``--allow-incomplete`` / ``--allow-no-python`` say to go on: a
    constraints file or a plan from such an audit would quietly miss what was not read."""
    if result.incomplete and not args.allow_incomplete:
        first = result.incomplete[0]
        raise IncompleteAudit(
            f"the audit of {result.image.reference} is incomplete ({len(result.incomplete)} "
            f"item(s); first: {first.what}: {first.why}); {output} made from it could miss what "
            "was not read (--allow-incomplete to go on anyway)"
        )
    if result.no_python and not args.allow_no_python:
        raise IncompleteAudit(
            f"{result.no_python_message()}: nothing to make {output} from "
            "(--allow-no-python to go on)"
        )


def _verdict(result: AuditResult, args: argparse.Namespace, allow_unproven: bool) -> str:
    return result.verdict(
        FAIL_ON[getattr(args, "fail_on", "error")],
        getattr(args, "allow_incomplete", False),
        getattr(args, "allow_no_python", False),
        allow_unproven,
    )


def exit_code(result: AuditResult, args: argparse.Namespace) -> int:
    """0 for a pass, and for an unproven one that ``--allow-unproven`` accepts; else 1."""
    verdict = _verdict(result, args, getattr(args, "allow_unproven", False))
    return 0 if verdict in ("pass", "unproven") else 1


def stdout_console() -> Console:
    from rich.console import Console

    return Console(file=sys.stdout, soft_wrap=False)
