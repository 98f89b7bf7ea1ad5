"""native-duplicate, native-mismatch, variant-change and [[native-pin]] on hand-built facts."""

from __future__ import annotations

import dataclasses
import datetime as _dt
from collections.abc import Sequence

import pytest

from pinguard.models import AuditResult, ChangeKind, NativeLibrary, Resolution, Snapshot, Step
from pinguard.policy import evaluate, parse_policy
from pinguard.policy.load import PolicyError
from tests.factories import ENV, change, dist, environment, result, step

WHEEL = f"{ENV}/nvidia/nccl/lib/libnccl.so.2"
DEB = "/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.9"
TORCH = f"{ENV}/torch/lib/libtorch_cuda.so"


def nccl_wheel(banner: str = "2.30.3+cuda13.0", owner_version: str = "2.30.3") -> NativeLibrary:
    return NativeLibrary(
        path=WHEEL,
        digest="sha256=AAAA",
        size=10,
        layer=f"sha256:{2:064x}",
        soname="libnccl.so.2",
        library="nccl",
        version=banner,
        owner_kind="wheel",
        owner="nvidia-nccl-cu13",
        owner_version=owner_version,
        owner_environment=ENV,
        record_digest="sha256=AAAA",
    )


DEB_NCCL = NativeLibrary(
    path=DEB,
    digest="sha256=BBBB",
    size=10,
    layer=f"sha256:{1:064x}",
    soname="libnccl.so.2",
    library="nccl",
    version="2.28.9+cuda13.0",
    owner_kind="deb",
    owner="libnccl2",
    owner_version="2.28.9-1+cuda13.0",
)
TORCH_LIB = NativeLibrary(
    path=TORCH,
    digest="sha256=CCCC",
    size=10,
    layer=f"sha256:{2:064x}",
    soname="libtorch_cuda.so",
    needed=("libnccl.so.2",),
    rpath=("$ORIGIN/../../nvidia/nccl/lib",),
    owner_kind="wheel",
    owner="torch",
    owner_version="2.12.1+cu130",
    owner_environment=ENV,
    record_digest="sha256=CCCC",
)
LOADS_WHEEL = Resolution(TORCH, "libnccl.so.2", WHEEL, WHEEL, "DT_RPATH", f"{ENV}/nvidia/nccl/lib")


def with_native(
    *libs: NativeLibrary,
    resolutions: tuple[Resolution, ...] = (),
    steps: Sequence[Step] = (),
    installer: str | None = "pip",
) -> AuditResult:
    base = result(
        environment(
            *(
                dataclasses.replace(d, installer=installer)
                for d in (dist("torch", "2.12.1+cu130"), dist("nvidia-nccl-cu13", "2.30.3"))
            )
        ),
        steps=steps or (step(1), step(2)),
    )
    final = dataclasses.replace(base.final, native=tuple(libs), resolutions=resolutions)
    return dataclasses.replace(base, final=final, snapshots=tuple(final for _ in base.steps))


def rules(res: AuditResult, policy: str = "") -> list[tuple[str, str]]:
    return [
        (f.rule, f.message)
        for f in evaluate(res, parse_policy(policy), today=_dt.date(2026, 12, 1))
        if f.rule.startswith(("native", "variant"))
    ]


PROBE = f"{ENV}/torch/lib/libtorch_probe.so"
PROBE_LIB = dataclasses.replace(TORCH_LIB, path=PROBE, soname="libtorch_probe.so", rpath=())
LOADS_DEB = Resolution(PROBE, "libnccl.so.2", DEB, DEB, "LD_LIBRARY_PATH", "/usr/lib")


def test_duplicate_names_both_versions_and_what_torch_loads() -> None:
    """Two Python consumers load different copies of libnccl.so.2 (a wheel's, a deb's):
    both versions, and each consumer's pick."""
    found = rules(
        with_native(
            nccl_wheel(), DEB_NCCL, TORCH_LIB, PROBE_LIB, resolutions=(LOADS_WHEEL, LOADS_DEB)
        )
    )
    assert len(found) == 1
    rule, message = found[0]
    assert rule == "native-duplicate"
    assert "libnccl.so.2 is provided 2 times" in message
    assert "2.30.3+cuda13.0" in message
    assert "2.28.9+cuda13.0" in message
    assert f"{TORCH} loads {WHEEL} (2.30.3+cuda13.0, via DT_RPATH)" in message


def test_system_copy_outside_python_is_inventory() -> None:
    """A deb copy no Python consumer loads is inventory, not a warning (issue 17: only
    copies Python's processes can load matter)."""
    assert rules(with_native(nccl_wheel(), DEB_NCCL, TORCH_LIB, resolutions=(LOADS_WHEEL,))) == []


def test_identical_copies_are_inventory() -> None:
    """Two byte-identical copies loaded by two consumers: nothing can skew."""
    same = dataclasses.replace(DEB_NCCL, digest=nccl_wheel().digest)
    res = with_native(
        nccl_wheel(), same, TORCH_LIB, PROBE_LIB, resolutions=(LOADS_WHEEL, LOADS_DEB)
    )
    assert rules(res) == []


def test_one_owner_is_no_duplicate() -> None:
    """One provider: nothing to report."""
    assert rules(with_native(nccl_wheel(), TORCH_LIB)) == []


def test_duplicate_is_waivable_by_soname() -> None:
    """A waiver may name the soname (normalized) instead of an owner."""
    res = with_native(
        nccl_wheel(), DEB_NCCL, TORCH_LIB, PROBE_LIB, resolutions=(LOADS_WHEEL, LOADS_DEB)
    )
    policy = (
        '[[waiver]]\npackage = "libnccl.so.2"\nrule = "native-duplicate"\n'
        'reason = "deb kept for the fabric tools"\nexpires = 2027-01-31\n'
    )
    (finding,) = [
        f
        for f in evaluate(res, parse_policy(policy), today=_dt.date(2026, 12, 1))
        if f.rule == "native-duplicate"
    ]
    assert finding.waived


@pytest.mark.parametrize(
    ("banner", "owner_version", "record", "want"),
    [
        (
            "2.29.7+cuda13.2",
            "2.30.3",
            "sha256=AAAA",
            ["the library says 2.29.7+cuda13.2, its owner is 2.30.3"],
        ),
        (
            "2.30.3+cuda13.0",
            "2.30.3",
            "sha256=ZZZZ",
            ["its content differs from the hash in the wheel's RECORD"],
        ),
        ("2.30.3+cuda13.0", "2.30.3", "sha256=AAAA", []),
        ("2.30.3+cuda13.0", "2.30.3", "", []),
    ],
)
def test_mismatch(banner: str, owner_version: str, record: str, want: list[str]) -> None:
    """The banner against the owner's version, and the bytes against RECORD."""
    lib = dataclasses.replace(nccl_wheel(banner, owner_version), record_digest=record or None)
    found = rules(with_native(lib))
    assert [m.split(": ", 1)[1] for r, m in found if r == "native-mismatch"] == want


def test_mismatch_deb_version_is_compared_on_its_upstream_part() -> None:
    """Debian's 2.28.9-1+cuda13.0 is 2.28.9: no mismatch with a 2.28.9 banner; 2.27 is one."""
    assert rules(with_native(DEB_NCCL)) == []
    bad = dataclasses.replace(DEB_NCCL, version="2.27.3")
    assert [r for r, _ in rules(with_native(bad))] == ["native-mismatch"]


def test_bundled_copy_is_not_compared_with_its_bundler() -> None:
    """A wheel that bundles NCCL under its own version is not a mismatch."""
    lib = dataclasses.replace(nccl_wheel(), owner="cupy-cuda13x", owner_version="13.6.0")
    assert rules(with_native(lib)) == []


def test_variant_change_cuda_to_cpu_even_when_upgraded() -> None:
    """+cu130 -> +cpu is reported, also when the version goes up."""
    res = result(
        environment(dist("torch", "2.12.0+cpu")),
        steps=[
            step(1),
            step(2, "", change("torch", ChangeKind.UPGRADED, "2.11.0+cu130", "2.12.0+cpu")),
        ],
    )
    found = rules(res)
    assert found == [
        (
            "variant-change",
            "torch 2.11.0+cu130 -> 2.12.0+cpu: the build variant changed from +cu130 to +cpu",
        )
    ]


def test_variant_same_label_is_quiet() -> None:
    res = result(
        environment(dist("torch", "2.12.0+cu130")),
        steps=[step(1, "", change("torch", ChangeKind.UPGRADED, "2.11.0+cu130", "2.12.0+cu130"))],
    )
    assert rules(res) == []


def test_variant_mixed_cuda_majors() -> None:
    """cu12 and cu13 wheels of one family (and torch's +cu130) in one environment."""
    res = result(
        environment(
            dist("nvidia-nccl-cu13", "2.30.3"),
            dist("nvidia-cublas-cu12", "12.9.1.4"),
            dist("torch", "2.12.1+cu130"),
        )
    )
    ((rule, message),) = rules(res)
    assert rule == "variant-change"
    assert message == (
        "nvidia CUDA variants are mixed in one environment: CUDA 12: nvidia-cublas-cu12 "
        "12.9.1.4; CUDA 13: nvidia-nccl-cu13 2.30.3, torch 2.12.1+cu130"
    )


PIN = (
    '[[native-pin]]\nsoname = "libnccl.so.2"\nversion = "==2.30.*"\nconsumer = "torch"\n'
    'reason = "known-good NCCL"\n'
)


def test_native_pin_judges_the_binary_torch_loads() -> None:
    """torch loads the wheel's copy; its banner says 2.29.7 though the wheel says 2.30.3."""
    lib = nccl_wheel("2.29.7+cuda13.2", "2.30.3")
    found = rules(with_native(lib, TORCH_LIB, resolutions=(LOADS_WHEEL,)), PIN)
    pins = [m for r, m in found if r == "native-pin"]
    assert pins == [
        f"libnccl.so.2: {TORCH} loads {WHEEL}, version 2.29.7+cuda13.2, outside the pin "
        "==2.30.* (known-good NCCL)"
    ]


def test_native_pin_passes_and_fails_closed() -> None:
    """In range: quiet. A library with no banner, or nothing found: reported."""
    ok = with_native(nccl_wheel(), TORCH_LIB, resolutions=(LOADS_WHEEL,))
    assert [r for r, _ in rules(ok, PIN) if r == "native-pin"] == []
    silent = dataclasses.replace(nccl_wheel(), version=None)
    found = rules(with_native(silent, TORCH_LIB, resolutions=(LOADS_WHEEL,)), PIN)
    assert any("states no version" in m for r, m in found if r == "native-pin")
    missing = Resolution(TORCH, "libnccl.so.2", None, None, "")
    found = rules(with_native(TORCH_LIB, resolutions=(missing,)), PIN)
    assert [m for r, m in found if r == "native-pin"] == [
        f"libnccl.so.2: {TORCH} loads nothing, so its version cannot be judged (known-good NCCL)"
    ]


def test_native_pin_without_consumer_judges_every_provider() -> None:
    policy = '[[native-pin]]\nsoname = "libnccl.so.2"\nversion = ">=2.29"\n'
    found = rules(with_native(nccl_wheel(), DEB_NCCL), policy)
    assert [m for r, m in found if r == "native-pin"] == [
        f"libnccl.so.2: provided by {DEB}, version 2.28.9+cuda13.0, outside the pin >=2.29"
    ]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('soname = "lib/x.so"\nversion = "==1"', "expected a library file name"),
        ('soname = "libx.so"\nversion = "==="', "version"),
        ('soname = "libx.so"', "version"),
        ('soname = "libx.so"\nversion = "==1"\nwhat = 1', "what"),
    ],
)
def test_native_pin_invalid(body: str, message: str) -> None:
    """Bad [[native-pin]] entries are errors naming the key and quoting the value."""
    with pytest.raises(PolicyError) as err:
        parse_policy("[[native-pin]]\n" + body + "\n")
    assert message in str(err.value)


def test_native_pin_loads() -> None:
    policy = parse_policy(PIN)
    (pin,) = policy.native_pins
    assert (pin.soname, str(pin.specifier), pin.consumer) == ("libnccl.so.2", "==2.30.*", "torch")
    assert pin.origin.line == 1
    assert isinstance(Snapshot().native, tuple)


def test_record_mismatch_needs_an_installer() -> None:
    """A distribution without INSTALLER (Debian's pybuild packages, stripped after RECORD
    was written) is not judged on RECORD hashes; the same file from pip is."""
    changed = dataclasses.replace(nccl_wheel(), record_digest="sha256=ZZZZ")
    assert rules(with_native(changed, installer=None)) == []
    assert [r for r, _ in rules(with_native(changed))] == ["native-mismatch"]
