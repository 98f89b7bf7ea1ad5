"""Mutation testing of the core modules with mutmut, on demand (not in CI): prints kill rates.

For each module (all of them by default, or those named on the command line) the script
copies the checkout, tracked and untracked-but-not-ignored files as they are on disk, into a
temporary directory, appends a ``[tool.mutmut]`` section that mutates that one module and
runs only the fast unit tests that exercise it (``-m "not integration"``), runs
``mutmut run`` there, and prints one line per module: mutants, killed, timed out, survived,
not run by any selected test, other, and the kill rate (killed and timed out over all
mutants, so a mutant no selected test runs counts against it). The working tree is never
touched: mutmut writes ``mutants/`` in the copy.

    .venv/bin/pip install -e '.[test,mutation]'
    .venv/bin/python scripts/mutation.py                     # every module
    .venv/bin/python scripts/mutation.py diff --show-survivors
    .venv/bin/python scripts/mutation.py --jobs 2 --keep     # keep the copies to browse

The test selections are narrow on purpose: the machine's cores are shared, so a module
takes minutes, not an hour. Equivalent mutants (a change no test can observe) are listed in
docs/testing.md; they stay as survivors.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True, slots=True)
class Target:
    """One module to mutate and the unit tests that judge it."""

    name: str
    module: str
    tests: tuple[str, ...]


LAYER_TESTS = (
    "tests/layers",
    "tests/cli/test_cli_edges.py::test_root_level_whiteout_removes_the_directory",
)
# analysis also holds the dir: walk and the cache format, exercised through audits
ANALYSIS_TESTS = (
    *LAYER_TESTS,
    "tests/audit/test_audit_synthetic.py",
    "tests/cli/test_cli_edges.py::test_dir_audit_does_not_follow_symlinks_out_of_the_root",
    "tests/cli/test_cli_edges.py::test_egg_info_is_read_as_importlib_metadata_reads_it",
)
TARGETS = (
    Target(
        "rules",
        "src/pinguard/policy/rules.py",
        ("tests/policy/test_rules.py", "tests/policy/test_engine.py"),
    ),
    Target(
        "diff",
        "src/pinguard/audit/diff.py",
        ("tests/audit/test_diff.py", "tests/audit/test_audit_synthetic.py"),
    ),
    Target("analysis", "src/pinguard/layers/analysis.py", ANALYSIS_TESTS),
    Target("tar", "src/pinguard/layers/tar.py", LAYER_TESTS),
    Target("blob", "src/pinguard/layers/blob.py", LAYER_TESTS),
)


def copy_checkout(dest: Path) -> None:
    """Copy the files git knows of (or would: untracked, not ignored), as they are on disk."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    for raw in listed:
        if not raw:
            continue
        rel = raw.decode()
        src = ROOT / rel
        if not src.is_file():
            continue  # deleted in the working tree
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)


def mutmut_section(target: Target) -> str:
    def toml_list(items: tuple[str, ...] | list[str]) -> str:
        return "[" + ", ".join(json.dumps(i) for i in items) + "]"

    return (
        "\n[tool.mutmut]\n"
        'source_paths = ["src/"]\n'
        f"only_mutate = {toml_list([target.module])}\n"
        f"pytest_add_cli_args_test_selection = {toml_list(target.tests)}\n"
        'pytest_add_cli_args = ["-m", "not integration", "-p", "no:cacheprovider", "-x"]\n'
        # tests still import the demo image writer and read the shipped policies
        'also_copy = ["examples/", "policies/"]\n'
        "use_git_change_detection = false\n"
        # a mutant that loops (a chunk reader that never advances) should cost seconds
        "timeout_multiplier = 4.0\n"
    )


@dataclass(frozen=True, slots=True)
class Outcome:
    """mutmut's counts for one module; a mutant no selected test runs counts as not killed."""

    target: Target
    killed: int
    survived: int
    no_tests: int
    timeout: int
    other: int  # suspicious, segfault, interrupted
    survivors: tuple[str, ...]

    @property
    def total(self) -> int:
        return self.killed + self.survived + self.no_tests + self.timeout + self.other

    @property
    def rate(self) -> float:
        return (self.killed + self.timeout) / self.total if self.total else 0.0


def run_target(target: Target, jobs: int, keep: bool, show: bool) -> Outcome:
    work = Path(tempfile.mkdtemp(prefix=f"pinguard-mutation-{target.name}-"))
    try:
        copy_checkout(work)
        with (work / "pyproject.toml").open("a", encoding="utf-8") as f:
            f.write(mutmut_section(target))
        mutmut = [sys.executable, "-m", "mutmut"]
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        run = subprocess.run(
            [*mutmut, "run", "--max-children", str(jobs)],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if run.returncode != 0:
            sys.stderr.write(run.stdout[-4000:] + run.stderr[-4000:])
            raise SystemExit(f"mutation: mutmut run failed for {target.module!r}")
        subprocess.run(
            [*mutmut, "export-cicd-stats"], cwd=work, env=env, check=True, capture_output=True
        )
        stats = json.loads((work / "mutants" / "mutmut-cicd-stats.json").read_text())
        listing = subprocess.run(
            [*mutmut, "results"], cwd=work, env=env, check=True, capture_output=True, text=True
        ).stdout
        survivors = tuple(
            line.split(":")[0].strip()
            for line in listing.splitlines()
            if line.endswith(": survived")
        )
        if show:
            for name in survivors:
                shown = subprocess.run(
                    [*mutmut, "show", name],
                    cwd=work,
                    env=env,
                    capture_output=True,
                    text=True,
                    check=False,
                )
                print(shown.stdout)
        counts = {k: int(v) for k, v in stats.items()}
        known = ("killed", "survived", "no_tests", "timeout", "skipped")
        other = counts["total"] - sum(counts.get(k, 0) for k in known)
        return Outcome(
            target,
            counts["killed"],
            counts["survived"],
            counts.get("no_tests", 0),
            counts.get("timeout", 0),
            other,
            survivors,
        )
    finally:
        if keep:
            print(f"mutation: kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="modules: " + ", ".join(t.name for t in TARGETS))
    parser.add_argument("--jobs", type=int, default=2, help="mutants tested at once (default 2)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary copies")
    parser.add_argument("--show-survivors", action="store_true", help="print surviving mutants")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.names) - {t.name for t in TARGETS})
    if unknown:
        parser.error(f"unknown module(s): {', '.join(unknown)}")
    wanted = [t for t in TARGETS if not args.names or t.name in args.names]
    header = ("module", "mutants", "killed", "timeout", "survived", "no tests", "other", "rate")
    print("{:32} {:>7} {:>6} {:>7} {:>8} {:>8} {:>5} {:>6}".format(*header), flush=True)
    for target in wanted:
        o = run_target(target, args.jobs, args.keep, args.show_survivors)
        print(
            f"{o.target.module:32} {o.total:7} {o.killed:6} {o.timeout:7} {o.survived:8} "
            f"{o.no_tests:8} {o.other:5} {o.rate:6.1%}"
        )
        for name in o.survivors:
            print(f"  not killed: {name}")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
