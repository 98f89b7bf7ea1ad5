"""Audit this machine's own root (``dir:/``) and compare the native prediction with what a
process really maps after importing the named modules (run on a real CUDA host).

    python3 scripts/native_host_check.py OUTDIR torch cupy

Writes OUTDIR/audit.json (the audit, as ``pinguard audit dir:/ -f json`` gives it) and
OUTDIR/check.json: the shared objects reported incomplete, the native findings, and for each
module set the watched libraries its process mapped beside the prediction
(``pinguard.probe.compare``). A module set ``torch+dist`` also runs a one-rank NCCL
all_reduce first, so NCCL is mapped as a real job maps it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

_CHILD = r"""
import json, os, sys
mods = sys.argv[1].split("+")
for m in mods:
    if m == "dist":
        import torch, torch.distributed as dist
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29533")
        dist.init_process_group("nccl", rank=0, world_size=1)
        t = torch.ones(8, device="cuda")
        dist.all_reduce(t)
        torch.cuda.synchronize()
    elif m == "cupy.nccl":
        from cupy.cuda import nccl  # noqa: F401
    else:
        __import__(m)
rows = [line.split(None, 5) for line in open("/proc/self/maps")]
print(json.dumps(sorted({r[5].strip() for r in rows if len(r) == 6 and r[5].startswith("/")})))
"""


def main() -> int:
    from pinguard.audit.pipeline import audit_directory
    from pinguard.probe import compare
    from pinguard.report.json import render
    from pinguard.report.options import RenderOptions

    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    result = audit_directory("/", reference="dir:/")
    seconds = time.perf_counter() - started
    (out / "audit.json").write_text(render(result, RenderOptions()))
    check: dict[str, object] = {
        "audit_seconds": round(seconds, 1),
        "shared_objects": len(result.final.native),
        "environments": [e.path for e in result.final.environments],
        "incomplete": [[i.what, i.why] for i in result.incomplete],
        "native_problems": [[lib.path, lib.problem] for lib in result.final.native if lib.problem],
    }
    from pinguard.policy import evaluate, parse_policy

    findings = evaluate(result, parse_policy(""))
    check["native_findings"] = [
        [f.rule, f.message] for f in findings if f.rule.startswith(("native", "variant"))
    ]
    probes: dict[str, object] = {}
    for mods in sys.argv[2:]:
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, mods], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            probes[mods] = {"error": done.stderr[-2000:]}
            continue
        mapped = json.loads(done.stdout.strip().splitlines()[-1])
        loads = [("import", m) for m in mods.split("+") if m not in {"dist", "cupy.nccl"}]
        if "cupy.nccl" in mods.split("+"):
            loads.append(("import", "cupy"))
        probe = compare("dir:/", loads, mapped, result)
        probes[mods] = {
            "watched": [r.to_json() for r in probe.rows],
            "nccl_mapped": [m for m in mapped if "libnccl" in m],
        }
    check["probes"] = probes
    (out / "check.json").write_text(json.dumps(check, indent=2, sort_keys=True))
    print(json.dumps({k: v for k, v in check.items() if k != "native_findings"}, indent=1)[:6000])
    print("native findings:", len(check["native_findings"]))  # type: ignore[arg-type]
    for rule, message in check["native_findings"][:20]:  # type: ignore[index]
        print(" ", rule, message[:400])
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
