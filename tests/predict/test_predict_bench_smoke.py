"""benchmarks/predict_bench.py runs end to end: every figure printed beside the floor, and the
warm prediction stated against the 5 s target (not asserted: a benchmark, not a timed test)."""

from __future__ import annotations

import re

from tests.infra.bench import run_benchmark


def test_predict_bench_smoke() -> None:
    out = run_benchmark("predict_bench.py", "--smoke", "--no-target", timeout=600)
    for label in (
        "prediction, cold",
        "prediction, warm (pip's resolver asked too)",
        "prediction, warm, --no-pip-check",
        "floor: warm base audit + 3 bare uv dry runs",
    ):
        line = next(x for x in out.splitlines() if label in x)
        assert re.search(r"\d+\.\d\d\s+\d+\.\d\dx floor$", line), line
    assert re.search(
        r"^target: warm prediction under 5\.0 s: (met|MISSED) \(\d+\.\d\d s\)$", out, re.M
    )
