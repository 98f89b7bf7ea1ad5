"""The resolver's replay of history steps: what of each install can be resolved outside."""

from __future__ import annotations

from pinguard.repair.resolve.command import parse_command_line, parse_install_commands
from pinguard.repair.resolve.uv import IndexOptions


def test_every_install_of_a_step_in_order() -> None:
    """Two installs in one RUN become two replays; the rest of the script is ignored."""
    created_by = (
        "|1 IDX=https://i/simple /bin/sh -c apt-get update && pip install -U 'torch>=2' "
        "&& uv pip install --system --index-url $IDX -c /c.txt x==1 -r r.txt -e ./src "
        "$PKG ./local.whl | tee /log"
    )
    first, second = parse_install_commands(created_by)
    assert first.command.tool == "pip"
    assert first.requirements == ("torch>=2",)
    assert first.command.upgrade
    assert first.skipped == ()
    assert second.command.tool == "uv"
    assert second.requirements == ("x==1",)
    assert second.constraint_files == ("/c.txt",)
    assert second.index == IndexOptions()
    assert second.skipped == ("--index-url $IDX", "-r r.txt", "-e ./src", "$PKG", "./local.whl")


def test_index_options_and_prerelease() -> None:
    """Index options and --pre become the replay's IndexOptions."""
    (replay,) = parse_install_commands(
        "RUN /bin/sh -c pip install --pre --index-url https://m/simple "
        "--extra-index-url https://n/simple -f /wheels --no-deps x # buildkit"
    )
    assert replay.index == IndexOptions(
        index_url="https://m/simple",
        extra_index_urls=("https://n/simple",),
        find_links=("/wheels",),
        prerelease=True,
    )
    assert replay.command.no_deps


def test_inline_settings_apply() -> None:
    """NAME=value before the install is part of its environment."""
    (replay,) = parse_install_commands(
        "/bin/sh -c PIP_INDEX_URL=https://i/simple PIP_PRE=1 pip install x"
    )
    assert replay.index.index_url == "https://i/simple"
    assert replay.index.prerelease


def test_continuations_and_quotes() -> None:
    """Continued lines are one command; quoted operators are not separators."""
    (replay,) = parse_install_commands(
        "/bin/sh -c pip install \\\n    'x>=1,<2; python_version < \"3.13\"' \\\n    y==2"
    )
    assert replay.requirements == ('x>=1,<2; python_version < "3.13"', "y==2")


def test_unterminated_quote_is_skipped() -> None:
    """An unterminated quote falls back to plain words, which cannot be replayed."""
    (replay,) = parse_install_commands("/bin/sh -c pip install 'x")
    assert replay.requirements == ()
    assert replay.skipped == ("'x",)


def test_steps_without_installs() -> None:
    """Other instructions and other commands give no replay."""
    assert parse_install_commands("/bin/sh -c #(nop)  ENV PIP_PRE=1") == ()
    assert parse_install_commands("RUN /bin/sh -c pip download x # buildkit") == ()
    assert parse_install_commands("/bin/sh -c echo pip install x") == ()


def test_command_line() -> None:
    """Words after `pinguard plan --` are read the same way."""
    replay = parse_command_line(["uv", "pip", "install", "--prerelease", "allow", "vllm"])
    assert replay is not None
    assert (replay.command.tool, replay.requirements, replay.index.prerelease) == (
        "uv",
        ("vllm",),
        True,
    )
    assert parse_command_line(["pip", "list"]) is None
