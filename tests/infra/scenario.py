"""The canonical GLM-on-GB10 story as real images: a nightly install that silently downgrades NCCL.

Tiny wheels with the real names are built into two indexes: the main one (NCCL, cutlass-dsl,
two torches, stable flashinfer, a vllm-ish package, filler) and a separate nightly one
(flashinfer nightlies and a rebuilt msgspec). :func:`build_scenario` builds two images from
the cached Debian base with real ``RUN pip install`` steps, ``buildah bud --layers``:

- ``glm-serving:bad`` runs every step in :data:`STEPS`; step ``C`` installs
  ``flashinfer-python==0.6.18.dev20261120`` from the nightly index, which pulls torch 2.12.1,
  which pins ``nvidia-nccl-cu13==2.29.7`` and ``nvidia-cutlass-dsl==4.2.1``: pip downgrades both,
  breaks ``vllm``'s ``torch==2.11.0`` and exits 0, exactly like the real incident;
- ``glm-serving:good`` is the same Dockerfile without step ``C``.

Each step carries the changes it is expected to make (:class:`ExpectedChange`) and its
1-based position in the image history, so tests assert against data, not prose. Images are
labelled with a fingerprint of everything that went into them and reused across runs while the
fingerprint matches (set ``PINGUARD_TEST_REBUILD=1`` to force a rebuild).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from tests.infra.build import (
    BASE_SITE_PACKAGES,
    BuildError,
    build_image,
    cache_dir,
    file_lock,
    image_config,
    image_exists,
    image_id,
    image_labels,
)
from tests.infra.wheels import WheelSpec, build_wheels, wheel_bytes

SCENARIO_VERSION = "3"
REPOSITORY = "localhost/pinguard-test/glm-serving"
BAD_TAG = f"{REPOSITORY}:bad"
GOOD_TAG = f"{REPOSITORY}:good"
FINGERPRINT_LABEL = "io.pinguard.test.scenario"
SITE = BASE_SITE_PACKAGES  # where Debian's pip installs as root
VENV_SITE = "/opt/venv/lib/python3.11/site-packages"
# the fixtures in tests/conftest.py that export the bad image, one per transport pinguard reads
BAD_IMAGE_EXPORTS = (
    "bad_image_oci",
    "bad_image_oci_zstd",
    "bad_image_oci_uncompressed",
    "bad_image_oci_archive",
    "bad_image_docker_archive",
    "bad_image_registry",
)

_LINUX = '; platform_system == "Linux"'


def _lib(version: str, what: str) -> bytes:
    return f"{what} {version}\n".encode()


MAIN_WHEELS: tuple[WheelSpec, ...] = (
    WheelSpec(
        "nvidia-nccl-cu13",
        "2.30.3",
        files={
            "nvidia/nccl/__init__.py": b"",
            "nvidia/nccl/lib/libnccl.so.2": _lib("2.30.3", "NCCL"),
        },
        requires_python=">=3.8",
    ),
    WheelSpec(
        "nvidia-nccl-cu13",
        "2.29.7",
        files={
            "nvidia/nccl/__init__.py": b"",
            "nvidia/nccl/lib/libnccl.so.2": _lib("2.29.7", "NCCL"),
        },
        requires_python=">=3.8",
    ),
    WheelSpec(
        "nvidia-cutlass-dsl",
        "4.3.0",
        files={
            "nvidia_cutlass_dsl/__init__.py": b'__version__ = "4.3.0"\n',
            "nvidia_cutlass_dsl/python_packages/cutlass/__init__.py": _lib("4.3.0", "#"),
        },
    ),
    WheelSpec(
        "nvidia-cutlass-dsl",
        "4.2.1",
        files={
            "nvidia_cutlass_dsl/__init__.py": b'__version__ = "4.2.1"\n',
            "nvidia_cutlass_dsl/python_packages/cutlass/__init__.py": _lib("4.2.1", "#"),
        },
    ),
    WheelSpec(
        "torch",
        "2.11.0+cu130",
        requires_dist=(
            "filelock",
            "typing-extensions>=4.10.0",
            f"nvidia-nccl-cu13==2.30.3{_LINUX}",
            f"nvidia-cutlass-dsl>=4.2{_LINUX}",
            'dataclasses; python_version < "3.7"',  # marker false: never looked up
        ),
        requires_python=">=3.10",
    ),
    WheelSpec(
        "torch",
        "2.12.1",
        requires_dist=(
            "filelock",
            "typing-extensions>=4.10.0",
            f"nvidia-nccl-cu13==2.29.7{_LINUX}",
            f"nvidia-cutlass-dsl==4.2.1{_LINUX}",
            'dataclasses; python_version < "3.7"',
        ),
        requires_python=">=3.10",
    ),
    WheelSpec("flashinfer-python", "0.6.16", requires_dist=("torch>=2.11",)),
    WheelSpec(
        "vllm",
        "0.11.0",
        requires_dist=("torch==2.11.0", "flashinfer-python>=0.6.16", "msgspec"),
        requires_python=">=3.10",
    ),
    WheelSpec("typing-extensions", "4.12.2", files={"typing_extensions.py": b"# te 4.12.2\n"}),
    WheelSpec("filelock", "3.16.1"),
    WheelSpec("ninja", "1.11.1.4"),
    WheelSpec("msgspec", "0.19.0"),
)

NIGHTLY_WHEELS: tuple[WheelSpec, ...] = (
    WheelSpec("flashinfer-python", "0.6.17.dev20261101", requires_dist=("torch>=2.11", "ninja")),
    WheelSpec("flashinfer-python", "0.6.18.dev20261120", requires_dist=("torch>=2.12",)),
    # Same name and version as on the main index, different files: a reinstall.
    WheelSpec(
        "msgspec",
        "0.19.0",
        files={"msgspec/__init__.py": b'__version__ = "0.19.0"  # rebuilt\n', "msgspec/_x.py": b""},
    ),
)


@dataclass(frozen=True)
class ExpectedChange:
    """One change a step is expected to make in one environment."""

    environment: str
    name: str
    kind: str  # added | removed | upgraded | downgraded | reinstalled
    before: str | None
    after: str | None
    cause: str | None = None  # "package version: requirement" of the nearest cause


@dataclass(frozen=True)
class ScenarioStep:
    """One Dockerfile instruction after FROM, with what it should change."""

    key: str
    instruction: str
    changes: tuple[ExpectedChange, ...] = ()
    # "package version: requirement" that this step leaves unmet for the first time (it
    # stays unmet in every later step: nothing in the scenario repairs it)
    unmet_after: tuple[str, ...] = ()

    @property
    def empty_layer(self) -> bool:
        return not self.instruction.startswith(("RUN ", "COPY ", "ADD "))


def _c(
    name: str,
    kind: str,
    before: str | None,
    after: str | None,
    cause: str | None = None,
    *,
    env: str = SITE,
) -> ExpectedChange:
    return ExpectedChange(env, name, kind, before, after, cause)


PIP = "pip install --index-url $INDEX_URL"
STEPS: tuple[ScenarioStep, ...] = (
    ScenarioStep("arg-index", "ARG INDEX_URL"),
    ScenarioStep("arg-nightly", "ARG NIGHTLY_URL"),
    ScenarioStep("env", "ENV PIP_NO_INPUT=1"),
    ScenarioStep(
        "A",
        f"RUN {PIP} nvidia-nccl-cu13==2.30.3 nvidia-cutlass-dsl==4.3.0 torch==2.11.0+cu130",
        (
            _c("filelock", "added", None, "3.16.1", "torch 2.11.0+cu130: filelock"),
            _c("nvidia-cutlass-dsl", "added", None, "4.3.0"),
            _c("nvidia-nccl-cu13", "added", None, "2.30.3"),
            _c("torch", "added", None, "2.11.0+cu130"),
            _c(
                "typing-extensions",
                "added",
                None,
                "4.12.2",
                "torch 2.11.0+cu130: typing-extensions>=4.10.0",
            ),
        ),
    ),
    ScenarioStep(
        "B",
        f"RUN {PIP} vllm==0.11.0 ninja==1.11.1.4",
        (
            _c(
                "flashinfer-python",
                "added",
                None,
                "0.6.16",
                "vllm 0.11.0: flashinfer-python>=0.6.16",
            ),
            _c("msgspec", "added", None, "0.19.0", "vllm 0.11.0: msgspec"),
            _c("ninja", "added", None, "1.11.1.4"),
            _c("vllm", "added", None, "0.11.0"),
        ),
    ),
    ScenarioStep("label", "LABEL org.opencontainers.image.title=glm-serving"),
    ScenarioStep(
        "C",
        "RUN pip install --pre --index-url $NIGHTLY_URL --extra-index-url $INDEX_URL"
        " flashinfer-python==0.6.18.dev20261120",
        (
            _c("flashinfer-python", "upgraded", "0.6.16", "0.6.18.dev20261120"),
            _c(
                "nvidia-cutlass-dsl",
                "downgraded",
                "4.3.0",
                "4.2.1",
                f"torch 2.12.1: nvidia-cutlass-dsl==4.2.1{_LINUX}",
            ),
            _c(
                "nvidia-nccl-cu13",
                "downgraded",
                "2.30.3",
                "2.29.7",
                f"torch 2.12.1: nvidia-nccl-cu13==2.29.7{_LINUX}",
            ),
            _c(
                "torch",
                "upgraded",
                "2.11.0+cu130",
                "2.12.1",
                "flashinfer-python 0.6.18.dev20261120: torch>=2.12",
            ),
        ),
        unmet_after=("vllm 0.11.0: torch==2.11.0",),
    ),
    ScenarioStep("D", "RUN pip uninstall -y ninja", (_c("ninja", "removed", "1.11.1.4", None),)),
    ScenarioStep(
        "E",
        "RUN pip install --force-reinstall --no-deps --index-url $NIGHTLY_URL msgspec==0.19.0",
        (_c("msgspec", "reinstalled", "0.19.0", "0.19.0"),),
    ),
    ScenarioStep(
        "F",
        f"RUN python3 -m venv /opt/venv && /opt/venv/bin/{PIP} filelock==3.16.1",
        (_c("filelock", "added", None, "3.16.1", env=VENV_SITE),),
    ),
    ScenarioStep("env-final", "ENV GLM_MODEL=glm-4.6"),
)
GOOD_STEPS: tuple[ScenarioStep, ...] = tuple(s for s in STEPS if s.key != "C")


def dockerfile(base: str, steps: tuple[ScenarioStep, ...]) -> str:
    return "\n".join([f"FROM {base}", *(s.instruction for s in steps)]) + "\n"


@dataclass(frozen=True)
class ScenarioImage:
    """One built scenario image; ``history_base`` is how many history entries FROM brought."""

    tag: str
    image_id: str
    steps: tuple[ScenarioStep, ...]
    history_base: int
    reused: bool

    def history_index(self, key: str) -> int:
        """The 1-based history index of the step named ``key`` (as pinguard numbers steps)."""
        for i, step in enumerate(self.steps, start=1):
            if step.key == key:
                return self.history_base + i
        raise KeyError(key)

    def step(self, key: str) -> ScenarioStep:
        return next(s for s in self.steps if s.key == key)


@dataclass(frozen=True)
class Scenario:
    """The built story: ``bad`` (with step C) and ``good`` (without); ``log`` holds both
    build logs (kept in the cache when the images are reused)."""

    bad: ScenarioImage
    good: ScenarioImage
    main_wheels: Path
    nightly_wheels: Path
    log: str = field(default="", repr=False)

    def known_good(self) -> dict[str, str]:
        """name -> version in the system site-packages after steps A and B (from scenario data)."""
        state: dict[str, str] = {}
        for key in ("A", "B"):
            for c in self.bad.step(key).changes:
                if c.environment == SITE and c.after is not None:
                    state[c.name] = c.after
        return state


def build_scenario_wheels(main_dir: Path, nightly_dir: Path) -> None:
    build_wheels(MAIN_WHEELS, main_dir)
    build_wheels(NIGHTLY_WHEELS, nightly_dir)


def fingerprint(base_image_id: str) -> str:
    h = hashlib.sha256()
    h.update(f"scenario v{SCENARIO_VERSION}\nbase {base_image_id}\n".encode())
    for spec in (*MAIN_WHEELS, *NIGHTLY_WHEELS):
        h.update(hashlib.sha256(wheel_bytes(spec)).digest())
    h.update(dockerfile("BASE", STEPS).encode())
    h.update(dockerfile("BASE", GOOD_STEPS).encode())
    return h.hexdigest()[:32]


def _log_path(fp: str, tag: str) -> Path:
    """Where the build log of a fingerprinted image is kept, so reuse keeps the log too."""
    return cache_dir() / f"scenario-{fp[:16]}-{tag.rsplit(':', 1)[1]}.log"


def build_scenario(
    workdir: Path,
    *,
    base_image: str,
    index_url: str,
    nightly_url: str,
    main_wheels: Path,
    nightly_wheels: Path,
) -> Scenario:
    """Build (or reuse) the bad and good images; raise :class:`BuildError` if a build fails."""
    base_id = image_id(base_image)
    base_history = len(image_config(base_image).get("history", []))
    fp = fingerprint(base_id)
    force = os.environ.get("PINGUARD_TEST_REBUILD", "") not in {"", "0"}
    images: dict[str, ScenarioImage] = {}
    logs: list[str] = []
    with file_lock(cache_dir() / "scenario.lock"):
        for tag, story in ((BAD_TAG, STEPS), (GOOD_TAG, GOOD_STEPS)):
            steps = (*story, ScenarioStep("fingerprint", f"LABEL {FINGERPRINT_LABEL}={fp}"))
            reuse = (
                not force and image_exists(tag) and image_labels(tag).get(FINGERPRINT_LABEL) == fp
            )
            if not reuse:
                result = build_image(
                    workdir / "context",
                    dockerfile(base_image, steps),
                    tag,
                    {"INDEX_URL": index_url, "NIGHTLY_URL": nightly_url},
                )
                result.check()
                for stale in cache_dir().glob(f"scenario-*-{tag.rsplit(':', 1)[1]}.log"):
                    stale.unlink()
                _log_path(fp, tag).write_text(result.log)
            log = _log_path(fp, tag)
            logs.append(log.read_text() if log.exists() else "")
            images[tag] = ScenarioImage(
                tag=tag,
                image_id=image_id(tag),
                steps=steps,
                history_base=base_history,
                reused=reuse,
            )
    for image in images.values():
        history = image_config(image.tag).get("history", [])
        if len(history) != image.history_base + len(image.steps):
            raise BuildError(
                f"{image.tag} has {len(history)} history entries, expected "
                f"{image.history_base + len(image.steps)}"
            )
    return Scenario(
        bad=images[BAD_TAG],
        good=images[GOOD_TAG],
        main_wheels=main_wheels,
        nightly_wheels=nightly_wheels,
        log="\n".join(logs),
    )
