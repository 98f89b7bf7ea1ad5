"""Benchmark the native-library reader on the real NCCL wheels: banner, speed, peak memory.

Downloads (once, with ``pip download --no-deps``, into ``--workdir``) the real
``nvidia-nccl-cu13`` wheels (2.29.7 and 2.30.3 by default, about 200 MB each; their
``libnccl.so.2`` is about 230 MB unpacked), then, for each, in a fresh subprocess: builds one
uncompressed layer tar holding the wheel's ``libnccl.so.2`` (streamed from the zip, never
whole in memory) and runs pinguard's layer analysis over it with the catalog's selector, so
the library goes through the same tar walk and ELF stream reader as in an audit. It prints the
banner version the binary states, its soname and NEEDED entries, the time, the throughput and
the peak RSS of that subprocess next to the baseline RSS of the same interpreter with
pinguard imported: memory stays flat when the difference is a small constant, not the file
size. ``--smoke`` uses a gcc-built 64 MB shared object with an NCCL-like banner instead of
downloading (``tests/test_benchmark_smoke.py`` style: it checks the script, not the figures).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_WORKDIR = Path.home() / ".cache" / "pinguard-bench" / "nccl"
MEMBER = "nvidia/nccl/lib/libnccl.so.2"
LAYER_PATH = "usr/local/lib/python3.11/dist-packages/" + MEMBER


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def wheel_for(version: str, workdir: Path) -> Path:
    """The cached wheel of ``version``, downloaded with pip the first time."""
    workdir.mkdir(parents=True, exist_ok=True)
    found = sorted(workdir.glob(f"nvidia_nccl_cu13-{version}-*.whl"))
    if not found:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "-q",
                "-d",
                str(workdir),
                f"nvidia-nccl-cu13=={version}",
            ],
            check=True,
        )
        found = sorted(workdir.glob(f"nvidia_nccl_cu13-{version}-*.whl"))
    return found[0]


def layer_from_wheel(wheel: Path, out: Path) -> int:
    """Write an uncompressed layer tar with the wheel's libnccl.so.2; returns its size."""
    with zipfile.ZipFile(wheel) as zf, tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tf:
        info = zf.getinfo(MEMBER)
        member = tarfile.TarInfo(LAYER_PATH)
        member.size = info.file_size
        member.mode = 0o644
        with zf.open(info) as src:
            tf.addfile(member, src)
    return info.file_size


def smoke_layer(out: Path, work: Path) -> int:
    """A gcc-built shared object of about 64 MB with a banner, as an uncompressed layer."""
    src = work / "big.c"
    src.write_text(
        'const char banner[] = "NCCL version 2.99.1+cuda13.0";\n'
        "const char pad[64 << 20] = {1};\nint f(void) { return 1; }\n"
    )
    so = work / "libnccl.so.2"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", str(so), str(src), "-Wl,-soname,libnccl.so.2"],
        check=True,
    )
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tf:
        tf.add(so, LAYER_PATH)
    return so.stat().st_size


def measure_one(layer: Path) -> dict[str, object]:
    """In this (fresh) process: analyse ``layer`` and report what and how fast."""
    sys.path.insert(0, str(ROOT / "src"))
    from pinguard.catalog.native.analyzer import ElfFacts, NativeAnalyzer
    from pinguard.catalog.registry import AnalyzerOptions
    from pinguard.layers.analysis import analyze_stream

    analyzer = NativeAnalyzer.create(AnalyzerOptions())
    baseline = _rss_mb()
    start = time.perf_counter()
    with layer.open("rb") as fh:
        analysis = analyze_stream(
            fh,
            digest=None,
            size=None,
            select=analyzer.wants,
            open_stream=analyzer.open_stream,
        )
    elapsed = time.perf_counter() - start
    raw = analysis.streamed["/" + LAYER_PATH]
    assert isinstance(raw, dict), raw
    facts = ElfFacts.from_json(raw)
    return {
        "seconds": round(elapsed, 2),
        "baseline_rss_mb": round(baseline, 1),
        "peak_rss_mb": round(_rss_mb(), 1),
        "soname": facts.soname,
        "needed": list(facts.needed),
        "version": facts.version,
        "problem": facts.problem,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    parser.add_argument("--versions", nargs="+", default=["2.29.7", "2.30.3"])
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one is not None:
        print(json.dumps(measure_one(args.one)))
        return 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="pinguard-native-bench-") as tmp:
        work = Path(tmp)
        inputs: list[tuple[str, Path, int]] = []
        if args.smoke:
            layer = work / "smoke.tar"
            inputs.append(("smoke (gcc, 64 MB)", layer, smoke_layer(layer, work)))
        else:
            for version in args.versions:
                layer = work / f"nccl-{version}.tar"
                size = layer_from_wheel(wheel_for(version, args.workdir), layer)
                inputs.append((f"nvidia-nccl-cu13 {version}", layer, size))
        for label, layer, size in inputs:
            proc = subprocess.run(
                [sys.executable, __file__, "--one", str(layer)],
                capture_output=True,
                text=True,
                check=True,
            )
            row = json.loads(proc.stdout)
            row["label"] = label
            row["size_mb"] = round(size / (1 << 20), 1)
            row["mb_per_s"] = round(size / (1 << 20) / max(float(row["seconds"]), 1e-6), 1)
            rows.append(row)
    print(
        f"{'input':<28} {'size MB':>8} {'banner':<18} {'s':>6} {'MB/s':>7} "
        f"{'base RSS':>9} {'peak RSS':>9}"
    )
    for row in rows:
        print(
            f"{row['label']:<28} {row['size_mb']:>8} {row['version']!s:<18} {row['seconds']:>6} "
            f"{row['mb_per_s']:>7} {row['baseline_rss_mb']:>9} {row['peak_rss_mb']:>9}"
        )
        needed = ",".join(str(n) for n in row["needed"])  # type: ignore[attr-defined]
        print(f"  soname={row['soname']} needed={needed} problem={row['problem']}")
    return 0 if all(r["version"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
