"""target: platform strings, architecture aliases both ways, the host default, marker values."""

from __future__ import annotations

import subprocess
import sys

import pytest
from packaging.markers import Marker
from packaging.utils import canonicalize_name

from pinguard.audit.diff import unmet_requirements
from pinguard.errors import InvalidPlatform, UsageError
from pinguard.models import Distribution, Environment, Platform
from pinguard.target import (
    host_platform,
    major_minor,
    marker_environment,
    normalize_arch,
    parse_platform,
    parse_requirement,
    platform_machine,
    platform_matches,
)

# (OCI architecture, the ``uname -m`` a Python there reports), written from the Go and
# Linux names (GOARCH values; arch/*/Makefile UTS_MACHINE).
PAIRS = [
    ("amd64", "x86_64"),
    ("arm64", "aarch64"),
    ("386", "i686"),
    ("arm", "armv7l"),
    ("ppc64le", "ppc64le"),
    ("s390x", "s390x"),
    ("riscv64", "riscv64"),
]


@pytest.mark.parametrize(("goarch", "machine"), PAIRS)
def test_aliases_both_ways(goarch: str, machine: str) -> None:
    """uname -m names map to the OCI architecture and the OCI architecture back to uname -m."""
    assert normalize_arch(machine) == goarch
    assert normalize_arch(goarch) == goarch
    assert platform_machine(Platform("linux", goarch)) == machine


@pytest.mark.parametrize(
    ("alias", "goarch"),
    [
        ("X86_64", "amd64"),
        ("x86-64", "amd64"),
        ("AMD64", "amd64"),
        ("aarch64", "arm64"),
        ("armv8", "arm64"),
        ("armv6l", "arm"),
        ("i386", "386"),
        ("mips64le", "mips64le"),  # unknown: kept, lowercased
    ],
)
def test_other_spellings(alias: str, goarch: str) -> None:
    """Every spelling in use names one OCI architecture; unknown ones pass through."""
    assert normalize_arch(alias) == goarch


def test_platform_machine_reads_aliases() -> None:
    """A platform written with a uname spelling still gives the right platform_machine."""
    assert platform_machine(Platform("linux", "aarch64")) == "aarch64"
    assert platform_machine(Platform("linux", "x86_64")) == "x86_64"
    assert platform_machine(Platform("linux", "i386")) == "i686"
    assert platform_machine(Platform("linux", "loong64")) == "loong64"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("linux/amd64", Platform("linux", "amd64")),
        ("linux/x86_64", Platform("linux", "amd64")),
        (" LINUX/AArch64/V8 ", Platform("linux", "arm64", "v8")),
        ("linux/arm/v7", Platform("linux", "arm", "v7")),
        ("windows/amd64", Platform("windows", "amd64")),
    ],
)
def test_parse_platform(text: str, expected: Platform) -> None:
    """os/arch[/variant], lowercased, the architecture in OCI terms."""
    assert parse_platform(text) == expected


@pytest.mark.parametrize(
    "text", ["linux", "linux/", "/amd64", "linux//v8", "linux/arm/v7/x", "", "amd64"]
)
def test_parse_platform_rejects(text: str) -> None:
    """A malformed platform raises InvalidPlatform quoting the value (a usage error)."""
    with pytest.raises(InvalidPlatform) as info:
        parse_platform(text)
    assert repr(text) in str(info.value)
    assert "os/arch[/variant]" in str(info.value)
    assert isinstance(info.value, UsageError)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("wanted", "have", "ok"),
    [
        (Platform("linux", "arm64"), Platform("linux", "arm64", "v8"), True),
        (Platform("linux", "arm64", "v8"), Platform("linux", "arm64"), True),
        (Platform("linux", "aarch64"), Platform("linux", "arm64"), True),
        (Platform("linux", "amd64"), Platform("linux", "x86_64"), True),
        (Platform("linux", "arm", "v7"), Platform("linux", "arm", "v6"), False),
        (Platform("linux", "arm", "v7"), Platform("linux", "arm"), False),
        (Platform("linux", "arm"), Platform("linux", "arm", "v6"), True),
        (Platform("linux", "amd64"), Platform("windows", "amd64"), False),
        (Platform("linux", "amd64"), Platform("linux", "arm64"), False),
    ],
)
def test_platform_matches(wanted: Platform, have: Platform, ok: bool) -> None:
    """Same os and architecture (any spelling); a wanted variant must match, arm64 is v8."""
    assert platform_matches(wanted, have) is ok


def test_host_platform_is_unames() -> None:
    """The host default is linux plus `uname -m` in OCI terms."""
    machine = subprocess.run(["uname", "-m"], capture_output=True, text=True, check=True)
    uname = machine.stdout.strip()
    expected = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "i686": "386"}
    host = host_platform()
    assert host.os == "linux"
    assert host.architecture == expected.get(uname, uname)
    assert host.variant == {"armv7l": "v7", "armv6l": "v6"}.get(uname, "")


def test_python_version_is_major_minor() -> None:
    """For Python 3.11.2, python_version is 3.11 and python_full_version 3.11.2."""
    env = marker_environment("3.11.2", None)
    assert env["python_version"] == "3.11"
    assert env["python_full_version"] == "3.11.2"
    assert env["implementation_version"] == "3.11.2"
    assert env["implementation_name"] == "cpython"
    assert Marker('python_version == "3.11"').evaluate(env)
    assert Marker('python_version < "3.12"').evaluate(env)
    assert not Marker('python_version >= "3.12"').evaluate(env)
    assert Marker('python_full_version == "3.11.2"').evaluate(env)
    assert not Marker('python_full_version >= "3.11.3"').evaluate(env)


@pytest.mark.parametrize(
    ("version", "short"), [("3.11.2", "3.11"), ("3.12", "3.12"), ("3.13.0rc1", "3.13")]
)
def test_major_minor(version: str, short: str) -> None:
    """python_version is the first two parts of the version."""
    assert major_minor(version) == short


def test_major_minor_only() -> None:
    """A Python known only as 3.12 has python_full_version 3.12.0."""
    env = marker_environment("3.12", None)
    assert (env["python_version"], env["python_full_version"]) == ("3.12", "3.12.0")


def test_unknown_python_is_this_interpreter() -> None:
    """Without a known Python, the values are this interpreter's (right for dir: and guard)."""
    env = marker_environment(None, None)
    assert env["python_version"] == f"{sys.version_info[0]}.{sys.version_info[1]}"


@pytest.mark.parametrize(
    ("platform", "values"),
    [
        (
            Platform("linux", "arm64", "v8"),
            {
                "platform_machine": "aarch64",
                "sys_platform": "linux",
                "platform_system": "Linux",
                "os_name": "posix",
            },
        ),
        (
            Platform("linux", "amd64"),
            {"platform_machine": "x86_64", "sys_platform": "linux", "platform_system": "Linux"},
        ),
        (
            Platform("windows", "amd64"),
            {"sys_platform": "win32", "platform_system": "Windows", "os_name": "nt"},
        ),
        (Platform("darwin", "arm64"), {"sys_platform": "darwin", "platform_system": "Darwin"}),
    ],
)
def test_platform_markers(platform: Platform, values: dict[str, str]) -> None:
    """The platform sets platform_machine, sys_platform, platform_system and os_name."""
    env = marker_environment("3.11.2", platform)
    assert {k: env[k] for k in values} == values


def test_platform_machine_marker() -> None:
    """A platform_machine marker is judged for the image, not for this machine."""
    arm = marker_environment("3.11", Platform("linux", "arm64"))
    amd = marker_environment("3.11", Platform("linux", "amd64"))
    marker = Marker('platform_machine == "aarch64"')
    assert marker.evaluate(arm)
    assert not marker.evaluate(amd)


@pytest.mark.parametrize(
    ("marker", "active"),
    [
        ('extra == "x"', False),
        ('extra == "test" and python_version == "3.11"', False),
        ('extra == "x" or python_version == "3.11"', True),
        ('python_version == "3.11"', True),
    ],
)
def test_extra_markers_are_inactive(marker: str, active: bool) -> None:
    """What is installed was installed without extras: ``extra == ...`` is false."""
    assert Marker(marker).evaluate(marker_environment("3.11.2", None)) is active


def test_extra_requirement_is_not_unmet() -> None:
    """A Requires-Dist behind an extra is not required of an installed environment."""
    dist = Distribution(
        name=canonicalize_name("a"),
        raw_version="1.0",
        metadata_path="/e/site-packages/a-1.0.dist-info",
        requires_dist=('pytest>=8; extra == "test"', 'b>=2; python_version == "3.11"'),
    )
    env = Environment("/e/site-packages", "3.11.2", (dist,))
    unmet = unmet_requirements(env, Platform("linux", "amd64"))
    assert [(u.package, u.requirement) for u in unmet] == [("a", 'b>=2; python_version == "3.11"')]


def test_parse_requirement() -> None:
    """PEP 508 text becomes a Requirement; anything else is None."""
    req = parse_requirement("Torch[cuda]==2.11.0; python_version >= '3.10'")
    assert req is not None
    assert (req.name, str(req.specifier), req.extras) == ("Torch", "==2.11.0", {"cuda"})
    assert str(req.marker) == 'python_version >= "3.10"'
    assert parse_requirement("torch ==") is None
    assert parse_requirement("") is None
    assert parse_requirement("a b c") is None


def test_a_requirement_sent_as_its_parts_is_the_requirement_parsed_here() -> None:
    """A worker sends each Requires-Dist line it parsed as its parts (a ``Requirement``
    pickles as its text and is parsed again on load); rebuilt here, it is the same
    requirement, and the line is not parsed again."""
    import pickle

    from packaging.requirements import Requirement
    from packaging.version import Version

    from pinguard import target

    text = "Graph_Lib[Extra1]>=2.0rc1,<3; python_version >= '3.9' and extra == 'fast'"
    parts = pickle.loads(pickle.dumps(target.requirement_parts(Requirement(text))))
    target._PARSED.pop(text, None)
    target.remember_requirements({text: parts, "not a requirement !": None})
    got = target.cached_requirement(text)
    assert got is not None
    assert got is target._PARSED[text]
    assert got == Requirement(text)
    assert str(got) == str(Requirement(text))
    assert got.specifier.contains(Version("2.0rc1"), prereleases=True)
    assert not got.specifier.contains(Version("3.0"))
    assert got.marker is not None
    assert got.marker.evaluate({"python_version": "3.11", "extra": "fast"})
    assert not got.marker.evaluate({"python_version": "3.8", "extra": "fast"})
    assert target.cached_requirement("not a requirement !") is None
    assert target.requirement_parts(None) is None
