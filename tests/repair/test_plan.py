"""plan: a dry run against the image's metadata predicts the downgrade; command parsing."""

from __future__ import annotations

import pytest

from pinguard.models import ChangeKind
from pinguard.repair.plan import plan_install
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
