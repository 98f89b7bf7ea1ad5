"""The dpkg status database, read the way dpkg itself reads it.

The status file is hand-written with the cases that matter (continuation lines that look
like fields, removed packages keeping config files, half-installed, held, Multi-Arch: same
packages on two architectures); the expected set comes from ``dpkg-query`` run on the same
file. In an audit, whiting out or replacing /var/lib/dpkg updates the packages.
"""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

from pinguard.audit.state import State
from pinguard.catalog import AnalyzerOptions, Analyzers
from pinguard.catalog.dpkg import STATUS, DpkgAnalyzer, parse_status
from pinguard.layers.analysis import LayerAnalysis, analyze_stream
from pinguard.layers.tar import CAPTURE, SKIP
from pinguard.models import DebPackage
from pinguard.testing.images import layer_tar
from tests.infra.tools import require_tool

STATUS_TEXT = """\
Package: libnccl2
Status: install ok installed
Maintainer: cudatools <cudatools@nvidia.com>
Architecture: amd64
Version: 2.30.3-1+cuda13.0
Description: NVIDIA Collective Communication Library (NCCL) Runtime
 NCCL (pronounced "Nickel") is a stand-alone library.
 .
 Package: not-a-package
 Status: install ok installed

Package: oldpkg
Status: deinstall ok config-files
Maintainer: nobody <nobody@example.invalid>
Architecture: all
Version: 1.0
Description: removed, config kept

Package: half
Status: install ok half-installed
Maintainer: nobody <nobody@example.invalid>
Architecture: amd64
Version: 0.1
Description: interrupted

Package: python3.11
Status: hold ok installed
Maintainer: nobody <nobody@example.invalid>
Architecture: amd64
Version: 3.11.2-6+deb12u6
Description: held at this version

Package: libc6
Status: install ok installed
Maintainer: nobody <nobody@example.invalid>
Architecture: arm64
Multi-Arch: same
Version: 2.36-9+deb12u10
Description: GNU C Library

Package: libc6
Status: install ok installed
Maintainer: nobody <nobody@example.invalid>
Architecture: amd64
Multi-Arch: same
Version: 2.36-9+deb12u10
Description: GNU C Library
"""


def _dpkg_installed(tmp_path: Path) -> set[tuple[str, str, str]]:
    """What dpkg-query reports as installed (status letter 'i') for the same status file."""
    require_tool("dpkg-query")
    admin = tmp_path / "dpkg"
    (admin / "info").mkdir(parents=True)
    (admin / "updates").mkdir()
    (admin / "status").write_text(STATUS_TEXT)
    out = subprocess.run(
        [
            "dpkg-query",
            f"--admindir={admin}",
            "-W",
            "-f",
            "${Package}\t${Version}\t${Architecture}\t${db:Status-Abbrev}\n",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = [line.split("\t") for line in out.splitlines()]
    return {(n, v, a) for n, v, a, abbrev in rows if abbrev[1] == "i"}


def test_installed_packages_match_dpkg_query(tmp_path: Path) -> None:
    """Exactly the packages dpkg calls installed, sorted by name then architecture."""
    got = parse_status(STATUS_TEXT.encode())
    assert set(got) == _dpkg_installed(tmp_path)
    assert [(name, arch) for name, _, arch in got] == [
        ("libc6", "amd64"),
        ("libc6", "arm64"),
        ("libnccl2", "amd64"),
        ("python3.11", "amd64"),
    ]


def test_analyzer_wants_only_the_status_file() -> None:
    """The status database is captured; its backups and the info files are not."""
    analyzer = DpkgAnalyzer()
    assert analyzer.wants(STATUS) == CAPTURE
    for path in ("/var/lib/dpkg/status-old", "/var/lib/dpkg/info/libc6.list", "/status"):
        assert analyzer.wants(path) == SKIP


def _layer(files: dict[str, bytes], whiteouts: tuple[str, ...] = ()) -> LayerAnalysis:
    tar = layer_tar(files, whiteouts=whiteouts)
    select = Analyzers.for_options(AnalyzerOptions()).selector()
    return analyze_stream(io.BytesIO(tar), digest=None, size=None, select=select)


def test_state_follows_status_rewrites_and_whiteouts() -> None:
    """A later apt step's status replaces the earlier one; whiting out /var/lib/dpkg or an
    opaque /var/lib empties the package list."""
    one = STATUS_TEXT.split("\n\n", maxsplit=1)[0] + "\n"
    state = State()
    first = state.apply(_layer({STATUS.lstrip("/"): STATUS_TEXT.encode()}))
    assert len(first.debs) == 4
    second = state.apply(_layer({STATUS.lstrip("/"): one.encode()}))
    assert second.debs == (DebPackage("libnccl2", "2.30.3-1+cuda13.0", "amd64"),)
    assert state.apply(_layer({}, whiteouts=("var/lib/.wh.dpkg",))).debs == ()
    state.apply(_layer({STATUS.lstrip("/"): one.encode()}))
    assert state.apply(_layer({}, whiteouts=("var/lib/.wh..wh..opq",))).debs == ()
