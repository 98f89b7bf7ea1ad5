"""Benchmark the streamed ELF reader on real shared objects, beside its floor and the last release.

For each file: the floor is what the layer walk does to a member's bytes anyway (sha256 over
1 MiB chunks, the RECORD digest); ``ElfScanner`` does that plus capturing by need. Printed per
file: size, floor seconds, scanner seconds, their ratio, the most bytes the scanner held in
memory and spilled to disk at once, and whether its facts equal ``readelf -d``'s. With
``--baseline REV`` the same files go through the scanner of that git revision (unpacked with
``git archive`` into a temporary directory, run in a subprocess), so the last release is
measured in the same run; its facts are compared too (the release before capture by need read
patchelf'd objects wrong). ``--max-ratio R`` exits 1 when the total scanner time exceeds R
times the floor, or the memory held exceeds ``--max-memory-mb``.

    python benchmarks/elf_bench.py FILE... [--baseline HEAD~1] [--max-ratio 1.6]
    python benchmarks/elf_bench.py --smoke      # this machine's libc and libstdc++ (tests)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHUNK = 1 << 20

_MEASURE = r"""
import hashlib, json, os, sys, time
try:  # the ELF reader's home: catalog/native/ now, catalog/native.py in older trees
    from pinguard.catalog.native import elf as native
except ImportError:
    from pinguard.catalog import native
CHUNK = 1 << 20
# best of 3 when every file is small (milliseconds are noise), one pass over large ones
ROUNDS = 3 if all(os.path.getsize(p) < (64 << 20) for p in sys.argv[1:]) else 1
out = []
for path in sys.argv[1:]:
    data = open(path, "rb").read()
    view = memoryview(data)
    floor = took = float("inf")
    for _ in range(ROUNDS):  # best of ROUNDS: a small file takes milliseconds
        t = time.perf_counter()
        h = hashlib.sha256()
        for i in range(0, len(data), CHUNK):
            h.update(view[i : i + CHUNK])
        floor = min(floor, time.perf_counter() - t)
        t = time.perf_counter()
        scanner = native.ElfScanner(len(data), path.rsplit("/", 1)[-1])
        for i in range(0, len(data), CHUNK):
            scanner.feed(view[i : i + CHUNK])
        peak = scanner.peak() if hasattr(scanner, "peak") else (-1, -1)
        facts = scanner.finish()
        took = min(took, time.perf_counter() - t)
    out.append({
        "path": path, "size": len(data), "floor": floor, "scan": took,
        "memory": peak[0], "spilled": peak[1],
        "facts": None if facts is None else [facts.soname, list(facts.needed),
                                              list(facts.rpath), list(facts.runpath)],
        "problem": None if facts is None else facts.problem,
    })
print(json.dumps(out))
"""


def readelf(path: str) -> list[object]:
    import re

    cmd = ["readelf", "-dW", path]
    out = subprocess.run(cmd, check=False, capture_output=True, text=True).stdout
    soname = None
    needed: list[str] = []
    rpath: list[str] = []
    runpath: list[str] = []
    for kind, value in re.findall(r"\((NEEDED|SONAME|RPATH|RUNPATH)\)\s+[^\[]*\[(.*)\]", out):
        if kind == "NEEDED":
            needed.append(value)
        elif kind == "SONAME":
            soname = value
        elif kind == "RPATH":
            rpath += [p for p in value.split(":") if p]
        else:
            runpath += [p for p in value.split(":") if p]
    return [soname, needed, rpath, runpath]


def measure(src: Path, files: list[str]) -> list[dict[str, object]]:
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, *files],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"},
    )
    rows: list[dict[str, object]] = json.loads(done.stdout.strip().splitlines()[-1])
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*")
    parser.add_argument("--baseline", metavar="REV", help="also measure this git revision")
    parser.add_argument("--max-ratio", type=float, help="fail past this scan/floor ratio")
    parser.add_argument("--max-memory-mb", type=float, default=16.0)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    files = list(args.files)
    if args.smoke:
        files = [
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            "/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
        ]
    if not files:
        parser.error("name shared objects, or --smoke")
    now = measure(ROOT / "src", files)
    before: dict[str, dict[str, object]] = {}
    if args.baseline:
        with tempfile.TemporaryDirectory() as tmp:
            archive = subprocess.run(
                ["git", "-C", str(ROOT), "archive", args.baseline, "src"],
                capture_output=True,
                check=True,
            ).stdout
            subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
            before = {str(r["path"]): r for r in measure(Path(tmp) / "src", files)}
    floor = sum(float(str(r["floor"])) for r in now)
    scan = sum(float(str(r["scan"])) for r in now)
    memory = max(int(str(r["memory"])) for r in now)
    print(
        f"{'file':44} {'MiB':>6} {'floor s':>8} {'scan s':>7} {'x floor':>7} "
        f"{'mem KiB':>8} {'disk MiB':>8} readelf" + ("  last release" if before else "")
    )
    for r in now:
        path = str(r["path"])
        same = r["facts"] == readelf(path) and r["problem"] is None
        line = (
            f"{Path(path).name[:44]:44} {int(str(r['size'])) / 2**20:6.1f} "
            f"{float(str(r['floor'])):8.3f} {float(str(r['scan'])):7.3f} "
            f"{float(str(r['scan'])) / max(float(str(r['floor'])), 1e-9):7.2f} "
            f"{int(str(r['memory'])) >> 10:8d} {int(str(r['spilled'])) / 2**20:8.1f} "
            f"{'equal' if same else 'DIFFERS'}"
        )
        if path in before:
            b = before[path]
            b_same = b["facts"] == readelf(path) and b["problem"] is None
            line += (
                f"  {float(str(b['scan'])):.3f} s "
                f"({float(str(r['scan'])) / max(float(str(b['scan'])), 1e-9):.2f}x), "
                f"{'equal' if b_same else 'wrong/incomplete'}"
            )
        print(line)
    ratio = scan / max(floor, 1e-9)
    print(
        f"total: floor {floor:.3f} s, scanner {scan:.3f} s = {ratio:.2f}x the floor; "
        f"most memory held {memory >> 10} KiB"
    )
    if before:
        b_scan = sum(float(str(r["scan"])) for r in before.values())
        print(
            f"last release ({args.baseline}): scanner {b_scan:.3f} s = "
            f"{b_scan / max(floor, 1e-9):.2f}x the floor; now/last {scan / b_scan:.2f}x"
        )
    failed = False
    if args.max_ratio is not None and ratio > args.max_ratio:
        print(f"FAIL: {ratio:.2f}x the floor is past the stated margin {args.max_ratio}x")
        failed = True
    if memory > args.max_memory_mb * 2**20:
        print(f"FAIL: {memory >> 20} MiB held in memory, past {args.max_memory_mb} MiB")
        failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
