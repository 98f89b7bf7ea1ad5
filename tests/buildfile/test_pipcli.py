"""pipcli: which words are a pip or uv install, and what its options and environment say."""

from __future__ import annotations

import pytest

from pinguard.buildfile.pipcli import (
    InstallCommand,
    is_guard_call,
    parse_install,
    read_install,
    strip_wrappers,
)


@pytest.mark.parametrize(
    ("argv", "tool", "args"),
    [
        (["pip", "install", "x"], "pip", ("x",)),
        (["/opt/venv/bin/pip3.11", "--isolated", "install", "x"], "pip", ("--isolated", "x")),
        (["pip", "--log", "/l", "install", "x"], "pip", ("--log", "/l", "x")),
        (["python3", "-m", "pip", "install", "x"], "pip", ("x",)),
        (["python3.11", "-u", "-mpip", "install", "x"], "pip", ("x",)),
        (["python", "-X", "dev", "-m", "pip", "install", "x"], "pip", ("x",)),
        (["uv", "pip", "install", "--system", "x"], "uv", ("--system", "x")),
        (["uv", "--no-cache", "pip", "install", "x"], "uv", ("--no-cache", "x")),
        (["uv", "--directory", "/d", "pip", "install", "x"], "uv", ("--directory", "/d", "x")),
        (["python", "-m", "uv", "pip", "install", "x"], "uv", ("x",)),
        (["sudo", "-E", "-u", "app", "env", "A=1", "pip", "install", "x"], "pip", ("x",)),
        (["exec", "nice", "-n", "5", "timeout", "60", "pip", "install", "x"], "pip", ("x",)),
        (["A=1", "B=2", "pip", "install", "x"], "pip", ("x",)),
    ],
)
def test_installs_are_recognised(argv: list[str], tool: str, args: tuple[str, ...]) -> None:
    """pip, pipX.Y, python -m pip and uv pip, behind wrappers and assignments, are installs."""
    command = read_install(argv)
    assert command is not None
    assert (command.tool, command.args) == (tool, args)


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["pip", "download", "x"],
        ["pip", "list"],
        ["pip", "--no-cache-dir"],
        ["uv", "add", "x"],
        ["uv", "pip", "compile", "r.in"],
        ["echo", "pip", "install", "x"],
        ["python3", "-c", "import pip"],
        ["python3", "-m", "venv", "install"],
        ["pipx", "install", "x"],
    ],
)
def test_other_commands_are_not_installs(argv: list[str]) -> None:
    """Other subcommands, other tools and mentions of pip are not installs."""
    assert read_install(argv) is None


def test_options() -> None:
    """Short clusters, --opt=value, repeated options and -e targets are read."""
    command = parse_install(
        "pip",
        [
            "-qUr",
            "req.txt",
            "--index-url=https://i/simple",
            "-c",
            "/c.txt",
            "--constraint=/d.txt",
            "x==1",
            "-e",
            "./src",
            "--extra-index-url",
            "https://e/simple",
            "-fhttps://f/links",
            "--no-deps",
            "--require-hashes",
            "--",
            "-odd",
        ],
    )
    assert command == InstallCommand(
        tool="pip",
        args=command.args,
        positional=("x==1", "-odd"),
        editables=("./src",),
        requirement_files=("req.txt",),
        constraints=("/c.txt", "/d.txt"),
        index_url="https://i/simple",
        extra_index_urls=("https://e/simple",),
        find_links=("https://f/links",),
        upgrade=True,
        no_deps=True,
        require_hashes=True,
    )
    assert command.requirements == ("x==1", "-odd", "./src")
    assert command.args[0] == "-qUr"


@pytest.mark.parametrize(
    ("tool", "args", "field", "value"),
    [
        ("pip", ["--pre", "x"], "pre", True),
        ("pip", ["-I", "x"], "force_reinstall", True),
        ("pip", ["--ignore-installed", "x"], "force_reinstall", True),
        ("uv", ["--reinstall", "x"], "force_reinstall", True),
        ("uv", ["--prerelease", "allow", "x"], "pre", True),
        ("uv", ["--prerelease=disallow", "x"], "pre", False),
        ("uv", ["--index-strategy", "unsafe-any-match", "x"], "index_strategy", "unsafe-any-match"),
        ("uv", ["--default-index", "https://d/simple", "x"], "index_url", "https://d/simple"),
        ("uv", ["--index", "https://n/simple", "x"], "extra_index_urls", ("https://n/simple",)),
        ("uv", ["-P", "torch", "x"], "upgrade_packages", ("torch",)),
        ("pip", ["--no-index", "x"], "no_index", True),
    ],
)
def test_flags(tool: str, args: list[str], field: str, value: object) -> None:
    """Each option sets its field, spelt the way its tool spells it."""
    assert getattr(parse_install(tool, args), field) == value


def test_pip_environment_folds_in() -> None:
    """PIP_* settings apply; an option on the command line wins over PIP_INDEX_URL."""
    environ = {
        "PIP_INDEX_URL": "https://env/simple",
        "PIP_EXTRA_INDEX_URL": "https://a/simple https://b/simple",
        "PIP_CONSTRAINT": "/env.txt",
        "PIP_NO_DEPS": "yes",
        "PIP_PRE": "1",
        "PIP_UPGRADE": "off",
        "UV_INDEX_STRATEGY": "unsafe-first-match",  # not pip's
    }
    command = parse_install("pip", ["-c", "/cli.txt", "x"], environ)
    assert command.index_url == "https://env/simple"
    assert command.extra_index_urls == ("https://a/simple", "https://b/simple")
    assert command.constraints == ("/cli.txt", "/env.txt")
    assert (command.no_deps, command.pre, command.upgrade) == (True, True, False)
    assert command.index_strategy is None
    given = parse_install("pip", ["-i", "https://cli/simple", "x"], environ)
    assert given.index_url == "https://cli/simple"


def test_uv_environment_folds_in() -> None:
    """UV_* settings apply to uv pip, and PIP_* ones do not."""
    environ = {
        "UV_DEFAULT_INDEX": "https://d/simple",
        "UV_INDEX": "https://n/simple",
        "UV_CONSTRAINT": "/uv.txt",
        "UV_PRERELEASE": "if-necessary",
        "UV_INDEX_STRATEGY": "unsafe-best-match",
        "PIP_CONSTRAINT": "/pip.txt",
    }
    command = parse_install("uv", ["x"], environ)
    assert command.index_url == "https://d/simple"
    assert command.extra_index_urls == ("https://n/simple",)
    assert command.constraints == ("/uv.txt",)
    assert command.pre
    assert command.index_strategy == "unsafe-best-match"


def test_inline_assignments_fold_in() -> None:
    """NAME=value before the command and env NAME=value apply to that command only."""
    command = read_install(
        ["PIP_PRE=1", "env", "PIP_CONSTRAINT=/c.txt", "pip", "install", "x"],
        {"PIP_INDEX_URL": "https://i/simple", "PIP_PRE": "0"},
    )
    assert command is not None
    assert (command.pre, command.constraints, command.index_url) == (
        True,
        ("/c.txt",),
        "https://i/simple",
    )


def test_strip_wrappers_collects_env() -> None:
    """env assignments are collected; env -u removes one; the command is what is left."""
    inline: dict[str, str] = {"B": "1"}
    argv = strip_wrappers(["env", "-u", "B", "A=2", "sudo", "-E", "pip", "list"], inline)
    assert argv == ["pip", "list"]
    assert inline == {"A": "2"}


@pytest.mark.parametrize(
    ("argv", "guard"),
    [
        (["pinguard", "guard"], True),
        (["/opt/pg/bin/pinguard", "guard", "--policy", "p"], True),
        (["python3", "/opt/pinguard.pyz", "guard"], True),
        (["python3", "/opt/pinguard-0.1.pyz", "guard"], True),
        (["python3", "-m", "pinguard", "guard"], True),
        (["pinguard", "audit", "dir:/"], False),
        (["echo", "guard"], False),
        (["pinguard-guard"], False),
        ([], False),
    ],
)
def test_is_guard_call(argv: list[str], guard: bool) -> None:
    """pinguard guard, in each way it is installed, is a guard call; nothing else is."""
    assert is_guard_call(argv) is guard


def test_settings_of_the_other_tool_do_not_apply() -> None:
    """PIP_PRE does not make uv allow pre-releases; UV_PRERELEASE does not make pip do so."""
    assert not parse_install("uv", ["x"], {"PIP_PRE": "1"}).pre
    assert not parse_install("pip", ["x"], {"UV_PRERELEASE": "allow"}).pre
