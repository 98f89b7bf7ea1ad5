"""Peak memory of one layer's analysis against its number of members.

Owns one measurement: a plain tar of ``--members`` empty files (16 per directory, 1 in 64 a
directory entry, names about 60 characters, as a large site-packages has) is written once
under ``--workdir`` and analysed by ``analyze_stream`` in a fresh process per run, which
prints its wall time and peak RSS (``ru_maxrss``) next to the same process's RSS before the
walk. ``--no-spill`` holds every path in memory (the behaviour before the bound), for the
comparison. A script, not a test.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

_RUN = """
import resource, sys, time
from pinguard.layers import names
from pinguard.layers.analysis import analyze_stream
from pinguard.layers.tar import SKIP
if sys.argv[2] == "no-spill":
    names.SPILL_AT = 1 << 62
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
with open(sys.argv[1], "rb") as fh:
    a = analyze_stream(fh, digest=None, size=None, select=lambda p: SKIP, prefetch=False)
wall = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(a.members, len(a.name_flags), wall, before, peak)
"""


def write_tar(path: Path, members: int) -> None:
    """``members`` members: a directory entry every 16 files, all empty."""
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        made = 0
        d = 0
        while made < members:
            info = tarfile.TarInfo(f"usr/lib/python3/dist-packages/pkg_{d:07d}/sub")
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
            made += 1
            for f in range(min(15, members - made)):
                info = tarfile.TarInfo(f"usr/lib/python3/dist-packages/pkg_{d:07d}/sub/m{f:02d}.py")
                tar.addfile(info)
                made += 1
            d += 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=2_000_000)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--no-spill", action="store_true")
    parser.add_argument("--write-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    path = args.workdir / f"members-{args.members}.tar"
    if args.write_only:
        write_tar(path.with_suffix(".part"), args.members)
        path.with_suffix(".part").rename(path)
        return 0
    if not path.exists():  # in a child: ru_maxrss survives fork and exec, so keep this small
        subprocess.run(
            [
                sys.executable,
                __file__,
                "--write-only",
                "--members",
                str(args.members),
                "--workdir",
                str(args.workdir),
            ],
            check=True,
        )
    mode = "no-spill" if args.no_spill else "spill"
    out = subprocess.run(
        [sys.executable, "-c", _RUN, str(path), mode], capture_output=True, text=True, check=True
    ).stdout.split()
    members, flags, wall, before, peak = int(out[0]), int(out[1]), float(out[2]), *map(int, out[3:])
    sys.stdout.write(
        f"{members} members ({mode}): {wall:.1f} s, RSS {before / 1024:.0f} MiB before the walk, "
        f"peak {peak / 1024:.0f} MiB (+{(peak - before) / 1024:.0f} MiB), {flags} flags\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
