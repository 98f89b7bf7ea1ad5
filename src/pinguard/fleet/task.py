"""The fleet's one task: audit one image reference with options, leave a record, return its id.

``audit_reference(reference, options)`` is what a Celery worker runs (``app.py`` registers
it). ``options`` are JSON values the enqueuer chose (policy files, ``fail_on``, platform,
``allow_incomplete``, ``allow_no_python``, targets, ``attest``); how the worker audits (result
store, shared cache, layer jobs, insecure registries, attestation key) are the worker's
``WorkerSettings``, given by ``pinguard worker`` or read from ``PINGUARD_*`` variables (a
plain ``celery -A pinguard.fleet.app worker``). A shared cache needs the fleet's keys, a
signing key and trusted public keys (``require_fleet_keys``), unless the worker is told
``--cache-unsigned`` (``PINGUARD_CACHE_UNSIGNED=1``): without them any host that can write to
the cache can poison what every worker trusts. Options are checked, failing closed: an
unknown ``fail_on``, a flag that is not a JSON boolean or an option this worker does not
know is an error record naming it, never an audit judged more loosely than asked.
The task is idempotent: the record's name is
a digest of reference and options and its bytes depend only on the image, the options and
the policy, so a redelivered task (its worker killed mid-audit) rewrites the same record.
An image that cannot be read is a record with its exit code (3), never a task failure, so
Celery never retries what would fail again.
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pinguard.cache.signed import FleetKeys
from pinguard.cache.store import CacheSpec
from pinguard.errors import ConfigError, PinguardError, UsageError
from pinguard.fleet.records import DistributionVersion, ImageRecord, ResultStore, record_id
from pinguard.models import AuditResult, Severity

RESULTS_ENV = "PINGUARD_RESULTS_DIR"
CACHE_ENV = "PINGUARD_CACHE_URL"
CACHE_SIGN_ENV = "PINGUARD_CACHE_SIGN_KEY"
CACHE_TRUST_ENV = "PINGUARD_CACHE_TRUST"  # os.pathsep-separated public keys
CACHE_UNSIGNED_ENV = "PINGUARD_CACHE_UNSIGNED"  # 1: a shared cache without the fleet's keys
ATTEST_KEY_ENV = "PINGUARD_ATTEST_KEY"
JOBS_ENV = "PINGUARD_JOBS"
PATIENCE_ENV = "PINGUARD_BROKER_PATIENCE"
#: seconds a worker waits for a lost broker to store a finished task's state and ack it
DEFAULT_PATIENCE = 300.0

#: ``fail_on`` as a task gives it -> the threshold (``never``: None, nothing fails)
FAIL_ON: dict[str, Severity | None] = {
    "error": Severity.ERROR,
    "warning": Severity.WARNING,
    "info": Severity.INFO,
    "never": None,
}
#: the options a task may carry (``cli/fleet.py`` ``_task_options``), each with its type
OPTIONS = frozenset(
    ("policy", "targets", "platform", "fail_on", "allow_incomplete", "allow_no_python", "attest")
)


def require_fleet_keys(
    cache: CacheSpec | None,
    unsigned: bool,
    names: tuple[str, str, str] = ("--cache-sign-key", "--cache-trust", "--cache-unsigned"),
    assign: str = " ",
) -> None:
    """``UsageError`` (exit 2) for a shared cache without both fleet keys, unless
    ``unsigned``: a worker without a signing key writes entries no trusting reader uses, and
    one without trusted keys uses any well-formed entry, a re-digested forgery included.
    ``names``: how the signing key, the trusted keys and the waiver are given (flags, or
    variables with ``assign="="``)."""
    if cache is None or unsigned:
        return
    sign, trust, waiver = names
    missing = [sign] if cache.keys.signing_key is None else []
    missing += [] if cache.keys.trusted else [trust]
    if not missing:
        return
    from pinguard.fleet.broker import redact

    raise UsageError(
        f"the shared cache {redact(cache.url)} without {' and '.join(missing)}: any host that "
        "can write to it could poison what the workers trust; give the fleet's key pair "
        f"({sign}{assign}KEY.pem {trust}{assign}KEY.pub) or {waiver} to use it unsigned"
    )


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """How a worker audits, whoever enqueued the task."""

    results: Path
    cache: CacheSpec | None = None
    jobs: int = 1
    insecure_registries: tuple[str, ...] = ()
    attest_key: Path | None = None
    broker_patience: float = DEFAULT_PATIENCE

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> WorkerSettings:
        env = os.environ if env is None else env
        results = env.get(RESULTS_ENV)
        if not results:
            raise ConfigError(f"the worker has no result store: set {RESULTS_ENV}")
        cache = None
        if env.get(CACHE_ENV):
            trusted = tuple(Path(p) for p in env.get(CACHE_TRUST_ENV, "").split(os.pathsep) if p)
            sign = env.get(CACHE_SIGN_ENV)
            cache = CacheSpec(env[CACHE_ENV], FleetKeys(Path(sign) if sign else None, trusted))
            unsigned = env.get(CACHE_UNSIGNED_ENV, "").strip().lower() in ("1", "true", "yes")
            names = (CACHE_SIGN_ENV, CACHE_TRUST_ENV, f"{CACHE_UNSIGNED_ENV}=1")
            require_fleet_keys(cache, unsigned, names, assign="=")
        attest = env.get(ATTEST_KEY_ENV)
        return cls(
            results=Path(results),
            cache=cache,
            jobs=int(env.get(JOBS_ENV, "1") or 1),
            attest_key=Path(attest) if attest else None,
            broker_patience=patience_from(env),
        )


def patience_from(env: Mapping[str, str]) -> float:
    """``PINGUARD_BROKER_PATIENCE`` (seconds, not negative), else the default."""
    text = env.get(PATIENCE_ENV) or ""
    if not text:
        return DEFAULT_PATIENCE
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise ConfigError(f"{PATIENCE_ENV}={text!r}: expected seconds, a number not below 0")
    return value


_SETTINGS: WorkerSettings | None = None


def configure(settings: WorkerSettings | None) -> None:
    """Set this worker process's settings (``pinguard worker``; prefork children inherit)."""
    global _SETTINGS  # noqa: PLW0603 - one worker process, one configuration
    _SETTINGS = settings


def settings() -> WorkerSettings:
    return _SETTINGS if _SETTINGS is not None else WorkerSettings.from_env()


def _distributions(result: AuditResult) -> tuple[DistributionVersion, ...]:
    return tuple(
        sorted(
            DistributionVersion(env.path, str(d.name), d.raw_version)
            for env in result.final.environments
            for d in env.distributions
        )
    )


def _platform(result: AuditResult) -> str | None:
    p = result.image.platform
    return str(p) if p is not None else None


def _judging(options: Mapping[str, Any]) -> tuple[Severity | None, bool, bool, bool]:
    """``fail_on``, ``allow_incomplete``, ``allow_no_python`` and ``attest`` as the task
    asks; ``ConfigError`` for an option this worker does not know, a ``fail_on`` that is not
    one of ``FAIL_ON`` (never read as ``never``, which passes everything) or a flag that is
    not a JSON boolean."""
    unknown = sorted(set(options) - OPTIONS)
    if unknown:
        raise ConfigError(
            f"unknown task option(s) {', '.join(map(repr, unknown))}: this worker knows "
            f"{', '.join(sorted(OPTIONS))} (is it older than the enqueuer?); not audited"
        )
    value = options.get("fail_on", "error")
    if not isinstance(value, str) or value not in FAIL_ON:
        raise ConfigError(
            f"task option fail_on {value!r} is not one of {', '.join(FAIL_ON)}; not audited"
        )
    return (
        FAIL_ON[value],
        _flag(options, "allow_incomplete"),
        _flag(options, "allow_no_python"),
        _flag(options, "attest"),
    )


def _flag(options: Mapping[str, Any], name: str) -> bool:
    """A boolean option; ``ConfigError`` unless it is a JSON boolean (``"false"`` is no)."""
    value = options.get(name, False)
    if not isinstance(value, bool):
        raise ConfigError(f"task option {name} {value!r} is not true or false; not audited")
    return value


def audit_reference(reference: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """Audit ``reference``; write its record; return ``{"id", "exit_code", "verdict"}``."""
    from pinguard.audit.options import AuditOptions
    from pinguard.audit.pipeline import audit_image
    from pinguard.policy.engine import evaluate
    from pinguard.policy.load import load_run_policy
    from pinguard.report import json as json_report
    from pinguard.report.options import RenderOptions
    from pinguard.sources.interface import SourceOptions
    from pinguard.target import parse_platform

    conf = settings()
    store = ResultStore(conf.results)
    rid = record_id(reference, options)
    report: str | None = None
    try:
        fail_on, allow_incomplete, allow_no_python, attest = _judging(options)
        platform = options.get("platform")
        audit_options = AuditOptions(
            source=SourceOptions(
                platform=parse_platform(platform) if platform else None,
                insecure_registries=conf.insecure_registries,
            ),
            shared_cache=conf.cache,
            jobs=conf.jobs,
        )
        policy = load_run_policy([str(p) for p in options.get("policy", ())])
        result = audit_image(reference, options=audit_options)
        findings = evaluate(
            result, policy, targets=tuple(options.get("targets", ())), today=_dt.date.today()
        )
        result = replace(result, findings=findings, policy=policy.source)
        verdict = result.verdict(fail_on, allow_incomplete, allow_no_python)
        attestation = None
        if attest and conf.attest_key is not None:
            from pinguard.fleet.attest import attest_result

            attestation = attest_result(
                result,
                policy,
                conf.attest_key,
                reference,
                fail_on=fail_on,
                allow_incomplete=allow_incomplete,
                allow_no_python=allow_no_python,
                insecure_registries=conf.insecure_registries,
            )
        unwaived = [f for f in result.findings if not f.waived]
        record = ImageRecord(
            reference=reference,
            verdict=verdict,
            exit_code=0 if verdict == "pass" else 1,
            manifest_digest=result.image.manifest_digest,
            platform=_platform(result),
            notes=tuple(result.notes),
            distributions=_distributions(result),
            errors=sum(f.severity == Severity.ERROR for f in unwaived),
            warnings=sum(f.severity == Severity.WARNING for f in unwaived),
            incomplete=len(result.incomplete),
            attestation=attestation,
        )
        report = json_report.render(
            result,
            RenderOptions(
                fail_on=fail_on,
                allow_incomplete=allow_incomplete,
                allow_no_python=allow_no_python,
            ),
        )
    except PinguardError as exc:
        record = ImageRecord(
            reference=reference, verdict="error", exit_code=exc.exit_code, error=str(exc)
        )
    store.write(rid, record, report)
    return {"id": rid, "exit_code": record.exit_code, "verdict": record.verdict}
