"""The rule functions of ``pinguard.policy.rules`` on hand-built audit facts.

Digests are computed here with ``hashlib`` and ``base64`` (RECORD's encoding, PEP 376/627),
not taken from pinguard; every expected value is written by hand. Each case is built so that
a plausible slip in the rule (counting unhashed RECORD rows, comparing digests of different
algorithms, reporting the first step instead of the last, trusting an unmet entry after its
requirer changed) makes it fail.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import replace

from packaging.markers import Marker
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from pinguard.models import ChangeKind, Distribution, Severity
from pinguard.policy.model import Coupling, Forbidden, Origin, Pin, RuleConfig, Scope
from pinguard.policy.rules import (
    Facts,
    Hit,
    coupling,
    downgrade,
    duplicate_distribution,
    file_collision,
    forbidden_version,
    pin_violation,
    record_mismatch,
    unmet_requirement,
    unpinned_prerelease,
)
from tests.factories import ENV, cause, change, dist, environment, result, step, unmet


def digest(data: bytes, algo: str = "sha256") -> str:
    raw = hashlib.new(algo, data).digest()
    return f"{algo}={base64.urlsafe_b64encode(raw).rstrip(b'=').decode()}"


A, B, C = digest(b"a"), digest(b"b"), digest(b"c")
RULE = RuleConfig("downgrade", Severity.ERROR)


# --------------------------------------------------------------------------- steps


def history() -> Facts:
    """torch 2.0 by step 1, 2.1 by step 2, back to 2.0 by step 3; numpy only by step 2."""
    final = environment(dist("torch", "2.0"), dist("numpy", "1.26.4"))
    return Facts.of(
        result(
            final,
            steps=[
                step(1, "", change("torch", ChangeKind.ADDED, None, "2.0")),
                step(
                    2,
                    "",
                    change("torch", ChangeKind.UPGRADED, "2.0", "2.1"),
                    change("numpy", ChangeKind.ADDED, None, "1.26.4"),
                ),
                step(3, "", change("torch", ChangeKind.DOWNGRADED, "2.1", "2.0")),
                step(4, "", change("numpy", ChangeKind.REMOVED, "1.26.4", None)),
            ],
        )
    )


def test_step_of_is_the_last_step_that_installed_that_version() -> None:
    """torch 2.0 was installed by steps 1 and 3: findings point at 3; a removal installs nothing."""
    facts = history()
    (hit,) = pin_violation(facts, [Pin(canonicalize_name("torch"), SpecifierSet(">=2.1"))])
    assert (hit.step, hit.versions, hit.environment) == (3, ("2.0",), ENV)
    (hit,) = forbidden_version(
        facts, [Forbidden(canonicalize_name("numpy"), SpecifierSet("==1.26.4"), "r")]
    )
    assert hit.step == 2
    assert facts.step_of(ENV, dist("torch", "2.1")) == 2
    assert facts.step_of(ENV, dist("scipy", "1.0")) is None
    assert facts.step_of(ENV, dist("torch", "2.0"), dist("numpy", "1.26.4")) == 3
    assert facts.step_of("/other/env", dist("torch", "2.0")) is None


def test_downgrade_hit_carries_the_step_versions_and_cause_packages() -> None:
    """The downgrade names its own step; a waiver may name the package or any cause."""
    facts = Facts.of(
        result(
            environment(dist("nccl", "2.29.7")),
            steps=[
                step(1, "", change("nccl", ChangeKind.ADDED, None, "2.30.3")),
                step(2, "", change("pip", ChangeKind.UPGRADED, "23", "24")),
                step(
                    3,
                    "",
                    change(
                        "nccl",
                        ChangeKind.DOWNGRADED,
                        "2.30.3",
                        "2.29.7",
                        causes=[
                            cause("torch", "2.12.1", "nccl==2.29.7"),
                            cause("fi", "0.6", "torch>=2.12"),
                        ],
                    ),
                ),
            ],
        )
    )
    (hit,) = downgrade(facts, RuleConfig("downgrade", Severity.ERROR))
    assert (hit.step, hit.package, hit.versions) == (3, "nccl", ("2.30.3", "2.29.7"))
    assert hit.packages == frozenset({"nccl", "torch", "fi"})
    assert hit.message == (
        "step 3 moved nccl back from 2.30.3 to 2.29.7 "
        "(torch 2.12.1 requires nccl==2.29.7 / fi 0.6 requires torch>=2.12)"
    )
    assert list(downgrade(facts, replace(RULE, allow=frozenset({canonicalize_name("nccl")})))) == []
    only_torch = replace(RULE, packages=frozenset({canonicalize_name("torch")}))
    assert list(downgrade(facts, only_torch)) == []


# --------------------------------------------------------------------------- unmet


def test_unmet_is_dropped_when_the_requirer_changed_version() -> None:
    """app 1.0 needed lib>=2; a later step upgraded app to 2.0 (lib>=1): nothing is unmet."""
    final = environment(dist("app", "2.0"), dist("lib", "1.0"))
    facts = Facts.of(
        result(
            final,
            steps=[
                step(1, "", unmet=[unmet("app", "1.0", "lib>=2", "1.0")]),
                step(2, "", change("app", ChangeKind.UPGRADED, "1.0", "2.0")),
            ],
        )
    )
    assert list(unmet_requirement(facts)) == []


def test_unmet_is_dropped_when_a_later_step_fixed_the_target() -> None:
    """lib went from 1.0 to 2.5 after the step that left app's lib>=2 unmet."""
    final = environment(dist("app", "1.0"), dist("lib", "2.5"))
    facts = Facts.of(
        result(final, steps=[step(1, "", unmet=[unmet("app", "1.0", "lib>=2", "1.0")])])
    )
    assert list(unmet_requirement(facts)) == []


def test_unmet_still_holds_points_at_the_first_step() -> None:
    """Unmet at steps 2 and 3 and still at the end: one hit, at step 2, naming what is there."""
    final = environment(dist("app", "1.0"), dist("lib", "1.5"))
    u = unmet("app", "1.0", "lib>=2", "1.0")
    later = unmet("app", "1.0", "lib>=2", "1.5")
    facts = Facts.of(
        result(final, steps=[step(1, ""), step(2, "", unmet=[u]), step(3, "", unmet=[later])])
    )
    (hit,) = unmet_requirement(facts)
    assert (hit.step, hit.package, hit.environment) == (2, "lib", ENV)
    assert hit.message == "app 1.0 requires lib>=2, but 1.5 is installed"
    assert hit.versions == ("1.0", "1.5")
    assert hit.packages == frozenset({"app", "lib"})


def test_unmet_missing_target_and_removed_requirer() -> None:
    """Missing lib stays unmet ("not installed"); a requirer removed at the end drops it."""
    u = unmet("app", "1.0", "lib>=2", None)
    (hit,) = unmet_requirement(
        Facts.of(result(environment(dist("app", "1.0")), steps=[step(1, "", unmet=[u])]))
    )
    assert hit.message == "app 1.0 requires lib>=2, but it is not installed"
    assert hit.versions == ("1.0",)
    gone = Facts.of(result(environment(dist("lib", "1.0")), steps=[step(1, "", unmet=[u])]))
    assert list(unmet_requirement(gone)) == []


def test_unmet_target_moved_but_still_outside() -> None:
    """lib moved 1.0 -> 1.5 later, still below 2: kept; a pre-release inside the range meets it."""
    u = unmet("app", "1.0", "lib>=2", "1.0")
    still = Facts.of(
        result(environment(dist("app", "1.0"), dist("lib", "1.5")), steps=[step(1, "", unmet=[u])])
    )
    assert [h.step for h in unmet_requirement(still)] == [1]
    dev = Facts.of(
        result(
            environment(dist("app", "1.0"), dist("lib", "2.1.dev3")), steps=[step(1, "", unmet=[u])]
        )
    )
    assert list(unmet_requirement(dev)) == []


# --------------------------------------------------------------------------- file-collision


def test_file_collision_counts_only_hashed_paths_with_different_digests() -> None:
    """Two wheels share four paths: one differs, one is identical (padding and case aside),
    two have no hash in one RECORD (.pyc, the RECORD itself): one file collides."""
    same_padded = B + "="
    same_upper = "SHA256=" + B.split("=", 1)[1]
    a = dist(
        "nvidia-cutlass-dsl",
        "4.3.0",
        record=[
            ("cutlass/__init__.py", A),
            ("cutlass/same.py", same_padded),
            ("cutlass/x.pyc", C),
            ("cutlass/RECORD", ""),
        ],
    )
    b = dist(
        "cutlass",
        "4.2.0",
        record=[
            ("cutlass/__init__.py", C),
            ("cutlass/same.py", same_upper),
            ("cutlass/x.pyc", ""),
            ("cutlass/RECORD", ""),
        ],
    )
    facts = Facts.of(result(environment(a, b)))
    (hit,) = file_collision(facts)
    assert hit.message == (
        "cutlass 4.2.0 and nvidia-cutlass-dsl 4.3.0 both install 1 file(s) with different "
        f"content: {ENV}/cutlass/__init__.py; install order decides which one wins"
    )
    assert (hit.package, hit.versions, hit.packages) == (
        "cutlass",
        ("4.2.0", "4.3.0"),
        frozenset({"cutlass", "nvidia-cutlass-dsl"}),
    )


def test_file_collision_lists_three_paths_then_counts_and_ignores_same_name() -> None:
    """Five colliding files: three shown, then "and 2 more"; one name twice is not a collision."""
    files = [f"m/{n}.py" for n in "edcba"]
    a = dist("alpha", "1", record=[(f, A) for f in files])
    b = dist("beta", "1", record=[(f, B) for f in files])
    (hit,) = file_collision(Facts.of(result(environment(a, b))))
    assert hit.message == (
        f"alpha 1 and beta 1 both install 5 file(s) with different content: {ENV}/m/a.py, "
        f"{ENV}/m/b.py, {ENV}/m/c.py and 2 more; install order decides which one wins"
    )
    twin = dist("alpha", "2", record=[(f, C) for f in files], suffix="-b")
    assert list(file_collision(Facts.of(result(environment(a, twin))))) == []


def test_file_collision_three_owners_make_pairs() -> None:
    """Three wheels writing one path with three contents: three pairs, sorted."""
    path = [("shared/lib.so",)]
    owners = [dist(n, "1", record=[(path[0][0], h)]) for n, h in (("c", C), ("a", A), ("b", B))]
    hits = list(file_collision(Facts.of(result(environment(*owners)))))
    assert [(h.package, h.versions) for h in hits] == [
        ("a", ("1", "1")),
        ("a", ("1", "1")),
        ("b", ("1", "1")),
    ]
    assert [sorted(h.packages) for h in hits] == [["a", "b"], ["a", "c"], ["b", "c"]]


# --------------------------------------------------------------------------- record-mismatch


def test_record_mismatch_only_compares_digests_of_one_algorithm() -> None:
    """A sha384 RECORD row is not compared with a sha256 digest; sha256 rows are."""
    d = dist(
        "flashinfer-python",
        "0.6.17",
        record=[
            ("fi/a.py", digest(b"a", "sha384")),  # other algorithm: skipped
            ("fi/b.py", digest(b"b")),  # equal
            ("fi/c.py", "SHA256=" + digest(b"c").split("=", 1)[1]),  # equal, algorithm upper-case
            ("fi/d.py", digest(b"d")),  # changed on disk
        ],
    )
    actual = {
        f"{ENV}/fi/a.py": digest(b"patched"),
        f"{ENV}/fi/b.py": digest(b"b"),
        f"{ENV}/fi/c.py": digest(b"c"),
        f"{ENV}/fi/d.py": digest(b"patched"),
    }
    (hit,) = record_mismatch(Facts.of(result(environment(d))), actual)
    assert hit.message == (
        f"flashinfer-python 0.6.17: files differ from RECORD: 1 changed ({ENV}/fi/d.py)"
    )
    del actual[f"{ENV}/fi/d.py"]
    actual[f"{ENV}/fi/d.py"] = digest(b"d") + "="  # padded the same digest: equal
    assert list(record_mismatch(Facts.of(result(environment(d))), actual)) == []


def test_record_mismatch_lists_at_most_three_and_counts_missing() -> None:
    """Four changed and one missing file: three named, "..."; the missing one named."""
    rows = [(f"p/{n}.py", digest(n.encode())) for n in "abcde"]
    d = dist("p", "1", record=rows)
    actual = {f"{ENV}/p/{n}.py": digest(b"x") for n in "abcd"}
    (hit,) = record_mismatch(Facts.of(result(environment(d))), actual)
    assert hit.message == (
        f"p 1: files differ from RECORD: 4 changed ({ENV}/p/a.py, {ENV}/p/b.py, "
        f"{ENV}/p/c.py, ...); 1 missing ({ENV}/p/e.py)"
    )
    assert (hit.package, hit.versions, hit.step) == ("p", ("1",), None)


def test_record_mismatch_metadata_dir_and_outside_paths_are_not_missing() -> None:
    """The dist-info's own files and files outside the environment are not reported missing."""
    d = dist("p", "1", record=[("p-1.dist-info/METADATA", A), ("p/x.egg-info/PKG-INFO", A)])
    d = replace(d, record=(*d.record, ("/usr/local/bin/p", A), (f"{ENV}/p/real.py", A)))
    (hit,) = record_mismatch(Facts.of(result(environment(d))), {})
    assert hit.message == f"p 1: files differ from RECORD: 1 missing ({ENV}/p/real.py)"
    assert list(record_mismatch(Facts.of(result(environment(d))), {f"{ENV}/p/real.py": A})) == []


# --------------------------------------------------------------------------- others


def test_pin_violation_non_pep440_and_prerelease_inside_the_range() -> None:
    """A non-PEP 440 version cannot satisfy a pin; a dev release inside the range does."""
    pins = [
        Pin(
            canonicalize_name("torch"), SpecifierSet(">=2.11,<2.13"), reason="ABI", link="https://x"
        )
    ]
    weird = Facts.of(result(environment(dist("torch", "2.12-custom"))))
    (hit,) = pin_violation(weird, pins)
    assert hit.message == (
        "torch 2.12-custom is not a PEP 440 version, so it cannot satisfy the pin "
        "torch<2.13,>=2.11 (ABI; https://x)"
    )
    dev = Facts.of(result(environment(dist("torch", "2.12.0.dev20261120"))))
    assert list(pin_violation(dev, pins)) == []
    rc_of_upper = Facts.of(result(environment(dist("torch", "2.13.0rc1"))))
    # PEP 440: <2.13 excludes the pre-releases of 2.13 itself
    assert [h.package for h in pin_violation(rc_of_upper, pins)] == ["torch"]


def test_forbidden_version_matches_prereleases_and_skips_non_pep440() -> None:
    """A forbidden range catches a dev release inside it; a non-PEP 440 version is skipped."""
    entry = [Forbidden(canonicalize_name("fi"), SpecifierSet(">=0.6.17,<0.6.18"), reason="bad")]
    dev = Facts.of(result(environment(dist("fi", "0.6.17.post1.dev2"))))
    (hit,) = forbidden_version(dev, entry)
    assert hit.message == "fi 0.6.17.post1.dev2 is forbidden (fi<0.6.18,>=0.6.17): bad"
    linked = [replace(entry[0], link="https://l")]
    (hit,) = forbidden_version(dev, linked)
    assert hit.message.endswith(": bad (see https://l)")
    assert list(forbidden_version(Facts.of(result(environment(dist("fi", "x-y")))), entry)) == []


def test_unpinned_prerelease_exact_pin_and_kinds() -> None:
    """A dev release is a nightly, an rc a pre-release; an exact pin silences only that one."""
    facts = Facts.of(
        result(
            environment(dist("fi", "0.6.18.dev20261120"), dist("tv", "1.0rc2"), dist("ok", "1.0"))
        )
    )
    pins = [Pin(canonicalize_name("tv"), SpecifierSet("==1.0rc2"))]
    hits = {h.package: h.message for h in unpinned_prerelease(facts, pins)}
    assert hits == {
        "fi": "fi 0.6.18.dev20261120 is a nightly (dev release) and no pin names that exact version"
    }
    range_pin = [Pin(canonicalize_name("tv"), SpecifierSet(">=1.0rc1"))]
    assert sorted(str(h.package) for h in unpinned_prerelease(facts, range_pin)) == ["fi", "tv"]


def test_coupling_partner_missing_outside_and_inside() -> None:
    """torch 2.12 needs nccl >=2.30: missing and 2.29 fire, 2.30.3 and 2.31.dev1 do not."""
    entry = [
        Coupling(
            canonicalize_name("torch"),
            SpecifierSet(">=2.12"),
            canonicalize_name("nccl"),
            SpecifierSet(">=2.30"),
            reason="fabric",
        )
    ]
    torch = dist("torch", "2.12.1")

    def hits(*dists: Distribution) -> list[str]:
        facts = Facts.of(result(environment(torch, *dists)))
        return [h.message for h in coupling(facts, entry)]

    assert hits() == [
        "torch 2.12.1 (in >=2.12) needs nccl>=2.30, but nccl is not installed (fabric)"
    ]
    assert hits(dist("nccl", "2.29.7")) == [
        "torch 2.12.1 (in >=2.12) needs nccl>=2.30, but nccl is 2.29.7 (fabric)"
    ]
    assert hits(dist("nccl", "2.30.3")) == []
    assert hits(dist("nccl", "2.31.dev1")) == []
    old = Facts.of(result(environment(dist("torch", "2.11.0"))))
    assert list(coupling(old, entry)) == []


def test_entry_scope_limits_to_matching_environments() -> None:
    """A pin scoped to another environment does not fire here."""
    scoped = [
        Pin(canonicalize_name("torch"), SpecifierSet(">=3"), scope=Scope(environments=("/usr/*",)))
    ]
    assert list(pin_violation(Facts.of(result(environment(dist("torch", "2.0")))), scoped)) == []


def test_duplicate_distribution_lists_paths_sorted() -> None:
    """Two numpy dist-infos: one hit with both versions ordered by metadata path."""
    one = dist("numpy", "2.0", suffix="")
    two = dist("numpy", "1.26", suffix="")
    facts = Facts.of(result(environment(one, two, dist("other", "1"))))
    (hit,) = duplicate_distribution(facts)
    assert hit.versions == ("1.26", "2.0")
    assert hit.message == (
        f"numpy is installed 2 times: 1.26 ({ENV}/numpy-1.26.dist-info), "
        f"2.0 ({ENV}/numpy-2.0.dist-info)"
    )


# --------------------------------------------------------------------------- whole hits

ORIGIN = Origin("p.toml", 7)
WARN = Severity.WARNING


def test_pin_violation_whole_hit_and_every_pin_is_checked() -> None:
    """Each dist is checked against every pin, past pins for other names and satisfied ones."""
    torch_pins = [
        Pin(canonicalize_name("numpy"), SpecifierSet("<2")),
        Pin(canonicalize_name("torch"), SpecifierSet(">=1")),
        Pin(canonicalize_name("torch"), SpecifierSet(">=2.1"), "ABI", "", WARN, origin=ORIGIN),
    ]
    facts = Facts.of(
        result(
            environment(dist("attrs", "1.0"), dist("torch", "2.0")),
            steps=[step(2, "", change("torch", ChangeKind.ADDED, None, "2.0"))],
        )
    )
    assert list(pin_violation(facts, torch_pins)) == [
        Hit(  # issue 9: numpy is not installed, so its pin matches nothing (a warning)
            "pin-violation",
            "pin matches nothing: no distribution named numpy is installed in any "
            "environment the pin numpy<2 covers",
            "numpy",
            None,
            None,
            (),
            frozenset({"numpy"}),
            WARN,
            Origin(),
        ),
        Hit(
            "pin-violation",
            "torch 2.0 does not satisfy the pin torch>=2.1 (ABI)",
            "torch",
            ENV,
            2,
            ("2.0",),
            frozenset({"torch"}),
            WARN,
            ORIGIN,
        ),
    ]
    no_reason = [Pin(canonicalize_name("torch"), SpecifierSet(">=2.1"))]
    (hit,) = pin_violation(facts, no_reason)
    assert hit.message == "torch 2.0 does not satisfy the pin torch>=2.1"
    assert (hit.severity, hit.origin) == (None, Origin())


def test_forbidden_version_whole_hit_and_every_entry_is_checked() -> None:
    """A non-PEP 440 dist first, then an entry for another name and one that does not match."""
    entries = [
        Forbidden(canonicalize_name("numpy"), SpecifierSet("==1.0"), "x"),
        Forbidden(canonicalize_name("nccl"), SpecifierSet("==2.28"), "old"),
        Forbidden(
            canonicalize_name("nccl"), SpecifierSet("==2.29.7"), "fabric", "", WARN, origin=ORIGIN
        ),
    ]
    facts = Facts.of(result(environment(dist("weird", "x-1"), dist("nccl", "2.29.7"))))
    assert list(forbidden_version(facts, entries)) == [
        Hit(
            "forbidden-version",
            "nccl 2.29.7 is forbidden (nccl==2.29.7): fabric",
            "nccl",
            ENV,
            None,
            ("2.29.7",),
            frozenset({"nccl"}),
            WARN,
            ORIGIN,
        )
    ]


def test_downgrade_whole_hit_and_later_changes_are_checked() -> None:
    """An allowed downgrade and an upgrade come first; the one after them is still reported."""
    facts = Facts.of(
        result(
            environment(dist("nccl", "2.29.7")),
            steps=[
                step(
                    4,
                    "",
                    change("pip", ChangeKind.DOWNGRADED, "24", "23"),
                    change("attrs", ChangeKind.UPGRADED, "1", "2"),
                    change("nccl", ChangeKind.DOWNGRADED, "2.30.3", "2.29.7"),
                ),
            ],
        )
    )
    config = replace(RULE, allow=frozenset({canonicalize_name("pip")}))
    assert list(downgrade(facts, config)) == [
        Hit(
            "downgrade",
            "step 4 moved nccl back from 2.30.3 to 2.29.7",
            "nccl",
            ENV,
            4,
            ("2.30.3", "2.29.7"),
            frozenset({"nccl"}),
        )
    ]
    listed = replace(RULE, packages=frozenset({canonicalize_name("nccl")}))
    assert [h.package for h in downgrade(facts, listed)] == ["nccl"]


def test_unpinned_prerelease_whole_hit_and_every_dist_is_checked() -> None:
    """A final release and an exactly pinned rc come first; the loose rc is still reported."""
    facts = Facts.of(
        result(
            environment(dist("a", "1.0"), dist("b", "2.0rc1"), dist("c", "0.3rc1")),
            steps=[step(3, "", change("c", ChangeKind.ADDED, None, "0.3rc1"))],
        )
    )
    pins = [
        Pin(canonicalize_name("x"), SpecifierSet("==1")),
        Pin(canonicalize_name("b"), SpecifierSet("==2.0rc1")),
    ]
    assert list(unpinned_prerelease(facts, pins)) == [
        Hit(
            "unpinned-prerelease",
            "c 0.3rc1 is a pre-release and no pin names that exact version",
            "c",
            ENV,
            3,
            ("0.3rc1",),
            frozenset({"c"}),
        )
    ]
    scoped = [
        Pin(canonicalize_name("b"), SpecifierSet("==2.0rc1"), scope=Scope(environments=("/x/*",)))
    ]
    assert sorted(str(h.package) for h in unpinned_prerelease(facts, scoped)) == ["b", "c"]


def test_coupling_whole_hit_and_every_entry_is_checked() -> None:
    """Entries for an absent package, out of scope, outside A's range and with B satisfied come
    first; the broken pair after them is reported with the later of the two install steps."""
    torch, nccl = canonicalize_name("torch"), canonicalize_name("nccl")
    entries = [
        Coupling(canonicalize_name("absent"), SpecifierSet(">=1"), nccl, SpecifierSet(">=1")),
        Coupling(torch, SpecifierSet(">=2"), nccl, SpecifierSet(">=9"), scope=Scope(("/x/*",))),
        Coupling(torch, SpecifierSet("<2"), nccl, SpecifierSet(">=9")),
        Coupling(torch, SpecifierSet(">=2"), nccl, SpecifierSet(">=2.29")),
        Coupling(
            torch,
            SpecifierSet(">=2.11"),
            nccl,
            SpecifierSet(">=2.30"),
            "fabric",
            "https://l",
            WARN,
            origin=ORIGIN,
        ),
    ]
    facts = Facts.of(
        result(
            environment(dist("torch", "2.12.0rc1"), dist("nccl", "2.29.7")),
            steps=[
                step(2, "", change("torch", ChangeKind.ADDED, None, "2.12.0rc1")),
                step(5, "", change("nccl", ChangeKind.ADDED, None, "2.29.7")),
            ],
        )
    )
    assert list(coupling(facts, entries)) == [
        Hit(
            "coupling",
            "torch 2.12.0rc1 (in >=2.11) needs nccl>=2.30, but nccl is 2.29.7 (fabric; https://l)",
            "nccl",
            ENV,
            5,
            ("2.12.0rc1", "2.29.7"),
            frozenset({"torch", "nccl"}),
            WARN,
            ORIGIN,
        )
    ]
    alone = Facts.of(
        result(
            environment(dist("torch", "2.12.0rc1")),
            steps=[step(2, "", change("torch", ChangeKind.ADDED, None, "2.12.0rc1"))],
        )
    )
    (hit,) = coupling(alone, entries[-1:])
    assert (hit.step, hit.versions) == (2, ("2.12.0rc1",))


def test_unmet_in_an_environment_gone_at_the_end_is_dropped() -> None:
    """The venv that held the unmet requirement was deleted by a later step."""
    u = unmet("app", "1.0", "lib>=2", "1.0", env="/usr/lib/python3/dist-packages")
    facts = Facts.of(result(environment(dist("app", "1.0")), steps=[step(1, "", unmet=[u])]))
    assert list(unmet_requirement(facts)) == []


def test_unmet_with_an_unparsable_requirement_is_kept() -> None:
    """A requirement packaging cannot parse cannot be re-judged: it stays, named by its text."""
    u = unmet("app", "1.0", "lib >= 2 ;; junk", None)
    facts = Facts.of(result(environment(dist("app", "1.0")), steps=[step(3, "", unmet=[u])]))
    (hit,) = unmet_requirement(facts)
    assert (hit.package, hit.step) == ("app", 3)
    assert hit.message.startswith("app 1.0 requires lib >= 2 ;; junk, but ")


def test_unmet_later_keys_are_checked_after_a_dropped_one() -> None:
    """The first unmet entry was fixed later; the second, still unmet, is reported."""
    fixed = unmet("app", "1.0", "lib>=2", "1.0")
    still = unmet("app", "1.0", "other>=3", "2.0")
    final = environment(dist("app", "1.0"), dist("lib", "2.5"), dist("other", "2.0"))
    facts = Facts.of(result(final, steps=[step(1, "", unmet=[fixed, still])]))
    assert [h.package for h in unmet_requirement(facts)] == ["other"]


def test_file_collision_whole_hits_with_a_same_name_pair_first() -> None:
    """On one path: two alpha dist-infos (not a collision) and beta: two pairs with beta."""
    alpha1 = dist("alpha", "1", record=[("m/x.so", A)])
    alpha2 = dist("alpha", "2", record=[("m/x.so", B)])
    beta = dist("beta", "1", record=[("m/x.so", C)])
    facts = Facts.of(
        result(
            environment(alpha1, alpha2, beta),
            steps=[
                step(2, "", change("alpha", ChangeKind.ADDED, None, "1")),
                step(4, "", change("beta", ChangeKind.ADDED, None, "1")),
            ],
        )
    )
    hits = list(file_collision(facts))
    assert [(h.versions, h.step, h.environment) for h in hits] == [
        (("1", "1"), 4, ENV),
        (("2", "1"), 4, ENV),
    ]
    assert hits[0] == Hit(
        "file-collision",
        f"alpha 1 and beta 1 both install 1 file(s) with different content: {ENV}/m/x.so; "
        "install order decides which one wins",
        "alpha",
        ENV,
        4,
        ("1", "1"),
        frozenset({"alpha", "beta"}),
    )


def test_file_collision_with_exactly_three_paths_lists_them_all() -> None:
    """Three colliding files are all shown, with no "and 0 more"."""
    files = [f"m/{n}.py" for n in "abc"]
    a = dist("alpha", "1", record=[(f, A) for f in files])
    b = dist("beta", "1", record=[(f, B) for f in files])
    (hit,) = file_collision(Facts.of(result(environment(a, b))))
    assert hit.message.endswith(
        f"3 file(s) with different content: {ENV}/m/a.py, {ENV}/m/b.py, {ENV}/m/c.py; "
        "install order decides which one wins"
    )


def test_record_mismatch_reads_past_unhashed_and_outside_rows() -> None:
    """An unhashed row and an unhashed-on-disk file outside the environment come first."""
    d = dist("p", "1", record=[("p/RECORD", ""), ("p/a.py", A)])
    d = replace(d, record=(("/usr/local/bin/p", A), *d.record))
    facts = Facts.of(
        result(environment(d), steps=[step(6, "", change("p", ChangeKind.ADDED, None, "1"))])
    )
    assert list(record_mismatch(facts, {f"{ENV}/p/a.py": B})) == [
        Hit(
            "record-mismatch",
            f"p 1: files differ from RECORD: 1 changed ({ENV}/p/a.py)",
            "p",
            ENV,
            6,
            ("1",),
            frozenset({"p"}),
        )
    ]


def test_record_mismatch_exactly_three_and_more_than_three_missing() -> None:
    """Three changed files are listed without "..."; four missing ones end with "..."."""
    rows = [(f"p/{n}.py", A) for n in "abcdefg"]
    d = dist("p", "1", record=rows)
    actual = {f"{ENV}/p/{n}.py": B for n in "abc"}
    (hit,) = record_mismatch(Facts.of(result(environment(d))), actual)
    assert hit.message == (
        f"p 1: files differ from RECORD: 3 changed ({ENV}/p/a.py, {ENV}/p/b.py, {ENV}/p/c.py); "
        f"4 missing ({ENV}/p/d.py, {ENV}/p/e.py, {ENV}/p/f.py, ...)"
    )
    three_missing = {f"{ENV}/p/{n}.py": A for n in "abcd"}
    (hit,) = record_mismatch(Facts.of(result(environment(d))), three_missing)
    assert hit.message == (
        f"p 1: files differ from RECORD: 3 missing ({ENV}/p/e.py, {ENV}/p/f.py, {ENV}/p/g.py)"
    )


def test_entry_scope_uses_the_image_platform_and_the_environments_python() -> None:
    """Scopes are judged for the image (arm64, Python 3.12.7 here), not for the test machine."""
    facts = Facts.of(result(environment(dist("torch", "2.0"))))  # linux/arm64, Python 3.12.7

    def fires(scope: Scope) -> bool:
        pin = Pin(canonicalize_name("torch"), SpecifierSet(">=3"), scope=scope)
        return bool(list(pin_violation(facts, [pin])))

    assert fires(Scope(platforms=("linux/arm64",)))
    assert not fires(Scope(platforms=("linux/amd64",)))
    assert fires(Scope(marker=Marker("platform_machine == 'aarch64'")))
    assert not fires(Scope(marker=Marker("platform_machine == 'x86_64'")))
    assert fires(Scope(marker=Marker("python_full_version == '3.12.7'")))
    assert not fires(Scope(marker=Marker("python_version < '3.12'")))


def test_duplicate_distribution_whole_hit_after_a_single_name() -> None:
    """attrs (once) sorts before numpy (twice): numpy is still reported, with its last step."""
    one = dist("numpy", "2.0")
    two = dist("numpy", "1.26")
    facts = Facts.of(
        result(
            environment(dist("attrs", "1"), one, two),
            steps=[
                step(2, "", change("numpy", ChangeKind.ADDED, None, "1.26")),
                step(5, "", change("numpy", ChangeKind.UPGRADED, "1.26", "2.0")),
            ],
        )
    )
    assert list(duplicate_distribution(facts)) == [
        Hit(
            "duplicate-distribution",
            f"numpy is installed 2 times: 1.26 ({ENV}/numpy-1.26.dist-info), "
            f"2.0 ({ENV}/numpy-2.0.dist-info)",
            "numpy",
            ENV,
            5,
            ("1.26", "2.0"),
            frozenset({"numpy"}),
        )
    ]


def test_record_mismatch_checks_every_distribution() -> None:
    """A clean distribution first; the changed one after it is reported."""
    clean = dist("a", "1", record=[("a/x.py", A)])
    changed = dist("b", "1", record=[("b/x.py", A)])
    digests = {f"{ENV}/a/x.py": A, f"{ENV}/b/x.py": B}
    hits = record_mismatch(Facts.of(result(environment(clean, changed))), digests)
    assert [h.package for h in hits] == ["b"]


def test_file_collision_step_is_the_later_of_the_two_installs() -> None:
    """beta came at step 2, alpha at step 6: the collision is alpha's step."""
    a = dist("alpha", "1", record=[("m/x.so", A)])
    b = dist("beta", "1", record=[("m/x.so", B)])
    facts = Facts.of(
        result(
            environment(a, b),
            steps=[
                step(2, "", change("beta", ChangeKind.ADDED, None, "1")),
                step(6, "", change("alpha", ChangeKind.ADDED, None, "1")),
            ],
        )
    )
    assert [h.step for h in file_collision(facts)] == [6]
