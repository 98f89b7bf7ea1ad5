"""Times ``audit.diff`` on a synthetic environment with a real requirement graph.

Owns one measurement: ``diff_environments`` (changes, cause chains, unmet requirements) for
one step that installs or moves most of ``--distributions`` distributions, each with several
``Requires-Dist`` lines (version ranges, extras markers, platform markers) pointing at
earlier ones, as a real ML image has. ``--dump FILE`` writes the repr of the result, so two
checkouts can be shown to give identical output. A script, not a test.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from packaging.utils import canonicalize_name

from pinguard.audit.diff import diff_environments
from pinguard.models import Distribution, Environment, Platform
from pinguard.testing.graphs import requirement_graph

SITE = "/opt/venv/lib/python3.12/site-packages"


def _dist(name: str, version: str, requires: tuple[str, ...]) -> Distribution:
    canon = canonicalize_name(name)
    return Distribution(
        name=canon,
        raw_version=version,
        metadata_path=f"{SITE}/{canon.replace('-', '_')}-{version}.dist-info",
        requires_dist=requires,
        fingerprint=f"{canon}-{version}",
        display_name=name,
    )


def environments(count: int) -> tuple[Environment, Environment]:
    """The graph's environment before and after its one step."""
    graph = requirement_graph(count)
    before = tuple(_dist(g.name, g.before, g.requires) for g in graph if g.before is not None)
    after = tuple(_dist(g.name, g.after, g.requires) for g in graph)
    return Environment(SITE, "3.12.7", before), Environment(SITE, "3.12.7", after)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--distributions", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dump", type=Path)
    args = parser.parse_args(argv)
    before, after = environments(args.distributions)
    platform = Platform("linux", "amd64")
    best = float("inf")
    result = None
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        result = diff_environments(before, after, platform=platform)
        best = min(best, time.perf_counter() - t0)
    assert result is not None
    changes, unmet = result
    chains = sum(len(c.causes) for c in changes)
    sys.stdout.write(
        f"diff of {args.distributions} distributions: {len(changes)} changes, "
        f"{chains} causes, {len(unmet)} unmet: {best * 1000:.1f} ms (best of {args.repeat})\n"
    )
    if args.dump is not None:
        args.dump.write_text(repr(result) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
