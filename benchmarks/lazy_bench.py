"""Benchmark ``pinguard audit --layer-read lazy`` on an image pushed as zstd:chunked.

The image (default: the real torch image ``tests/infra/torchimage.py`` builds, torch with its
CUDA 13 wheel closure in two pip steps) is pushed once from containers-storage with
``skopeo copy --dest-compress-format zstd:chunked`` (a private, empty blob-info cache, so
skopeo compresses rather than reusing gzip blobs) to Debian's ``docker-registry`` on
127.0.0.1, storing under ``--workdir``. The script then measures, in one run: the floor
(fetching and inflating every layer, one process per core, bytes discarded), the full
``pinguard audit`` (streams every layer, proves every DiffID) and the lazy one (the TOC and
the chunks analyzers need), both subprocesses with an empty cache, and prints the bytes the
lazy read fetched against the compressed size, its wall time against the floor and against
the full audit, and whether both audits found the same packages, native facts, findings and
verdict. Beside the floor it measures the lazy floor, the least any lazy reader spends: the
start-up floor (Python starts, imports ``requests``, fetches the manifest and the config) and
the TOC floor (every layer's TOC fetched from where its manifest-position annotation places
it, inflated and parsed as JSON, one process per core); it prints the unproven lazy audit
against it and whether the issue's target, 10x under the floor, lies above it or below what
any lazy reader can reach. ``--baseline REV`` runs the same three audits (full, lazy, lazy
with ``--allow-unproven``) with REV's code (``git archive``, as ``audit_bench.py`` does) beside
this checkout's, in the same run, and says whether each report is byte-identical to REV's (a
release without a lazy read or without ``--allow-unproven`` gets ``not supported``).
``--smoke`` does the same on a small image built here
(four distributions beside 256 MB of random bytes no analyzer reads, and a real shared
object), for ``tests/test_lazy_bench_smoke.py``; ``--max-bytes`` and ``--max-floor-ratio``
make the script exit 1 when the lazy read fetches more than that share of the compressed
bytes or its ``load_layers`` takes more than that share of the floor's wall time.
"""

from __future__ import annotations

import argparse
import io
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parent))
from audit_bench import (
    ROOT,
    Run,
    _pythonpath,
    baseline_src,
    report_differences,
    run_audit,
    start_floor,
)

REPO = "bench/lazy"
TORCH = "localhost/pinguard-test/torch-real:2.14.1-v1"
_ACCEPT = "application/vnd.oci.image.manifest.v1+json"


def _manifest(address: str, tag: str) -> dict[str, Any] | None:
    req = urllib.request.Request(
        f"http://{address}/v2/{REPO}/manifests/{tag}", headers={"Accept": _ACCEPT}
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            doc: dict[str, Any] = json.loads(resp.read())
            return doc
    except OSError:
        return None


def _smoke_layout(path: Path) -> str:
    """A small two-layer OCI layout (zstd; skopeo recompresses it as zstd:chunked, and
    fails with 'short write' on an uncompressed one):
    metadata and a real shared object beside 256 MB of random bytes nobody analyses, enough
    that the floor is well above the lazy read's fixed cost (its rounds of requests)."""
    from pinguard.testing.images import ImageWriter, layer_tar

    site = "usr/lib/python3.11/site-packages"
    rng = __import__("random").Random(19)
    big = b"".join(rng.randbytes(64 << 20) for _ in range(4))
    libz = Path("/usr/lib/x86_64-linux-gnu/libz.so.1").read_bytes()

    def dist(name: str, version: str, requires: str = "") -> dict[str, bytes]:
        meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{requires}\n"
        info = f"{site}/{name}-{version}.dist-info"
        return {f"{info}/METADATA": meta.encode(), f"{info}/RECORD": b""}

    first = {**dist("foo", "2.0"), **dist("bar", "1.0", "Requires-Dist: foo>=2\n")}
    first[f"{site}/foo/big.bin"] = big
    first[f"{site}/foo/libz.so.1"] = libz
    second = {**dist("foo", "1.9"), **dist("zoo", "1.0")}
    w = ImageWriter(path)
    layers = [
        w.layer(layer_tar(first, parents=True), "zstd"),
        w.layer(
            layer_tar(second, parents=True, whiteouts=[f"{site}/.wh.foo-2.0.dist-info"]), "zstd"
        ),
    ]
    img = w.image(layers, [{"created_by": "RUN pip install bar"}, {"created_by": "RUN pip"}])
    w.write_layout(w.index([img], tag="v1")[0])
    return f"oci:{path}:v1"


def push_chunked(source: str, address: str, tag: str, log: Any) -> dict[str, Any]:
    """``source`` in the registry as zstd:chunked (pushed unless already there)."""
    manifest = _manifest(address, tag)
    if manifest is None:
        log(f"pushing {source} as zstd:chunked with skopeo ...")
        started = time.perf_counter()
        Path("/var/lib/containers/cache").mkdir(parents=True, exist_ok=True)
        copy = (
            "mount -t tmpfs none /var/lib/containers/cache && exec skopeo --insecure-policy "
            "copy --quiet --dest-tls-verify=false --dest-compress-format zstd:chunked "
            f"{source} docker://{address}/{REPO}:{tag}"
        )
        subprocess.run(["unshare", "-m", "sh", "-c", copy], check=True)
        log(f"pushed in {time.perf_counter() - started:.1f}s")
        manifest = _manifest(address, tag)
    if manifest is None:
        raise SystemExit(f"lazy_bench: {REPO}:{tag} is not in the registry after the push")
    kinds = {layer["mediaType"] for layer in manifest["layers"]}
    if not all(k.endswith("+zstd") for k in kinds) or not all(
        any(k.endswith("manifest-position") for k in layer.get("annotations", {}))
        for layer in manifest["layers"]
    ):
        raise SystemExit(f"lazy_bench: {REPO}:{tag} is not zstd:chunked ({sorted(kinds)})")
    return manifest


def _floor_one(url: str) -> tuple[int, float]:
    """Fetch one zstd blob and inflate it across all its frames, discarding the bytes:
    (bytes inflated, CPU seconds)."""
    import requests
    import zstandard

    cpu = time.process_time()
    out = 0
    with requests.get(url, stream=True, timeout=60) as resp:
        resp.raise_for_status()
        raw = cast(IO[bytes], resp.raw)
        reader = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
        while chunk := reader.read(1 << 20):
            out += len(chunk)
    return out, time.process_time() - cpu


def floor(address: str, manifest: dict[str, Any], jobs: int) -> tuple[float, float]:
    """(wall, CPU) seconds to fetch and inflate every layer, ``jobs`` processes."""
    layers = sorted(manifest["layers"], key=lambda layer: -layer["size"])  # largest first
    work = [f"http://{address}/v2/{REPO}/blobs/{layer['digest']}" for layer in layers]
    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        pool.map(_floor_one, work[-1:])  # warm the workers up (imports, page cache)
        started = time.perf_counter()
        results = pool.map(_floor_one, work, chunksize=1)
        return time.perf_counter() - started, sum(cpu for _n, cpu in results)


def _toc_one(job: tuple[str, int, int, int]) -> tuple[int, float]:
    """Fetch one layer's TOC range, inflate it and parse its JSON: (entries, CPU seconds)."""
    import requests
    import zstandard

    url, offset, length, uncompressed = job
    cpu = time.process_time()
    headers = {"Range": f"bytes={offset}-{offset + length - 1}"}
    with requests.get(url, headers=headers, timeout=60) as resp:
        resp.raise_for_status()
        data = resp.content
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True)
    entries = len(json.loads(reader.read(uncompressed + 1))["entries"])
    return entries, time.process_time() - cpu


def toc_floor(address: str, manifest: dict[str, Any], jobs: int) -> tuple[float, float, int]:
    """(wall, CPU seconds, entries) to fetch every layer's TOC (where its manifest-position
    annotation places it), inflate it and parse its JSON, ``jobs`` processes, largest first:
    what any lazy reader of these layers spends before it knows which chunks to fetch (the
    tar-split, where one is placed, is not counted)."""
    work = []
    for layer in sorted(manifest["layers"], key=lambda layer: -layer["size"]):
        position = next(
            v for k, v in layer["annotations"].items() if k.endswith("manifest-position")
        )
        offset, length, uncompressed, _kind = (int(p) for p in position.split(":"))
        url = f"http://{address}/v2/{REPO}/blobs/{layer['digest']}"
        work.append((url, offset, length, uncompressed))
    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        pool.map(_toc_one, work[-1:])  # warm the workers up (imports, page cache)
        started = time.perf_counter()
        results = pool.map(_toc_one, work, chunksize=1)
        wall = time.perf_counter() - started
    return wall, sum(cpu for _n, cpu in results), sum(n for n, _cpu in results)


@dataclass(frozen=True, slots=True)
class LazyFloor:
    """The least a lazy audit spends: the start-up floor (Python, ``requests``, the manifest
    and the config; ``audit_bench.start_floor``) and the TOC floor (``toc_floor``)."""

    start_s: float
    start_cpu: float
    toc_s: float
    toc_cpu: float
    entries: int

    @property
    def seconds(self) -> float:
        return self.start_s + self.toc_s

    @classmethod
    def measure(
        cls, address: str, manifest: dict[str, Any], ref: str, jobs: int, work: Path
    ) -> LazyFloor:
        start = start_floor(ref, work / "start.out")
        toc_s, toc_cpu, entries = toc_floor(address, manifest, jobs)
        return cls(start.seconds, start.cpu, toc_s, toc_cpu, entries)

    def rows(self, floor_s: float, unproven_s: float) -> list[str]:
        """The unproven lazy audit against this floor, and whether the issue's target (10x
        under the floor) lies above it: no lazy reader can be faster than this floor."""
        target = floor_s / 10
        return [
            f"lazy floor: start-up {self.start_s:.2f} s + TOCs {self.toc_s:.2f} s "
            f"({self.entries} entries) = {self.seconds:.2f} s",
            f"unproven lazy/lazy floor: {unproven_s / self.seconds:.2f}x the lazy floor "
            f"(x TOC floor: {unproven_s / self.toc_s:.1f})",
            f"10x under the floor: {target:.2f} s, "
            + (
                f"above the lazy floor ({self.seconds:.2f} s): reachable"
                if target > self.seconds
                else f"below the lazy floor ({self.seconds:.2f} s): no lazy reader reaches it"
            ),
        ]


_LAZY_LAYERS = """
import sys, time
from pathlib import Path
from pinguard.audit.loading import load_layers
from pinguard.audit.options import AuditOptions
from pinguard.sources import open_source
options = AuditOptions(layer_read="lazy")
source = open_source(sys.argv[1], options.source)
with source:
    resolved = source.resolve()
    started = time.perf_counter()
    found = load_layers(source, resolved.layers, options)
    wall = time.perf_counter() - started
assert all(a.lazy and "toc" in a.lazy for a in found.values()), "a layer was read in full"
print(wall)
"""


def lazy_layers(ref: str) -> float:
    """Wall seconds of ``load_layers`` alone, lazily (no start-up, resolve or report)."""
    proc = subprocess.run(
        [sys.executable, "-c", _LAZY_LAYERS, ref],
        capture_output=True,
        text=True,
        env=_pythonpath(ROOT / "src"),
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"lazy load_layers failed: {proc.stderr[-2000:]}")
    return float(proc.stdout.split()[-1])


def _no_layers(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _no_layers(v) for k, v in value.items() if k != "layer"}
    if isinstance(value, list):
        return [_no_layers(v) for v in value]
    return value


def facts(report: Path) -> dict[str, Any]:
    """What must not depend on how the layers were read."""
    doc = json.loads(report.read_text())
    keys = ("environments", "findings", "incomplete", "verdict", "native_libraries", "steps")
    return {k: _no_layers(doc.get(k)) for k in keys}


#: The three audits each run measures (report file stem, extra options), this checkout's and,
#: with ``--baseline``, the last release's.
AUDITS: tuple[tuple[str, list[str]], ...] = (
    ("full", []),
    ("lazy", ["--layer-read", "lazy"]),
    ("unproven", ["--layer-read", "lazy", "--allow-unproven"]),
)


def _last_rows(
    last: tuple[str, dict[str, tuple[Run, list[str] | None] | None]] | None,
    floor_s: float,
    ours: dict[str, Run],
) -> list[str]:
    """The last release's audits beside the floor, each against this checkout's, and whether
    each report is byte-identical to this checkout's."""
    if last is None:
        return []
    commit, runs = last
    rows = []
    for name, got in runs.items():
        label = f"{name} audit, last release {commit}"
        if got is None:
            rows.append(f"{label:<34}  not supported by that release")
            continue
        run, differs = got
        rows.append(
            f"{label:<34}{run.seconds:9.2f}{run.cpu:9.2f}{run.max_rss >> 20:>6} MiB"
            f"{run.seconds / floor_s:9.2f}"
        )
        same = "byte-identical" if differs is None else f"DIFFERS in {', '.join(differs)}"
        rows.append(
            f"  {name}: this checkout / last release {ours[name].seconds / run.seconds:.3f}; "
            f"report {same}"
        )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--image", default=TORCH, help="containers-storage image (default: torch)")
    ap.add_argument("--smoke", action="store_true", help="a small image built here")
    ap.add_argument("--workdir", type=Path, default=Path.home() / ".cache/pinguard-lazy-bench")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument(
        "--baseline",
        metavar="REV",
        help="also run REV's full, lazy and unproven lazy audits (git archive) and compare reports",
    )
    ap.add_argument("--max-bytes", type=float, help="fail past this share of compressed bytes")
    ap.add_argument("--max-floor-ratio", type=float, help="fail past lazy wall / floor wall")
    args = ap.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)

    def log(msg: str) -> None:
        print(f"# {msg}", file=sys.stderr, flush=True)

    sys.path.insert(0, str(ROOT))
    from tests.infra.registry import start_registry

    registry = start_registry(args.workdir / "registry")
    try:
        if args.smoke:
            source, tag = _smoke_layout(Path(tempfile.mkdtemp(dir=args.workdir))), "smoke"
        else:
            source, tag = f"containers-storage:{args.image}", args.image.rsplit(":", 1)[-1]
        manifest = push_chunked(source, registry.address, tag, log)
        ref = f"docker://{registry.address}/{REPO}:{tag}"
        stored = sum(layer["size"] for layer in manifest["layers"])
        log(f"{len(manifest['layers'])} zstd:chunked layers, {stored / 1e6:.1f} MB")
        floor_s, floor_cpu = floor(registry.address, manifest, args.jobs)
        with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
            work = Path(tmp)
            # a pass on layers read lazily is confirmed by reading them in full (issue 30.1);
            # --allow-unproven takes the lazy read's word: the only lazy audit that can be
            # under the floor, and the one whose reads the report lists
            ours = {
                name: run_audit(ref, work / f"{name}-cache", work / f"{name}.json", extra)
                for name, extra in AUDITS
            }
            full, lazy, unproven = ours["full"], ours["lazy"], ours["unproven"]
            layers_s = lazy_layers(ref)
            least = LazyFloor.measure(registry.address, manifest, ref, args.jobs, work)
            last: tuple[str, dict[str, tuple[Run, list[str] | None] | None]] | None = None
            if args.baseline:
                commit, src = baseline_src(args.workdir, args.baseline)
                last = (commit, {})
                for name, extra in AUDITS:
                    try:
                        run = run_audit(
                            ref,
                            work / f"last-{name}-cache",
                            work / f"last-{name}.json",
                            extra,
                            src=src,
                        )
                    except RuntimeError:  # a release without that option: usage error
                        last[1][name] = None
                        continue
                    differs = report_differences(work / f"{name}.json", work / f"last-{name}.json")
                    last[1][name] = (run, differs)
            full_facts, unproven_facts = facts(work / "full.json"), facts(work / "unproven.json")
            # the unproven audit's verdict is 'unproven' where the proven one is 'pass'
            want = "unproven" if full_facts["verdict"] == "pass" else full_facts["verdict"]
            same = (
                full_facts == facts(work / "lazy.json")
                and {**full_facts, "verdict": want} == unproven_facts
            )
            confirmed = not json.loads((work / "lazy.json").read_text()).get("layer_reads")
            reads = json.loads((work / "unproven.json").read_text()).get("layer_reads", [])
    finally:
        registry.stop()
    fetched = sum(r["fetched"] for r in reads)
    lazy_count = sum(r["mode"] == "lazy" for r in reads)
    share = fetched / stored
    rows = [
        f"image: {args.image if not args.smoke else 'smoke'}, {len(manifest['layers'])} "
        f"zstd:chunked layers, {stored} compressed bytes; {args.jobs} cores",
        f"{'measure':<34}{'seconds':>9}{'cpu s':>9}{'peak RSS':>10}{'x floor':>9}",
        f"{'floor (fetch + inflate)':<34}{floor_s:9.2f}{floor_cpu:9.2f}{'':>10}{1:9.2f}",
        f"{'TOC floor (fetch + parse TOCs)':<34}{least.toc_s:9.2f}{least.toc_cpu:9.2f}{'':>10}"
        f"{least.toc_s / floor_s:9.2f}",
        f"{'start-up floor (python, manifest)':<34}{least.start_s:9.2f}{least.start_cpu:9.2f}"
        f"{'':>10}{least.start_s / floor_s:9.2f}",
        f"{'lazy floor (start-up + TOCs)':<34}{least.seconds:9.2f}{'':>9}{'':>10}"
        f"{least.seconds / floor_s:9.2f}",
        f"{'full audit (DiffIDs proven)':<34}{full.seconds:9.2f}{full.cpu:9.2f}"
        f"{full.max_rss >> 20:>6} MiB{full.seconds / floor_s:9.2f}",
        f"{'lazy audit (--layer-read lazy)':<34}{lazy.seconds:9.2f}{lazy.cpu:9.2f}"
        f"{lazy.max_rss >> 20:>6} MiB{lazy.seconds / floor_s:9.2f}",
        f"{'lazy audit, --allow-unproven':<34}{unproven.seconds:9.2f}{unproven.cpu:9.2f}"
        f"{unproven.max_rss >> 20:>6} MiB{unproven.seconds / floor_s:9.2f}",
        f"{'lazy layers (load_layers alone)':<34}{layers_s:9.2f}{'':>9}{'':>10}"
        f"{layers_s / floor_s:9.2f}",
        *(_last_rows(last, floor_s, ours)),
        "the lazy audit's pass: "
        + ("confirmed by reading every layer in full" if confirmed else "not a pass, kept lazy"),
        f"layers read lazily (--allow-unproven): {lazy_count} of {len(reads)}",
        f"bytes fetched: {fetched} of {stored} compressed ({100 * share:.2f}%)",
        f"lazy/floor: {lazy.seconds / floor_s:.3f} ({floor_s / lazy.seconds:.1f}x under the floor)",
        f"lazy/full audit: {lazy.seconds / full.seconds:.3f}",
        f"unproven lazy/floor: {unproven.seconds / floor_s:.3f} "
        f"({floor_s / unproven.seconds:.1f}x under the floor; target >= 10x)",
        *least.rows(floor_s, unproven.seconds),
        f"lazy layers/TOC floor: {layers_s / least.toc_s:.2f}",
        f"lazy cpu/floor cpu: {lazy.cpu / floor_cpu:.3f}",
        f"findings identical: {'yes' if same else 'NO'}",
    ]
    failed = not same or not reads or lazy_count != len(reads)
    if args.max_bytes is not None and share > args.max_bytes:
        rows.append(f"FAIL: fetched {share:.4f} of the bytes, above --max-bytes {args.max_bytes}")
        failed = True
    if args.max_floor_ratio is not None and layers_s / floor_s > args.max_floor_ratio:
        rows.append(f"FAIL: lazy layers/floor above --max-floor-ratio {args.max_floor_ratio}")
        failed = True
    print("\n".join(rows))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
