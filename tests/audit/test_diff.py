"""``pinguard.audit.diff`` against hand-written expectations and against ``pip check``.

The cause-chain cases carry decoys beside the real cause (a requirer that admits the old
version too, one without a specifier, one whose marker is false, one that excludes the old
version but did not change in the step), so a chain that names the wrong package fails. The
unmet requirements of one environment are compared with what ``pip check`` (pip's own
reader and its vendored ``packaging``) reports for the same distributions written as
``.dist-info`` directories, and with a hand-written list.
"""

from __future__ import annotations

import platform as host
import re
import subprocess
import sys
from pathlib import Path

import pip
from packaging.utils import canonicalize_name

from pinguard.audit.diff import diff_environments, unmet_requirements
from pinguard.models import Cause, Change, ChangeKind, Distribution, Environment, Platform

SITE = "/opt/venv/lib/python3.11/site-packages"


def dist(name: str, version: str, *requires: str, fingerprint: str = "") -> Distribution:
    canon = canonicalize_name(name)
    return Distribution(
        name=canon,
        raw_version=version,
        metadata_path=f"{SITE}/{canon.replace('-', '_')}-{version}.dist-info",
        requires_dist=requires,
        fingerprint=fingerprint or f"{canon}-{version}",
        display_name=name,
    )


def env(*dists: Distribution, python: str | None = "3.11.2") -> Environment:
    return Environment(SITE, python, dists)


def by_name(changes: tuple[Change, ...]) -> dict[str, Change]:
    return {c.name: c for c in changes}


def causes(change: Change) -> list[tuple[str, str, str]]:
    return [(c.package, c.version, c.requirement) for c in change.causes]


# --------------------------------------------------------------------------- markers


def test_python_version_marker_on_a_patch_release() -> None:
    """On 3.11.2, `python_version == "3.11"` applies; `python_version == "3.11.2"` does not."""
    app = dist(
        "app",
        "1.0",
        "only-311>=2; python_version == '3.11'",
        "never>=2; python_version == '3.11.2'",
        "full-only; python_full_version == '3.11.2'",
        "old-py>=2; python_version < '3.10'",
    )
    unmet = unmet_requirements(
        env(app, dist("only-311", "1.0"), dist("never", "1.0"), dist("old-py", "1.0")), None
    )
    assert [(u.requirement, u.installed) for u in unmet] == [
        ('full-only; python_full_version == "3.11.2"', None),
        ('only-311>=2; python_version == "3.11"', "1.0"),
    ]


# --------------------------------------------------------------------------- unmet vs pip check

# (name, version, requires) written as .dist-info for pip and as Distributions for pinguard
PIP_CASE: list[tuple[str, str, tuple[str, ...]]] = [
    (
        "app",
        "1.0",
        (
            "nightly-a>=2.0",  # 2.0rc1 is below 2.0: unmet
            "nightly-b>=1.0",  # 1.1.dev3 is above 1.0: met, pre-releases count
            "rc-pin<2.0",  # 2.0rc1 is excluded by <2.0 (PEP 440): unmet
            "local-pin==1.0",  # 1.0+cu130 matches ==1.0: met
            "extra-dep>=2; extra == 'test'",  # extras are never requested: inactive
            "docs-dep; extra == 'docs'",  # idem, not installed
            "win-dep; sys_platform == 'win32'",  # not this platform
            "missing-dep",  # not installed: unmet
            "py-dep>=5; python_version >= '3.8'",  # applies, 1.0 installed: unmet
            "Under.Score>=1",  # name normalisation: under-score 1.0 meets it
            "any-dep",  # no specifier: met by any version
        ),
    ),
    ("nightly-a", "2.0rc1", ()),
    ("nightly-b", "1.1.dev3", ()),
    ("rc-pin", "2.0rc1", ()),
    ("local-pin", "1.0+cu130", ()),
    ("extra-dep", "1.0", ()),
    ("py-dep", "1.0", ()),
    ("under-score", "1.0", ()),
    ("any-dep", "0.0.1", ("app>=1",)),
]
PIP_EXPECTED = {  # (requirer, required name), written by hand
    ("app", "nightly-a"),
    ("app", "rc-pin"),
    ("app", "missing-dep"),
    ("app", "py-dep"),
}


def pip_check(site: Path) -> set[tuple[str, str]]:
    """(requirer, required name) for every line of ``pip check`` run on ``site`` alone."""
    pip_home = str(Path(pip.__file__).resolve().parents[1])
    code = (
        "import sys\n"
        "keep = [p for p in sys.path if 'site-packages' not in p]\n"
        f"sys.path[:] = [{str(site)!r}, {pip_home!r}, *keep]\n"
        "from pip._internal.cli.main import main\n"
        "sys.exit(main(['check']))\n"
    )
    run = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, check=False
    )
    found: set[tuple[str, str]] = set()
    for line in run.stdout.splitlines():
        m = re.match(r"(\S+) \S+ (?:requires|has requirement) ([A-Za-z0-9._-]+)", line)
        if m and canonicalize_name(m.group(1)) in {"app", "any-dep"}:
            found.add((canonicalize_name(m.group(1)), canonicalize_name(m.group(2))))
    assert run.returncode == (1 if found else 0), run.stdout + run.stderr
    return found


def test_unmet_requirements_agree_with_pip_check(tmp_path: Path) -> None:
    """Pre-releases, local labels, extras, markers and names are judged as pip check does."""
    site = tmp_path / "site-packages"
    for name, version, requires in PIP_CASE:
        meta = site / f"{name.replace('-', '_')}-{version}.dist-info"
        meta.mkdir(parents=True)
        lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
        lines += [f"Requires-Dist: {r}" for r in requires]
        (meta / "METADATA").write_text("\n".join(lines) + "\n")
    assert pip_check(site) == PIP_EXPECTED
    ours = env(*(dist(n, v, *r) for n, v, r in PIP_CASE), python=host.python_version())
    got = {
        (u.package, canonicalize_name(re.split(r"[<>=!~; ]", u.requirement)[0]))
        for u in unmet_requirements(ours, None)
    }
    assert got == PIP_EXPECTED


def test_unmet_records_requirer_version_and_installed() -> None:
    """An unmet entry names the requirer, its version, the requirement and what is installed."""
    (u,) = unmet_requirements(env(dist("app", "1.0", "lib >=2"), dist("lib", "1.5")), None)
    assert (u.environment, u.package, u.version, u.requirement, u.installed) == (
        SITE,
        "app",
        "1.0",
        "lib>=2",
        "1.5",
    )


def test_non_pep440_version_meets_only_an_exact_pin() -> None:
    """A version packaging cannot parse meets a requirement only by naming it exactly."""
    weird = dist("weird", "2024-custom")
    assert unmet_requirements(env(dist("a", "1", "weird===2024-custom"), weird), None) == ()
    (u,) = unmet_requirements(env(dist("a", "1", "weird>=1"), weird), None)
    assert u.installed == "2024-custom"


def test_only_newly_unmet_requirements_are_reported_per_step() -> None:
    """A requirement unmet before the step is not reported again; a new one is."""
    before = env(dist("app", "1.0", "lib>=2", "other>=2"), dist("lib", "1.0"), dist("other", "2.0"))
    after = env(dist("app", "1.0", "lib>=2", "other>=2"), dist("lib", "1.0"), dist("other", "1.0"))
    _, unmet = diff_environments(before, after, platform=None)
    assert [(u.package, u.requirement, u.installed) for u in unmet] == [("app", "other>=2", "1.0")]


# --------------------------------------------------------------------------- cause chains


def test_cause_chain_names_the_requirer_that_moved_it_not_the_decoys() -> None:
    """NCCL went back because torch now pins it, and torch moved because flashinfer wants it."""
    before = env(
        dist("nvidia-nccl-cu13", "2.30.3"),
        dist("torch", "2.11.0", "nvidia-nccl-cu13==2.30.3"),
        dist("aaa-pinner", "1.0", "nvidia-nccl-cu13<2.30"),
        dist("vllm", "0.11.0", "nvidia-nccl-cu13", "torch"),
    )
    after = env(
        dist("nvidia-nccl-cu13", "2.29.7"),
        dist("torch", "2.12.1+cu130", "nvidia-nccl-cu13 ==2.29.7; platform_machine == 'aarch64'"),
        dist("flashinfer-python", "0.6.18.dev20261120", "torch>=2.12"),
        # decoys: excludes the old version but unchanged; admits the old version too; no
        # specifier; a false marker
        dist("aaa-pinner", "1.0", "nvidia-nccl-cu13<2.30"),
        dist("broad", "1.0", "nvidia-nccl-cu13>=2.0"),
        dist("vllm", "0.11.0", "nvidia-nccl-cu13", "torch"),
        dist("win-tool", "1.0", "nvidia-nccl-cu13==2.29.7; sys_platform == 'win32'"),
    )
    changes, _ = diff_environments(before, after, platform=Platform("linux", "arm64"))
    got = by_name(changes)
    assert got["nvidia-nccl-cu13"].kind is ChangeKind.DOWNGRADED
    assert causes(got["nvidia-nccl-cu13"]) == [
        ("torch", "2.12.1+cu130", 'nvidia-nccl-cu13==2.29.7; platform_machine == "aarch64"'),
        ("flashinfer-python", "0.6.18.dev20261120", "torch>=2.12"),
    ]
    assert causes(got["torch"]) == [("flashinfer-python", "0.6.18.dev20261120", "torch>=2.12")]
    assert got["flashinfer-python"].kind is ChangeKind.ADDED
    assert causes(got["flashinfer-python"]) == []  # nothing installed requires it
    assert sorted(got) == [  # aaa-pinner and vllm did not change
        "broad",
        "flashinfer-python",
        "nvidia-nccl-cu13",
        "torch",
        "win-tool",
    ]


def test_unchanged_requirer_is_the_cause_when_nothing_else_explains_it() -> None:
    """With no changed requirer, the unchanged one that excludes the old version is named."""
    before = env(dist("lib", "2.0"), dist("pinner", "1.0", "lib<3"))
    after = env(dist("lib", "1.0"), dist("pinner", "1.0", "lib<2"), dist("zed", "1", "lib"))
    got = by_name(diff_environments(before, after, platform=None)[0])
    assert causes(got["lib"]) == [("pinner", "1.0", "lib<2")]


def test_chain_on_arm64_only_follows_requirements_for_that_platform() -> None:
    """The same image read as amd64 has no cause: the pin's marker is false there."""
    before = env(dist("nccl", "2.30"), dist("torch", "2.11", "nccl==2.30"))
    after = env(
        dist("nccl", "2.29"), dist("torch", "2.12", "nccl==2.29; platform_machine=='aarch64'")
    )
    arm = by_name(diff_environments(before, after, platform=Platform("linux", "arm64"))[0])
    amd = by_name(diff_environments(before, after, platform=Platform("linux", "amd64"))[0])
    assert [c.package for c in arm["nccl"].causes] == ["torch"]
    assert amd["nccl"].causes == ()


def test_added_distributions_have_causes() -> None:
    """A distribution added by a step names what requires it; a false marker does not count."""
    before = env(dist("torch", "2.11.0"))
    after = env(
        dist("torch", "2.11.0"),
        dist("flashinfer-python", "0.6.17", "apache-tvm-ffi>=0.1", "torch"),
        dist("apache-tvm-ffi", "0.1.4"),
        dist("a-win-tool", "1.0", "apache-tvm-ffi>=0.1; sys_platform == 'win32'"),
    )
    got = by_name(diff_environments(before, after, platform=Platform("linux", "amd64"))[0])
    assert got["apache-tvm-ffi"].kind is ChangeKind.ADDED
    assert got["apache-tvm-ffi"].causes == (
        Cause(canonicalize_name("flashinfer-python"), "0.6.17", "apache-tvm-ffi>=0.1"),
    )
    assert (got["apache-tvm-ffi"].before, got["apache-tvm-ffi"].after) == (None, "0.1.4")


def test_an_added_requirer_without_a_specifier_causes_an_addition() -> None:
    """`Requires-Dist: lib` with no version still explains why lib was added."""
    after = env(dist("app", "1.0", "lib"), dist("lib", "3.0"))
    got = by_name(diff_environments(env(), after, platform=None)[0])
    assert causes(got["lib"]) == [("app", "1.0", "lib")]
    assert causes(got["app"]) == []


def test_pre_releases_are_admitted_whatever_packagings_default() -> None:
    """A nightly is admitted by `lib`, `lib>=1` and `lib<3` (pre-releases explicitly allowed,
    as pip check does): packaging's own default for them changed in 26.0."""
    after = env(
        dist("app", "1.0", "nightly", "rc>=1", "dev<3"),
        dist("nightly", "3.0rc1"),
        dist("rc", "1.1rc2"),
        dist("dev", "2.1.dev20261120"),
    )
    got = by_name(diff_environments(env(), after, platform=None)[0])
    assert causes(got["nightly"]) == [("app", "1.0", "nightly")]
    assert causes(got["rc"]) == [("app", "1.0", "rc>=1")]
    assert causes(got["dev"]) == [("app", "1.0", "dev<3")]
    assert unmet_requirements(after, None) == ()


def test_removed_and_reinstalled_have_no_causes() -> None:
    """Only additions and version moves get causes."""
    before = env(
        dist("gone", "1.0"), dist("same", "1.0", fingerprint="a"), dist("app", "1", "same==1.0")
    )
    after = env(dist("same", "1.0", fingerprint="b"), dist("app", "1", "same==1.0", "gone"))
    got = by_name(diff_environments(before, after, platform=None)[0])
    assert (got["gone"].kind, got["gone"].causes, got["gone"].after) == (
        ChangeKind.REMOVED,
        (),
        None,
    )
    assert (got["same"].kind, got["same"].causes) == (ChangeKind.REINSTALLED, ())
    assert "app" not in got


def test_cycle_of_requirers_ends() -> None:
    """a and b both moved, each requiring the other's new version: the chain stops at a repeat."""
    before = env(dist("a", "1.0", "b==1.0"), dist("b", "1.0", "a==1.0"))
    after = env(dist("a", "2.0", "b==2.0"), dist("b", "2.0", "a==2.0"))
    got = by_name(diff_environments(before, after, platform=None)[0])
    assert causes(got["a"]) == [("b", "2.0", "a==2.0"), ("a", "2.0", "b==2.0")]
    assert causes(got["b"]) == [("a", "2.0", "b==2.0"), ("b", "2.0", "a==2.0")]


def test_a_long_chain_is_capped() -> None:
    """Each link is followed to the end of a ten-step chain, but at most eight are kept."""
    names = [f"p{i}" for i in range(10)]
    before = env(
        *(dist(n, "1.0", *([f"{names[i - 1]}==1.0"] if i else [])) for i, n in enumerate(names))
    )
    after = env(
        *(dist(n, "2.0", *([f"{names[i - 1]}==2.0"] if i else [])) for i, n in enumerate(names))
    )
    got = by_name(diff_environments(before, after, platform=None)[0])
    assert [c.package for c in got["p0"].causes] == names[1:9]


def test_changes_carry_environment_and_versions_and_are_sorted() -> None:
    """Changes are sorted by name and carry the environment path and raw versions."""
    before = env(dist("b", "1.0"), dist("a", "1.0+cpu"))
    after = env(dist("c", "1.0"), dist("a", "1.0+cu130"), dist("b", "0.9"))
    changes, _ = diff_environments(before, after, platform=None)
    assert [(c.environment, c.name, c.kind, c.before, c.after) for c in changes] == [
        (SITE, "a", ChangeKind.UPGRADED, "1.0+cpu", "1.0+cu130"),
        (SITE, "b", ChangeKind.DOWNGRADED, "1.0", "0.9"),
        (SITE, "c", ChangeKind.ADDED, None, "1.0"),
    ]
    gone, _ = diff_environments(before, None, platform=None)
    assert [(c.environment, c.kind) for c in gone] == [(SITE, ChangeKind.REMOVED)] * 2
    assert diff_environments(None, None, platform=None) == ((), ())


# --------------------------------------------------------------------------- mutant edges


def test_a_marker_that_cannot_be_evaluated_does_not_apply() -> None:
    """`python_version ~= "3"` raises in packaging; the requirement is skipped, not unmet."""
    app = dist("app", "1.0", "lib>=2; python_version ~= '3'")
    assert unmet_requirements(env(app, dist("lib", "1.0")), None) == ()
    before = env(dist("lib", "2.0"))
    after = env(app, dist("lib", "1.0"))
    assert by_name(diff_environments(before, after, platform=None)[0])["lib"].causes == ()


def test_non_pep440_versions_change_kinds_and_admit_nothing() -> None:
    """1.0 -> a non-PEP 440 version is a change of unknown order (changed); same text and
    files is no change, other files a reinstall; a range never admits such a version."""

    def kinds(b: Distribution, a: Distribution) -> list[ChangeKind]:
        return [c.kind for c in diff_environments(env(b), env(a), platform=None)[0]]

    assert kinds(dist("p", "1.0"), dist("p", "2024-custom")) == [ChangeKind.CHANGED]
    assert kinds(dist("p", "2024-custom"), dist("p", "1.0")) == [ChangeKind.CHANGED]
    same = dist("p", "2024-custom", fingerprint="f")
    assert kinds(same, same) == []
    assert kinds(same, dist("p", "2024-custom", fingerprint="g")) == [ChangeKind.REINSTALLED]
    after = env(dist("app", "1.0", "weird>=1"), dist("weird", "2024-custom"))
    assert by_name(diff_environments(env(), after, platform=None)[0])["weird"].causes == ()


def test_added_environment_changes_carry_its_path() -> None:
    """An environment that did not exist before: every change names the new environment."""
    changes, _ = diff_environments(None, env(dist("a", "1.0")), platform=None)
    assert [(c.environment, c.kind) for c in changes] == [(SITE, ChangeKind.ADDED)]


def test_cause_markers_use_the_environments_python_not_this_one() -> None:
    """The chain judges python_version for the image's Python (3.12 here, the tests run on 3.11),
    whichever of the two states knows it."""
    req = "lib<2; python_version >= '3.12'"
    for known_before, known_after in (
        (None, "3.12.7"),
        ("3.12.7", None),
        ("3.12.7", "3.12.7"),
    ):
        before = env(dist("lib", "2.0"), python=known_before)
        after = env(dist("lib", "1.0"), dist("app", "1.0", req), python=known_after)
        got = by_name(diff_environments(before, after, platform=None)[0])
        assert causes(got["lib"]) == [("app", "1.0", 'lib<2; python_version >= "3.12"')], (
            known_before,
            known_after,
        )


def test_newly_unmet_is_judged_for_the_image_platform() -> None:
    """An arm64-only requirement unmet before and after is not new; one unmet only after is."""
    arm = Platform("linux", "arm64")
    req = "lib>=2; platform_machine == 'aarch64'"
    both = env(dist("app", "1.0", req), dist("lib", "1.0"))
    assert diff_environments(both, both, platform=arm)[1] == ()
    before = env(dist("app", "1.0", req), dist("lib", "2.0"))
    (u,) = diff_environments(before, both, platform=arm)[1]
    assert (u.package, u.installed) == ("app", "1.0")


def test_a_later_requirement_on_the_same_name_is_still_read() -> None:
    """`Requires-Dist: lib` and `lib<2; ...`: the second one is why lib went back."""
    before = env(dist("lib", "2.0"))
    after = env(dist("lib", "1.0"), dist("app", "1.0", "lib", "lib<2; os_name == 'posix'"))
    got = by_name(diff_environments(before, after, platform=Platform("linux", "amd64"))[0])
    assert causes(got["lib"]) == [("app", "1.0", 'lib<2; os_name == "posix"')]


def test_a_cycle_away_from_the_start_ends() -> None:
    """x moved for y, y for z, z for y: the chain stops when y comes round again."""
    before = env(dist("x", "1"), dist("y", "1", "x==1", "z==1"), dist("z", "1", "y==1"))
    after = env(dist("x", "2"), dist("y", "2", "x==2", "z==2"), dist("z", "2", "y==2"))
    got = by_name(diff_environments(before, after, platform=None)[0])
    assert [c.package for c in got["x"].causes] == ["y", "z", "y"]


def test_a_reinstalled_requirer_ends_the_chain() -> None:
    """lib went back because app (reinstalled, same version) pins it: app is named, then stop."""
    before = env(dist("lib", "2.0"), dist("app", "1.0", "lib<3", fingerprint="a"))
    after = env(dist("lib", "1.0"), dist("app", "1.0", "lib<2", fingerprint="b"))
    got = by_name(diff_environments(before, after, platform=None)[0])
    assert got["app"].kind is ChangeKind.REINSTALLED
    assert got["lib"].causes == (Cause(canonicalize_name("app"), "1.0", "lib<2"),)


def test_unchanged_requirers_are_ranked_by_name_not_by_path() -> None:
    """Two unchanged requirers exclude the old version: the first by name ("a-z" before "a0",
    although its dist-info directory a_z-... sorts after a0-...) is named."""
    before = env(dist("lib", "2.0"), dist("a-z", "1", "lib<3"), dist("a0", "1", "lib<3"))
    after = env(dist("lib", "1.0"), dist("a-z", "1", "lib<2"), dist("a0", "1", "lib<2"))
    got = by_name(diff_environments(before, after, platform=None)[0])
    assert causes(got["lib"]) == [("a-z", "1", "lib<2")]


def test_a_requirement_that_excludes_the_new_version_does_not_hide_the_next_one() -> None:
    """app lists lib>=5 (unmet) and lib<2: the second is why lib went back to 1.0."""
    before = env(dist("lib", "2.0"))
    after = env(dist("lib", "1.0"), dist("app", "1", "lib>=5", "lib<2"))
    got = by_name(diff_environments(before, after, platform=None)[0])
    assert causes(got["lib"]) == [("app", "1", "lib<2")]


# --------------------------------------------------------------------------- the cause index


def _scan_causes(
    name: str, before: Distribution | None, after: Distribution, installed: dict[str, Distribution]
) -> list[tuple[Distribution, str]]:
    """The pre-index search, kept as the reference: every requirement of every distribution."""
    from packaging.requirements import InvalidRequirement, Requirement

    from pinguard.target import marker_environment

    menv = marker_environment("3.11.2", Platform("linux", "amd64"))
    found = []
    for d in installed.values():
        if d.name == name:
            continue
        for text in d.requires_dist:
            try:
                req = Requirement(text)
            except InvalidRequirement:
                continue
            if canonicalize_name(req.name) != name:
                continue
            if req.marker is not None and not req.marker.evaluate(dict(menv)):
                continue
            if after.version is None or not req.specifier.contains(after.version, prereleases=True):
                continue
            if before is not None and (
                not req.specifier
                or (
                    before.version is not None
                    and req.specifier.contains(before.version, prereleases=True)
                )
            ):
                continue
            found.append((d, str(req)))
    return found


_CHAINED = {ChangeKind.ADDED, ChangeKind.UPGRADED, ChangeKind.DOWNGRADED}


def test_cause_chains_match_a_full_scan_on_a_requirement_graph() -> None:
    """The per-diff index gives the chains a scan of every Requires-Dist line gives.

    120 distributions with requirement chains, markers and extras (``requirement_graph``),
    most of them moved in one step; each chain is rebuilt with the reference scan above and
    must be equal link by link, and the graph must produce chains longer than one link.
    """
    from pinguard.testing.graphs import requirement_graph

    graph = requirement_graph(120)
    old = {g.name: dist(g.name, g.before, *g.requires) for g in graph if g.before is not None}
    new = {g.name: dist(g.name, g.after, *g.requires) for g in graph}
    changes, _unmet = diff_environments(
        env(*old.values()), env(*new.values()), platform=Platform("linux", "amd64")
    )
    moved = {c.name: c for c in changes}
    longest = 0
    for change in changes:
        if change.kind is ChangeKind.REMOVED or change.kind is ChangeKind.REINSTALLED:
            continue
        expected: list[tuple[str, str, str]] = []
        current = change.name
        seen = {current}
        while len(expected) < 8:
            b = old.get(current) if current in moved else None
            found = _scan_causes(current, b, new[current], new)
            if not found:
                break
            found.sort(key=lambda c: (c[0].name not in moved, c[0].name))
            d, shown = found[0]
            expected.append((d.name, d.raw_version, shown))
            if d.name in seen or d.name not in moved or moved[d.name].kind not in _CHAINED:
                break
            seen.add(d.name)
            current = d.name
        assert causes(change) == expected, change.name
        longest = max(longest, len(expected))
    assert longest >= 2


# --------------------------------------------------------------------------- one interpreter

LOCAL = "/usr/local/lib/python3.11/dist-packages"
APT = "/usr/lib/python3/dist-packages"


def _at(path: str, *dists: Distribution, python: str | None = None) -> Environment:
    return Environment(path, python, tuple(dists))


def test_debian_python3_meets_requirements_from_apts_directory() -> None:
    """pip as root writes /usr/local/lib/python3.11/dist-packages and leaves a requirement
    that apt's /usr/lib/python3/dist-packages meets (torch 2.11's ``setuptools<82`` with
    Debian's 66.1.1): met, as pip check says in the real image. A requirement apt's copy
    does not meet is unmet, naming the version the interpreter imports."""
    local = _at(LOCAL, dist("torch", "2.11.0", "setuptools<82", "wheel>=1"))
    apt = _at(APT, dist("setuptools", "66.1.1"), dist("wheel", "0.38.4"))
    (u,) = unmet_requirements(local, None, (local, apt))
    assert (u.package, u.requirement, u.installed) == ("torch", "wheel>=1", "0.38.4")
    # the same environments judged one by one (the old model) miss apt's copies
    assert {x.requirement for x in unmet_requirements(local, None)} == {"setuptools<82", "wheel>=1"}


def test_the_first_directory_on_the_path_wins_and_shadows() -> None:
    """A copy in /usr/local shadows apt's: requirements are judged against it, and the
    shadowed copy's own requirements are not judged (it is not the one imported)."""
    local = _at(LOCAL, dist("app", "1", "lib>=2"), dist("lib", "1.0"))
    apt = _at(APT, dist("lib", "3.0", "missing>=1"))
    (u,) = unmet_requirements(local, None, (local, apt))
    assert (u.requirement, u.installed) == ("lib>=2", "1.0")
    assert unmet_requirements(apt, None, (local, apt)) == ()


def test_other_environments_stay_apart() -> None:
    """A venv and python.org's site-packages do not import from apt's directory; every
    Debian python3.X does (/usr/lib/python3/dist-packages is on each one's path)."""
    venv = _at("/opt/venv/lib/python3.11/site-packages", dist("app", "1", "lib"))
    org = _at("/usr/local/lib/python3.11/site-packages", dist("app", "1", "lib"))
    py312 = _at("/usr/local/lib/python3.12/dist-packages", dist("app", "1", "lib"))
    apt = _at(APT, dist("lib", "1"), python="3.11")
    envs = (venv, org, py312, apt)
    assert [u.package for u in unmet_requirements(venv, None, envs)] == ["app"]
    assert [u.package for u in unmet_requirements(org, None, envs)] == ["app"]
    assert unmet_requirements(py312, None, envs) == ()
