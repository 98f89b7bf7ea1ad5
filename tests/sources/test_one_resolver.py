"""One reading of a reference's text for every command (issue 28): ``resolve_reference``.

What the text names is decided before anything is fetched, from real files (the demo OCI
archive, a skopeo copy of it as a docker-archive and as an OCI layout, a directory) and real
hosts (a ``.invalid`` name, which RFC 6761 guarantees never resolves, and a loopback port
nothing listens on). A path that names nothing is ``no such file: PATH`` at once, never a
registry request; a ``NAME:TAG`` breaking docker's rules says which rule; a registry host
that cannot be reached is ``could not reach HOST: CAUSE (after N attempts)``, and a name that
does not resolve is not retried.
"""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from pinguard.errors import ImageNotFound, InvalidReference, SourceError
from pinguard.sources import open_source, resolve_reference
from pinguard.sources.interface import SourceOptions
from pinguard.sources.registry import RegistrySource, RegistryUnreachable
from pinguard.testing.demo import build_demo
from tests.infra.tools import require_tool

#: a name RFC 6761 reserves: its lookup fails without any traffic leaving this machine
UNRESOLVABLE = "registry.pinguard-test.invalid"
TAG = "2026-11-29"


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.fixture
def no_daemon(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> SourceOptions:
    """Options (and $DOCKER_HOST) naming a daemon socket that does not exist, so a bare
    reference goes straight to its registry wherever the tests run."""
    host = f"unix://{tmp_path}/no-daemon.sock"
    monkeypatch.setenv("DOCKER_HOST", host)
    return SourceOptions(docker_host=host)


@pytest.fixture
def demo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The demo OCI archive as ``demo.tar`` in the working directory."""
    monkeypatch.chdir(tmp_path)
    build_demo(tmp_path / "demo.tar", tag=TAG)
    return tmp_path / "demo.tar"


# --------------------------------------------------------------------------- what text names


def test_local_paths_get_their_transport_and_a_note(demo: Path) -> None:
    """A plain path is read by content: the reference says which transport, what it is, and
    that it lives in no registry; PATH:TAG keeps the tag."""
    ref = resolve_reference("demo.tar")
    assert (ref.transport, ref.rest, ref.canonical) == (
        "oci-archive",
        "demo.tar",
        "oci-archive:demo.tar",
    )
    assert ref.kind == "local OCI archive"
    assert ref.registry_name is None
    assert ref.note == "demo.tar is a local OCI archive: read as oci-archive:demo.tar"
    tagged = resolve_reference(f"./demo.tar:{TAG}")
    assert tagged.canonical == f"oci-archive:./demo.tar:{TAG}"
    # the same archive named with its transport: the same reading, no note
    explicit = resolve_reference(f"oci-archive:demo.tar:{TAG}")
    assert (explicit.transport, explicit.rest, explicit.note) == (
        "oci-archive",
        f"demo.tar:{TAG}",
        "",
    )
    # and opened, it is that archive
    source = open_source("demo.tar")
    try:
        resolved = source.resolve()
    finally:
        source.close()
    assert resolved.transport == "oci-archive"
    assert ref.note in resolved.notes


def test_other_local_forms_are_told_apart(demo: Path, tmp_path: Path) -> None:
    """skopeo's docker-archive and OCI layout of the same image, and a plain directory."""
    skopeo = require_tool("skopeo")
    for dest in (f"docker-archive:{tmp_path / 'saved.tar'}", f"oci:{tmp_path / 'layout'}:{TAG}"):
        subprocess.run(
            [skopeo, "--insecure-policy", "copy", "--quiet", f"oci-archive:{demo}:{TAG}", dest],
            check=True,
            capture_output=True,
            timeout=300,
        )
    (tmp_path / "rootfs").mkdir()
    kinds = {
        "saved.tar": ("docker-archive", "local docker-archive (docker save tar)"),
        "layout": ("oci", "local OCI layout"),
        "rootfs": ("dir", "local root filesystem"),
    }
    for text, (transport, kind) in kinds.items():
        ref = resolve_reference(text)
        assert (ref.transport, ref.kind, ref.registry_name) == (transport, kind, None), text


def test_registry_names_keep_their_name(no_daemon: SourceOptions) -> None:
    """A bare name and a docker:// reference both name a registry image; only the first is
    left to the daemon-then-registry choice."""
    bare = resolve_reference("127.0.0.1:5000/team/app:1")
    assert (bare.transport, bare.registry_name) == (None, "127.0.0.1:5000/team/app:1")
    explicit = resolve_reference("docker://127.0.0.1:5000/team/app:1")
    assert (explicit.transport, explicit.registry_name) == ("docker", "127.0.0.1:5000/team/app:1")
    assert explicit.kind == "registry image"
    daemon = resolve_reference("docker-daemon:app:1")
    assert (daemon.registry_name, daemon.kind) == (None, "Docker daemon image")


# --------------------------------------------------------------------------- what is wrong


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("./missing.tar", "./missing.tar"),
        ("../missing/layout", "../missing/layout"),
        ("/nonexistent/pinguard/image.tar", "/nonexistent/pinguard/image.tar"),
        ("missing.tar", "missing.tar"),  # a docker repository could be so named; an archive is
        ("out/missing.tar:v1", "out/missing.tar"),  # PATH:TAG names PATH
        ("missing.tar.gz", "missing.tar.gz"),
        ("oci-archive:missing.tar", "missing.tar"),
        ("docker-archive:missing.tar:app:1", "missing.tar"),
    ],
)
def test_a_path_that_names_nothing_is_no_such_file_at_once(
    demo: Path, no_daemon: SourceOptions, text: str, shown: str
) -> None:
    """Never sent to Docker Hub as library/...: one ImageNotFound (exit 3) naming the path."""
    start = time.monotonic()
    with pytest.raises(ImageNotFound) as info:
        open_source(text, no_daemon).resolve()
    assert str(info.value) == f"no such file: {shown}"
    assert info.value.exit_code == 3
    assert time.monotonic() - start < 1.0


def test_a_home_path_that_names_nothing(
    demo: Path, no_daemon: SourceOptions, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``~/x.tar`` (quoted, so no shell expanded it) is the home directory's path."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with pytest.raises(ImageNotFound, match=r"^no such file: .*/home/missing\.tar$"):
        open_source("~/missing.tar", no_daemon)
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "demo.tar").write_bytes(demo.read_bytes())
    assert resolve_reference("~/demo.tar").canonical == f"oci-archive:{tmp_path}/home/demo.tar"


def test_a_missing_layout_or_root_is_no_such_directory(tmp_path: Path) -> None:
    for text in (f"oci:{tmp_path}/none:{TAG}", f"dir:{tmp_path}/none"):
        with pytest.raises(ImageNotFound, match=f"^no such directory: {tmp_path}/none$"):
            open_source(text)


@pytest.mark.parametrize(
    "text", ["Python:3.12", "Team/App:1", "docker://Python:3.12", "localhost:5000/Team/app"]
)
def test_an_uppercase_name_says_names_are_lowercase(text: str) -> None:
    """As docker and skopeo say it ("repository name must be lowercase"), not "unknown
    transport 'Python'"."""
    with pytest.raises(InvalidReference) as info:
        open_source(text)
    assert str(info.value) == f"invalid image reference {text!r}: repository name must be lowercase"
    assert info.value.exit_code == 2


def test_a_real_unknown_transport_is_still_one(tmp_path: Path) -> None:
    """``word:PATH`` (no tag after the colon) is a transport pinguard does not know."""
    with pytest.raises(InvalidReference, match=r"unknown transport 'xyz'.*known: docker://, "):
        open_source("xyz:/some/path")


# --------------------------------------------------------------------------- hosts


def test_a_name_that_does_not_resolve_is_not_retried(no_daemon: SourceOptions) -> None:
    """With the default retries (4), a DNS failure is one attempt, named as such."""
    start = time.monotonic()
    with pytest.raises(RegistryUnreachable) as info:
        RegistrySource(f"{UNRESOLVABLE}/team/app:1", SourceOptions()).resolve()
    elapsed = time.monotonic() - start
    message = str(info.value)
    assert f"could not reach {UNRESOLVABLE}: name does not resolve: " in message
    assert message.endswith("(after 1 attempt)")
    assert info.value.exit_code == 3
    assert elapsed < 3.0, elapsed
    # a bare name goes the same way (no daemon here), through the one resolver
    with pytest.raises(RegistryUnreachable, match=f"could not reach {UNRESOLVABLE}"):
        open_source(f"{UNRESOLVABLE}/team/app:1", no_daemon).resolve()


def test_a_refused_connection_is_retried_briefly() -> None:
    """Connection refused: two retries with backoff (about 1.5 s), then one line."""
    address = f"127.0.0.1:{closed_port()}"
    start = time.monotonic()
    with pytest.raises(RegistryUnreachable) as info:
        RegistrySource(f"{address}/team/app:1", SourceOptions()).resolve()
    elapsed = time.monotonic() - start
    assert str(info.value) == (
        f"manifest 1 of {address}/team/app: could not reach {address}: connection refused "
        "(after 3 attempts)"
    )
    assert 1.0 < elapsed < 5.0, elapsed


def test_a_host_that_answered_is_not_unreachable(tmp_path: Path) -> None:
    """A server that accepts and closes without answering was reached: that stays 'request
    to HOST failed', retried as before, and is no RegistryUnreachable."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    address = f"127.0.0.1:{server.getsockname()[1]}"
    server.settimeout(10)

    def close_each() -> None:
        for _ in range(2):
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.close()

    thread = threading.Thread(target=close_each, daemon=True)
    thread.start()
    try:
        with pytest.raises(SourceError) as info:
            RegistrySource(f"{address}/team/app:1", SourceOptions(max_retries=1)).resolve()
    finally:
        thread.join(timeout=10)
        server.close()
    assert not isinstance(info.value, RegistryUnreachable)
    assert f"request to {address} failed after 2 attempts: ConnectionError" in str(info.value)
