"""``-o FILE`` that cannot be written: a clear error, exit 2, and the old file intact.

The faults are real: a "directory" that is a regular file (the file's own folder, or one
above it: missing folders are created, as trivy's ``-o`` does), and a file size limit
(RLIMIT_FSIZE, with SIGXFSZ ignored, so writes fail with EFBIG as on a full disk) set in a
child process that runs the real command line. Tests run as root, so
permission bits alone cannot make a directory unwritable; these faults do not depend on them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pinguard.cli import main
from pinguard.testing.demo import build_demo


@pytest.fixture
def demo(tmp_path: Path) -> str:
    path = tmp_path / "demo.tar"
    build_demo(path, tag="t")
    return f"oci-archive:{path}:t"


@pytest.mark.parametrize("where", ["file-above-missing-dir", "file-as-dir"])
def test_unwritable_output_path(
    demo: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    blocker = tmp_path / "plain-file"
    blocker.write_text("not a directory")
    target = (
        blocker / "nope" / "r.json" if where == "file-above-missing-dir" else blocker / "r.json"
    )
    code = main(["audit", demo, "--no-cache", "--format", "json", "-o", str(target)])
    _, err = capsys.readouterr()
    assert code == 2
    assert f"cannot write {str(target)!r}" in err
    assert "Traceback" not in err
    assert blocker.read_text() == "not a directory"


_LIMITED = """
import resource, signal, sys
from pinguard.cli import main
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
sys.exit(main(sys.argv[1:]))
"""


def test_full_disk_keeps_the_old_file(demo: str, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    report.write_text("the previous report\n")
    proc = subprocess.run(
        [
            *(sys.executable, "-c", _LIMITED, "audit", demo),
            *("--no-cache", "--format", "json", "-o", str(report)),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    assert f"cannot write {str(report)!r}: File too large" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert report.read_text() == "the previous report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo.tar", "report.json"]
