"""Every command that takes an image reads its reference the way ``audit`` does (issue 28).

The first hour with references, through the real CLI: the demo OCI archive in the working
directory, a real registry (Debian's ``docker-registry`` on 127.0.0.1) holding the same image,
a ``.invalid`` registry name (RFC 6761: it never resolves, so nothing leaves this machine) and
a loopback port nothing listens on. A missing path is ``no such file: PATH`` from every
command, at once; an uppercase name says names are lowercase; a registry that cannot be
reached is ``could not reach HOST`` without waiting through retries; ``verify`` of a local
archive checks envelope files against it or says it needs a registry, never taking the file
name for a registry host; ``attest --push`` takes a bare registry name; and ``probe`` runs a
local image archive (a small image holding this machine's own Python, built with buildah).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pinguard.testing.demo import Dist, Layer, build_demo, write_oci_archive
from tests.infra.cli import cli_streams
from tests.infra.keys import ec_key_pair
from tests.infra.native import build_so
from tests.infra.registry import RegistryServer, start_registry
from tests.infra.tools import require_tool

UNRESOLVABLE = "registry.pinguard-test.invalid"
TAG = "2026-11-29"
#: the demo's downgrades as warnings: the demo passes at --fail-on error, so it can be attested
#: as passing and verified
POLICY = '[rules.downgrade]\nseverity = "warning"\n'
#: how long a command may take to fail on a reference it can judge without the network, or on
#: a host that refuses or does not resolve (retrying a DNS failure five times took 8-10 s)
PROMPT_S = 4.0


@dataclass(frozen=True)
class Work:
    """The working directory every command runs in, and what lies in it."""

    root: Path
    demo_digest: str  # the manifest digest of demo.tar


@pytest.fixture(scope="module")
def module_work(tmp_path_factory: pytest.TempPathFactory) -> Work:
    root = tmp_path_factory.mktemp("references")
    digest = build_demo(root / "demo.tar", tag=TAG)
    (root / "policy.toml").write_text(POLICY)
    (root / "Dockerfile").write_text("FROM scratch\nRUN pip install torch\n")
    ec_key_pair(root, "key")
    return Work(root=root, demo_digest=digest)


@pytest.fixture
def work(module_work: Work, monkeypatch: pytest.MonkeyPatch) -> Work:
    """In the working directory, with no daemon (a bare name goes to its registry) and a
    cache of its own."""
    monkeypatch.chdir(module_work.root)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{module_work.root}/no-daemon.sock")
    monkeypatch.setenv("XDG_CACHE_HOME", str(module_work.root / "cache"))
    return module_work


def timed(*argv: str) -> tuple[int, str, str, float]:
    start = time.monotonic()
    code, out, err = cli_streams(*argv)
    return code, out, err, time.monotonic() - start


def error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("pinguard: error: ")]
    assert len(lines) == 1, err
    return lines[0].removeprefix("pinguard: error: ")


def reported(command: str, out: str, err: str) -> str:
    """What the command said went wrong: its error line, or for gate, whose reports record an
    unreadable image (exit 3) as an error, that line of its report."""
    if command == "gate" and "pinguard: error: " not in err:
        lines = [line for line in out.splitlines() if ": cannot be read: " in line]
        assert len(lines) == 1, out
        return lines[0].split(": cannot be read: ", 1)[1]
    return error_line(err)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def commands(ref: str) -> dict[str, list[str]]:
    """Each command that takes an image, given ``ref`` where it takes it."""
    return {
        "audit": ["audit", ref, "--no-cache"],
        "compare": ["compare", "demo.tar", ref, "--no-cache"],
        "constraints": ["constraints", ref, "--no-cache", "-o", "c.txt"],
        "plan": ["plan", ref, "--no-cache", "--", "pip", "install", "six"],
        "gate": ["gate", "--dockerfile", "Dockerfile", "--image", ref, "--policy", "policy.toml"],
        "attest": ["attest", ref, "--policy", "policy.toml", "--key", "key.pem", "-o", "s.json"],
        "verify": ["verify", ref, "--key", "key.pub"],
        "probe": ["probe", ref, "--import", "json"],
    }


COMMANDS = tuple(commands("x"))


# --------------------------------------------------------------------------- one reading


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(
    ("ref", "shown"),
    [("./missing.tar", "./missing.tar"), ("missing.tar:v1", "missing.tar")],
)
def test_a_missing_path_is_no_such_file_from_every_command(
    work: Work, command: str, ref: str, shown: str
) -> None:
    """Not 'invalid image reference', not Docker Hub's library/missing.tar after 9 s."""
    code, out, err, elapsed = timed(*commands(ref)[command])
    assert (code, reported(command, out, err)) == (3, f"no such file: {shown}"), err
    assert elapsed < PROMPT_S, elapsed


@pytest.mark.parametrize("command", COMMANDS)
def test_an_uppercase_name_says_why_from_every_command(work: Work, command: str) -> None:
    """Not "unknown transport 'Python'"."""
    code, _, err, _ = timed(*commands("Python:3.12")[command])
    assert (code, error_line(err)) == (
        2,
        "invalid image reference 'Python:3.12': repository name must be lowercase",
    ), err


@pytest.mark.parametrize("command", [c for c in COMMANDS if c != "probe"])
@pytest.mark.parametrize("form", ["bare", "docker://"])
def test_a_registry_name_that_does_not_resolve_fails_at_once(
    work: Work, command: str, form: str
) -> None:
    """One attempt, the host named in the README's words, exit 3."""
    ref = f"{UNRESOLVABLE}/team/serving:1"
    code, out, err, elapsed = timed(
        *commands(ref if form == "bare" else f"docker://{ref}")[command]
    )
    line = reported(command, out, err)
    assert code == 3, err
    assert f"could not reach {UNRESOLVABLE}: name does not resolve: " in line
    assert line.endswith("(after 1 attempt)")
    assert elapsed < PROMPT_S, elapsed


def test_a_refused_registry_is_retried_briefly(work: Work) -> None:
    address = f"127.0.0.1:{closed_port()}"
    code, _, err, elapsed = timed("audit", f"{address}/team/serving:1", "--no-cache")
    assert code == 3, err
    assert error_line(err) == (
        f"manifest 1 of {address}/team/serving: could not reach {address}: connection refused "
        "(after 3 attempts)"
    )
    assert elapsed < PROMPT_S, elapsed


# --------------------------------------------------------------------------- verify, attest


@pytest.mark.parametrize("ref", ["demo.tar", "./demo.tar", f"oci-archive:demo.tar:{TAG}"])
def test_verify_of_a_local_archive_without_envelopes_says_what_it_is(work: Work, ref: str) -> None:
    """Exit 2 naming what REF is; never 'invalid registry host', never Docker Hub."""
    code, _, err, elapsed = timed("verify", ref, "--key", "key.pub")
    assert code == 2, err
    assert error_line(err).startswith(
        f"verify needs a registry reference to find attestations; {ref} is a local OCI archive"
    )
    assert "--attestation FILE" in err
    assert elapsed < PROMPT_S


def test_attest_and_verify_a_local_archive_by_its_envelope(work: Work) -> None:
    """attest -o on the archive, then verify the archive against that envelope: the subject
    is the archive's own manifest digest (another image's is refused)."""
    code, _, err = cli_streams(
        "attest", "demo.tar", "--policy", "policy.toml", "--key", "key.pem", "-o", "demo.dsse"
    )
    assert code == 0, err
    code, out, err = cli_streams(
        "verify", "demo.tar", "--attestation", "demo.dsse", "--key", "key.pub", "-f", "json"
    )
    assert code == 0, err
    doc = json.loads(out)
    assert (doc["reference"], doc["image_digest"], doc["result"]) == (
        "oci-archive:demo.tar",
        work.demo_digest,
        "verified",
    )
    other = work.root / "other.tar"
    other_digest = write_oci_archive(
        [Layer("ADD rootfs /", add=[Dist("six", "1.16.0")])], other, tag="t"
    )
    code, out, err = cli_streams(
        "verify", "other.tar", "--attestation", "demo.dsse", "--key", "key.pub", "-f", "json"
    )
    assert code == 1, err
    doc = json.loads(out)
    assert doc["image_digest"] == other_digest
    assert any(
        f"not the image {other_digest}" in reason
        for check in doc["attestations"]
        for reason in check["reasons"]
    ), doc


def test_attest_push_of_a_local_archive_says_what_it_is(work: Work) -> None:
    for ref, what in (
        ("demo.tar", "is a local OCI archive"),
        ("./missing.tar", "names a local path (no such file: ./missing.tar)"),
    ):
        code, _, err = cli_streams(
            "attest", ref, "--policy", "policy.toml", "--key", "key.pem", "--push"
        )
        assert code == 2, err
        assert error_line(err) == (
            f"--push needs a registry reference (docker://HOST/REPO:TAG); {ref} {what}"
        )


@pytest.fixture(scope="module")
def registry(module_work: Work, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real registry holding the demo as team/demo:1; yields ``127.0.0.1:PORT``."""
    server: RegistryServer = start_registry(tmp_path_factory.mktemp("registry"))
    try:
        server.push(f"oci-archive:{module_work.root / 'demo.tar'}:{TAG}", "team/demo:1")
        yield server.address
    finally:
        server.stop()


def test_attest_push_and_verify_take_a_bare_registry_name(work: Work, registry: str) -> None:
    """``HOST/REPO:TAG`` without docker:// is what audit takes: attest --push reads the
    registry's copy and attaches there, and verify finds it by the same name."""
    ref = f"{registry}/team/demo:1"
    code, _, err = cli_streams(
        "attest", ref, "--policy", "policy.toml", "--key", "key.pem", "--push"
    )
    assert code == 0, err
    assert f"to {work.demo_digest} (via " in err  # attached to the registry's manifest
    for name in (ref, f"docker://{ref}"):
        code, out, err = cli_streams("verify", name, "--key", "key.pub", "-f", "json")
        assert code == 0, err
        doc = json.loads(out)
        assert (doc["reference"], doc["image_digest"]) == (f"docker://{ref}", work.demo_digest)


# --------------------------------------------------------------------------- probe


def _copy_file(src: Path, root: Path) -> None:
    dest = root / str(src).lstrip("/")
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(os.path.realpath(src), dest)


def _ldd(path: Path) -> list[Path]:
    out = subprocess.run(
        [require_tool("ldd"), str(path)], check=True, capture_output=True, text=True
    ).stdout
    paths = [Path(w) for line in out.splitlines() for w in line.split() if w.startswith("/")]
    return [p for p in paths if p.exists()]


@dataclass(frozen=True)
class PythonImage:
    archive: Path  # an OCI archive, tagged TAG
    python: str  # the interpreter's path inside it


@pytest.fixture(scope="module")
def python_image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PythonImage]:
    """An image holding this machine's Python (the interpreter, its extension modules, the
    libraries ldd names and the part of the standard library the probe's script imports;
    about 20 MB), an NCCL stand-in in
    /opt/nccl and a library in /opt/app that needs it through its RPATH; committed by buildah
    as an OCI archive (never stored), then removed from storage once probe has imported it."""
    buildah = require_tool("buildah")
    work = tmp_path_factory.mktemp("python-image")
    root = work / "root"
    python = Path(os.path.realpath(sys.executable))
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    dynload = stdlib / "lib-dynload"
    needed = [python, *_ldd(python)]
    for extension in dynload.glob("*.so"):  # some builds make _struct or math one of these
        needed += [extension, *_ldd(extension)]
    for path in needed:
        _copy_file(path, root)
    target = root / str(stdlib).lstrip("/")
    for module in stdlib.glob("*.py"):
        shutil.copy2(module, target / module.name)
    for package in ("encodings", "json", "ctypes", "importlib", "collections", "re"):
        if (stdlib / package).is_dir():
            shutil.copytree(stdlib / package, target / package, dirs_exist_ok=True)
    nccl = build_so(work / "libnccl.so.2", soname="libnccl.so.2")
    user = build_so(work / "libuser.so", soname="libuser.so", needed=[nccl], rpath=["/opt/nccl"])
    (root / "opt/nccl").mkdir(parents=True)
    (root / "opt/app").mkdir(parents=True)
    shutil.copy2(nccl, root / "opt/nccl/libnccl.so.2")
    shutil.copy2(user, root / "opt/app/libuser.so")
    name = f"pinguard-test-probe-{uuid.uuid4().hex[:8]}"
    archive = work / f"{name}.tar"

    def run(*argv: str) -> str:
        done = subprocess.run([buildah, *argv], check=True, capture_output=True, text=True)
        return done.stdout.strip()

    container = run("from", "scratch").splitlines()[-1]
    try:
        run("copy", container, str(root), "/")
        run("config", "--env", "PATH=/usr/local/bin:/usr/bin:/bin", container)
        run("commit", "--quiet", container, f"oci-archive:{archive}:{name}")
    finally:
        subprocess.run([buildah, "rm", container], capture_output=True, check=False)
    yield PythonImage(archive=archive, python=str(python))
    # probe imports the archive into local storage, as podman would; leave nothing behind
    subprocess.run([buildah, "rmi", f"localhost/{name}:latest"], capture_output=True, check=False)


def test_probe_runs_a_local_archive(
    python_image: PythonImage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plain path and ``oci-archive:PATH:TAG`` both run: the process maps the NCCL the
    library's RPATH finds, and the audit of the same root predicts that file."""
    monkeypatch.chdir(python_image.archive.parent)
    row = {
        "soname": "libnccl.so.2",
        "observed": "/opt/nccl/libnccl.so.2",
        "predicted": ["/opt/nccl/libnccl.so.2"],
        "basis": "search",
        "agrees": True,
    }
    name = python_image.archive.name
    tag = name.removesuffix(".tar")
    for ref, shown in ((name, f"oci-archive:{name}"), (f"oci-archive:{name}:{tag}", None)):
        code, out, err = cli_streams(
            "probe",
            ref,
            "--load",
            "/opt/app/libuser.so",
            "--python",
            python_image.python,
            "-f",
            "json",
        )
        assert code == 0, err
        doc = json.loads(out)
        assert doc["image"] == (shown or ref)
        assert doc["libraries"] == [row]


def test_probe_refuses_a_root_filesystem(work: Work) -> None:
    """A directory is audited as a root filesystem, but there is no image to run."""
    (work.root / "rootfs").mkdir(exist_ok=True)
    for ref in ("rootfs", "dir:rootfs"):
        code, _, err = cli_streams("probe", ref, "--import", "json")
        assert code == 2, err
        assert error_line(err).startswith(f"probe runs an image; {ref} is a local root filesystem")
