"""Verification with real uv against two served indexes; chains, alternatives, overrides."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from pinguard.repair.resolve import IndexOptions, TargetEnvironment, verify_constraints
from pinguard.repair.resolve.explain import explain_failure, facts_from_uv
from pinguard.repair.resolve.index import SimpleIndex
from tests.infra.index import serve_index
from tests.infra.wheels import WheelSpec, build_wheels
from tests.repair.conftest import PLATFORM, Indexes

TARGET = TargetEnvironment("3.12", PLATFORM)
WHOLE = ["nvidia-cutlass-dsl==4.3.0", "nvidia-nccl-cu13==2.30.3", "torch==2.11.0+cu130"]
NO_TORCH = ["nvidia-cutlass-dsl==4.3.0", "nvidia-nccl-cu13==2.30.3"]
BAD = ["flashinfer-python==0.6.18.dev20261120"]


def opts(ix: Indexes) -> IndexOptions:
    return IndexOptions(index_url=ix.main.url, extra_index_urls=(ix.nightly.url,), prerelease=True)


def test_satisfiable(indexes: Indexes) -> None:
    """The good step's requirement resolves under the constraints, to the pinned set."""
    v = verify_constraints(["torch"], WHOLE, index=opts(indexes), target=TARGET)
    assert v.satisfiable
    assert dict(v.pins)[canonicalize_name("torch")] == "2.11.0+cu130"
    assert v.explanation is None


def test_unsatisfiable_whole_set_explained(indexes: Indexes) -> None:
    """With torch pinned, the chain stops at torch; the newer nightly is the way out."""
    v = verify_constraints(BAD, WHOLE, index=opts(indexes), target=TARGET)
    assert not v.satisfiable
    assert v.explanation is not None
    assert v.explanation.culprit == "flashinfer-python"
    assert v.explanation.blocked_by == "torch==2.11.0+cu130"
    assert v.explanation.chain[0].version == "0.6.18.dev20261120"
    assert "flashinfer-python 0.6.18.dev20261120 requires torch>=2.12" in v.explanation.plain()
    assert [(a.version, a.verified) for a in v.alternatives] == [("0.6.18.dev20261125", True)]
    assert v.override is not None
    assert v.override.satisfiable
    assert v.override.overrides == ("torch==2.11.0+cu130",)
    assert v.override.unmet[0].requirement == "torch>=2.12"
    # the alternative was judged by PEP 658 metadata, never by downloading a wheel
    assert indexes.nightly.requested(".whl.metadata")
    assert not any(p.endswith(".whl") for p in indexes.nightly.requests)


def test_unsatisfiable_chain_through_torch(indexes: Indexes) -> None:
    """Without torch pinned, the chain runs flashinfer -> torch 2.12.1 -> NCCL/cutlass pin."""
    v = verify_constraints(BAD, NO_TORCH, index=opts(indexes), target=TARGET)
    assert v.explanation is not None
    links = [(link.package, link.version) for link in v.explanation.chain]
    assert links == [("flashinfer-python", "0.6.18.dev20261120"), ("torch", "2.12.1")]
    assert v.explanation.blocked_by in {"nvidia-nccl-cu13==2.30.3", "nvidia-cutlass-dsl==4.3.0"}
    assert [a.version for a in v.alternatives] == ["0.6.18.dev20261125"]
    assert v.override is not None
    assert set(v.override.overrides) == {"nvidia-nccl-cu13==2.30.3", "nvidia-cutlass-dsl==4.3.0"}
    assert {u.package for u in v.override.unmet} == {"torch"}


def test_pip_tools_resolver(indexes: Indexes) -> None:
    """--resolver pip-tools reaches the same verdicts with pip's resolver."""
    ok = verify_constraints(
        ["torch"], WHOLE, index=opts(indexes), target=TARGET, resolver="pip-tools"
    )
    assert ok.satisfiable
    bad = verify_constraints(BAD, WHOLE, index=opts(indexes), target=TARGET, resolver="pip-tools")
    assert not bad.satisfiable
    assert bad.explanation is not None
    assert bad.explanation.culprit == "flashinfer-python"


def test_index_lists_versions_html_and_json(indexes: Indexes, tmp_path: Path) -> None:
    """The simple-index client reads PEP 691 JSON and find-links directories alike."""
    client = SimpleIndex([indexes.main.url], [str(tmp_path / "nightly")])
    assert client.versions("torch") == (Version("2.12.1"), Version("2.11.0+cu130"))
    assert client.versions("flashinfer_python")[0] == Version("0.6.18.dev20261125")
    pins = {canonicalize_name("torch"): SpecifierSet("==2.11.0+cu130")}
    found = client.candidates("flashinfer-python", pins, TARGET)
    assert [str(c.version) for c in found] == ["0.6.18.dev20261125"]


UV_TEXT = "\n".join(
    [
        "error: No solution found when resolving dependencies",
        "  cause: Because torch>=2.12.1 depends on nvidia-nccl-cu13==2.29.7 and"
        " nvidia-nccl-cu13==2.30.3, we can conclude that torch>=2.12.1 cannot be used.",
        "         And because only the following versions of torch are available:",
        "             torch<2.12",
        "             torch>=2.12.1",
        "         we can conclude that torch>=2.12 cannot be used.",
        "         And because flashinfer-python==0.6.18.dev20261120 depends on torch>=2.12 and"
        " you require flashinfer-python==0.6.18.dev20261120, we can conclude that your"
        " requirements are unsatisfiable.",
    ]
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (UV_TEXT, [("flashinfer-python", "0.6.18.dev20261120"), ("torch", "2.12.1")]),
        (
            UV_TEXT.replace("error:", "  \u00d7").replace("cause:", "\u2570\u2500\u25b6"),
            [("flashinfer-python", "0.6.18.dev20261120"), ("torch", "2.12.1")],
        ),
        ("error: something else entirely", None),
    ],
)
def test_explain_uv_text(text: str, expected: list[tuple[str, str]] | None) -> None:
    """uv's prose (old and new layouts) becomes a chain; unknown prose gives None."""
    pins = {canonicalize_name("nvidia-nccl-cu13"): SpecifierSet("==2.30.3")}
    found = explain_failure(text, BAD, pins)
    if expected is None:
        assert found is None
        return
    assert found is not None
    assert [(x.package, x.version) for x in found.chain] == expected
    assert found.unmet_if_overridden.requirement == "nvidia-nccl-cu13==2.29.7"
    assert len(facts_from_uv(text)[0]) == 2


def test_override_that_still_fails_names_the_missing_version(tmp_path: Path) -> None:
    """When the known-good torch is not on the index at all, forcing it cannot resolve:
    the option names torch==2.11.0+cu130 and lists what the index has instead (2.12.1)."""
    build_wheels(
        (
            WheelSpec("torch", "2.12.1"),
            WheelSpec("flashinfer-python", "0.6.18.dev20261120", ("torch>=2.12",)),
        ),
        tmp_path / "only-new",
    )
    with serve_index(tmp_path / "only-new") as ix:
        v = verify_constraints(
            BAD,
            ["torch==2.11.0+cu130"],
            index=IndexOptions(index_url=ix.url, prerelease=True),
            target=TARGET,
        )
    assert not v.satisfiable
    assert v.override is not None
    assert v.override.overrides == ("torch==2.11.0+cu130",)
    assert not v.override.satisfiable
    assert v.override.blocker is not None
    assert v.override.blocker.package == "torch"
    assert v.override.blocker.asked == "==2.11.0+cu130"
    assert v.override.blocker.available == ("2.12.1",)
    assert v.override.blocker.sentence() == (
        "no file of torch==2.11.0+cu130 fits the target; the index has 2.12.1"
    )


def test_missing_pin_without_a_chain_is_named(tmp_path: Path) -> None:
    """A pinned installer package the index lacks (the seeded pip==23.0.1 of a Debian image)
    is named with what the index has, even when no chain can be drawn."""
    build_wheels((WheelSpec("pip", "25.1"), WheelSpec("pip", "24.0")), tmp_path / "pips")
    with serve_index(tmp_path / "pips") as ix:
        v = verify_constraints(
            ["pip"],
            ["pip==23.0.1"],
            index=IndexOptions(index_url=ix.url),
            target=TARGET,
        )
    assert not v.satisfiable
    assert "blocked: no file of pip==23.0.1 fits the target; the index has 25.1, 24.0" in v.notes
