"""Issue 28: an attestation must not say pass where the verifier's own judgement would fail.

``verify`` re-judges the finding counts an attestation records at its own ``--fail-on``
(default ``error``), whatever threshold it was attested at, and fails closed on a statement
that records no counts, names a second subject or another image, found no Python, or was
judged under ``--policy none``; ``attest`` and the fleet's workers refuse to sign a verdict at
``--fail-on never`` or under ``--policy none``. The checks run on envelopes signed with
openssl-made keys; the round trips run the CLI and a fleet task against Debian's
``docker-registry``, with the bundled demo image (two downgrades) pushed by skopeo.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as _dt
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import requests

from pinguard.attest import render as report
from pinguard.attest.statement import PREDICATE_TYPE, build_statement, statement_bytes
from pinguard.attest.store import Candidate, push_attestation
from pinguard.attest.verify import Demands, check_envelope, verify
from pinguard.cli import main
from pinguard.errors import AttestError
from pinguard.fleet.records import ResultStore
from pinguard.fleet.task import WorkerSettings, audit_reference, configure
from pinguard.models import Finding, PolicySource, Severity
from pinguard.signing import dsse
from pinguard.signing.keys import load_private_key, load_public_key
from pinguard.sources.interface import SourceOptions
from pinguard.sources.registry import RegistrySource
from pinguard.testing.demo import build_demo
from tests.attest.conftest import Keys
from tests.factories import dist, environment, result, step
from tests.infra.registry import RegistryServer, build_oci_layout, start_registry

IMAGE = "sha256:" + "1f" * 32
OTHER = "sha256:" + "2e" * 32
NOW = _dt.datetime(2026, 12, 1, 9, 0, 0, tzinfo=_dt.timezone.utc)
POLICY = '[rules.downgrade]\nseverity = "error"\n'
DEMO_TAG = "2026-11-29"


def _schema(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(
        resources.files("pinguard").joinpath(f"schemas/{name}").read_text()
    )
    return loaded


def statement(
    fail_on: str = "error",
    counts: tuple[int, int, int] = (0, 0, 0),
    verdict: str = "pass",
    environments: int = 1,
    **predicate: Any,
) -> dict[str, Any]:
    """A v1 statement as pinguard writes it (the audit document cut to its policy)."""
    error, warning, info = counts
    base: dict[str, Any] = {
        "verdict": verdict,
        "failOn": fail_on,
        "allowIncomplete": False,
        "allowNoPython": False,
        "incomplete": [],
        "policies": [{"path": "policy.toml", "digest": {"sha256": "c0" * 32}}],
        "image": {"reference": "docker://registry.example/app:v1", "digest": IMAGE},
        "platform": "linux/amd64",
        "pinguard": {"version": "0.1.0"},
        "timestamp": "2026-11-30T09:00:00Z",
        "summary": {
            "findings": {"error": error, "warning": warning, "info": info, "waived": 0},
            "steps": 2,
            "environments": environments,
            "distributions": 3 * environments,
        },
        "audit": {"policy": {"source": "given", "files": []}},
    }
    base.update(predicate)
    return {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": "registry.example/app", "digest": {"sha256": IMAGE[7:]}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": base,
    }


def check(keys: Keys, doc: dict[str, Any], demands: Demands) -> tuple[str, ...]:
    """The reasons a signed ``doc`` fails ``demands`` (empty: it verifies)."""
    envelope = dsse.sign(statement_bytes(doc), load_private_key(keys.private)).to_json()
    result = check_envelope(
        envelope.encode(), load_public_key(keys.public), demands, NOW, source="a", via="file"
    )
    assert result.attested is not None  # the signature verified: only the demands are left
    return result.reasons


@pytest.mark.parametrize(
    ("fail_on", "counts", "verify_at", "reason"),
    [
        # the issue: judged at never, two errors -> verify's default threshold fails it
        (
            "never",
            (2, 0, 0),
            Severity.ERROR,
            "it was judged at --fail-on never, looser than --fail-on error here, and records "
            "2 error finding(s), which fail at error",
        ),
        (
            "error",
            (0, 1, 0),
            Severity.WARNING,
            "judged at --fail-on error, looser than --fail-on warning here, and records "
            "1 warning finding(s)",
        ),
        (
            "warning",
            (0, 0, 3),
            Severity.INFO,
            "judged at --fail-on warning, looser than --fail-on info here, and records 3 info",
        ),
        ("never", (1, 2, 0), Severity.WARNING, "records 1 error, 2 warning finding(s)"),
        # looser threshold but nothing at or above verify's: the counts pass here
        ("never", (0, 0, 0), Severity.ERROR, None),
        ("error", (0, 4, 1), Severity.ERROR, None),
        # a verifier that itself asks for nothing (--fail-on never) keeps the old behaviour
        ("never", (2, 0, 0), None, None),
    ],
    ids=[
        "never-errors-at-error",
        "error-warning-at-warning",
        "warning-info-at-info",
        "never-mixed-at-warning",
        "never-clean-at-error",
        "error-warnings-at-error",
        "never-errors-at-never",
    ],
)
def test_recorded_findings_are_re_judged_at_verify_threshold(
    keys: Keys,
    fail_on: str,
    counts: tuple[int, int, int],
    verify_at: Severity | None,
    reason: str | None,
) -> None:
    """The attested verdict is pass in every row; what decides is the counts at verify's
    threshold, and a looser attested threshold is named in the reason."""
    reasons = check(
        keys, statement(fail_on, counts), Demands(image_digest=IMAGE, fail_on=verify_at)
    )
    if reason is None:
        assert reasons == ()
    else:
        assert len(reasons) == 1, reasons
        assert reason in reasons[0]


def _without(doc: dict[str, Any], *path: str) -> dict[str, Any]:
    target = doc["predicate"]
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]
    return doc


@pytest.mark.parametrize(
    ("doc", "reason"),
    [
        (_without(statement(), "summary"), "records no finding counts per severity"),
        (_without(statement(), "summary", "findings"), "records no finding counts per severity"),
        (
            _without(statement(), "summary", "environments"),
            "records no finding counts per severity and environments",
        ),
        (
            statement(summary={"findings": {"error": "0", "warning": 0, "info": 0}}),
            "records no finding counts per severity",
        ),
        (
            statement(summary={"findings": {"error": -1, "warning": 0, "info": 0}}),
            "records no finding counts per severity",
        ),
        (_without(statement(), "failOn"), "records no threshold (failOn)"),
        (statement(fail_on="critical"), "its threshold failOn 'critical' is not one of"),
        (_without(statement(), "image"), "its predicate names no image digest"),
    ],
    ids=[
        "no-summary",
        "no-counts",
        "no-environments",
        "count-as-text",
        "negative-count",
        "no-threshold",
        "unknown-threshold",
        "no-image",
    ],
)
def test_what_is_not_recorded_fails_closed(keys: Keys, doc: dict[str, Any], reason: str) -> None:
    """A signed v1 statement without counts, threshold or image (older or hand-made) fails
    with a reason saying what is missing, even for a verifier at --fail-on never."""
    for verify_at in (Severity.ERROR, None):
        reasons = check(keys, doc, Demands(image_digest=IMAGE, fail_on=verify_at))
        assert any(reason in r for r in reasons), reasons


def test_an_attestation_of_another_image_fails(keys: Keys) -> None:
    """A statement naming the image and a second subject, or whose predicate records the audit
    of another digest, does not verify the image."""
    two = statement()
    two["subject"].append({"name": "registry.example/other", "digest": {"sha256": OTHER[7:]}})
    demands = Demands(image_digest=IMAGE)
    assert check(keys, two, demands) == (
        "it names 2 subjects; a pinguard attestation names the one image it audited",
    )
    other = statement(image={"reference": "docker://registry.example/o:v1", "digest": OTHER})
    assert check(keys, other, demands) == (
        f"its predicate records an audit of {OTHER}, not of the image {IMAGE}",
    )


def test_a_statement_that_contradicts_itself_fails(keys: Keys) -> None:
    """Verdict pass at failOn error with an error recorded: refused even by a verifier at
    --fail-on never."""
    reasons = check(keys, statement("error", (1, 0, 0)), Demands(image_digest=IMAGE, fail_on=None))
    assert reasons == (
        "it contradicts itself: verdict 'pass' at --fail-on error with 1 error finding(s)",
    )


def test_no_python_and_policy_none_fail(keys: Keys) -> None:
    """An audit that found no Python environment passes only with allow_no_python; one judged
    under --policy none never passes."""
    empty = statement(environments=0, allowNoPython=True)
    reasons = check(keys, empty, Demands(image_digest=IMAGE))
    assert reasons == (
        "the audit found no Python environment in the image (attested with "
        "--allow-no-python); --allow-no-python accepts that",
    )
    assert check(keys, empty, Demands(image_digest=IMAGE, allow_no_python=True)) == ()
    inventory = statement(audit={"policy": {"source": "none", "files": []}}, policies=[])
    assert check(keys, inventory, Demands(image_digest=IMAGE, allow_no_python=True)) == (
        "it was judged under --policy none (an inventory): no rule could fail it",
    )


def test_the_report_shows_both_thresholds_and_the_counts(keys: Keys) -> None:
    """verify's JSON (schema-valid) and table carry verify's threshold and each attestation's
    attested threshold and counts."""
    key = load_private_key(keys.private)
    loose = dsse.sign(statement_bytes(statement("never", (2, 0, 0))), key).to_json().encode()
    strict = dsse.sign(statement_bytes(statement("warning", (0, 0, 1))), key).to_json().encode()
    candidates = [
        Candidate("sha256:" + "01" * 32, "tag-schema", envelope=loose, subject=IMAGE),
        Candidate("sha256:" + "02" * 32, "tag-schema", envelope=strict, subject=IMAGE),
    ]
    demands = Demands(image_digest=IMAGE, fail_on=Severity.WARNING)
    result = verify("docker://r/app:v1", candidates, load_public_key(keys.public), demands, NOW)
    doc = report.to_dict(result)
    jsonschema.Draft202012Validator(_schema("verify-v1.schema.json")).validate(doc)
    assert doc["result"] == "verified"
    assert doc["fail_on"] == "warning"
    by_source = {a["source"]: a for a in doc["attestations"]}
    failed = by_source["sha256:" + "01" * 32]
    assert (failed["ok"], failed["fail_on"], failed["complete"], failed["no_python"]) == (
        False,
        "never",
        True,
        False,
    )
    assert failed["findings"] == {"error": 2, "warning": 0, "info": 0, "waived": 0}
    assert by_source["sha256:" + "02" * 32]["fail_on"] == "warning"
    table = report.render_table(result)
    assert "  judged here at --fail-on warning\n" in table
    assert "verdict pass at fail-on never (2 error, 0 warning, 0 info)" in table
    assert "- it was judged at --fail-on never, looser than --fail-on warning here" in table


def _judged(**changes: Any) -> Any:
    r = result(environment(dist("torch", "2.12.1")), steps=[step(1)])
    findings = (Finding(rule="downgrade", severity=Severity.ERROR, message="m", package="x"),)
    given = PolicySource("given", (("p.toml", "sha256:00"),))
    return dataclasses.replace(r, **{"findings": findings, "policy": given, **changes})


def test_attest_refuses_a_verdict_that_judges_nothing() -> None:
    """build_statement (attest and the fleet both sign through it) refuses --fail-on never and
    --policy none; at a threshold it records failOn, allowNoPython and the counts, schema-valid."""
    with pytest.raises(AttestError, match=r"--fail-on never judges nothing"):
        build_statement(_judged(), policies=(), fail_on=None, allow_incomplete=False, now=NOW)
    with pytest.raises(AttestError, match=r"--policy none judges nothing"):
        build_statement(
            _judged(policy=PolicySource("none")),
            policies=(),
            fail_on=Severity.ERROR,
            allow_incomplete=False,
            now=NOW,
        )
    doc = build_statement(
        _judged(),
        policies=(),
        fail_on=Severity.WARNING,
        allow_incomplete=False,
        allow_no_python=True,
        now=NOW,
    )
    jsonschema.Draft202012Validator(_schema("attest-v1.schema.json")).validate(doc)
    pred = doc["predicate"]
    assert (pred["verdict"], pred["failOn"], pred["allowNoPython"]) == ("fail", "warning", True)
    assert pred["summary"]["findings"] == {"error": 1, "warning": 0, "info": 0, "waived": 0}


# --------------------------------------------------------------------------- registry


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryServer]:
    server = start_registry(tmp_path_factory.mktemp("threshold-registry"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled demo image: step 6 downgrades NCCL and cutlass-dsl (two errors)."""
    path = tmp_path_factory.mktemp("demo") / "demo.tar"
    build_demo(path, tag=DEMO_TAG)
    return path


@dataclass
class Ctx:
    registry: RegistryServer
    repo: str
    keys: Keys
    tmp_path: Path
    capsys: pytest.CaptureFixture[str]

    @property
    def ref(self) -> str:
        return f"docker://{self.registry.ref(self.repo)}:v1"

    def policy(self, text: str = POLICY) -> Path:
        path = self.tmp_path / "policy.toml"
        path.write_text(text)
        return path

    def run(self, *argv: str) -> tuple[int, str, str]:
        code = main(list(argv))
        out, err = self.capsys.readouterr()
        return code, out, err

    def attest(self, *extra: str, policy: Path | None = None) -> tuple[int, str, str]:
        return self.run(
            "attest",
            self.ref,
            "--policy",
            str(policy or self.policy()),
            "--key",
            str(self.keys.private),
            "--cache-dir",
            str(self.tmp_path / "cache"),
            *extra,
        )

    def verify(self, *extra: str) -> tuple[int, str, str]:
        return self.run("verify", self.ref, "--key", str(self.keys.public), *extra)

    def tags(self) -> list[str]:
        response = requests.get(f"{self.registry.url}/v2/{self.repo}/tags/list", timeout=10)
        response.raise_for_status()
        return sorted(response.json().get("tags") or [])


@pytest.fixture
def ctx(
    registry: RegistryServer, keys: Keys, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> Ctx:
    return Ctx(registry, f"team/gate-{uuid.uuid4().hex[:8]}", keys, tmp_path, capsys)


@pytest.mark.integration
def test_issue_28_a_never_attestation_of_two_downgrades_does_not_verify(
    ctx: Ctx, demo: Path
) -> None:
    """attest --fail-on never exits 2 and pushes nothing. The attestation pinguard used to
    sign there (verdict pass, failOn never, two errors recorded), attached to the image, fails
    verify at its default threshold with the reason and both thresholds shown; a verifier that
    asks for --fail-on never itself accepts it."""
    ctx.registry.push(f"oci-archive:{demo}:{DEMO_TAG}", f"{ctx.repo}:v1")
    code, out, err = ctx.attest("--fail-on", "never", "--push")
    assert code == 2, err
    assert "--fail-on never judges nothing" in err
    assert out == ""
    assert ctx.tags() == ["v1"]  # no attestation was attached

    saved = ctx.tmp_path / "strict.json"
    code, _, err = ctx.attest("-o", str(saved))
    assert code == 1, err
    assert "attested verdict: fail" in err
    doc = json.loads(base64.b64decode(json.loads(saved.read_text())["payload"]))
    assert doc["predicate"]["summary"]["findings"]["error"] == 2
    # what the old `attest --fail-on never` signed: the same audit, judged at never
    doc["predicate"].update(failOn="never", verdict="pass")
    doc["predicate"]["audit"]["verdict"] = "pass"
    envelope = dsse.sign(statement_bytes(doc), load_private_key(ctx.keys.private)).to_json()
    image = doc["predicate"]["image"]["digest"]
    with RegistrySource(ctx.registry.ref(f"{ctx.repo}:v1"), SourceOptions()) as source:
        assert isinstance(source, RegistrySource)
        push_attestation(
            source, image, envelope.encode(), predicate_type=PREDICATE_TYPE, created="x"
        )

    code, out, _ = ctx.verify()
    assert code == 1, out
    assert "judged here at --fail-on error" in out
    assert "verdict pass at fail-on never (2 error, 0 warning, 0 info)" in out
    assert (
        "- it was judged at --fail-on never, looser than --fail-on error here, and records "
        "2 error finding(s), which fail at error"
    ) in out
    assert "not verified" in out
    code, out, _ = ctx.verify("--format", "json")
    assert code == 1
    report_doc = json.loads(out)
    jsonschema.Draft202012Validator(_schema("verify-v1.schema.json")).validate(report_doc)
    assert report_doc["result"] == "failed"
    assert report_doc["fail_on"] == "error"
    [attestation] = report_doc["attestations"]
    assert attestation["fail_on"] == "never"
    assert attestation["findings"]["error"] == 2
    assert ctx.verify("--fail-on", "never")[0] == 0


@pytest.mark.integration
def test_verify_at_a_stricter_threshold_than_attested(ctx: Ctx, demo: Path) -> None:
    """Downgrades as warnings: attested at --fail-on error the verdict is pass and verify at
    its default accepts it; verify --fail-on warning re-judges the two recorded warnings and
    refuses it, naming both thresholds."""
    ctx.registry.push(f"oci-archive:{demo}:{DEMO_TAG}", f"{ctx.repo}:v1")
    policy = ctx.policy('[rules.downgrade]\nseverity = "warning"\n')
    code, _, err = ctx.attest("--push", policy=policy)
    assert code == 0, err
    code, out, _ = ctx.verify()
    assert code == 0, out
    assert "verdict pass at fail-on error (0 error, 2 warning, 0 info)" in out
    code, out, _ = ctx.verify("--fail-on", "warning")
    assert code == 1, out
    assert (
        "- it was judged at --fail-on error, looser than --fail-on warning here, and records "
        "2 warning finding(s), which fail at warning"
    ) in out


@pytest.mark.integration
def test_an_image_without_python_verifies_only_with_allow_no_python(ctx: Ctx) -> None:
    """attest --allow-no-python signs pass for an image with no Python environment; verify
    refuses it unless it is given --allow-no-python too, as audit's gate would."""
    layout = build_oci_layout(ctx.tmp_path / "layout", layers=[{"etc/motd": b"hello\n"}])
    ctx.registry.push(layout.source, f"{ctx.repo}:v1")
    code, _, err = ctx.attest("--push", "--allow-no-python")
    assert code == 0, err
    code, out, _ = ctx.verify()
    assert code == 1, out
    assert "the audit found no Python environment in the image (attested with " in out
    assert ctx.verify("--allow-no-python")[0] == 0


@pytest.fixture
def worker(tmp_path: Path, keys: Keys) -> Iterator[ResultStore]:
    """This process as a fleet worker with an attestation key; its result store."""
    results = tmp_path / "results"
    results.mkdir()
    configure(WorkerSettings(results=results, attest_key=keys.private))
    try:
        yield ResultStore(results)
    finally:
        configure(None)


@pytest.mark.integration
def test_the_fleet_never_records_an_unjudged_attestation_as_a_pass(
    ctx: Ctx, demo: Path, worker: ResultStore
) -> None:
    """A fleet task with --attest at --fail-on never, or under --policy none, leaves an error
    record naming why and attaches nothing (it was a pass record with an attestation); at
    --fail-on error the record fails and so does verify."""
    ctx.registry.push(f"oci-archive:{demo}:{DEMO_TAG}", f"{ctx.repo}:v1")
    policy = str(ctx.policy())
    base = {"policy": [policy], "attest": True, "fail_on": "error"}
    for options, why in (
        ({**base, "fail_on": "never"}, "--fail-on never judges nothing"),
        ({**base, "policy": ["none"]}, "--policy none judges nothing"),
    ):
        outcome = audit_reference(ctx.ref, options)
        assert (outcome["verdict"], outcome["exit_code"]) == ("error", 2), outcome
        record = worker.read(str(outcome["id"]))
        assert record is not None
        assert record.attestation is None
        assert record.error is not None
        assert f"not attesting {ctx.ref}: {why}" in record.error
    assert ctx.tags() == ["v1"]
    outcome = audit_reference(ctx.ref, base)
    assert (outcome["verdict"], outcome["exit_code"]) == ("fail", 1), outcome
    record = worker.read(str(outcome["id"]))
    assert record is not None
    assert record.attestation is not None
    code, out, _ = ctx.verify()
    assert code == 1
    assert "the attested verdict is 'fail', not 'pass'" in out
    assert "it records 2 error finding(s), which fail at --fail-on error" in out
