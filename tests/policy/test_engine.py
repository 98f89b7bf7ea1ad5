"""Rules, scope, severity and waivers, on audit results built directly from models.py types."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from pinguard.models import AuditResult, ChangeKind, Finding, Platform, Severity
from pinguard.policy import default_policy, evaluate, load_policy, parse_policy, worst
from tests.factories import (
    ENV,
    SYSTEM,
    cause,
    change,
    dist,
    environment,
    result,
    step,
    unmet,
)
from tests.infra.paths import POLICIES

TODAY = _dt.date(2026, 6, 1)
H1, H2 = "sha256=" + "A" * 43, "sha256=" + "B" * 43


@dataclass(frozen=True)
class Case:
    id: str
    policy: str
    audit: Callable[[], AuditResult]
    expect: list[tuple[str, str | None]]  # (rule, package) of every finding, sorted
    kwargs: dict[str, Any] = field(default_factory=dict)


def downgraded() -> AuditResult:
    return result(
        environment(
            dist("nvidia-nccl-cu13", "2.29.7"), dist("torch", "2.9.1"), dist("pip", "23.0")
        ),
        steps=[
            step(
                1, "pip install nccl", change("nvidia-nccl-cu13", ChangeKind.ADDED, None, "2.30.1")
            ),
            step(
                2,
                "pip install torch",
                change("torch", ChangeKind.ADDED, None, "2.9.1"),
                change(
                    "nvidia-nccl-cu13",
                    ChangeKind.DOWNGRADED,
                    "2.30.1",
                    "2.29.7",
                    causes=[cause("torch", "2.9.1", "nvidia-nccl-cu13==2.29.7")],
                ),
                change("pip", ChangeKind.DOWNGRADED, "24.0", "23.0"),
            ),
        ],
    )


def upgraded() -> AuditResult:
    return result(
        environment(dist("nvidia-nccl-cu13", "2.30.1")),
        steps=[step(1, "x", change("nvidia-nccl-cu13", ChangeKind.UPGRADED, "2.29.7", "2.30.1"))],
    )


def one(name: str, version: str, **kw: Any) -> Callable[[], AuditResult]:
    return lambda: result(environment(dist(name, version)), **kw)


def coupled(fi: str | None, cutlass: str | None) -> Callable[[], AuditResult]:
    dists = [dist("flashinfer-python", fi)] if fi else []
    dists += [dist("nvidia-cutlass-dsl", cutlass)] if cutlass else []
    return lambda: result(environment(*dists))


def unmet_result(final_nccl: str | None) -> AuditResult:
    dists = [dist("torch", "2.9.1")] + (
        [dist("nvidia-nccl-cu13", final_nccl)] if final_nccl else []
    )
    return result(
        environment(*dists),
        steps=[
            step(3, "a", unmet=[unmet("torch", "2.9.1", "nvidia-nccl-cu13==2.29.7", "2.30.1")]),
            step(4, "b"),
        ],
    )


def collision(same_hash: bool = False, same_name: bool = False) -> AuditResult:
    a = dist("nvidia-cutlass-dsl", "4.3.0", record=[("cutlass/__init__.py", H1), ("a.py", H1)])
    b = dist(
        "cutlass" if not same_name else "nvidia-cutlass-dsl",
        "4.2.0",
        suffix="x",
        record=[
            ("cutlass/__init__.py", H1 if same_hash else H2),
            ("b.py", H2),
            ("cutlass/__pycache__/x.pyc", ""),
        ],
    )
    return result(environment(a, b))


def duplicate() -> AuditResult:
    return result(
        environment(dist("numpy", "1.26.4"), dist("numpy", "2.1.0")),
        environment(dist("numpy", "1.24.2"), path=SYSTEM),
    )


PIN = '[[pin]]\npackage = "nvidia-nccl-cu13"\nversion = ">=2.30"\n'
FORBID = (
    '[[forbidden]]\npackage = "nvidia-nccl-cu13"\nversion = "2.29.7"\n'
    'reason = "NCCL internal error"\nlink = "https://github.com/pytorch/pytorch/issues/187526"\n'
)
FORBID_TARGET = (
    '[[forbidden]]\npackage = "flashinfer-python"\nversion = "0.6.17"\n'
    'targets = ["sm_121"]\nreason = "NaNs"\n'
)
PRE = "[rules.unpinned-prerelease]\nenabled = true\n"
COUPLE = (
    '[[coupling]]\npackage = "flashinfer-python"\nversion = ">=0.6"\n'
    'requires = "nvidia-cutlass-dsl>=4.3"\n'
)
OFF_DEFAULTS = "".join(
    f"[rules.{r}]\nenabled = false\n"
    for r in ("downgrade", "unmet-requirement", "file-collision", "duplicate-distribution")
)

CASES = [
    # pin-violation
    Case(
        "pin fires", PIN, one("nvidia-nccl-cu13", "2.29.7"), [("pin-violation", "nvidia-nccl-cu13")]
    ),
    Case("pin holds", PIN, one("nvidia-nccl-cu13", "2.30.1"), []),
    # issue 9: a pin that matches nothing is a warning, never silence
    Case(
        "pin on absent package",
        PIN,
        one("torch", "2.9.1"),
        [("pin-violation", "nvidia-nccl-cu13")],
    ),
    Case(
        "pin vs non-PEP 440",
        PIN,
        one("nvidia-nccl-cu13", "nightly-abc"),
        [("pin-violation", "nvidia-nccl-cu13")],
    ),
    # forbidden-version
    Case(
        "forbidden fires",
        FORBID,
        one("nvidia-nccl-cu13", "2.29.7"),
        [("forbidden-version", "nvidia-nccl-cu13")],
    ),
    Case("forbidden other version", FORBID, one("nvidia-nccl-cu13", "2.30.1"), []),
    Case(
        "forbidden on target",
        FORBID_TARGET,
        one("flashinfer-python", "0.6.17"),
        [("forbidden-version", "flashinfer-python")],
        {"targets": ("sm_121",)},
    ),
    Case(
        "forbidden other target",
        FORBID_TARGET,
        one("flashinfer-python", "0.6.17"),
        [],
        {"targets": ("sm_90",)},
    ),
    Case("forbidden no target", FORBID_TARGET, one("flashinfer-python", "0.6.17"), []),
    # downgrade
    Case(
        "downgrade fires", "", downgraded, [("downgrade", "nvidia-nccl-cu13"), ("downgrade", "pip")]
    ),
    Case(
        "downgrade allow-list",
        '[rules.downgrade]\nallow = ["pip"]\n',
        downgraded,
        [("downgrade", "nvidia-nccl-cu13")],
    ),
    Case(
        "downgrade only listed",
        '[rules.downgrade]\npackages = ["pip"]\n',
        downgraded,
        [("downgrade", "pip")],
    ),
    Case("upgrade is no downgrade", "", upgraded, []),
    Case("downgrade disabled", "[rules.downgrade]\nenabled = false\n", downgraded, []),
    # unpinned-prerelease
    Case(
        "nightly unpinned",
        PRE,
        one("torch", "2.10.0.dev20251201+cu130"),
        [("unpinned-prerelease", "torch")],
    ),
    Case("rc unpinned", PRE, one("vllm", "0.12.0rc1"), [("unpinned-prerelease", "vllm")]),
    Case(
        "nightly pinned exactly",
        PRE + '[[pin]]\npackage = "torch"\nversion = "==2.10.0.dev20251201"\n',
        one("torch", "2.10.0.dev20251201+cu130"),
        [],
    ),
    Case(
        "nightly pinned by range",
        PRE + '[[pin]]\npackage = "torch"\nversion = ">=2.10.0.dev0"\n',
        one("torch", "2.10.0.dev20251201"),
        [("unpinned-prerelease", "torch")],
    ),
    Case(
        "nightly pinned to another",
        PRE + '[[pin]]\npackage = "torch"\nversion = "2.10.0.dev20251130"\n',
        one("torch", "2.10.0.dev20251201"),
        [("pin-violation", "torch"), ("unpinned-prerelease", "torch")],
    ),
    Case("release is fine", PRE, one("torch", "2.9.1"), []),
    Case("prerelease off by default", "", one("torch", "2.10.0.dev20251201"), []),
    # coupling
    Case(
        "coupling fires", COUPLE, coupled("0.6.17", "4.2.0"), [("coupling", "nvidia-cutlass-dsl")]
    ),
    Case(
        "coupling partner missing",
        COUPLE,
        coupled("0.6.17", None),
        [("coupling", "nvidia-cutlass-dsl")],
    ),
    Case("coupling holds", COUPLE, coupled("0.6.17", "4.3.1"), []),
    Case("coupling not triggered", COUPLE, coupled("0.5.3", "4.2.0"), []),
    Case("coupling A absent", COUPLE, coupled(None, "4.2.0"), []),
    # unmet-requirement
    Case(
        "unmet still unmet",
        "",
        lambda: unmet_result("2.30.1"),
        [("unmet-requirement", "nvidia-nccl-cu13")],
    ),
    Case(
        "unmet target removed",
        "",
        lambda: unmet_result(None),
        [("unmet-requirement", "nvidia-nccl-cu13")],
    ),
    Case("unmet fixed later", "", lambda: unmet_result("2.29.7"), []),
    # file-collision
    Case("collision fires", "", collision, [("file-collision", "cutlass")]),
    Case("same content no collision", "", lambda: collision(same_hash=True), []),
    Case(
        "same name is a duplicate",
        "",
        lambda: collision(same_name=True),
        [("duplicate-distribution", "nvidia-cutlass-dsl")],
    ),
    # duplicate-distribution
    Case("duplicate fires per environment", "", duplicate, [("duplicate-distribution", "numpy")]),
    Case("duplicate disabled", "[rules.duplicate-distribution]\nenabled = false\n", duplicate, []),
]


def keys(findings: tuple[Finding, ...]) -> list[tuple[str, str | None]]:
    return sorted((f.rule, f.package) for f in findings)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_rule_fires_or_not(case: Case) -> None:
    """Each rule fires exactly on the facts it is about, and stays silent otherwise."""
    policy = parse_policy(case.policy, file="policy.toml")
    findings = evaluate(case.audit(), policy, today=TODAY, **case.kwargs)
    assert keys(findings) == sorted(case.expect)
    for f in findings:
        assert f.message
        assert not f.waived


def test_downgrade_finding_names_step_versions_and_cause() -> None:
    """A downgrade finding says which step, from what to what, and which requirement did it."""
    (nccl,) = [
        f
        for f in evaluate(downgraded(), default_policy(), today=TODAY)
        if f.package == "nvidia-nccl-cu13"
    ]
    assert nccl.severity is Severity.ERROR
    assert (nccl.step, nccl.environment, nccl.versions) == (2, ENV, ("2.30.1", "2.29.7"))
    assert "torch 2.9.1 requires nvidia-nccl-cu13==2.29.7" in nccl.message
    assert nccl.policy_file is None  # the built-in default has no file


def test_findings_point_at_the_policy_line_and_the_step() -> None:
    """Entry findings carry the entry's line; the step is the one that installed the version."""
    policy = parse_policy("\n\n" + FORBID, file="p.toml")
    audit = downgraded()
    (f,) = [f for f in evaluate(audit, policy, today=TODAY) if f.rule == "forbidden-version"]
    assert (f.policy_file, f.policy_line, f.step) == ("p.toml", 3, 2)
    assert "NCCL internal error" in f.message
    assert "187526" in f.message
    (d,) = [
        f
        for f in evaluate(audit, parse_policy("\n[rules.downgrade]\n", file="q.toml"), today=TODAY)
        if f.package == "nvidia-nccl-cu13"
    ]
    assert (d.policy_file, d.policy_line) == ("q.toml", 2)


def test_file_collision_details() -> None:
    """A collision names both distributions, the colliding path, and ignores unhashed files."""
    (f,) = evaluate(collision(), default_policy(), today=TODAY)
    assert f.severity is Severity.WARNING
    assert f.versions == ("4.2.0", "4.3.0")
    assert f"{ENV}/cutlass/__init__.py" in f.message
    assert "nvidia-cutlass-dsl" in f.message
    assert "1 file(s)" in f.message


def test_record_mismatch_is_opt_in_and_compares_digests() -> None:
    """Runs only with file digests; reports changed and missing files inside the environment."""
    d = dist(
        "flashinfer-python",
        "0.6.17",
        record=[
            ("flashinfer/a.py", H1),
            ("flashinfer/b.py", H1),
            ("flashinfer/c.py", H1),
            ("flashinfer/__pycache__/a.pyc", ""),
            ("flashinfer_python-0.6.17.dist-info/METADATA", H1),
        ],
    )
    outside = ("/usr/local/bin/flashinfer", H1)
    d = replace(d, record=(*d.record, outside))
    audit = result(environment(d))
    assert evaluate(audit, default_policy(), today=TODAY) == ()
    digests = {f"{ENV}/flashinfer/a.py": H1, f"{ENV}/flashinfer/b.py": H2 + "="}
    (f,) = evaluate(audit, default_policy(), today=TODAY, file_digests=digests)
    assert f.rule == "record-mismatch"
    assert f.severity is Severity.ERROR
    assert "1 changed" in f.message
    assert "flashinfer/b.py" in f.message
    assert "1 missing" in f.message
    assert "flashinfer/c.py" in f.message
    assert "/usr/local/bin" not in f.message
    ok = {f"{ENV}/flashinfer/{n}.py": H1 for n in "abc"}
    assert evaluate(audit, default_policy(), today=TODAY, file_digests=ok) == ()
    off = parse_policy("[rules.record-mismatch]\nenabled = false\n")
    assert evaluate(audit, off, today=TODAY, file_digests=digests) == ()


SCOPES = [
    # (id, scope lines for [rules.downgrade], platform, targets, fires)
    ("env glob match", 'environments = ["/opt/venv/*"]', Platform("linux", "arm64"), (), True),
    ("env glob miss", 'environments = ["/usr/lib/*"]', Platform("linux", "arm64"), (), False),
    ("platform match", 'platforms = ["linux/arm64"]', Platform("linux", "arm64", "v8"), (), True),
    ("platform miss", 'platforms = ["linux/amd64"]', Platform("linux", "arm64"), (), False),
    (
        "platform variant miss",
        'platforms = ["linux/arm64/v7"]',
        Platform("linux", "arm64", "v8"),
        (),
        False,
    ),
    ("platform unknown fails closed", 'platforms = ["linux/amd64"]', None, (), True),
    # aliases, as pinguard.target spells them: aarch64 is arm64 (whose default variant is v8)
    (
        "platform alias aarch64",
        'platforms = ["linux/aarch64"]',
        Platform("linux", "arm64"),
        (),
        True,
    ),
    (
        "platform alias with variant",
        'platforms = ["linux/aarch64/v8"]',
        Platform("linux", "arm64"),
        (),
        True,
    ),
    ("platform alias x86_64", 'platforms = ["linux/x86_64"]', Platform("linux", "amd64"), (), True),
    ("platform alias miss", 'platforms = ["linux/x86_64"]', Platform("linux", "arm64"), (), False),
    ("target given", 'targets = ["sm_121"]', Platform("linux", "arm64"), ("sm_121",), True),
    ("target other", 'targets = ["sm_121"]', Platform("linux", "arm64"), ("sm_90",), False),
    ("target none", 'targets = ["sm_121"]', Platform("linux", "arm64"), (), False),
    (
        "marker true",
        "marker = \"python_version >= '3.12' and platform_machine == 'aarch64'\"",
        Platform("linux", "arm64"),
        (),
        True,
    ),
    (
        "marker false",
        "marker = \"platform_machine == 'x86_64'\"",
        Platform("linux", "arm64"),
        (),
        False,
    ),
]


@pytest.mark.parametrize(
    ("scope", "platform", "targets", "fires"), [s[1:] for s in SCOPES], ids=[s[0] for s in SCOPES]
)
def test_rule_scope(
    scope: str, platform: Platform | None, targets: tuple[str, ...], fires: bool
) -> None:
    """Environment globs, platforms, --target values and markers limit where a rule applies."""
    policy = parse_policy(f'[rules.downgrade]\nallow = ["pip"]\n{scope}\n')
    audit = replace(downgraded(), image=replace(downgraded().image, platform=platform))
    found = [
        f for f in evaluate(audit, policy, targets=targets, today=TODAY) if f.rule == "downgrade"
    ]
    assert bool(found) is fires


def test_entry_scope_limits_one_pin() -> None:
    """A [[pin]] scoped to one environment leaves the same package elsewhere alone."""
    policy = parse_policy(PIN + f'environments = ["{SYSTEM}"]\n')
    audit = result(
        environment(dist("nvidia-nccl-cu13", "2.29.7")),
        environment(dist("nvidia-nccl-cu13", "2.28.0"), path=SYSTEM),
    )
    (f,) = evaluate(audit, policy, today=TODAY)
    assert (f.environment, f.versions) == (SYSTEM, ("2.28.0",))


SEVERITIES = [
    ("rule severity", "[rules.downgrade]\nseverity = 'info'\n", Severity.INFO),
    ("default severity", "", Severity.ERROR),
    ("warning", "[rules.downgrade]\nseverity = 'warning'\n", Severity.WARNING),
]


@pytest.mark.parametrize(
    ("text", "severity"), [s[1:] for s in SEVERITIES], ids=[s[0] for s in SEVERITIES]
)
def test_severity_per_rule(text: str, severity: Severity) -> None:
    """[rules.X] severity sets the severity of every finding of that rule."""
    findings = evaluate(downgraded(), parse_policy(text), today=TODAY)
    assert {f.severity for f in findings} == {severity}


def test_entry_severity_overrides_rule_severity() -> None:
    """A [[forbidden]] entry's own severity wins over [rules.forbidden-version]."""
    text = "[rules.forbidden-version]\nseverity = 'error'\n" + FORBID + 'severity = "info"\n'
    (f,) = evaluate(
        result(environment(dist("nvidia-nccl-cu13", "2.29.7"))), parse_policy(text), today=TODAY
    )
    assert f.severity is Severity.INFO


WAIVER = (
    '[[waiver]]\npackage = "nvidia-nccl-cu13"\nrule = "downgrade"\n'
    'reason = "waiting for torch 2.10"\nexpires = {date}\n'
)


def test_valid_waiver_marks_finding_waived_but_keeps_it() -> None:
    """A waiver within its date waives the finding; the finding stays, marked and explained."""
    policy = parse_policy(WAIVER.format(date="2026-06-01"), file="w.toml")
    findings = evaluate(downgraded(), policy, today=TODAY)  # expires today: still valid
    nccl = next(f for f in findings if f.package == "nvidia-nccl-cu13")
    pip = next(f for f in findings if f.package == "pip")
    assert nccl.waived
    assert "waiting for torch 2.10" in (nccl.waiver_reason or "")
    assert not pip.waived
    assert worst(f for f in findings if f.package == "nvidia-nccl-cu13") is None
    assert all(f.rule != "expired-waiver" for f in findings)


def test_expired_waiver_is_an_error_and_waives_nothing() -> None:
    """After its date a waiver is an expired-waiver error at its line, and the finding is back."""
    policy = parse_policy("\n" + WAIVER.format(date="2026-05-31"), file="w.toml")
    findings = evaluate(downgraded(), policy, today=TODAY)
    expired = [f for f in findings if f.rule == "expired-waiver"]
    assert len(expired) == 1
    assert expired[0].severity is Severity.ERROR
    assert (expired[0].policy_file, expired[0].policy_line) == ("w.toml", 2)
    assert "2026-05-31" in expired[0].message
    assert not any(f.waived for f in findings)


def test_waiver_by_cause_package_and_environment() -> None:
    """A waiver may name a package involved (the cause), and be limited to environments."""
    text = (
        '[[waiver]]\npackage = "torch"\nrule = "downgrade"\nreason = "r"\nexpires = 2030-01-01\n'
        'environments = ["/opt/*"]\n'
    )
    findings = evaluate(downgraded(), parse_policy(text), today=TODAY)
    assert [f.waived for f in findings if f.package == "nvidia-nccl-cu13"] == [True]
    elsewhere = text.replace("/opt/*", "/usr/*")
    findings = evaluate(downgraded(), parse_policy(elsewhere), today=TODAY)
    assert not any(f.waived for f in findings)


def test_output_is_sorted_and_deterministic() -> None:
    """Errors come first; two evaluations of the same input are identical."""
    text = PIN + "[rules.duplicate-distribution]\nseverity = 'warning'\n"
    audit = result(
        environment(dist("nvidia-nccl-cu13", "2.29.7"), dist("numpy", "1.0"), dist("numpy", "2.0"))
    )
    a = evaluate(audit, parse_policy(text), today=TODAY)
    b = evaluate(audit, parse_policy(text), today=TODAY)
    assert a == b
    assert [f.severity.rank for f in a] == sorted((f.severity.rank for f in a), reverse=True)


def test_glm_policy_on_the_silent_downgrade_story() -> None:
    """The shipped GB10 policy fails the story's image on downgrade, pin and forbidden NCCL."""
    policy = load_policy(POLICIES / "glm-serving-gb10.toml")
    audit = result(
        environment(
            dist("nvidia-nccl-cu13", "2.29.7"),
            dist("torch", "2.9.1"),
            dist("flashinfer-python", "0.6.17"),
            dist("nvidia-cutlass-dsl", "4.3.1"),
        ),
        steps=downgraded().steps,
    )
    rules = {(f.rule, f.package) for f in evaluate(audit, policy, targets=("sm_121",), today=TODAY)}
    assert {
        ("downgrade", "nvidia-nccl-cu13"),
        ("pin-violation", "nvidia-nccl-cu13"),
        ("forbidden-version", "nvidia-nccl-cu13"),
        ("forbidden-version", "flashinfer-python"),
    } <= rules
    without_target = {(f.rule, f.package) for f in evaluate(audit, policy, today=TODAY)}
    assert ("forbidden-version", "flashinfer-python") not in without_target


def test_a_pin_that_matches_nothing_is_a_warning() -> None:
    policy = parse_policy(PIN, file="policy.toml")
    (finding,) = evaluate(one("torch", "2.9.1")(), policy, today=TODAY)
    assert finding.severity is Severity.WARNING
    assert finding.message.startswith(
        "pin matches nothing: no distribution named nvidia-nccl-cu13 is installed"
    )
    assert (finding.policy_file, finding.policy_line) == ("policy.toml", 1)
