"""Build the bundled demo image: a small OCI archive whose history shows a silent downgrade.

The image mimics a GPU serving Dockerfile with real-looking `RUN pip install` steps: a base
layer with Python, a step that installs the known-good NCCL 2.30.3 / cutlass-dsl 4.3.0 /
torch 2.11.0+cu130 set, a harmless step, then a flashinfer nightly whose torch 2.12.1
hard-pins nvidia-nccl-cu13==2.29.7 and nvidia-cutlass-dsl==4.2.1, so pip swaps them
(with whiteouts for the old dist-info, exactly as a layer diff records it). Layers are
written with tarfile and gzip, deterministically (fixed mtimes), so the archive has the same
digest every time. Usage: ``python examples/make_demo_image.py OUT.tar``.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import sys
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

SITE = "usr/local/lib/python3.12/site-packages"
MTIME = 1764374400  # 2025-11-29, fixed so the archive is byte-for-byte reproducible


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


def layer_tar(layer: Layer) -> bytes:
    buf = io.BytesIO()
    entries: dict[str, bytes | None] = {}
    for dist in layer.remove:
        parent, _, base = dist.dist_info.rpartition("/")
        entries[f"{parent}/.wh.{base}"] = b""
        module = dist.name.replace("-", "_")
        entries[f"{dist.site}/.wh.{module}"] = b""
    for dist in layer.add:
        entries.update(dist.files())
    entries.update(layer.files)
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs: set[str] = set()
        for path in sorted(entries):
            parts = path.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                d = "/".join(parts[:i])
                if d not in dirs:
                    dirs.add(d)
                    info = tarfile.TarInfo(d)
                    info.type = tarfile.DIRTYPE
                    info.mode = 0o755
                    info.mtime = MTIME
                    tar.addfile(info)
            data = entries[path] or b""
            info = tarfile.TarInfo(path)
            info.size = len(data)
            info.mode = 0o644
            info.mtime = MTIME
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _blob(out: dict[str, bytes], data: bytes) -> tuple[str, int]:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    out[digest] = data
    return digest, len(data)


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
    blobs: dict[str, bytes] = {}
    layer_descs, diff_ids, history = [], [], []
    for i, layer in enumerate(layers):
        for pos, text in sorted((empty_steps or {}).items()):
            if pos == i:
                history.append(
                    {"created": "2025-11-29T00:00:00Z", "created_by": text, "empty_layer": True}
                )
        plain = layer_tar(layer)
        diff_ids.append("sha256:" + hashlib.sha256(plain).hexdigest())
        gz = gzip.compress(plain, mtime=0)
        digest, size = _blob(blobs, gz)
        layer_descs.append(
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": digest,
                "size": size,
            }
        )
        history.append({"created": "2025-11-29T00:00:00Z", "created_by": layer.created_by})
    config = {
        "architecture": architecture,
        "os": "linux",
        "config": {"Env": ["PATH=/usr/local/bin:/usr/bin:/bin"]},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": history,
    }
    cfg_digest, cfg_size = _blob(blobs, json.dumps(config, sort_keys=True).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": cfg_digest,
            "size": cfg_size,
        },
        "layers": layer_descs,
    }
    man_digest, man_size = _blob(blobs, json.dumps(manifest, sort_keys=True).encode())
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": man_digest,
                "size": man_size,
                "platform": {"os": "linux", "architecture": architecture},
                "annotations": {"org.opencontainers.image.ref.name": tag},
            }
        ],
    }
    files = {
        "oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
        "index.json": json.dumps(index, sort_keys=True).encode(),
    }
    for digest, data in blobs.items():
        files["blobs/sha256/" + digest.split(":", 1)[1]] = data
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(files):
            info = tarfile.TarInfo(name)
            info.size = len(files[name])
            info.mtime = MTIME
            tar.addfile(info, io.BytesIO(files[name]))
    tmp.replace(path)
    return man_digest


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


def main(argv: list[str]) -> int:
    out = Path(argv[1] if len(argv) > 1 else "examples/out/glm-serving-demo.tar")
    digest = build_demo(out)
    print(f"wrote {out} ({digest})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
