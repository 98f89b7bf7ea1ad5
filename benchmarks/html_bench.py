"""Benchmark the HTML report on a long image: 12 steps, 300 packages, every step changing some.

Builds a synthetic ``AuditResult`` in memory (no image needed): step 1 adds 300
distributions, each later step upgrades 25 of them and downgrades 5, with a requirement
chain on every downgrade so each cell carries a cause. It judges it with the default policy,
then renders the audit report and an A -> B comparison of step 6's state against the final
one, printing the render times, the page sizes and the number of timeline cells. It is a
script, not a test: ``.venv/bin/python benchmarks/html_bench.py [--steps 12 --packages 300]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import time

from packaging.utils import canonicalize_name

from pinguard.audit.compare import compare_images
from pinguard.audit.diff import diff_environments
from pinguard.models import (
    AuditResult,
    Distribution,
    Environment,
    ImageInfo,
    Platform,
    Snapshot,
    Step,
)
from pinguard.policy.engine import evaluate
from pinguard.policy.model import default_policy
from pinguard.report import html

SITE = "/usr/local/lib/python3.12/site-packages"
PLATFORM = Platform("linux", "amd64")


def _dist(name: str, major: int, minor: int, requires: tuple[str, ...] = ()) -> Distribution:
    norm = canonicalize_name(name)
    return Distribution(
        name=norm,
        raw_version=f"{major}.{minor}.0",
        metadata_path=f"{SITE}/{name.replace('-', '_')}-{major}.{minor}.0.dist-info",
        requires_dist=requires,
        fingerprint=f"{name}-{major}.{minor}",
    )


def synthetic(steps: int, packages: int) -> AuditResult:
    versions = {f"pkg-{i:03d}": (1, 0) for i in range(packages)}
    state: dict[str, Distribution] = {}
    out_steps: list[Step] = []
    snapshots: list[Snapshot] = []
    before: Environment | None = None
    for s in range(1, steps + 1):
        if s == 1:
            state = {n: _dist(n, *v) for n, v in versions.items()}
            command = "/bin/sh -c pip install -r requirements.txt"
        else:
            ups = [f"pkg-{(s * 25 + k) % packages:03d}" for k in range(25)]
            downs = [f"pkg-{(s * 7 + k * 11) % packages:03d}" for k in range(5)]
            for n in ups:
                major, minor = versions[n]
                versions[n] = (major, minor + 1)
            for n in downs:
                major, minor = versions[n]
                versions[n] = (major, max(0, minor - 1)) if minor else (major - 1 or 1, 9)
            for n in {*ups, *downs}:
                state[n] = _dist(n, *versions[n])
            driver = f"driver-{s:02d}"
            pins = tuple(f"{n}=={versions[n][0]}.{versions[n][1]}.0" for n in downs)
            state[driver] = _dist(driver, 1, s, pins)
            command = f"/bin/sh -c pip install {driver}==1.{s}.0"
        env = Environment(SITE, "3.12", tuple(sorted(state.values(), key=lambda d: d.name)))
        changes, unmet = diff_environments(before, env, platform=PLATFORM)
        out_steps.append(Step(s, command, f"sha256:{s:064x}", changes, unmet))
        snapshots.append(Snapshot((env,)))
        before = env
    result = AuditResult(
        image=ImageInfo("synthetic:long", f"sha256:{1:064x}", PLATFORM, "oci"),
        steps=tuple(out_steps),
        final=snapshots[-1],
        snapshots=tuple(snapshots),
    )
    findings = evaluate(result, default_policy(), today=dt.date(2026, 12, 1))
    return dataclasses.replace(result, findings=findings)


def _timed(label: str, fn: object, repeat: int = 3) -> str:
    best = float("inf")
    text = ""
    for _ in range(repeat):
        start = time.perf_counter()
        text = fn()  # type: ignore[operator]
        best = min(best, time.perf_counter() - start)
    print(f"{label:<28} {best * 1000:8.1f} ms  {len(text) / 1e6:6.2f} MB")
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--packages", type=int, default=300)
    parser.add_argument(
        "--browser", action="store_true", help="also load the page in headless Chromium"
    )
    args = parser.parse_args()
    result = synthetic(args.steps, args.packages)
    changes = sum(len(s.changes) for s in result.steps)
    print(
        f"image: {args.steps} steps, {len(result.final.environments[0].distributions)} "
        f"distributions, {changes} changes, {len(result.findings)} findings"
    )
    page = _timed("audit report (best of 3)", lambda: html.render(result))
    print(f"{'timeline cells':<28} {page.count('data-step='):8d}")
    half = dataclasses.replace(
        result,
        steps=result.steps[: args.steps // 2],
        snapshots=result.snapshots[: args.steps // 2],
        final=result.snapshots[args.steps // 2 - 1],
    )
    cmp = compare_images(half, result)
    _timed("compare report (best of 3)", lambda: html.render_comparison(cmp))
    if args.browser:
        _browser(page)
    return 0


def _browser(page: str) -> None:
    """Load the audit page in headless Chromium; print when its DOM was complete."""
    import sys
    import tempfile
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.infra.browser import open_browser

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "long.html"
        path.write_text(page)
        with open_browser() as driver:
            for label in ("chromium load, cold", "chromium load, warm"):
                driver.get(path.as_uri())
                done = driver.execute_script(
                    "return performance.getEntriesByType('navigation')[0].loadEventEnd"
                )
                print(f"{label:<28} {done:8.1f} ms")


if __name__ == "__main__":
    raise SystemExit(main())
