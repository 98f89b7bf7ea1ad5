"""Policies judged end to end on images built by buildah with real `RUN pip install` steps.

One small image (:data:`STEPS`, built once per session from the cached Debian base and
reused across runs while its inputs are unchanged) carries everything the rules look for:
downgrades (direct and caused by a requirement), an unmet requirement and one that a later
step fixes, two wheels writing one path with different bytes (NVIDIA/cutlass#3170) and two
writing it with the same bytes, an exactly pinned and a loose pre-release, a file patched
after install, a second dist-info of one name, and a virtual environment where everything is
in order. Every test writes real policy files (or uses the shipped ones), runs
``pinguard audit`` and checks each rule both firing and not firing, plus the SARIF (against
the official 2.1.0 schema), JUnit and Markdown reports.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from pinguard.cli import main
from tests.infra.build import (
    BASE_SITE_PACKAGES,
    build_image,
    cache_dir,
    file_lock,
    image_config,
    image_exists,
    image_id,
    image_labels,
)
from tests.infra.index import IndexServer, serve_index
from tests.infra.paths import REPO, SARIF_SCHEMA
from tests.infra.tools import require_tool
from tests.infra.wheels import WheelSpec, build_wheels, wheel_bytes

pytestmark = pytest.mark.integration

T = TypeVar("T")

TAG = "localhost/pinguard-test/policy-rules:latest"
FINGERPRINT_LABEL = "io.pinguard.test.policy-rules"
SITE = BASE_SITE_PACKAGES
VENV_SITE = "/opt/venv/lib/python3.11/site-packages"
PIP = "pip install --index-url $INDEX_URL"


def _files(module: str, **contents: bytes) -> dict[str, bytes]:
    return {f"{module}/__init__.py": b"", **{f"{module}/{k}": v for k, v in contents.items()}}


WHEELS: tuple[WheelSpec, ...] = (
    WheelSpec("alpha", "1.0"),
    WheelSpec("alpha", "2.0"),
    WheelSpec("beta", "1.0"),
    WheelSpec("beta", "2.0"),
    WheelSpec("gamma", "1.0"),
    WheelSpec("delta", "1.0"),
    WheelSpec("happy", "1.0", requires_dist=("gamma>=1",)),
    WheelSpec("needy", "1.0", requires_dist=("gamma>=2",)),
    WheelSpec("later", "1.0", requires_dist=("delta",)),
    WheelSpec("nvidia-nccl-cu13", "2.30.3", files=_files("nccl30", **{"libnccl.so.2": b"2.30"})),
    WheelSpec("nvidia-nccl-cu13", "2.29.7", files=_files("nccl29", **{"libnccl.so.2": b"2.29"})),
    WheelSpec("nvidia-cutlass-dsl", "4.3.0"),
    WheelSpec("nvidia-cutlass-dsl", "4.2.1"),
    WheelSpec("flashinfer-python", "0.6.17"),
    WheelSpec(
        "oldtorch", "1.0", requires_dist=("nvidia-nccl-cu13==2.29.7", "nvidia-cutlass-dsl==4.2.1")
    ),
    WheelSpec("tampered", "1.0"),
    WheelSpec("dupe", "1.0"),
    # NVIDIA/cutlass#3170: two distributions install one path with different bytes.
    WheelSpec("collide-a", "1.0", files=_files("shared_lib", **{"lib.so": b"built by A\n"})),
    WheelSpec("collide-b", "1.0", files=_files("shared_lib", **{"lib.so": b"built by B\n"})),
    # ... and two that install one path with the same bytes, which is harmless.
    WheelSpec("same-a", "1.0", files=_files("same_lib", **{"data.txt": b"identical\n"})),
    WheelSpec("same-b", "1.0", files=_files("same_lib", **{"data.txt": b"identical\n"})),
    WheelSpec("nightly-pinned", "1.1.dev20261120"),
    WheelSpec("nightly-loose", "0.3rc1"),
)


@dataclass(frozen=True)
class BuildStep:
    key: str
    instruction: str


STEPS: tuple[BuildStep, ...] = (
    BuildStep("arg", "ARG INDEX_URL"),
    BuildStep("env", "ENV PIP_NO_INPUT=1"),
    BuildStep(
        "install",
        f"RUN {PIP} alpha==2.0 beta==2.0 nvidia-nccl-cu13==2.30.3 \\\n"
        "      nvidia-cutlass-dsl==4.3.0 flashinfer-python==0.6.17 \\\n"
        "      tampered==1.0 dupe==1.0 happy==1.0",
    ),
    BuildStep("downgrade", f"RUN {PIP} alpha==1.0 beta==1.0 oldtorch==1.0"),
    BuildStep("no-deps", f"RUN {PIP} --no-deps needy==1.0 later==1.0"),
    BuildStep("collide-a", f"RUN {PIP} collide-a==1.0 same-a==1.0 delta==1.0"),
    BuildStep("collide-b", f"RUN {PIP} collide-b==1.0 same-b==1.0"),
    BuildStep("nightly", f"RUN {PIP} nightly-pinned==1.1.dev20261120 nightly-loose==0.3rc1"),
    BuildStep("tamper", f"RUN echo '# patched after install' >> {SITE}/tampered/__init__.py"),
    BuildStep(
        "duplicate",
        f"RUN cp -r {SITE}/dupe-1.0.dist-info {SITE}/dupe-0.9.dist-info && "
        f"sed -i 's/^Version: 1.0$/Version: 0.9/' {SITE}/dupe-0.9.dist-info/METADATA",
    ),
    BuildStep(
        "venv",
        f"RUN python3 -m venv /opt/venv && /opt/venv/bin/{PIP} alpha==2.0 \\\n"
        "      nvidia-nccl-cu13==2.30.3 nvidia-cutlass-dsl==4.3.0 flashinfer-python==0.6.17",
    ),
)


def dockerfile_text(base: str, label: str = "") -> str:
    lines = [f"FROM {base}", *(s.instruction for s in STEPS)]
    if label:
        lines.append(f"LABEL {FINGERPRINT_LABEL}={label}")
    return "\n".join(lines) + "\n"


def dockerfile_line(text: str, key: str) -> int:
    """The 1-based line where the instruction of step ``key`` starts in ``text``."""
    first = next(s for s in STEPS if s.key == key).instruction.splitlines()[0]
    return text.splitlines().index(first) + 1


@dataclass(frozen=True)
class PolicyImage:
    """The built image: its tag, an OCI layout of it, the Dockerfile and history numbering."""

    tag: str
    reference: str
    dockerfile: Path
    history_base: int
    reused: bool

    def step(self, key: str) -> int:
        """The 1-based history index (pinguard's step number) of step ``key``."""
        return self.history_base + 1 + [s.key for s in STEPS].index(key)


@pytest.fixture(scope="session")
def policy_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexServer]:
    """A loopback index with this module's wheels."""
    directory = tmp_path_factory.mktemp("policy-wheels")
    build_wheels(WHEELS, directory)
    with serve_index(directory) as index:
        yield index


@pytest.fixture(scope="session")
def policy_image(
    base_image: str, policy_index: IndexServer, tmp_path_factory: pytest.TempPathFactory
) -> PolicyImage:
    """The rules image, built (or reused by fingerprint) and exported as an OCI layout."""
    skopeo = require_tool("skopeo")
    h = hashlib.sha256(f"policy-rules v1\nbase {image_id(base_image)}\n".encode())
    for spec in WHEELS:
        h.update(hashlib.sha256(wheel_bytes(spec)).digest())
    h.update(dockerfile_text("BASE").encode())
    fp = h.hexdigest()[:32]
    work = tmp_path_factory.mktemp("policy-image")
    text = dockerfile_text(base_image, fp)
    with file_lock(cache_dir() / "policy-rules.lock"):
        force = os.environ.get("PINGUARD_TEST_REBUILD", "") not in {"", "0"}
        reused = not force and image_exists(TAG) and image_labels(TAG).get(FINGERPRINT_LABEL) == fp
        if not reused:
            build_image(work / "context", text, TAG, {"INDEX_URL": policy_index.url}).check()
    dockerfile = work / "Dockerfile"
    dockerfile.write_text(text)
    history = image_config(TAG).get("history", [])
    base_history = len(image_config(base_image).get("history", []))
    assert len(history) == base_history + len(STEPS) + 1, "unexpected history length"
    layout = work / "oci"
    proc = subprocess.run(
        [
            skopeo,
            "--insecure-policy",
            "copy",
            "--quiet",
            "--dest-oci-accept-uncompressed-layers",
            f"containers-storage:{TAG}",
            f"oci:{layout}:latest",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return PolicyImage(TAG, f"oci:{layout}:latest", dockerfile, base_history, reused)


@pytest.fixture(scope="session")
def layer_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("policy-layer-cache")


@dataclass
class Audit:
    """One `pinguard audit` run: its exit code, the report text and (for json) the document."""

    code: int
    text: str

    @property
    def doc(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.text)
        return data

    @property
    def findings(self) -> list[dict[str, Any]]:
        return list(self.doc["findings"])

    def rule(self, rule: str, package: str | None = None) -> list[dict[str, Any]]:
        return [
            f
            for f in self.findings
            if f["rule"] == rule and (package is None or f["package"] == package)
        ]


@pytest.fixture
def audit(policy_image: PolicyImage, layer_cache: Path, tmp_path: Path) -> Any:
    """``audit(*args, fmt="json") -> Audit``: `pinguard audit` of the rules image."""
    counter = iter(range(1000))

    def run(*args: str, fmt: str = "json") -> Audit:
        out = tmp_path / f"report-{next(counter)}.{fmt}"
        code = main(
            [
                "audit",
                policy_image.reference,
                "--cache-dir",
                str(layer_cache),
                "--format",
                fmt,
                "-o",
                str(out),
                *args,
            ]
        )
        return Audit(code, out.read_text())

    return run


def write_policy(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def line_of(path: str, needle: str) -> int:
    """The 1-based line of the first line of ``path`` containing ``needle``."""
    for i, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if needle in line:
            return i
    raise AssertionError(f"{needle!r} not in {path}")


SHIPPED_DEFAULT = str(REPO / "policies" / "default.toml")
SHIPPED_GLM = str(REPO / "policies" / "glm-serving-gb10.toml")


def keys(run: Audit, *rules: str) -> set[tuple[str, str, str]]:
    """``(rule, package, environment)`` of the findings of ``rules`` (all rules if none)."""
    return {
        (f["rule"], f["package"], f["environment"])
        for f in run.findings
        if not rules or f["rule"] in rules
    }


def only(found: list[T]) -> T:
    assert len(found) == 1, found
    return found[0]


# --------------------------------------------------------------------------- the default


def test_default_policy_fires_the_default_rules(audit: Any, policy_image: PolicyImage) -> None:
    """The shipped default reports the downgrades, unmet requirement, collision and duplicate."""
    run = audit("--policy", SHIPPED_DEFAULT)
    assert run.code == 1
    assert run.doc["verdict"] == "fail"
    assert keys(run) == {
        ("downgrade", "alpha", SITE),
        ("downgrade", "beta", SITE),
        ("downgrade", "nvidia-nccl-cu13", SITE),
        ("downgrade", "nvidia-cutlass-dsl", SITE),
        # a second, older dist-info makes the visible version go backwards as well
        ("downgrade", "dupe", SITE),
        ("unmet-requirement", "gamma", SITE),
        ("file-collision", "collide-a", SITE),
        ("duplicate-distribution", "dupe", SITE),
    }
    nccl = only(run.rule("downgrade", "nvidia-nccl-cu13"))
    assert nccl["step"] == policy_image.step("downgrade")
    assert nccl["versions"] == ["2.30.3", "2.29.7"]
    assert "oldtorch 1.0 requires nvidia-nccl-cu13==2.29.7" in nccl["message"]
    assert nccl["severity"] == "error"
    assert nccl["policy_file"] == SHIPPED_DEFAULT
    assert nccl["policy_line"] == line_of(SHIPPED_DEFAULT, "[rules.downgrade]")

    unmet = only(run.rule("unmet-requirement"))
    assert unmet["step"] == policy_image.step("no-deps")
    assert "needy 1.0 requires gamma>=2" in unmet["message"]
    # `later` lacked `delta` after the --no-deps step, but a later step installed it; `happy`
    # has what it needs: neither is reported
    assert "later" not in json.dumps(run.findings)
    assert "happy" not in json.dumps(run.findings)

    collision = only(run.rule("file-collision"))
    assert collision["severity"] == "warning"
    assert collision["step"] == policy_image.step("collide-b")
    assert f"{SITE}/shared_lib/lib.so" in collision["message"]
    assert "collide-b 1.0" in collision["message"]
    # same-a and same-b install one path with identical bytes: no collision
    assert not [f for f in run.findings if f["package"] in {"same-a", "same-b"}]

    duplicate = only(run.rule("duplicate-distribution"))
    assert duplicate["severity"] == "warning"
    assert duplicate["step"] == policy_image.step("duplicate")
    assert sorted(duplicate["versions"]) == ["0.9", "1.0"]
    # off by default, or needing --verify-records / policy entries
    assert not run.rule("unpinned-prerelease")
    assert not run.rule("record-mismatch")
    assert not run.rule("pin-violation")
    assert not run.rule("forbidden-version")
    assert not run.rule("coupling")
    # the virtual environment is in order
    assert not [f for f in run.findings if f["environment"] == VENV_SITE]


def test_no_policy_is_the_shipped_default(
    audit: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no --policy and nothing to discover, the built-in default gives the same findings."""
    monkeypatch.chdir(tmp_path)
    builtin = audit()
    shipped = audit("--policy", SHIPPED_DEFAULT)
    strip = ("policy_file", "policy_line")

    def bare(run: Audit) -> list[dict[str, Any]]:
        return [{k: v for k, v in f.items() if k not in strip} for f in run.findings]

    assert bare(builtin) == bare(shipped)
    assert builtin.code == shipped.code == 1


# --------------------------------------------------------------------------- GLM policy


def test_glm_policy_forbidden_pin_coupling_and_nightlies(audit: Any) -> None:
    """The GLM policy fires forbidden, pin, coupling and nightly rules in the system env only."""
    run = audit("--policy", SHIPPED_GLM)
    assert run.code == 1
    forbidden = only(run.rule("forbidden-version"))
    assert forbidden["package"] == "nvidia-nccl-cu13"
    assert forbidden["environment"] == SITE
    assert "NCCL internal error on the GB10 fabric" in forbidden["message"]
    assert "https://github.com/pytorch/pytorch/issues/187526" in forbidden["message"]
    assert forbidden["policy_file"] == SHIPPED_GLM
    assert forbidden["policy_line"] == line_of(SHIPPED_GLM, "[[forbidden]]")
    # flashinfer 0.6.17 is forbidden only for --target sm_121
    assert not run.rule("forbidden-version", "flashinfer-python")

    pin = only(run.rule("pin-violation"))
    assert (pin["package"], pin["environment"], pin["versions"]) == (
        "nvidia-nccl-cu13",
        SITE,
        ["2.29.7"],
    )
    assert "nvidia-nccl-cu13>=2.30" in pin["message"]

    coupling = only(run.rule("coupling"))
    assert (coupling["package"], coupling["environment"]) == ("nvidia-cutlass-dsl", SITE)
    assert "flashinfer-python 0.6.17" in coupling["message"]
    assert "nvidia-cutlass-dsl is 4.2.1" in coupling["message"]
    # in the venv both sides are in range (flashinfer 0.6.17 with cutlass-dsl 4.3.0), so
    # neither coupling entry fires there; in the system env cutlass-dsl 4.2.1 is outside
    # `>=4.3`, so the reverse entry does not apply either

    assert keys(run, "unpinned-prerelease") == {
        ("unpinned-prerelease", "nightly-pinned", SITE),
        ("unpinned-prerelease", "nightly-loose", SITE),
    }
    loose = only(run.rule("unpinned-prerelease", "nightly-loose"))
    assert "pre-release" in loose["message"]
    assert "nightly" in only(run.rule("unpinned-prerelease", "nightly-pinned"))["message"]
    # it extends default.toml: the default rules still fire, with the GLM file's downgrade table
    downgrade = run.rule("downgrade", "nvidia-nccl-cu13")
    assert only(downgrade)["policy_file"] == SHIPPED_GLM
    assert not [f for f in run.findings if f["environment"] == VENV_SITE]


@pytest.mark.parametrize(
    ("targets", "fires"),
    [((), False), (("sm_90",), False), (("sm_121",), True), (("sm_90", "sm_121"), True)],
)
def test_glm_forbidden_flashinfer_only_for_sm_121(
    audit: Any, targets: tuple[str, ...], fires: bool
) -> None:
    """`targets = ["sm_121"]` scopes the flashinfer 0.6.17 entry to `--target sm_121`."""
    args = [a for t in targets for a in ("--target", t)]
    run = audit("--policy", SHIPPED_GLM, *args)
    found = run.rule("forbidden-version", "flashinfer-python")
    if not fires:
        assert found == []
        return
    assert {f["environment"] for f in found} == {SITE, VENV_SITE}
    for f in found:
        assert "FA2 MLA kernel NaNs on 64-256-row batches" in f["message"]
        assert "https://github.com/flashinfer-ai/flashinfer/issues/3821" in f["message"]
        assert f["severity"] == "error"
    # the NCCL entry has no target: it fires either way
    assert run.rule("forbidden-version", "nvidia-nccl-cu13")


# --------------------------------------------------------------------------- pins, nightlies


def test_pins_and_exactly_pinned_nightly(audit: Any, tmp_path: Path) -> None:
    """Pins fire outside their range; a nightly pinned with `==` is allowed, a loose one is not."""
    policy = write_policy(
        tmp_path,
        "pins.toml",
        """\
[rules.unpinned-prerelease]
enabled = true

[[pin]]  # alpha-pin
package = "alpha"
version = ">=2"
reason = "alpha 1 drops the v2 API"
link = "https://example.invalid/alpha/2"

[[pin]]
package = "beta"
version = "1.0"

[[pin]]
package = "nightly-pinned"
version = "==1.1.dev20261120"
reason = "validated nightly"

[[pin]]  # loose-pin
package = "nightly-loose"
version = ">=0.3rc1"
""",
    )
    run = audit("--policy", policy)
    pin = only(run.rule("pin-violation"))
    assert (pin["package"], pin["environment"], pin["versions"]) == ("alpha", SITE, ["1.0"])
    assert "alpha 1.0 does not satisfy the pin alpha>=2" in pin["message"]
    assert "alpha 1 drops the v2 API" in pin["message"]
    assert "https://example.invalid/alpha/2" in pin["message"]
    assert pin["policy_file"] == policy
    assert pin["policy_line"] == line_of(policy, "# alpha-pin")
    # the venv's alpha 2.0 satisfies it; beta 1.0 satisfies `1.0`; both nightlies satisfy theirs
    assert keys(run, "unpinned-prerelease") == {("unpinned-prerelease", "nightly-loose", SITE)}
    assert "no pin names that exact version" in only(run.rule("unpinned-prerelease"))["message"]


# --------------------------------------------------------------------------- downgrade


def test_downgrade_allow_list_and_package_list(audit: Any, tmp_path: Path) -> None:
    """`allow` lets listed packages move backwards; `packages` limits the rule to those listed."""
    allow = write_policy(
        tmp_path,
        "allow.toml",
        """\
[rules.downgrade]
allow = ["beta", "Dupe", "alpha"]
""",
    )
    run = audit("--policy", allow)
    assert {f["package"] for f in run.rule("downgrade")} == {
        "nvidia-nccl-cu13",
        "nvidia-cutlass-dsl",
    }
    only_nccl = write_policy(
        tmp_path,
        "packages.toml",
        """\
[rules.downgrade]
packages = ["nvidia_nccl_cu13"]
""",
    )
    run = audit("--policy", only_nccl)
    assert {f["package"] for f in run.rule("downgrade")} == {"nvidia-nccl-cu13"}
    off = write_policy(tmp_path, "off.toml", "[rules.downgrade]\nenabled = false\n")
    assert audit("--policy", off).rule("downgrade") == []


# --------------------------------------------------------------------------- records


def test_record_mismatch_needs_verify_records(audit: Any) -> None:
    """A file patched after install is a record-mismatch, only with --verify-records."""
    plain = audit("--policy", SHIPPED_DEFAULT)
    assert plain.rule("record-mismatch") == []
    run = audit("--policy", SHIPPED_DEFAULT, "--verify-records")
    found = {f["package"]: f for f in run.rule("record-mismatch")}
    tampered = found.pop("tampered")
    assert tampered["environment"] == SITE
    assert f"{SITE}/tampered/__init__.py" in tampered["message"]
    assert tampered["severity"] == "error"
    # collide-b overwrote collide-a's lib.so: collide-a's RECORD no longer matches either
    collide = found.pop("collide-a")
    assert f"{SITE}/shared_lib/lib.so" in collide["message"]
    assert found == {}, "nothing else was modified after install"
    # the other rules are unaffected by the flag
    assert keys(run) - keys(run, "record-mismatch") == keys(plain)


# --------------------------------------------------------------------------- scope


def test_scope_environment_globs(audit: Any, tmp_path: Path) -> None:
    """Environment globs on entries and rule tables limit findings to matching environments."""
    venv_only = write_policy(
        tmp_path,
        "venv.toml",
        f"""\
[rules.file-collision]
environments = ["/opt/venv/*"]

[rules.downgrade]
environments = ["{SITE}"]

[[pin]]
package = "alpha"
version = "==1.0"
environments = ["/opt/*"]
""",
    )
    run = audit("--policy", venv_only)
    assert run.rule("file-collision") == []
    assert {f["environment"] for f in run.rule("downgrade")} == {SITE}
    # alpha is 1.0 in the system env (satisfied) and 2.0 in the venv (violated, in scope)
    assert keys(run, "pin-violation") == {("pin-violation", "alpha", VENV_SITE)}

    system_only = write_policy(
        tmp_path,
        "system.toml",
        """\
[rules.downgrade]
environments = ["/opt/venv/*"]

[[pin]]
package = "alpha"
version = "==1.0"
environments = ["/usr/*"]
""",
    )
    run = audit("--policy", system_only)
    assert run.rule("downgrade") == []
    assert run.rule("pin-violation") == []
    assert run.rule("file-collision")  # its rule table has no scope here


def test_scope_platforms_and_markers(audit: Any, tmp_path: Path) -> None:
    """Rules scoped to another platform or a false marker find nothing; in scope they fire."""
    platform = audit("--policy", SHIPPED_DEFAULT).doc["image"]["platform"]
    assert platform
    assert platform.startswith("linux/")
    other = "linux/s390x" if not platform.startswith("linux/s390x") else "linux/arm64"
    out_of_scope = write_policy(
        tmp_path,
        "other.toml",
        f"""\
[rules.downgrade]
platforms = ["{other}"]

[rules.unmet-requirement]
marker = "python_version >= '3.12'"

[[forbidden]]
package = "nvidia-nccl-cu13"
version = "2.29.7"
reason = "bad NCCL"
platforms = ["{other}"]
""",
    )
    run = audit("--policy", out_of_scope)
    assert run.rule("downgrade") == []
    assert run.rule("unmet-requirement") == []
    assert run.rule("forbidden-version") == []
    assert run.rule("file-collision")  # unscoped rules still run

    in_scope = write_policy(
        tmp_path,
        "this.toml",
        f"""\
[rules.downgrade]
platforms = ["{platform}", "{other}"]

[rules.unmet-requirement]
marker = "python_version < '3.12' and platform_system == 'Linux'"

[[forbidden]]
package = "nvidia-nccl-cu13"
version = ">=2.29,<2.30"
reason = "bad NCCL"
platforms = ["{platform.split("/")[0]}/{platform.split("/")[1]}"]
""",
    )
    run = audit("--policy", in_scope)
    assert len(run.rule("downgrade")) == 5
    assert only(run.rule("unmet-requirement"))["package"] == "gamma"
    assert only(run.rule("forbidden-version"))["message"].endswith("bad NCCL")


# --------------------------------------------------------------------------- severity


def test_severity_overrides_and_fail_on(audit: Any, tmp_path: Path) -> None:
    """Rule tables and entries override severities, and `--fail-on` decides what fails."""
    policy = write_policy(
        tmp_path,
        "severity.toml",
        """\
[rules.downgrade]
severity = "warning"

[rules.unmet-requirement]
severity = "info"

[rules.file-collision]
severity = "error"

[rules.duplicate-distribution]
enabled = false

[[pin]]
package = "alpha"
version = ">=2"
severity = "info"

[[pin]]
package = "nvidia-nccl-cu13"
version = ">=2.30"
""",
    )
    run = audit("--policy", policy)
    sev = {(f["rule"], f["package"]): f["severity"] for f in run.findings}
    assert sev[("downgrade", "alpha")] == "warning"
    assert sev[("unmet-requirement", "gamma")] == "info"
    assert sev[("file-collision", "collide-a")] == "error"
    assert sev[("pin-violation", "alpha")] == "info"  # the entry's own severity
    assert sev[("pin-violation", "nvidia-nccl-cu13")] == "error"  # the rule's
    assert not run.rule("duplicate-distribution")
    assert run.code == 1

    relaxed = write_policy(
        tmp_path,
        "relaxed.toml",
        """\
extend = ["severity.toml"]

[rules.file-collision]
severity = "warning"

[rules.pin-violation]
severity = "warning"
""",
    )
    run = audit("--policy", relaxed)
    assert {f["severity"] for f in run.findings} == {"warning", "info"}
    # a later file overrides severity only: the alpha entry keeps its own `info`
    assert only(run.rule("pin-violation", "alpha"))["severity"] == "info"
    assert run.code == 0
    assert run.doc["verdict"] == "pass"
    assert audit("--policy", relaxed, "--fail-on", "warning").code == 1
    assert audit("--policy", relaxed, "--fail-on", "info").code == 1
    assert audit("--policy", policy, "--fail-on", "never").code == 0


# --------------------------------------------------------------------------- waivers

WAIVED = """\
[rules.downgrade]
allow = ["dupe"]

[rules.unmet-requirement]
severity = "warning"

[[waiver]]  # alpha-waiver
package = "alpha"
rule = "downgrade"
reason = "alpha 1.0 is what the app is tested with"
expires = {alpha_expires}

[[waiver]]
package = "beta"
rule = "downgrade"
reason = "beta follows alpha"
expires = "2099-12-31"

[[waiver]]  # cause-waiver
package = "oldtorch"
rule = "downgrade"
reason = "oldtorch pins its NCCL and cutlass-dsl; upgrade next sprint"
expires = 2099-12-31
environments = ["/usr/local/*"]
"""


def test_valid_waiver_marks_findings_waived_and_passes(audit: Any, tmp_path: Path) -> None:
    """Unexpired waivers keep findings in the report, marked waived, and the gate passes."""
    policy = write_policy(tmp_path, "waived.toml", WAIVED.format(alpha_expires="2099-12-31"))
    run = audit("--policy", policy)
    downgrades = {f["package"]: f for f in run.rule("downgrade")}
    assert set(downgrades) == {"alpha", "beta", "nvidia-nccl-cu13", "nvidia-cutlass-dsl"}
    assert all(f["waived"] for f in downgrades.values())
    assert downgrades["alpha"]["waiver_reason"] == (
        "alpha 1.0 is what the app is tested with (until 2099-12-31)"
    )
    assert downgrades["nvidia-nccl-cu13"]["waiver_reason"].startswith("oldtorch pins its NCCL")
    assert not run.rule("expired-waiver")
    assert [f for f in run.findings if not f["waived"] and f["severity"] == "error"] == []
    assert run.code == 0
    assert run.doc["verdict"] == "pass"


def test_waiver_does_not_cover_other_rules_or_packages(audit: Any, tmp_path: Path) -> None:
    """A waiver covers only its rule and packages: an unwaived downgrade still fails."""
    policy = write_policy(
        tmp_path,
        "partial.toml",
        """\
[[waiver]]
package = "alpha"
rule = "unmet-requirement"
reason = "wrong rule"
expires = 2099-12-31
""",
    )
    run = audit("--policy", policy)
    assert not any(f["waived"] for f in run.findings)
    assert run.code == 1


def test_expired_waiver_is_an_error_and_waives_nothing(audit: Any, tmp_path: Path) -> None:
    """An expired waiver is an error at its own line and its finding is open again."""
    policy = write_policy(tmp_path, "expired.toml", WAIVED.format(alpha_expires="2020-01-31"))
    run = audit("--policy", policy)
    expired = only(run.rule("expired-waiver"))
    assert expired["severity"] == "error"
    assert expired["package"] == "alpha"
    assert "expired on 2020-01-31" in expired["message"]
    assert expired["policy_file"] == policy
    assert expired["policy_line"] == line_of(policy, "# alpha-waiver")
    alpha = only(run.rule("downgrade", "alpha"))
    assert alpha["waived"] is False
    assert only(run.rule("downgrade", "beta"))["waived"] is True
    assert run.code == 1
    assert run.doc["verdict"] == "fail"


# --------------------------------------------------------------------------- reports

REPORT_POLICY = """\
extend = ["{glm}"]

[rules.duplicate-distribution]
severity = "info"

[[waiver]]  # beta-waiver
package = "beta"
rule = "downgrade"
reason = "beta 1.0 is what the app is tested with"
expires = 2099-12-31

[[waiver]]  # old-waiver
package = "dupe"
rule = "duplicate-distribution"
reason = "cleanup scheduled"
expires = 2021-06-30
"""


@pytest.fixture
def report_policy(tmp_path: Path) -> str:
    return write_policy(tmp_path, "report.toml", REPORT_POLICY.format(glm=SHIPPED_GLM))


def sarif_validator() -> Any:
    import jsonschema

    schema = json.loads(SARIF_SCHEMA.read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema, format_checker=jsonschema.FormatChecker())


def test_vendored_sarif_schema_is_the_official_one() -> None:
    """The vendored schema is the complete OASIS 2.1.0 schema and rejects a broken log."""
    schema = json.loads(SARIF_SCHEMA.read_text())
    assert schema["id"].endswith("/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json")
    assert len(SARIF_SCHEMA.read_text()) == 112768
    assert {"result", "run", "suppression", "reportingDescriptor", "region"} <= set(
        schema["definitions"]
    )
    validator = sarif_validator()
    bad = {
        "version": "2.1.0",
        "runs": [
            {
                "tool": {"driver": {"name": "x"}},
                "results": [{"message": {"text": "m"}, "level": "fatal"}],
            }
        ],
    }
    assert list(validator.iter_errors(bad))
    bad_region = {
        "version": "2.1.0",
        "runs": [
            {
                "tool": {"driver": {"name": "x"}},
                "results": [
                    {
                        "message": {"text": "m"},
                        "locations": [
                            {
                                "physicalLocation": {
                                    "artifactLocation": {"uri": "Dockerfile"},
                                    "region": {"startLine": 0},
                                }
                            }
                        ],
                    }
                ],
            }
        ],
    }
    assert list(validator.iter_errors(bad_region))


def test_sarif_is_valid_and_points_at_dockerfile_lines(
    audit: Any, policy_image: PolicyImage, report_policy: str
) -> None:
    """SARIF validates against the official schema and points at each step's RUN line."""
    run = audit(
        "--policy",
        report_policy,
        "--target",
        "sm_121",
        "--verify-records",
        "--dockerfile",
        str(policy_image.dockerfile),
        fmt="sarif",
    )
    assert run.code == 1
    log = json.loads(run.text)
    errors = sorted(sarif_validator().iter_errors(log), key=str)
    assert not errors, "\n".join(str(e) for e in errors[:5])

    text = policy_image.dockerfile.read_text()
    line_of_step = {policy_image.step(s.key): dockerfile_line(text, s.key) for s in STEPS}
    lines = text.splitlines()
    results = log["runs"][0]["results"]
    rules = {r["id"] for r in log["runs"][0]["tool"]["driver"]["rules"]}
    assert {r["ruleId"] for r in results} == {
        "downgrade",
        "unmet-requirement",
        "file-collision",
        "duplicate-distribution",
        "pin-violation",
        "forbidden-version",
        "coupling",
        "unpinned-prerelease",
        "record-mismatch",
        "expired-waiver",
    }
    assert {r["ruleId"] for r in results} <= rules
    seen_steps = set()
    for r in results:
        step = r["properties"].get("step")
        location = r["locations"][0]["physicalLocation"]
        if step is None:  # the expired waiver: at its own policy line
            assert r["ruleId"] == "expired-waiver"
            assert location["artifactLocation"]["uri"] == Path(report_policy).as_uri()
            assert location["region"]["startLine"] == line_of(report_policy, "# old-waiver")
            continue
        assert location["artifactLocation"]["uri"] == policy_image.dockerfile.as_uri(), r
        line = location["region"]["startLine"]
        assert line == line_of_step[step], (r["ruleId"], r["message"]["text"], step, line)
        assert lines[line - 1].startswith("RUN "), lines[line - 1]
        seen_steps.add(step)
    # the multi-line RUNs (system install, venv) are pointed at their first line
    assert policy_image.step("install") in seen_steps  # flashinfer 0.6.17 for sm_121
    assert policy_image.step("venv") in seen_steps  # the same, in the venv
    by_key = {(r["ruleId"], r["properties"].get("package")): r for r in results}
    nccl = by_key[("downgrade", "nvidia-nccl-cu13")]
    assert nccl["locations"][0]["physicalLocation"]["region"]["startLine"] == dockerfile_line(
        text, "downgrade"
    )
    assert nccl["level"] == "error"
    collision = by_key[("file-collision", "collide-a")]
    assert collision["level"] == "warning"
    assert collision["properties"]["step"] == policy_image.step("collide-b")
    assert by_key[("duplicate-distribution", "dupe")]["level"] == "note"
    # the waived downgrade is an accepted external suppression; the expired one waives nothing
    beta = by_key[("downgrade", "beta")]
    assert beta["suppressions"] == [
        {
            "kind": "external",
            "status": "accepted",
            "justification": "beta 1.0 is what the app is tested with (until 2099-12-31)",
        }
    ]
    assert "suppressions" not in by_key[("duplicate-distribution", "dupe")]
    assert "suppressions" not in nccl
    forbidden = [r for r in results if r["ruleId"] == "forbidden-version"]
    assert any("FA2 MLA kernel NaNs" in r["message"]["text"] for r in forbidden)


def test_sarif_without_dockerfile_points_at_policy_lines(audit: Any, report_policy: str) -> None:
    """Without --dockerfile, SARIF results point at the policy file line that produced them."""
    run = audit("--policy", report_policy, fmt="sarif")
    log = json.loads(run.text)
    assert not list(sarif_validator().iter_errors(log))
    for r in log["runs"][0]["results"]:
        physical = r["locations"][0]["physicalLocation"]
        props = r["properties"]
        assert physical["artifactLocation"]["uri"] == Path(props["policyFile"]).as_uri()
        assert physical["region"]["startLine"] == props["policyLine"]
    forbidden = next(r for r in log["runs"][0]["results"] if r["ruleId"] == "forbidden-version")
    assert forbidden["locations"][0]["physicalLocation"]["region"]["startLine"] == line_of(
        SHIPPED_GLM, "[[forbidden]]"
    )


def test_junit_parses_back_one_case_per_rule_and_package(audit: Any, report_policy: str) -> None:
    """JUnit parses back: one case per (rule, package), failures open, waived ones skipped."""
    findings = audit("--policy", report_policy).findings
    run = audit("--policy", report_policy, fmt="junit")
    assert run.code == 1
    root = ET.fromstring(run.text)
    assert root.tag == "testsuites"
    suite = only(root.findall("testsuite"))
    cases = suite.findall("testcase")
    ids = [(c.get("classname"), c.get("name")) for c in cases]
    assert len(ids) == len(set(ids))
    expected = {(f"pinguard.{f['rule']}", f["package"]) for f in findings}
    assert set(ids) == expected
    # ... and, written by hand from STEPS and REPORT_POLICY (no --target, no --verify-records):
    assert set(ids) == {
        ("pinguard.downgrade", "alpha"),  # 2.0 -> 1.0 at "downgrade"
        ("pinguard.downgrade", "beta"),  # waived: still a (skipped) case
        ("pinguard.downgrade", "nvidia-nccl-cu13"),  # oldtorch pins 2.29.7
        ("pinguard.downgrade", "nvidia-cutlass-dsl"),  # oldtorch pins 4.2.1
        ("pinguard.downgrade", "dupe"),  # the copied dupe-0.9.dist-info sorts first: 1.0 -> 0.9
        ("pinguard.unmet-requirement", "gamma"),  # needy needs gamma>=2 (later's delta came)
        ("pinguard.file-collision", "collide-a"),  # same-a/same-b write identical bytes
        ("pinguard.duplicate-distribution", "dupe"),
        ("pinguard.expired-waiver", "dupe"),
        ("pinguard.pin-violation", "nvidia-nccl-cu13"),  # system site only; the venv has 2.30.3
        ("pinguard.forbidden-version", "nvidia-nccl-cu13"),  # flashinfer's needs --target
        ("pinguard.coupling", "nvidia-cutlass-dsl"),  # flashinfer 0.6.17 needs cutlass>=4.3
        ("pinguard.unpinned-prerelease", "nightly-pinned"),  # no [[pin]] names it
        ("pinguard.unpinned-prerelease", "nightly-loose"),
    }
    case = {(c.get("classname"), c.get("name")): c for c in cases}

    nccl = case[("pinguard.downgrade", "nvidia-nccl-cu13")]
    failure = nccl.find("failure")
    assert failure is not None
    assert failure.get("type") == "error"
    assert "moved nvidia-nccl-cu13 back from 2.30.3 to 2.29.7" in (failure.get("message") or "")
    beta = case[("pinguard.downgrade", "beta")]
    assert beta.find("failure") is None
    skipped = beta.find("skipped")
    assert skipped is not None
    assert "beta 1.0 is what the app is tested with" in (skipped.get("message") or "")
    forbidden = case[("pinguard.forbidden-version", "nvidia-nccl-cu13")].find("failure")
    assert forbidden is not None
    assert "NCCL internal error on the GB10 fabric" in (forbidden.text or "")
    expired = case[("pinguard.expired-waiver", "dupe")].find("failure")
    assert expired is not None

    open_pairs = {(f"pinguard.{f['rule']}", f["package"]) for f in findings if not f["waived"]}
    failed = {k for k, c in case.items() if c.find("failure") is not None}
    skipped_cases = {k for k, c in case.items() if c.find("skipped") is not None}
    assert failed <= open_pairs
    assert skipped_cases == expected - open_pairs
    assert int(suite.get("tests") or -1) == len(cases)
    assert int(suite.get("failures") or -1) == len(failed)
    assert int(suite.get("skipped") or -1) == len(skipped_cases)
    assert int(suite.get("errors") or -1) == 0


def test_markdown_renders_verdict_table_and_folded_waivers(audit: Any, report_policy: str) -> None:
    """Markdown: the failing verdict, a row per open finding, waived ones folded."""
    run = audit("--policy", report_policy, fmt="markdown")
    assert run.code == 1
    text = run.text
    first = text.splitlines()[0]
    assert first.startswith("### :x: pinguard: **fail** for `oci:")
    assert "| Severity | Rule | Package | Versions | Step | Environment | Message |" in text
    assert "| **error** | `forbidden-version` | `nvidia-nccl-cu13` | 2.29.7 |" in text
    assert "`downgrade` | `alpha` | 2.0 -&gt; 1.0 |" in text  # ">" escaped, renders as ->
    assert "<details><summary>1 waived finding(s)</summary>" in text
    folded = text.split("<details>", 1)[1]
    assert "`beta`" in folded
    assert "beta 1.0 is what the app is tested with (until 2099-12-31)" in folded
    assert "`beta`" not in text.split("<details>", 1)[0]
    assert "</details>" in text


def test_reports_agree_with_fail_on(audit: Any, tmp_path: Path) -> None:
    """Exit code, Markdown verdict and JUnit failures all follow `--fail-on`."""
    policy = write_policy(
        tmp_path,
        "warnings.toml",
        """\
[rules.downgrade]
severity = "warning"

[rules.unmet-requirement]
severity = "warning"
""",
    )
    lenient = audit("--policy", policy, fmt="markdown")
    assert lenient.code == 0
    assert "**pass**" in lenient.text.splitlines()[0]
    strict = audit("--policy", policy, "--fail-on", "warning", fmt="markdown")
    assert strict.code == 1
    assert "**fail**" in strict.text.splitlines()[0]
    assert "(failing at warning or above)" in strict.text

    def failures(run: Audit) -> int:
        return len(ET.fromstring(run.text).findall("./testsuite/testcase/failure"))

    assert failures(audit("--policy", policy, "--fail-on", "warning", fmt="junit")) > 0
    assert failures(audit("--policy", policy, "--fail-on", "never", fmt="junit")) == 0
    assert failures(audit("--policy", policy, fmt="junit")) == 0
