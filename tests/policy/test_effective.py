"""`effective_policy`: the pins, forbidden ranges and guard rule that apply to one run."""

from __future__ import annotations

from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from pinguard.models import Platform
from pinguard.policy import load_policy, parse_policy
from pinguard.policy.effective import EffectivePolicy, ForbiddenRange, effective_policy

POLICY = """\
require_guard = true

[[pin]]
package = "Torch"
version = ">=2.9"

[[pin]]
package = "torch"
version = "<2.10"

[[pin]]
package = "numpy"
version = "<2"
platforms = ["linux/amd64"]

[[pin]]
package = "flashinfer-python"
version = "==0.5.3"
targets = ["sm_121"]

[[forbidden]]
package = "nvidia-nccl-cu13"
version = "2.29.7"
reason = "hangs"

[[forbidden]]
package = "triton"
version = "<3.5"
reason = "no sm_121 kernels"
targets = ["sm_121"]
"""

ARM = Platform("linux", "arm64")
AMD = Platform("linux", "amd64")


def test_pins_of_one_package_intersect_and_scopes_filter() -> None:
    """Two torch pins become one range; a platform pin drops on another platform."""
    got = effective_policy(parse_policy(POLICY, file="p.toml"), platform=ARM)
    assert dict(got.pins) == {"torch": SpecifierSet(">=2.9,<2.10")}
    assert got.pin_requirements == ("torch<2.10,>=2.9",)
    nccl = canonicalize_name("nvidia-nccl-cu13")
    assert got.forbidden == (ForbiddenRange(nccl, SpecifierSet("==2.29.7"), "hangs"),)
    assert got.require_guard is True
    assert got.policy_file == "p.toml"


def test_unknown_platform_matches_every_platform_scope_and_targets_switch_entries_on() -> None:
    """No platform (lint, gate before the audit): numpy's amd64 pin applies (fail closed);
    --target sm_121 adds the target-scoped pin and forbidden range."""
    policy = parse_policy(POLICY, file="p.toml")
    assert set(effective_policy(policy).pins) == {"torch", "numpy"}
    assert set(effective_policy(policy, platform=AMD).pins) == {"torch", "numpy"}
    got = effective_policy(policy, platform=ARM, targets=["sm_121"])
    assert dict(got.pins) == {
        "torch": SpecifierSet(">=2.9,<2.10"),
        "flashinfer-python": SpecifierSet("==0.5.3"),
    }
    assert got.pin_requirements == ("flashinfer-python==0.5.3", "torch<2.10,>=2.9")
    assert [f.package for f in got.forbidden] == ["nvidia-nccl-cu13", "triton"]


def test_the_default_policy_asks_for_nothing() -> None:
    """No files: no pins, nothing forbidden, no guard, no policy file."""
    assert effective_policy(load_policy()) == EffectivePolicy()


def test_a_forbidden_range_forbids_its_package_at_versions_in_it() -> None:
    """Names compare canonicalized; pre-releases inside the range count."""
    bad = ForbiddenRange(canonicalize_name("triton"), SpecifierSet("<3.5"), "no sm_121 kernels")
    assert bad.forbids("Triton", Version("3.4.0"))
    assert bad.forbids("triton", Version("3.4.0rc1"))
    assert not bad.forbids("triton", Version("3.5.0"))
    assert not bad.forbids("torch", Version("3.4.0"))
