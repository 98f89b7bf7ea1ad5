"""A stdout that cannot take a command's output is one error line and exit 2, never a traceback.

Real CLI processes on a real OCI layout, with stdout as a CI job or a shell can leave it:
``/dev/full`` (a full disk: every write fails with ENOSPC), closed (``>&-``, a daemon's), and a
pipe whose reader has gone (``| head`` after it read its fill). The report, the table, the
comparison and a plain line (``pinguard version``) each fail the same way, on the parsed route
and on a warm audit answered before parsing (``cli/warm.answer``). Exit 2 is never a verdict:
an image that passes exits 2, not 0, when its report could not be written; with ``-o`` the
closed stdout is no error and the verdict stands.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.factories import installed_dist
from tests.infra.registry import Layout, build_oci_layout

_RUN = """
import json, sys
from pinguard.cli import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "parsed": "argparse" in sys.modules}), file=sys.stderr)
sys.exit(code)
"""


@pytest.fixture
def upgrade(tmp_path: Path) -> Layout:
    """An image whose second layer upgrades foo 1.0 to 2.0: the default policy passes it."""
    return build_oci_layout(
        tmp_path / "layout", tag="t", layers=[installed_dist("1.0"), installed_dist("2.0")]
    )


class Run:
    def __init__(self, code: int, stderr: str) -> None:
        lines = stderr.splitlines()
        probe = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else None
        self.code = code
        self.parsed = probe["parsed"] if probe else None
        self.err = "\n".join(lines[:-1] if probe else lines)


def _full() -> int:
    return os.open("/dev/full", os.O_WRONLY)


def _reader_gone() -> int:
    read, write = os.pipe()
    os.close(read)
    return write


def _run(stdout: Callable[[], int] | None, *argv: str, cwd: Path) -> Run:
    """``pinguard argv`` with stdout on what ``stdout`` opens, or closed (None)."""
    fd = stdout() if stdout is not None else None
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _RUN, *argv],
            stdin=subprocess.DEVNULL,
            stdout=fd if fd is not None else subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
            check=False,
            cwd=cwd,
            # closed: the child starts with no fd 1, as ``>&-`` leaves it
            preexec_fn=(lambda: os.close(1)) if fd is None else None,
        )
    finally:
        if fd is not None:
            os.close(fd)
    return Run(proc.returncode, proc.stderr)


def _one_error(run: Run, message: str) -> None:
    assert "Traceback" not in run.err, run.err
    assert run.err == f"pinguard: error: {message}", run.err
    assert run.code == 2


STREAMS = {
    "full": (_full, "No space left on device"),
    "closed": (None, "stdout is closed"),
    "reader gone": (_reader_gone, "its reader closed the pipe"),
}


@pytest.mark.parametrize("stream", sorted(STREAMS))
def test_a_report_that_cannot_reach_stdout_is_exit_2_cold_and_warm(
    stream: str, upgrade: Layout, tmp_path: Path
) -> None:
    opener, why = STREAMS[stream]
    cache = str(tmp_path / "cache")
    audit = ("audit", upgrade.source, "--format", "json")
    # the image passes: what a stdout that takes the report gets
    ok = _run(lambda: os.open(os.devnull, os.O_WRONLY), *audit, "--cache-dir", cache, cwd=tmp_path)
    assert (ok.code, ok.err) == (0, "")
    warm = _run(opener, *audit, "--cache-dir", cache, cwd=tmp_path)
    assert warm.parsed is False  # the quick answer wrote it, before any parsing
    _one_error(warm, f"cannot write the json report to stdout: {why}")
    cold = _run(opener, *audit, "--no-cache", cwd=tmp_path)
    assert cold.parsed is True
    _one_error(cold, f"cannot write the json report to stdout: {why}")


@pytest.mark.parametrize("stream", sorted(STREAMS))
def test_a_table_a_comparison_and_a_line_fail_the_same_way(
    stream: str, upgrade: Layout, tmp_path: Path
) -> None:
    opener, why = STREAMS[stream]
    table = _run(opener, "audit", upgrade.source, "--no-cache", cwd=tmp_path)
    _one_error(table, f"cannot write to stdout: {why}")
    compare = ("compare", upgrade.source, upgrade.source, "--format", "json", "--no-cache")
    _one_error(
        _run(opener, *compare, cwd=tmp_path), f"cannot write the json comparison to stdout: {why}"
    )
    _one_error(_run(opener, "version", cwd=tmp_path), f"cannot write to stdout: {why}")


def test_with_o_a_closed_stdout_is_no_error(upgrade: Layout, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    run = _run(
        None,
        "audit",
        upgrade.source,
        "--format",
        "json",
        "--no-cache",
        "-o",
        str(out),
        cwd=tmp_path,
    )
    assert run.code == 0, run.err
    assert run.err == f"wrote the json report ({out.stat().st_size} bytes) to {out}"
    assert json.loads(out.read_text())["verdict"] == "pass"
