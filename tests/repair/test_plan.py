"""plan: a dry run against the image's metadata predicts the downgrade; command parsing;
seeding the dry run's site-packages from untrusted image values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from packaging.utils import canonicalize_name

from pinguard.models import ChangeKind, Distribution, Environment
from pinguard.repair.plan import plan_install, seed_site_packages
from pinguard.repair.resolve import IndexOptions, parse_command_line, parse_install_commands
from tests.repair.conftest import GOOD, PLATFORM, Indexes


def test_plan_predicts_the_downgrade(indexes: Indexes) -> None:
    """Installing the nightly into the good state downgrades NCCL and cutlass, caused by torch."""
    command = parse_command_line(
        [
            "pip",
            "install",
            "--pre",
            "--extra-index-url",
            indexes.nightly.url,
            "flashinfer-python==0.6.18.dev20261120",
        ]
    )
    assert command is not None
    plan = plan_install(
        GOOD, command, index=IndexOptions(index_url=indexes.main.url), platform=PLATFORM
    )
    kinds: dict[str, tuple[ChangeKind, str | None, str | None]] = {
        c.name: (c.kind, c.before, c.after) for c in plan.changes
    }
    assert kinds["nvidia-nccl-cu13"] == (ChangeKind.DOWNGRADED, "2.30.3", "2.29.7")
    assert kinds["nvidia-cutlass-dsl"] == (ChangeKind.DOWNGRADED, "4.3.0", "4.2.1")
    assert kinds["torch"] == (ChangeKind.UPGRADED, "2.11.0+cu130", "2.12.1")
    assert kinds["flashinfer-python"][0] is ChangeKind.ADDED
    nccl = next(c for c in plan.changes if c.name == "nvidia-nccl-cu13")
    assert any(c.package == "torch" and "2.29.7" in c.requirement for c in nccl.causes)


def test_plan_of_a_harmless_step(indexes: Indexes) -> None:
    """The newer nightly changes nothing already installed."""
    command = parse_command_line(
        [
            "uv",
            "pip",
            "install",
            "--prerelease",
            "allow",
            "--index-url",
            indexes.main.url,
            "--extra-index-url",
            indexes.nightly.url,
            "flashinfer-python",
        ]
    )
    assert command is not None
    plan = plan_install(GOOD, command, platform=PLATFORM)
    assert [(c.name, c.kind) for c in plan.changes] == [("flashinfer-python", ChangeKind.ADDED)]


@pytest.mark.parametrize(
    ("created_by", "reqs", "pre"),
    [
        (
            "/bin/sh -c pip install --pre flashinfer-python==0.6.18.dev20261120",
            ["flashinfer-python==0.6.18.dev20261120"],
            True,
        ),
        (
            "RUN |1 V=1 /bin/sh -c python3 -m pip install -U 'torch>=2' && pip check # buildkit",
            ["torch>=2"],
            False,
        ),
        ("/bin/sh -c uv pip install --system --prerelease=allow -r r.txt vllm", ["vllm"], True),
        ("/bin/sh -c #(nop)  ENV A=b", None, False),
    ],
)
def test_install_commands_from_history(created_by: str, reqs: list[str] | None, pre: bool) -> None:
    """History commands become install commands (or none)."""
    found = parse_install_commands(created_by)
    if reqs is None:
        assert found == ()
        return
    assert list(found[0].requirements) == reqs
    assert found[0].index.prerelease is pre


def test_seeding_never_writes_outside_site_packages(tmp_path: Path) -> None:
    """Names and versions come from the image: a hostile one is left out, not followed."""
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)

    def dist(name: str, version: str, **kw: Any) -> Distribution:
        return Distribution(
            name=canonicalize_name(name),
            raw_version=version,
            metadata_path=f"/x/{name}-{version}.dist-info",
            display_name=name,
            **kw,
        )

    env = Environment(
        path="/usr/lib/python3/dist-packages",
        python="3.11",
        distributions=(
            dist("escape", "../../../../../pwned"),
            dist("legacy", "6.7.8.9-10.el7"),
            dist("empty", ""),
            dist("bad/name", "1.0"),
            dist("inject", "1.0", requires_dist=("six\nName: evil",)),
            dist("Good_Pkg", "2.30.03+cu130", requires_dist=("six>=1",)),
        ),
    )
    notes = seed_site_packages(site, env)
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert all(w.startswith("venv/lib/python3.11/site-packages/") for w in written), written
    assert sorted(p.name for p in site.iterdir()) == [
        "good_pkg-2.30.3+cu130.dist-info",
        "inject-1.0.dist-info",
    ]
    metadata = (site / "good_pkg-2.30.3+cu130.dist-info" / "METADATA").read_text()
    assert metadata.splitlines()[:4] == [
        "Metadata-Version: 2.1",
        "Name: Good_Pkg",
        "Version: 2.30.3+cu130",
        "Requires-Dist: six>=1",
    ]
    assert "evil" not in (site / "inject-1.0.dist-info" / "METADATA").read_text()
    assert len(notes) == 5
    assert any("'../../../../../pwned' is not PEP 440" in n for n in notes)
    assert any("'bad/name' is not a valid project name" in n for n in notes)
    assert any("holds a line break" in n for n in notes)
