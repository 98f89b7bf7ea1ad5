"""A real GPU Python image: torch's CUDA 13 wheel and every wheel it needs, built by buildah.

The native layer's real-world check (issue 17) and the speed benchmarks (issue 19) need an
image built the way serving images are: ``pip install`` of the real wheels from the package
index, in ``RUN`` steps, on a Debian Python base. :func:`torch_wheelhouse` downloads torch
2.14.1 and its whole dependency closure for CPython 3.11 (about 2.9 GB: the nvidia-* CUDA 13
wheels, NCCL 2.30.7, triton, sympy, ...) once into the test cache; :func:`ensure_torch_image`
serves them on a loopback index and builds two steps, the NVIDIA libraries first and torch
second, so libtorch_cuda.so's NCCL comes from a lower layer than its consumer. The image is
cached in storage under :data:`TORCH_IMAGE`; both are used only with ``--large-corpus`` and by
the benchmarks.
"""

from __future__ import annotations

from pathlib import Path

from tests.infra.build import (
    BuildError,
    build_image,
    cache_dir,
    ensure_base_image,
    file_lock,
    image_exists,
)
from tests.infra.corpus import pip_download
from tests.infra.index import serve_index

TORCH = "torch==2.14.1"
NCCL = "nvidia-nccl-cu13==2.30.7"
TORCH_IMAGE_VERSION = "v1"  # bump when the Dockerfile below changes
TORCH_IMAGE = f"localhost/pinguard-test/torch-real:2.14.1-{TORCH_IMAGE_VERSION}"
#: The site-packages the image's pip writes to (Debian's python3, run as root).
SITE = "/usr/local/lib/python3.11/dist-packages"

DOCKERFILE = f"""\
FROM {{base}}
ARG INDEX_URL
RUN pip install --index-url $INDEX_URL {NCCL} nvidia-cudnn-cu13 nvidia-cublas \
nvidia-cuda-runtime nvidia-cusparselt-cu13 nvidia-nvshmem-cu13
RUN pip install --index-url $INDEX_URL {TORCH}
"""


def torch_wheelhouse(version: str = "2.14.1") -> Path:
    """A directory holding torch ``version``'s wheel and its dependency closure (downloaded
    once: pip resolves torch's exact nvidia-* pins for Linux)."""
    target = cache_dir() / "real-wheels" / f"torch-{version}"
    with file_lock(cache_dir() / "torch-wheelhouse.lock"):
        done = target / ".complete"
        if done.exists():
            return target
        target.mkdir(parents=True, exist_ok=True)
        pip_download([f"torch=={version}"], target, deps=True)
        done.write_text("ok\n")
        return target


def ensure_torch_image(tag: str = TORCH_IMAGE) -> str:
    """``tag`` in storage: the two-step real torch image, built once (about ten minutes)."""
    with file_lock(cache_dir() / "torch-image.lock"):
        if image_exists(tag):
            return tag
        wheels = torch_wheelhouse()
        base = ensure_base_image()
        context = cache_dir() / "torch-image-context"
        context.mkdir(exist_ok=True)
        with serve_index(wheels) as index:
            result = build_image(
                context,
                DOCKERFILE.format(base=base),
                tag,
                {"INDEX_URL": index.url},
                timeout=3600,
            )
        if result.returncode != 0:
            raise BuildError(f"building {tag} failed:\n{result.log[-4000:]}")
        return tag
