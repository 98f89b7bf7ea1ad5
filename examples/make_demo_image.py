"""Build the bundled demo image: a small OCI archive whose history shows a silent downgrade.

The story and the writer live in ``pinguard.testing.demo`` (shared with the tests and the
benchmarks); this is the command. Usage: ``python examples/make_demo_image.py OUT.tar``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pinguard.testing.demo import build_demo


def main(argv: list[str]) -> int:
    out = Path(argv[1] if len(argv) > 1 else "examples/out/glm-serving-demo.tar")
    digest = build_demo(out)
    print(f"wrote {out} ({digest})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
