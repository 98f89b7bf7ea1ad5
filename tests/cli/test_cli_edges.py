"""Command-line behaviour that the story tests did not pin down, with hand-written expectations.

The table the README describes, ``--no-cache`` neither reading nor writing (a poisoned cache
entry shows the difference), several ``--policy`` files combining in order, ``===raw`` pins in
constraints, ``plan``'s exit 2, the gate's exit 1 on an incomplete image, exit 130 on
Ctrl-C (a real SIGINT to a real process blocked on a socket), egg-info metadata read as
``importlib.metadata`` reads it, a root-level whiteout (``/.wh.opt``) removing ``/opt``, and
a ``dir:`` walk that does not follow symlinks out of the root. Images are written with
``tarfile`` into tmp_path.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version

from pinguard.audit.pipeline import audit_directory, audit_image
from pinguard.cache.entry import seal
from pinguard.cli import main
from pinguard.models import ChangeKind
from pinguard.testing.demo import Dist, Layer, build_demo, demo_layers, write_oci_archive
from tests.infra.cli import PINGUARD_WITH_CTRL_C

NCCL_ROW = "│ nvidia-nccl-cu13   │ downgraded │ 2.30.3 -> 2.29.7 "


@pytest.fixture
def demo(tmp_path: Path) -> str:
    path = tmp_path / "demo.tar"
    build_demo(path, tag="t")
    return f"oci-archive:{path}:t"


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# --------------------------------------------------------------------------- the table


def test_table_shows_the_readme_story(demo: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Step 6 downgrades NCCL because torch 2.12.1+cu130 pins it, pulled in by flashinfer."""
    code, out, _ = run_cli(capsys, "audit", demo, "--no-cache")
    assert code == 1
    lines = out.splitlines()
    summary = [ln.split()[1] for ln in lines if ln.startswith("  step ")]
    assert summary == ["1", "3", "4", "6"]  # steps 2 and 5 changed nothing
    # step 1 only populated the new environment (pip): counted in the summary, not listed
    steps = [ln.split("  ")[0] for ln in lines if ln.startswith("step ")]
    assert steps == ["step 3", "step 4", "step 6"]
    (row,) = [i for i, ln in enumerate(lines) if ln.startswith(NCCL_ROW)]
    assert "torch 2.12.1+cu130 requires nvidia-nccl-cu13==2.29.7" in lines[row]
    assert "flashinfer-python 0.6.18.dev20261120 requires torch>=2.12" in lines[row + 2]
    assert any(
        ln.startswith("│ torch              │ upgraded   │ 2.11.0+cu130 -> 2.12.1+cu130 ")
        for ln in lines
    )
    (env_row,) = [ln for ln in lines if ln.startswith("│ /usr/local/lib/python3.12/site-packages")]
    assert [c.strip() for c in env_row.split("│")[2:-1]] == ["3.12", "6", "6", "1", "2"]
    findings = [ln for ln in lines if ln.startswith("│ error ")]
    assert [f.split("│")[2].strip() for f in findings] == ["downgrade", "downgrade"]
    assert [f.split("│")[4].strip() for f in findings] == ["nvidia-cutlass-dsl", "nvidia-nccl-cu13"]
    assert lines[-1] == "verdict: fail (findings at error or above: 2 errors)"


# --------------------------------------------------------------------------- --no-cache


def test_no_cache_neither_reads_nor_writes(
    demo: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A poisoned entry is used with the cache and ignored with --no-cache; nothing is written."""
    cache = tmp_path / "cache"

    def nccl_after(*extra: str) -> str:
        code, out, _ = run_cli(capsys, "audit", demo, "--format", "json", *extra)
        assert code == 1
        doc = json.loads(out)
        return next(
            str(c["after"])
            for s in doc["steps"]
            for c in s["changes"]
            if c["name"] == "nvidia-nccl-cu13" and c["kind"] == "downgraded"
        )

    assert run_cli(capsys, "audit", demo, "--cache-dir", str(cache), "--format", "json")[0] == 1
    (entry,) = [p for p in cache.iterdir() if b"Version: 2.29.7\\n" in p.read_bytes()]
    entry.write_bytes(entry.read_bytes().replace(b"Version: 2.29.7\\n", b"Version: 2.29.1\\n"))
    # an entry edited after it was written fails its content digest and is read again
    assert nccl_after("--cache-dir", str(cache)) == "2.29.7"
    # re-sealed, as a writer of whole entries could, the poison is what a cached run sees
    entry.write_bytes(entry.read_bytes().replace(b"Version: 2.29.7\\n", b"Version: 2.29.1\\n"))
    data = json.loads(entry.read_text())
    del data["content"]
    entry.write_text(seal(data))
    for replay in cache.glob("replay-*.json"):  # a replay never reads the layer entries
        replay.unlink()
    for result in cache.glob("result-*.json"):  # nor does a result (the report itself)
        result.unlink()

    assert nccl_after("--cache-dir", str(cache)) == "2.29.1"  # the poison is read
    before = {p.name: p.read_bytes() for p in cache.iterdir()}  # with that run's replay
    assert nccl_after("--cache-dir", str(cache), "--no-cache") == "2.29.7"
    assert {p.name: p.read_bytes() for p in cache.iterdir()} == before

    home = tmp_path / "xdg"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    assert nccl_after("--no-cache") == "2.29.7"
    assert not home.exists()  # the default cache directory was not created either
    assert nccl_after() == "2.29.7"
    assert any(home.rglob("*.json"))  # ... and without --no-cache it is


# --------------------------------------------------------------------------- --policy order


def test_policy_files_combine_in_order(
    demo: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Later files override [rules.*] key by key; [[pin]] entries accumulate."""
    first = tmp_path / "first.toml"
    first.write_text(
        '[rules.downgrade]\nseverity = "error"\nallow = ["nvidia-cutlass-dsl"]\n\n'
        '[[pin]]\npackage = "numpy"\nversion = "<2"\nreason = "ABI"\n'
    )
    second = tmp_path / "second.toml"
    second.write_text(
        '[rules.downgrade]\nseverity = "warning"\n\n'
        '[[pin]]\npackage = "torch"\nversion = "<2.12"\nreason = "fabric"\n'
    )

    def findings(*policies: Path) -> list[tuple[str, str, str]]:
        args = [a for p in policies for a in ("--policy", str(p))]
        code, out, _ = run_cli(capsys, "audit", demo, "--no-cache", "--format", "json", *args)
        assert code in (0, 1)
        return sorted((f["rule"], f["package"], f["severity"]) for f in json.loads(out)["findings"])

    assert findings(first, second) == [
        ("downgrade", "nvidia-nccl-cu13", "warning"),  # severity from second, allow from first
        ("pin-violation", "numpy", "error"),
        ("pin-violation", "torch", "error"),
    ]
    assert findings(second, first) == [
        ("downgrade", "nvidia-nccl-cu13", "error"),  # first's severity wins when it comes last
        ("pin-violation", "numpy", "error"),
        ("pin-violation", "torch", "error"),
    ]


# --------------------------------------------------------------------------- constraints


def test_constraints_write_non_pep440_versions_as_arbitrary_equality(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A known-good version packaging cannot parse is pinned as name===raw, which pip reads."""
    raw = "2024.11-custom"
    with pytest.raises(InvalidVersion):
        Version(raw)
    layers = demo_layers()
    layers[0] = dataclasses.replace(layers[0], add=[*layers[0].add, Dist("vendor-tool", raw)])
    path = tmp_path / "x.tar"
    write_oci_archive(layers, path, tag="t")
    code, out, _ = run_cli(capsys, "constraints", f"oci-archive:{path}:t", "--no-cache")
    assert code == 0
    pins = [ln for ln in out.splitlines() if ln and not ln.startswith("#")]
    assert pins == [
        "numpy==2.3.5",
        "nvidia-cutlass-dsl==4.3.0",
        "nvidia-nccl-cu13==2.30.3",
        "torch==2.11.0+cu130",  # pip itself is left out (no --allow-unsafe)
        "vendor-tool===2024.11-custom",
    ]
    req = Requirement(pins[-1])
    assert [(s.operator, s.version) for s in req.specifier] == [("===", raw)]


# --------------------------------------------------------------------------- plan and gate


def test_plan_exit_2_without_a_command_or_when_uv_cannot_resolve(
    demo: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No step after --, a step that is not an install, or an unresolvable one: exit 2."""
    code, _, err = run_cli(capsys, "plan", demo, "--no-cache")
    assert code == 2
    assert "give the step after --" in err
    assert run_cli(capsys, "plan", demo, "--no-cache", "--", "pip", "list")[0] == 2
    empty = tmp_path / "empty-index"
    empty.mkdir()
    code, _, err = run_cli(
        capsys,
        "plan",
        demo,
        "--no-cache",
        "--index-url",
        empty.as_uri(),
        "--",
        "pip",
        "install",
        "no-such-dist==1.0",
    )
    assert code == 2
    assert "uv could not resolve the step" in err


def test_gate_fails_on_an_incomplete_image_unless_allowed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A METADATA without Version makes the image incomplete: gate exit 1, 0 with the flag
    (and --allow-no-python: the one distribution was its only Python environment)."""
    site = "usr/lib/python3/dist-packages"
    broken = {f"{site}/broken-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: broken\n"}
    path = tmp_path / "x.tar"
    write_oci_archive([Layer("RUN base", files={**broken, "usr/lib/python3.11/os.py": b""})], path)
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM debian\nRUN pip install -c /c.txt x\n")
    argv = ["gate", "--dockerfile", str(dockerfile), "--image", f"oci-archive:{path}"]
    code, out, _ = run_cli(capsys, *argv, "--no-cache")
    assert code == 1
    assert f"/{site}/broken-1.0.dist-info" in out
    assert run_cli(capsys, *argv, "--no-cache", "--allow-incomplete")[0] == 1
    assert run_cli(capsys, *argv, "--no-cache", "--allow-incomplete", "--allow-no-python")[0] == 0


# --------------------------------------------------------------------------- exit 130


@pytest.fixture
def silent_server() -> Iterator[tuple[int, threading.Event]]:
    """A TCP port on 127.0.0.1 that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    connected = threading.Event()
    held: list[socket.socket] = []

    def accept() -> None:
        try:
            conn, _ = server.accept()
        except OSError:
            return
        held.append(conn)
        connected.set()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], connected
    server.close()
    for conn in held:
        conn.close()


def test_ctrl_c_exits_130(silent_server: tuple[int, threading.Event], tmp_path: Path) -> None:
    """SIGINT while waiting on a registry: one error line and exit 130, no traceback."""
    port, connected = silent_server
    proc = subprocess.Popen(
        [*PINGUARD_WITH_CTRL_C, "audit", f"docker://127.0.0.1:{port}/x:y", "--no-cache"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "HOME": str(tmp_path)},
    )
    try:
        assert connected.wait(60), "pinguard never connected"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert err.strip().splitlines() == ["pinguard: error: interrupted"]


# --------------------------------------------------------------------------- egg-info


def test_egg_info_is_read_as_importlib_metadata_reads_it(tmp_path: Path) -> None:
    """Name, version and requires.txt (sections as extras and markers) match importlib.metadata."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python3*/site-packages"))
    egg = site / "Legacy_Tool-1.4.2-py3.11.egg-info"
    egg.mkdir()
    (egg / "PKG-INFO").write_text("Metadata-Version: 1.1\nName: Legacy-Tool\nVersion: 1.4.2\n")
    (egg / "requires.txt").write_text(
        "six>=1.10\n\n[test]\npytest>=7\n\n[:python_version < '3.8']\nimportlib-metadata\n"
    )
    (egg / "top_level.txt").write_text("legacy_tool\n")
    real = next(iter(importlib.metadata.distributions(path=[str(site)])))
    result = audit_directory(str(venv))
    (d,) = result.final.environments[0].distributions
    assert (d.name, d.raw_version) == ("legacy-tool", "1.4.2")
    assert (real.metadata["Name"], real.version) == ("Legacy-Tool", "1.4.2")
    ours = sorted(str(Requirement(r)) for r in d.requires_dist)
    theirs = sorted(str(Requirement(r)) for r in real.requires or [])
    assert ours == theirs
    assert ours == sorted(
        [
            "six>=1.10",
            'pytest>=7; extra == "test"',
            'importlib-metadata; python_version < "3.8"',
        ]
    )
    assert d.metadata_path.endswith("/site-packages/Legacy_Tool-1.4.2-py3.11.egg-info")


# --------------------------------------------------------------------------- whiteouts


def test_root_level_whiteout_removes_the_directory(tmp_path: Path) -> None:
    """A layer with /.wh.opt deletes everything under /opt, venv included."""
    venv_site = "opt/venv/lib/python3.12/site-packages"
    layers = [
        Layer(
            "ADD rootfs", add=[Dist("pip", "25.0.1")], files={"usr/local/lib/python3.12/os.py": b""}
        ),
        Layer(
            "RUN python3 -m venv /opt/venv && pip install x",
            add=[Dist("x", "1.0", site=venv_site)],
            files={"opt/venv/pyvenv.cfg": b"version = 3.12.7\n"},
        ),
        Layer("RUN rm -rf /opt", files={".wh.opt": b""}),
    ]
    path = tmp_path / "x.tar"
    write_oci_archive(layers, path, tag="t")
    result = audit_image(f"oci-archive:{path}:t")
    envs = [e.path for e in result.final.environments]
    assert envs == ["/usr/local/lib/python3.12/site-packages"]
    removed = [(c.name, c.kind) for c in result.steps[-1].changes]
    assert removed == [("x", ChangeKind.REMOVED)]


def test_dir_audit_does_not_follow_symlinks_out_of_the_root(tmp_path: Path) -> None:
    """A symlinked directory or dist-info pointing outside the root is not read."""
    outside = tmp_path / "outside"
    for rel, data in Dist("escaped", "6.6.6", site="").files().items():
        target = outside / rel.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python3*/site-packages"))
    for rel, data in Dist("inside", "1.0", site="").files().items():
        target = site / rel.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    (site / "escaped-6.6.6.dist-info").symlink_to(outside / "escaped-6.6.6.dist-info")
    (site / "linked-tree").symlink_to(outside, target_is_directory=True)
    result = audit_directory(str(venv))
    names = sorted(d.name for e in result.final.environments for d in e.distributions)
    assert names == ["inside"]
