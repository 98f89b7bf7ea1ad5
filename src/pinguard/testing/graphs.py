"""Synthetic requirement graphs: many distributions whose Requires-Dist lines chain together.

Owns one deterministic generator, ``requirement_graph``, shared by the diff tests, the diff
benchmark and the audit benchmark's requirement-graph image: ``count`` distributions, each
requiring 3 to 12 earlier ones (version ranges, extras, ``extra ==``, platform and Python
markers) plus test-only extras, most of them added, upgraded or downgraded in one step, as a
``pip install`` of an ML framework does. Never imported by an audit.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GraphDist:
    """One distribution of the graph: its versions before and after the step, its requirements."""

    name: str
    before: str | None  # None: added in the step
    after: str
    requires: tuple[str, ...]


def requirement_graph(count: int, seed: int = 19, prefix: str = "pkg") -> tuple[GraphDist, ...]:
    """``count`` distributions named ``pkg-0000``...; 60% added, 30% moved, 10% unchanged."""
    rng = random.Random(seed)
    names = [f"{prefix}-{i:04d}" for i in range(count)]
    out: list[GraphDist] = []
    for i, name in enumerate(names):
        requires: list[str] = []
        for j in sorted(rng.sample(range(i), min(i, rng.randint(3, 12)))):
            dep = names[j]
            major = 1 + j % 3
            kind = rng.randrange(5)
            if kind == 0:
                requires.append(f"{dep}>={major}.{rng.randrange(4)},<{major + 1}")
            elif kind == 1:
                requires.append(f"{dep}[extra1]>={major}.0; python_version >= '3.9'")
            elif kind == 2:
                requires.append(f"{dep}; extra == 'dev'")
            elif kind == 3:
                requires.append(f"{dep}>={major}.1; platform_machine == 'x86_64'")
            else:
                requires.append(dep)
        requires.extend(f"test-tool-{k}>=1.0; extra == 'test'" for k in range(rng.randint(2, 8)))
        major = 1 + i % 3
        roll = rng.randrange(10)
        if roll < 6:
            out.append(GraphDist(name, None, f"{major}.{rng.randrange(5)}", tuple(requires)))
        elif roll < 8:
            out.append(
                GraphDist(name, f"{major - 1}.9", f"{major}.{rng.randrange(5)}", tuple(requires))
            )
        elif roll < 9:
            out.append(
                GraphDist(name, f"{major + 1}.0", f"{major}.{rng.randrange(5)}", tuple(requires))
            )
        else:
            out.append(GraphDist(name, f"{major}.2", f"{major}.2", tuple(requires)))
    return tuple(out)
