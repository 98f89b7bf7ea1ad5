"""`pinguard compare` on synthetic images written in tmp_path (OCI archives and layouts)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from pinguard.audit.compare import compare_images
from pinguard.audit.pipeline import audit_image
from pinguard.cli import main
from pinguard.models import ChangeKind
from pinguard.testing.demo import Dist, Layer, demo_layers, write_oci_archive
from tests.infra.paths import COMPARE_SCHEMA, SARIF_SCHEMA
from tests.infra.registry import build_oci_layout

SCHEMA = COMPARE_SCHEMA
SITE = "usr/local/lib/python3.12/site-packages"
EMPTY = {1: "ENV PIP_NO_CACHE_DIR=1"}


@pytest.fixture
def before_after(tmp_path: Path) -> tuple[str, str]:
    """A: the demo without its nightly step; B: the demo (the nightly step is its step 5)."""
    a, b = tmp_path / "a.tar", tmp_path / "b.tar"
    write_oci_archive(demo_layers()[:3], a, tag="t", empty_steps=EMPTY)
    write_oci_archive(demo_layers(), b, tag="t", empty_steps=EMPTY)
    return f"oci-archive:{a}:t", f"oci-archive:{b}:t"


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    code = main(["compare", *argv, "--no-cache", "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    jsonschema.validate(doc, json.loads(SCHEMA.read_text()))
    return code, doc


def test_nightly_step_differences_have_b_steps_and_causes(before_after: tuple[str, str]) -> None:
    """A -> B: the nightly step (B's step 5) downgrades NCCL and cutlass-dsl, upgrades torch,
    adds flashinfer; the three shared layers are the base and are not re-reported."""
    a, b = (audit_image(r) for r in before_after)
    cmp = compare_images(a, b)
    assert (cmp.base.layers, cmp.base.step_a, cmp.base.step_b) == (3, 4, 4)
    assert cmp.base.created_by == "RUN /bin/sh -c pip install numpy==2.3.5 # buildkit"
    got = {d.name: (d.kind, d.a, d.b, d.step) for d in cmp.differences}
    assert got == {
        "flashinfer-python": (ChangeKind.ADDED, None, "0.6.18.dev20261120", 5),
        "nvidia-cutlass-dsl": (ChangeKind.DOWNGRADED, "4.3.0", "4.2.1", 5),
        "nvidia-nccl-cu13": (ChangeKind.DOWNGRADED, "2.30.3", "2.29.7", 5),
        "torch": (ChangeKind.UPGRADED, "2.11.0+cu130", "2.12.1+cu130", 5),
    }
    nccl = next(d for d in cmp.differences if d.name == "nvidia-nccl-cu13")
    assert [(c.package, c.version) for c in nccl.causes] == [
        ("torch", "2.12.1+cu130"),
        ("flashinfer-python", "0.6.18.dev20261120"),
    ]
    assert nccl.causes[0].requirement.startswith("nvidia-nccl-cu13==2.29.7")


def test_policy_gates_the_a_to_b_direction(
    before_after: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A -> B fails on the two downgrades (found at B's step 5); B -> A instead takes torch
    back to the base's 2.11.0+cu130 (B's step 3, in the shared base) and fails on that."""
    a, b = before_after
    code, doc = _json(capsys, a, b)
    assert code == 1
    assert doc["verdict"] == "fail"
    downgrades = sorted(
        (f["package"], f["step"], tuple(f["versions"]))
        for f in doc["findings"]
        if f["rule"] == "downgrade"
    )
    assert downgrades == [
        ("nvidia-cutlass-dsl", 5, ("4.3.0", "4.2.1")),
        ("nvidia-nccl-cu13", 5, ("2.30.3", "2.29.7")),
    ]
    code, doc = _json(capsys, b, a)
    assert [
        (f["package"], f["step"], tuple(f["versions"]))
        for f in doc["findings"]
        if f["rule"] == "downgrade"
    ] == [("torch", 3, ("2.12.1+cu130", "2.11.0+cu130"))]
    assert code == 1
    removed = next(d for d in doc["differences"] if d["name"] == "flashinfer-python")
    assert (removed["kind"], removed["step"]) == ("removed", None)
    assert removed["reason"] == ["B never installed it"]
    nccl = next(d for d in doc["differences"] if d["name"] == "nvidia-nccl-cu13")
    # B (=A here) got NCCL 2.30.3 from its step 3, which lies inside the shared base
    assert (nccl["kind"], nccl["step"], nccl["in_shared_base"]) == ("upgraded", 3, True)


def test_pins_apply_to_b(
    before_after: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pin on NCCL 2.30.3 fails A -> B (B carries 2.29.7) and passes B -> A."""
    policy = tmp_path / "policy.toml"
    policy.write_text(
        '[[pin]]\npackage = "nvidia-nccl-cu13"\nversion = "==2.30.3"\nreason = "fabric"\n'
    )
    a, b = before_after
    code, doc = _json(capsys, a, b, "--policy", str(policy))
    assert code == 1
    assert any(f["rule"] == "pin-violation" and f["step"] == 5 for f in doc["findings"])
    code, doc = _json(capsys, b, a, "--policy", str(policy))
    assert not any(f["rule"] == "pin-violation" for f in doc["findings"])


def test_json_is_deterministic(
    before_after: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Two runs over the same pair give the same bytes."""
    a, b = before_after
    outs = []
    for _ in range(2):
        main(["compare", a, b, "--no-cache", "--format", "json"])
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1]


def test_unmatched_environment_shows_as_added(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An environment only B has is marked 'only in B' and its distributions are added."""
    venv = "opt/venv/lib/python3.12/site-packages"
    a, b = tmp_path / "a.tar", tmp_path / "b.tar"
    base = demo_layers()[:1]
    write_oci_archive(base, a, tag="t")
    extra = Layer(
        "RUN /bin/sh -c /opt/venv/bin/pip install filelock==3.16.1",
        add=[Dist("filelock", "3.16.1", site=venv)],
    )
    write_oci_archive([*base, extra], b, tag="t")
    code, doc = _json(capsys, f"oci-archive:{a}:t", f"oci-archive:{b}:t")
    assert {(e["path"], e["in_a"], e["in_b"]) for e in doc["environments"]} == {
        (f"/{SITE}", True, True),
        (f"/{venv}", False, True),
    }
    (diff,) = doc["differences"]
    assert (diff["environment"], diff["name"], diff["kind"], diff["step"]) == (
        f"/{venv}",
        "filelock",
        "added",
        2,
    )
    assert diff["reason"] == ["asked for by this step (filelock==3.16.1)"]
    assert code == 0


def _platform_layers(plat: str) -> list[dict[str, bytes]]:
    nccl = "2.30.3" if plat == "linux/amd64" else "2.29.7"
    files: dict[str, bytes] = {}
    for name, version in (("nvidia-nccl-cu13", nccl), ("filelock", "3.16.1")):
        info = f"{SITE}/{name.replace('-', '_')}-{version}.dist-info"
        files[f"{info}/METADATA"] = (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        ).encode()
    return [files]


def test_platforms_of_an_oci_index(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--platforms all on an OCI layout index: one row, NCCL 2.30.3 on amd64, 2.29.7 on arm64."""
    layout = build_oci_layout(
        tmp_path / "layout",
        tag="glm",
        platforms=("linux/amd64", "linux/arm64"),
        layers=_platform_layers,
    )
    code, doc = _json(capsys, layout.source, "--platforms", "all")
    assert doc["platforms"] == ["linux/amd64", "linux/arm64"]
    assert doc["rows"] == [
        {
            "environment": f"/{SITE}",
            "name": "nvidia-nccl-cu13",
            "versions": {"linux/amd64": "2.30.3", "linux/arm64": "2.29.7"},
            "steps": {"linux/amd64": 1, "linux/arm64": 1},
        }
    ]
    assert code == 0
    code, same = _json(capsys, layout.source, "--platforms", "linux/arm64,linux/amd64")
    assert same["platforms"] == ["linux/arm64", "linux/amd64"]
    assert same["rows"][0]["versions"] == {"linux/amd64": "2.30.3", "linux/arm64": "2.29.7"}


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["compare", "oci:/nonexistent:x"], "two references"),
        (["compare", "a:1", "b:2", "--platforms", "all"], "exactly one"),
        (["compare", "a:1", "--platforms", "linux/amd64"], "fewer than two"),
        (["compare", "a:1", "--platforms", "linux/amd64,linux/amd64"], "twice"),
        (["compare", "a:1", "--platforms", "linux/amd64,nonsense"], "--platform"),
    ],
)
def test_usage_errors_exit_2(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Wrong reference counts and bad --platforms values are usage errors (exit 2)."""
    assert main(argv) == 2
    assert needle in capsys.readouterr().err


def test_missing_image_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A side that cannot be read is exit 3, naming it."""
    missing = tmp_path / "missing.tar"
    assert main(["compare", f"oci-archive:{missing}:t", f"oci-archive:{missing}:t"]) == 3
    assert "missing.tar" in capsys.readouterr().err


def _out(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(["compare", *argv, "--no-cache"])
    return code, capsys.readouterr().out


def test_table_names_the_base_and_each_reason(
    before_after: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The terminal table names the shared base once and gives every row a reason."""
    code, text = _out(capsys, *before_after)
    assert code == 1
    assert (
        "shared base: 3 layer(s), through step 4 of A and step 4 of B (pip install numpy==2.3.5;"
        in text
    )
    rows = [line for line in text.splitlines() if "flashinfer-python" in line]
    assert "asked for by this" in rows[0]  # the cell wraps; its first line is enough
    assert "torch 2.12.1+cu130" in text
    assert "verdict: fail" in text


def test_markdown_lists_the_differences(
    before_after: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The Markdown comment has the verdict line and one table row per difference."""
    _code, text = _out(capsys, *before_after, "--format", "markdown")
    assert text.startswith("### :x: pinguard compare: **fail**")
    rows = [line for line in text.splitlines() if line.startswith("| `/usr/local")]
    assert len(rows) == 4
    nccl = next(r for r in rows if "`nvidia-nccl-cu13`" in r)
    assert "| downgraded | 2.30.3 | 2.29.7 | 5 |" in nccl


def test_sarif_and_junit_carry_the_direction_findings(
    before_after: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """SARIF validates against the official 2.1.0 schema and holds the two downgrades; the
    JUnit document fails the two downgrade cases."""
    import xml.etree.ElementTree as ET

    _code, text = _out(capsys, *before_after, "--format", "sarif")
    doc = json.loads(text)
    schema = json.loads(SARIF_SCHEMA.read_text())
    jsonschema.validate(doc, schema)
    results = doc["runs"][0]["results"]
    assert sorted(r["properties"]["package"] for r in results if r["ruleId"] == "downgrade") == [
        "nvidia-cutlass-dsl",
        "nvidia-nccl-cu13",
    ]
    _code, text = _out(capsys, *before_after, "--format", "junit")
    root = ET.fromstring(text)
    failed = sorted(
        c.get("name", "")
        for c in root.iter("testcase")
        if c.get("classname") == "pinguard.downgrade" and c.find("failure") is not None
    )
    assert failed == ["nvidia-cutlass-dsl", "nvidia-nccl-cu13"]


def test_compare_offers_the_compare_registry() -> None:
    """`pinguard compare --format` offers exactly COMPARE_FORMATS, table first."""
    from pinguard.cli import build_parser
    from pinguard.report.formats import COMPARE_FORMATS

    assert list(COMPARE_FORMATS) == ["table", "json", "markdown", "html", "sarif", "junit"]
    parser = build_parser()
    assert parser.parse_args(["compare", "a:1", "b:1"]).format == "table"
    with pytest.raises(SystemExit):
        parser.parse_args(["compare", "a:1", "b:1", "--format", "xml"])


def test_two_directories_share_no_base(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """dir: sides have no layers in common (their pseudo-layers have the same name), and
    the upgrade between them is reported at their one step."""
    for side, version in (("a", "3.16.0"), ("b", "3.16.1")):
        info = tmp_path / side / "lib/python3.12/site-packages" / f"filelock-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: filelock\nVersion: {version}\n"
        )
    code, doc = _json(capsys, f"dir:{tmp_path / 'a'}", f"dir:{tmp_path / 'b'}")
    assert doc["shared_base"]["layers"] == 0
    (diff,) = doc["differences"]
    assert (diff["name"], diff["kind"], diff["a"], diff["b"], diff["step"]) == (
        "filelock",
        "upgraded",
        "3.16.0",
        "3.16.1",
        1,
    )
    assert diff["in_shared_base"] is False
    assert code == 0
