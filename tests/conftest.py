"""Shared fixtures: wheels, loopback package indexes, real images, a registry, a Docker API socket.

Everything here starts real components on 127.0.0.1 (see ``tests/infra``). Cheap fixtures are
function-scoped (``make_wheel``, ``serve_wheels``); expensive ones are session-scoped and
built once: ``base_image`` (Debian bookworm + Python, cached across runs), ``scenario`` (the
GLM/GB10 silent-downgrade images, reused across runs while their inputs are unchanged), the
``bad_image_*`` exports of the bad image to every reference kind pinguard reads, and
``podman_api`` (``podman system service``). Under ``CI=true`` a missing tool or missing root
fails the test instead of skipping it.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.infra.build import cache_dir, ensure_base_image, file_lock
from tests.infra.index import IndexServer, serve_index
from tests.infra.podman import PodmanService, podman_service
from tests.infra.registry import RegistryServer, running_registry
from tests.infra.scenario import Scenario, ScenarioImage, build_scenario, build_scenario_wheels
from tests.infra.tools import require_root, require_tool
from tests.infra.wheels import WheelSpec, build_wheel

BUILD_TOOLS = ("buildah", "skopeo")
SCENARIO_REPO = "pinguard/glm-serving"


def require_build_tools() -> None:
    """Skip (or fail under CI=true) unless root and buildah/skopeo are available."""
    for tool in BUILD_TOOLS:
        require_tool(tool)
    require_root()


# --------------------------------------------------------------------------- wheels, indexes


@pytest.fixture
def make_wheel(tmp_path: Path) -> Callable[..., Path]:
    """``make_wheel(name, version, requires_dist=(), files=None, ..., out_dir=None) -> Path``:
    a real wheel built in ``tmp_path/wheels`` (or ``out_dir``)."""

    def make(
        name: str, version: str, *args: object, out_dir: Path | None = None, **kw: object
    ) -> Path:
        spec = WheelSpec(name, version, *args, **kw)  # type: ignore[arg-type]
        return build_wheel(spec, out_dir or tmp_path / "wheels")

    return make


@pytest.fixture
def serve_wheels() -> Iterator[Callable[[Path], IndexServer]]:
    """``serve_wheels(directory) -> IndexServer``: a PEP 503/658/691 index of ``directory``
    on 127.0.0.1 until the test ends; ``.url`` is the ``--index-url``."""
    with ExitStack() as stack:
        yield lambda directory: stack.enter_context(serve_index(directory))


@pytest.fixture(scope="session")
def scenario_wheels(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """``(main_dir, nightly_dir)``: the scenario's wheels (see tests/infra/scenario.py)."""
    root = tmp_path_factory.mktemp("scenario-wheels")
    main, nightly = root / "main", root / "nightly"
    build_scenario_wheels(main, nightly)
    return main, nightly


@pytest.fixture(scope="session")
def scenario_index(scenario_wheels: tuple[Path, Path]) -> Iterator[IndexServer]:
    """The main scenario index (torch, nccl, cutlass-dsl, stable flashinfer, vllm, filler)."""
    with serve_index(scenario_wheels[0]) as index:
        yield index


@pytest.fixture(scope="session")
def nightly_index(scenario_wheels: tuple[Path, Path]) -> Iterator[IndexServer]:
    """The separate nightly index (flashinfer-python 0.6.17/0.6.18 dev builds, msgspec rebuild)."""
    with serve_index(scenario_wheels[1]) as index:
        yield index


# --------------------------------------------------------------------------- images


@pytest.fixture(scope="session")
def base_image() -> str:
    """Tag of the Debian bookworm + python3/pip/venv base image in containers-storage."""
    require_build_tools()
    require_tool("podman")
    if not _image_cached():
        require_tool("debootstrap")
    return ensure_base_image()


def _image_cached() -> bool:
    from tests.infra.build import BASE_IMAGE, base_rootfs_tarball, image_exists

    return image_exists(BASE_IMAGE) or base_rootfs_tarball().exists()


@pytest.fixture(scope="session")
def scenario(
    base_image: str,
    scenario_wheels: tuple[Path, Path],
    scenario_index: IndexServer,
    nightly_index: IndexServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Scenario:
    """The built GLM story: ``scenario.bad.tag`` / ``scenario.good.tag`` in containers-storage,
    with the expected changes of each step (``scenario.bad.step("C").changes``)."""
    return build_scenario(
        tmp_path_factory.mktemp("scenario-build"),
        base_image=base_image,
        index_url=scenario_index.url,
        nightly_url=nightly_index.url,
        main_wheels=scenario_wheels[0],
        nightly_wheels=scenario_wheels[1],
    )


def skopeo_copy(source: str, dest: str, *args: str) -> None:
    """``skopeo copy`` with the insecure (accept-anything) policy; raises with stderr."""
    skopeo = require_tool("skopeo")
    proc = subprocess.run(
        [skopeo, "--insecure-policy", "copy", "--quiet", *args, source, dest],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"skopeo copy {source} {dest} failed:\n{proc.stderr}")


@pytest.fixture(scope="session")
def exports_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("exports")


def oci_export(image: ScenarioImage, variant: str, dest: Path, *args: str) -> str:
    """``oci:DEST:bad`` holding ``image`` exported with skopeo ``args``.

    Compressing the 200 MB base layer is the slow part, so the layout is kept in the test
    cache keyed by image ID (content-addressed, so it cannot go stale) and copied into
    ``dest``: tests may modify their copy freely."""
    root = cache_dir() / "exports"
    cached = root / image.image_id[:24] / variant
    with file_lock(root / "exports.lock"):
        if not (cached / ".complete").exists():
            for stale in root.iterdir():
                if stale.is_dir() and stale.name != image.image_id[:24]:
                    shutil.rmtree(stale, ignore_errors=True)
            partial = cached.with_name(cached.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            partial.parent.mkdir(parents=True, exist_ok=True)
            skopeo_copy(f"containers-storage:{image.tag}", f"oci:{partial}:bad", *args)
            shutil.rmtree(cached, ignore_errors=True)
            partial.rename(cached)
            (cached / ".complete").touch()
    shutil.copytree(cached, dest, ignore=shutil.ignore_patterns(".complete"))
    return f"oci:{dest}:bad"


@pytest.fixture(scope="session")
def bad_image_oci(scenario: Scenario, exports_dir: Path) -> str:
    """``oci:DIR:bad``: the bad image as an OCI layout with gzip layers."""
    return oci_export(scenario.bad, "oci-gzip", exports_dir / "oci-gzip")


@pytest.fixture(scope="session")
def bad_image_oci_zstd(scenario: Scenario, exports_dir: Path) -> str:
    """``oci:DIR:bad``: the bad image as an OCI layout with zstd layers."""
    return oci_export(
        scenario.bad, "oci-zstd", exports_dir / "oci-zstd", "--dest-compress-format", "zstd"
    )


@pytest.fixture(scope="session")
def bad_image_oci_uncompressed(scenario: Scenario, exports_dir: Path) -> str:
    """``oci:DIR:bad``: the bad image as an OCI layout with uncompressed tar layers."""
    return oci_export(
        scenario.bad,
        "oci-plain",
        exports_dir / "oci-plain",
        "--dest-oci-accept-uncompressed-layers",
    )


@pytest.fixture(scope="session")
def bad_image_oci_archive(bad_image_oci: str, exports_dir: Path) -> str:
    """``oci-archive:PATH:bad``: the bad image as an OCI archive (gzip layers)."""
    dest = f"oci-archive:{exports_dir / 'bad-oci.tar'}:bad"
    skopeo_copy(bad_image_oci, dest)
    return dest


@pytest.fixture(scope="session")
def bad_image_docker_archive(scenario: Scenario, exports_dir: Path) -> str:
    """``docker-archive:PATH``: ``docker save`` format (uncompressed layers, one RepoTag)."""
    path = exports_dir / "bad-docker.tar"
    skopeo_copy(
        f"containers-storage:{scenario.bad.tag}",
        f"docker-archive:{path}:{SCENARIO_REPO}:bad",
    )
    return f"docker-archive:{path}"


@pytest.fixture(scope="session")
def scenario_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryServer]:
    """An anonymous ``docker-registry`` on 127.0.0.1 for the session's pushed images."""
    with running_registry(tmp_path_factory.mktemp("registry")) as registry:
        yield registry


@pytest.fixture(scope="session")
def bad_image_registry(bad_image_oci: str, scenario_registry: RegistryServer) -> str:
    """``docker://127.0.0.1:PORT/pinguard/glm-serving:bad`` (OCI manifest, gzip layers)."""
    scenario_registry.push(bad_image_oci, f"{SCENARIO_REPO}:bad")
    return f"docker://{scenario_registry.ref(f'{SCENARIO_REPO}:bad')}"


@pytest.fixture(scope="session")
def good_image_registry(scenario: Scenario, scenario_registry: RegistryServer) -> str:
    """``docker://127.0.0.1:PORT/pinguard/glm-serving:good`` (Docker v2s2 manifest)."""
    scenario_registry.push(
        f"containers-storage:{scenario.good.tag}", f"{SCENARIO_REPO}:good", format="v2s2"
    )
    return f"docker://{scenario_registry.ref(f'{SCENARIO_REPO}:good')}"


# --------------------------------------------------------------------------- docker API


@pytest.fixture(scope="session")
def podman_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PodmanService]:
    """``podman system service`` on a private unix socket; ``.docker_host`` is ``unix://...``.
    It shares containers-storage with buildah, so ``scenario`` images are visible to it."""
    require_tool("podman")
    require_root()
    with podman_service(tmp_path_factory.mktemp("podman")) as service:
        yield service


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--large-corpus",
        action="store_true",
        help="also run the tests on large real wheels (torch's CUDA wheel, about 800 MB)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``large_corpus`` run only with ``--large-corpus`` (deselected, not
    skipped: the default run never downloads the large wheels)."""
    if config.getoption("--large-corpus"):
        return
    keep = [i for i in items if i.get_closest_marker("large_corpus") is None]
    dropped = [i for i in items if i.get_closest_marker("large_corpus") is not None]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
