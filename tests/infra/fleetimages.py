"""A fleet of real images on one base: buildah builds with varying install steps, cached by tag.

:func:`ensure_fleet_images` builds ``count`` images ``localhost/pinguard-test/fleet:NN`` from
the cached Debian base (``build.ensure_base_image``) with three real ``RUN pip install``
steps against a package index of tiny wheels served by the test process:

- ``A``: torch 2.11.0+cu130 with NCCL 2.30.3 and cutlass-dsl 4.3.0 for even images, torch
  2.12.1 (which pins NCCL 2.29.7 and cutlass-dsl 4.2.1) for odd ones: two layers, each shared
  by half the fleet (buildah's ``--layers`` cache gives one layer for one step on one parent);
- ``B``: one of :data:`EXTRAS` by ``NN % 5``: ten distinct layers, two images each;
- ``C``: the image's own ``fleet-app-NN``: one layer per image.

So 20 images have 80 layers, 33 of them distinct (the base, 2, 10, 20). What pip installed in
each image is read back after the build from the image's mounted root with
``importlib.metadata`` (not pinguard) and kept with the images: :func:`expected_packages`.
Images carry a label with a fingerprint of everything that went into them (wheels, steps,
base image ID, count); when any image is missing or stale, every image is rebuilt in one
index session, so the shared steps stay byte-identical. ``PINGUARD_TEST_REBUILD=1`` forces it.
:func:`push_fleet_images` pushes them to a registry as ``fleet:NN`` and :func:`layer_sizes`
reads a pushed manifest's layers (digest and compressed size) back from the registry.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tests.infra.build import (
    BASE_SITE_PACKAGES,
    build_image,
    cache_dir,
    ensure_base_image,
    file_lock,
    image_exists,
    image_id,
    image_labels,
    mounted_image,
)
from tests.infra.index import serve_index
from tests.infra.registry import RegistryServer
from tests.infra.scenario import MAIN_WHEELS
from tests.infra.wheels import WheelSpec, build_wheels, wheel_bytes

MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
FLEET_VERSION = "1"
REPOSITORY = "localhost/pinguard-test/fleet"
FINGERPRINT_LABEL = "io.pinguard.test.fleet"
PIP = "pip install --index-url $INDEX_URL"
TORCHES = (
    "nvidia-nccl-cu13==2.30.3 nvidia-cutlass-dsl==4.3.0 torch==2.11.0+cu130",
    "torch==2.12.1",
)
EXTRAS = (
    "ninja==1.11.1.4",
    "msgspec==0.19.0 filelock==3.16.1",
    "flashinfer-python==0.6.16",
    "ninja==1.11.1.4 msgspec==0.19.0",
    "typing-extensions==4.12.2 flashinfer-python==0.6.16",
)


def app_wheel(index: int) -> WheelSpec:
    return WheelSpec(f"fleet-app-{index:02d}", "1.0", requires_dist=("filelock",))


def dockerfile(base: str, index: int, fingerprint: str) -> str:
    return (
        f"FROM {base}\nARG INDEX_URL\n"
        f"RUN {PIP} {TORCHES[index % 2]}\n"
        f"RUN {PIP} {EXTRAS[index % 5]}\n"
        f"RUN {PIP} fleet-app-{index:02d}==1.0\n"
        f"LABEL {FINGERPRINT_LABEL}={fingerprint}\n"
    )


@dataclass(frozen=True)
class FleetImage:
    """One built image: its tag in containers-storage and what pip installed in it."""

    tag: str
    packages: dict[str, str]  # canonical name -> version, in BASE_SITE_PACKAGES

    @property
    def name(self) -> str:
        """``fleet:NN``: the repository and tag it is pushed as."""
        return "fleet:" + self.tag.rsplit(":", 1)[1]


def fingerprint(base_id: str, count: int) -> str:
    h = hashlib.sha256(f"fleet v{FLEET_VERSION} base {base_id} count {count}\n".encode())
    for spec in (*MAIN_WHEELS, *(app_wheel(i) for i in range(count))):
        h.update(hashlib.sha256(wheel_bytes(spec)).digest())
    h.update(dockerfile("BASE", 0, "").encode() + "".join((*TORCHES, *EXTRAS)).encode())
    return h.hexdigest()[:32]


def _installed(root: Path) -> dict[str, str]:
    """name -> version of every distribution in the image's pip site-packages (the oracle)."""
    from packaging.utils import canonicalize_name

    site = root / BASE_SITE_PACKAGES.lstrip("/")
    return {
        str(canonicalize_name(d.metadata["Name"])): d.version
        for d in importlib.metadata.distributions(path=[str(site)])
    }


def tag_of(index: int) -> str:
    return f"{REPOSITORY}:{index:02d}"


def ensure_fleet_images(count: int = 20) -> list[FleetImage]:
    """The ``count`` fleet images (built unless storage already holds them all, fresh)."""
    base = ensure_base_image()
    fp = fingerprint(image_id(base), count)
    record = cache_dir() / f"fleet-images-{fp[:16]}.json"
    force = os.environ.get("PINGUARD_TEST_REBUILD", "") not in {"", "0"}
    with file_lock(cache_dir() / "fleet-images.lock"):
        fresh = record.exists() and all(
            image_exists(tag_of(i)) and image_labels(tag_of(i)).get(FINGERPRINT_LABEL) == fp
            for i in range(count)
        )
        if force or not fresh:
            with tempfile.TemporaryDirectory(prefix="pinguard-fleet-") as tmp:
                wheels = Path(tmp) / "wheels"
                build_wheels((*MAIN_WHEELS, *(app_wheel(i) for i in range(count))), wheels)
                installed: dict[str, dict[str, str]] = {}
                with serve_index(wheels) as index:
                    for i in range(count):
                        build_image(
                            Path(tmp) / "context",
                            dockerfile(base, i, fp),
                            tag_of(i),
                            {"INDEX_URL": index.url},
                        ).check()
                        with mounted_image(tag_of(i)) as root:
                            installed[tag_of(i)] = _installed(root)
            record.write_text(json.dumps(installed, indent=1, sort_keys=True))
        data = json.loads(record.read_text())
    return [FleetImage(tag_of(i), dict(data[tag_of(i)])) for i in range(count)]


def push_fleet_images(registry: RegistryServer, images: list[FleetImage]) -> dict[str, str]:
    """Push each image as ``fleet:NN``; return ``fleet:NN`` -> ``docker://`` reference."""
    out = {}
    for image in images:
        registry.push(f"containers-storage:{image.tag}", image.name)
        out[image.name] = f"docker://{registry.ref(image.name)}"
    return out


def layer_sizes(registry: RegistryServer, name: str) -> dict[str, int]:
    """Layer digest -> compressed size in the pushed manifest of ``repo:tag`` ``name``."""
    repo, tag = name.rsplit(":", 1)
    request = urllib.request.Request(
        f"{registry.url}/v2/{repo}/manifests/{tag}",
        headers={"Accept": ", ".join(MANIFEST_TYPES)},
    )
    with urllib.request.urlopen(request, timeout=30) as resp:
        manifest = json.load(resp)
    return {str(layer["digest"]): int(layer["size"]) for layer in manifest["layers"]}
