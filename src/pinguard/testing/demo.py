"""The bundled demo image: a small OCI archive whose history shows a silent downgrade.

The image mimics a GPU serving Dockerfile with real-looking `RUN pip install` steps: a base
layer with Python, a step that installs the known-good NCCL 2.30.3 / cutlass-dsl 4.3.0 /
torch 2.11.0+cu130 set, a harmless step, then a flashinfer nightly whose torch 2.12.1
hard-pins nvidia-nccl-cu13==2.29.7 and nvidia-cutlass-dsl==4.2.1, so pip swaps them
(with whiteouts for the old dist-info, exactly as a layer diff records it). ``Dist`` and
``Layer`` describe any such synthetic image (the tests build their own from them);
``write_oci_archive`` writes one through ``pinguard.testing.images``, deterministically, so
the archive has the same digest every time. ``examples/make_demo_image.py`` is the command.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pinguard.testing.images import CREATED, ImageWriter, layer_tar

SITE = "usr/local/lib/python3.12/site-packages"


@dataclass
class Dist:
    """A distribution as a layer writes it: dist-info files plus one module file."""

    name: str
    version: str
    requires: Sequence[str] = ()
    requested: bool = False
    installer: str = "pip"
    site: str = SITE
    extra_files: Mapping[str, bytes] = field(default_factory=dict)

    @property
    def dist_info(self) -> str:
        return f"{self.site}/{self.name.replace('-', '_')}-{self.version}.dist-info"

    def files(self) -> dict[str, bytes]:
        module = self.name.replace("-", "_")
        payload = {
            f"{self.site}/{module}/__init__.py": f"__version__ = {self.version!r}\n".encode()
        }
        payload.update({f"{self.site}/{k}": v for k, v in self.extra_files.items()})
        meta = ["Metadata-Version: 2.1", f"Name: {self.name}", f"Version: {self.version}"]
        meta += [f"Requires-Dist: {r}" for r in self.requires]
        out = dict(payload)
        out[f"{self.dist_info}/METADATA"] = ("\n".join(meta) + "\n").encode()
        out[f"{self.dist_info}/INSTALLER"] = f"{self.installer}\n".encode()
        if self.requested:
            out[f"{self.dist_info}/REQUESTED"] = b""
        rows = []
        for path, data in sorted(out.items()):
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            rows.append(f"{path[len(self.site) + 1 :]},sha256={digest},{len(data)}")
        rows.append(f"{self.dist_info[len(self.site) + 1 :]}/RECORD,,")
        out[f"{self.dist_info}/RECORD"] = ("\n".join(rows) + "\n").encode()
        return out


@dataclass
class Layer:
    created_by: str
    add: Sequence[Dist] = ()
    remove: Sequence[Dist] = ()  # whiteouts for these dist-info dirs and modules
    files: Mapping[str, bytes] = field(default_factory=dict)


def layer_files(layer: Layer) -> tuple[dict[str, bytes], list[str]]:
    """The files a layer adds and the whiteouts it writes for the distributions it removes."""
    whiteouts: list[str] = []
    for dist in layer.remove:
        parent, _, base = dist.dist_info.rpartition("/")
        whiteouts.append(f"{parent}/.wh.{base}")
        whiteouts.append(f"{dist.site}/.wh.{dist.name.replace('-', '_')}")
    files: dict[str, bytes] = {}
    for dist in layer.add:
        files.update(dist.files())
    files.update(layer.files)
    return files, whiteouts


def write_oci_archive(
    layers: Sequence[Layer],
    path: Path,
    *,
    tag: str = "latest",
    architecture: str = "amd64",
    empty_steps: Mapping[int, str] | None = None,
) -> str:
    """Write an oci-archive with one gzip layer per ``Layer``; return the manifest digest.

    ``empty_steps`` maps a position in the history to a created_by of an empty layer
    (ENV, LABEL, ...) inserted before the layer at that position.
    """
    writer = ImageWriter()
    descs = []
    history: list[dict[str, object]] = []
    for i, layer in enumerate(layers):
        for pos, text in sorted((empty_steps or {}).items()):
            if pos == i:
                history.append({"created": CREATED, "created_by": text, "empty_layer": True})
        files, whiteouts = layer_files(layer)
        descs.append(writer.layer(layer_tar(files, whiteouts=whiteouts, parents=True)))
        history.append({"created": CREATED, "created_by": layer.created_by})
    image = writer.image(descs, history, platform=f"linux/{architecture}")
    index, _ = writer.index([image], tag=tag)
    writer.write_oci_archive(index, path)
    return image.manifest.digest


def demo_layers() -> list[Layer]:
    """The GLM-on-GB10 story in five layers."""
    nccl_good = Dist("nvidia-nccl-cu13", "2.30.3")
    nccl_bad = Dist("nvidia-nccl-cu13", "2.29.7")
    cutlass_good = Dist("nvidia-cutlass-dsl", "4.3.0")
    cutlass_bad = Dist("nvidia-cutlass-dsl", "4.2.1")
    torch_good = Dist(
        "torch",
        "2.11.0+cu130",
        requires=[
            "nvidia-nccl-cu13<2.31,>=2.30; platform_system == 'Linux'",
            "nvidia-cutlass-dsl>=4.2",
        ],
        requested=True,
    )
    torch_new = Dist(
        "torch",
        "2.12.1+cu130",
        requires=[
            "nvidia-nccl-cu13==2.29.7; platform_system == 'Linux'",
            "nvidia-cutlass-dsl==4.2.1",
        ],
    )
    flashinfer = Dist(
        "flashinfer-python",
        "0.6.18.dev20261120",
        requires=["torch>=2.12", "nvidia-cutlass-dsl>=4.2"],
        requested=True,
    )
    pip = Dist("pip", "25.0.1", installer="")
    return [
        Layer(
            "/bin/sh -c #(nop) ADD file:python-3.12-slim-rootfs in / ",
            add=[pip],
            files={"usr/local/lib/python3.12/os.py": b"# os\n"},
        ),
        Layer(
            "RUN /bin/sh -c pip install nvidia-nccl-cu13==2.30.3 nvidia-cutlass-dsl==4.3.0 "
            "torch==2.11.0+cu130 # buildkit",
            add=[nccl_good, cutlass_good, torch_good],
        ),
        Layer(
            "RUN /bin/sh -c pip install numpy==2.3.5 # buildkit",
            add=[Dist("numpy", "2.3.5", requested=True)],
        ),
        Layer(
            "RUN /bin/sh -c pip install --pre flashinfer-python==0.6.18.dev20261120 "
            "--extra-index-url https://flashinfer.ai/whl/nightly/ # buildkit",
            add=[flashinfer, torch_new, nccl_bad, cutlass_bad],
            remove=[torch_good, nccl_good, cutlass_good],
        ),
    ]


def build_demo(out: Path, tag: str = "2026-11-29") -> str:
    """Write the demo archive to ``out``; return its manifest digest."""
    return write_oci_archive(
        demo_layers(),
        out,
        tag=tag,
        empty_steps={
            1: "ENV PIP_NO_CACHE_DIR=1",
            3: "LABEL org.opencontainers.image.title=glm-serving",
        },
    )
