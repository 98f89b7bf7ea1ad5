"""Tests of the local transports: oci:, oci-archive:, docker-archive:, docker-daemon:, dir:
and the reference dispatcher, over a real image built by buildah and exported by skopeo, a
podman API socket, hand-written multi-platform OCI layouts, and a fake legacy docker daemon."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import io
import json
import os
import socketserver
import subprocess
import sys
import tarfile
import threading
import time
import types
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pinguard import target as tg
from pinguard.errors import ImageNotFound, InvalidReference, SourceError
from pinguard.models import Platform
from pinguard.sources import (
    DAEMON_NOTE,
    REGISTRY_NOTE,
    ImageSource,
    LayerRef,
    ResolvedImage,
    SourceOptions,
    UnpackedTree,
    open_source,
    split_transport,
)
from pinguard.sources import manifest as mf
from pinguard.sources import mediatypes as mt
from pinguard.sources.daemon import DaemonSource, history_from_docker
from pinguard.sources.rootfs import DirSource
from pinguard.testing.images import ImageWriter, layer_tar
from pinguard.testing.images import sha256_digest as sha256
from tests.infra.registry import _Handler, _Server
from tests.infra.tools import require_root, require_tool

# --------------------------------------------------------------------------- helpers


def tar_bytes(files: dict[str, bytes]) -> bytes:
    return layer_tar(files, mtime=0)


def stream_all(source: ImageSource, resolved: ResolvedImage) -> dict[str, str]:
    """Hash every blob as ``iter_blobs`` yields it; check the declared size when known."""
    seen: dict[str, str] = {}
    for layer, stream in source.iter_blobs(resolved.layers):
        hasher = hashlib.sha256()
        total = 0
        while chunk := stream.read(1 << 16):
            hasher.update(chunk)
            total += len(chunk)
        if layer.size is not None:
            assert total == layer.size
        seen[layer.digest] = "sha256:" + hasher.hexdigest()
    return seen


def run(*argv: str) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 0, f"{argv!r} failed: {proc.stdout}{proc.stderr}"
    return proc.stdout


# --------------------------------------------------------------------------- a real image


CONTAINERFILE = """\
FROM scratch
COPY a.txt /data/a.txt
ENV STAGE=one
COPY b.txt /data/b.txt
LABEL purpose=pinguard-tests
COPY c/ /opt/c/
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A 3-layer image with 2 empty steps in containers-storage, plus its skopeo exports."""
    require_root()
    for tool in ("buildah", "skopeo"):
        require_tool(tool)
    from tests.infra.build import build_image, image_config, remove_image

    work = tmp_path_factory.mktemp("local-sources")
    context = work / "context"
    (context / "c").mkdir(parents=True)
    (context / "a.txt").write_text("alpha\n")
    (context / "b.txt").write_text("beta\n" * 1000)
    (context / "c" / "one.py").write_text("print(1)\n")
    (context / "c" / "two.py").write_text("print(2)\n")
    tag = f"localhost/pinguard-test/local-sources:{uuid.uuid4().hex[:12]}"
    started = time.monotonic()
    result = build_image(context, CONTAINERFILE, tag)
    assert result.returncode == 0, result.log
    config = image_config(tag)
    exports = {
        "oci": work / "layout",
        "oci-archive": work / "image.oci.tar",
        "docker-archive": work / "image.docker.tar",
    }
    run("skopeo", "copy", "-q", f"containers-storage:{tag}", f"oci:{exports['oci']}:v1")
    run(
        "skopeo",
        "copy",
        "-q",
        f"containers-storage:{tag}",
        f"oci-archive:{exports['oci-archive']}:v1",
    )
    run(
        "skopeo",
        "copy",
        "-q",
        f"containers-storage:{tag}",
        f"docker-archive:{exports['docker-archive']}:{tag}",
    )
    yield {
        "tag": tag,
        "config": config,
        "exports": exports,
        "work": work,
        "build_seconds": time.monotonic() - started,
    }
    remove_image(tag)


@pytest.fixture(scope="module")
def podman(built: dict[str, Any]) -> Iterator[Any]:
    """A podman API service on a private socket, serving buildah's storage."""
    require_tool("podman")
    from tests.infra.podman import podman_service

    with podman_service(built["work"] / "podman") as service:
        yield service


def expected_history(config: dict[str, Any]) -> list[tuple[str, bool]]:
    return [(h.get("created_by", ""), bool(h.get("empty_layer"))) for h in config["history"]]


def check_against_build(resolved: ResolvedImage, config: dict[str, Any]) -> None:
    diff_ids = config["rootfs"]["diff_ids"]
    assert len(diff_ids) == 3
    assert [layer.diff_id for layer in resolved.layers] == diff_ids
    assert expected_history(resolved.config) == expected_history(config)
    assert [e for _, e in expected_history(config)] == [False, True, False, True, False]
    assert resolved.platform == Platform("linux", config["architecture"])


# --------------------------------------------------------------------------- real exports


@pytest.mark.integration
@pytest.mark.parametrize("transport", ["oci", "oci-archive", "docker-archive"])
def test_exports_resolve_to_the_built_image_and_stream_verified_blobs(
    built: dict[str, Any], transport: str
) -> None:
    """Every file transport resolves the built image's diff ids and history, and each
    streamed blob hashes to its declared digest (diff id for docker-archive)."""
    suffix = "" if transport == "docker-archive" else ":v1"
    ref = f"{transport}:{built['exports'][transport]}{suffix}"
    with open_source(ref, SourceOptions()) as source:
        resolved = source.resolve()
        assert resolved.transport == transport
        assert resolved.reference == ref
        check_against_build(resolved, built["config"])
        if transport == "docker-archive":
            assert resolved.manifest_digest is None
            assert all(layer.digest == layer.diff_id for layer in resolved.layers)
        else:
            assert resolved.manifest_digest is not None
            assert resolved.manifest_digest.startswith("sha256:")
        streamed = stream_all(source, resolved)
        assert streamed == {layer.digest: layer.digest for layer in resolved.layers}
        # random access too, in reverse order, from a fresh handle each time
        for layer in reversed(resolved.layers):
            with source.open_blob(layer) as stream:
                assert sha256(stream.read()) == layer.digest


@pytest.mark.integration
def test_docker_archive_selects_by_tag_and_index(built: dict[str, Any]) -> None:
    """docker-archive:PATH:REF matches RepoTags (ignoring localhost/), @0 picks by position,
    and an absent tag lists the present ones."""
    path = built["exports"]["docker-archive"]
    short = built["tag"].removeprefix("localhost/")
    for suffix in (f":{built['tag']}", f":{short}", ":@0"):
        resolved = open_source(f"docker-archive:{path}{suffix}").resolve()
        assert [x.diff_id for x in resolved.layers] == built["config"]["rootfs"]["diff_ids"]
    with pytest.raises(ImageNotFound, match=r"tags present: .*local-sources"):
        open_source(f"docker-archive:{path}:nope:1").resolve()
    with pytest.raises(ImageNotFound, match="no image tagged 'nope'"):
        open_source(f"oci:{built['exports']['oci']}:nope").resolve()


@pytest.mark.integration
def test_legacy_docker_save_layout(built: dict[str, Any], tmp_path: Path) -> None:
    """A legacy ``<v1id>/layer.tar`` docker save archive (real files, no symlinks) resolves
    and streams like the skopeo one."""
    src = open_source(f"docker-archive:{built['exports']['docker-archive']}")
    resolved = src.resolve()
    config_bytes = json.dumps(resolved.config).encode()
    files = {f"{sha256(config_bytes)[7:]}.json": config_bytes}
    names = []
    for i, layer in enumerate(resolved.layers):
        with src.open_blob(layer) as stream:
            files[f"{i:064x}/layer.tar"] = stream.read()
        files[f"{i:064x}/VERSION"] = b"1.0"
        names.append(f"{i:064x}/layer.tar")
    files["manifest.json"] = json.dumps(
        [{"Config": f"{sha256(config_bytes)[7:]}.json", "RepoTags": ["app:1"], "Layers": names}]
    ).encode()
    archive = tmp_path / "legacy.tar"
    archive.write_bytes(tar_bytes(files))
    with open_source(f"docker-archive:{archive}:app:1") as legacy:
        again = legacy.resolve()
        assert again.layers == resolved.layers
        assert stream_all(legacy, again) == {x.digest: x.digest for x in again.layers}


# --------------------------------------------------------------------------- the daemon


@pytest.mark.integration
def test_daemon_resolves_and_streams_the_export_once(
    built: dict[str, Any], podman: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docker-daemon: over podman's API gives the built diff ids and exact history, and one
    pass over /images/{name}/get yields every layer with the right digest."""
    options = SourceOptions(docker_host=podman.docker_host)
    with open_source(f"docker-daemon:{built['tag']}", options) as source:
        assert source.parallel_safe is False
        resolved = source.resolve()
        check_against_build(resolved, built["config"])
        assert all(x.digest == x.diff_id and x.size is None for x in resolved.layers)
        calls: list[str] = []
        original = source.client.request  # type: ignore[attr-defined]

        def counting(path: str, what: str) -> Any:
            calls.append(path)
            return original(path, what)

        monkeypatch.setattr(source.client, "request", counting)  # type: ignore[attr-defined]
        streamed = stream_all(source, resolved)
        assert streamed == {x.digest: x.digest for x in resolved.layers}
        assert [c for c in calls if c.endswith("/get")] == [calls[0]]
        assert len(calls) == 1
        with source.open_blob(resolved.layers[1]) as stream:
            assert sha256(stream.read()) == resolved.layers[1].digest
    # $DOCKER_HOST is honoured when the options say nothing
    monkeypatch.setenv("DOCKER_HOST", podman.docker_host)
    assert open_source(f"docker-daemon:{built['tag']}").resolve().layers == resolved.layers


@pytest.mark.integration
def test_daemon_docker_history_inference_matches_podman(built: dict[str, Any], podman: Any) -> None:
    """Docker's /images/{name}/history has no empty_layer; the inference from sizes gives
    the same flags as the real config."""
    status, body = podman.get(f"/images/{built['tag']}/history")
    assert status == 200
    history, matched = history_from_docker(json.loads(body), 3)
    assert matched
    assert expected_history({"history": history}) == expected_history(built["config"])


@pytest.mark.integration
def test_daemon_missing_image_and_platform(built: dict[str, Any], podman: Any) -> None:
    """A missing image is ImageNotFound; an explicit other platform lists the present one."""
    options = SourceOptions(docker_host=podman.docker_host)
    with pytest.raises(ImageNotFound):
        open_source("docker-daemon:localhost/pinguard-test/absent:1", options).resolve()
    other = Platform("linux", "s390x")
    with pytest.raises(ImageNotFound, match=r"linux/s390x; present: linux/"):
        DaemonSource(
            built["tag"], SourceOptions(docker_host=podman.docker_host, platform=other)
        ).resolve()


class _NoRootFSHandler(_Handler):
    """Forwards GETs to podman's socket, dropping ``RootFS`` from image inspects (an old API)."""

    def do_GET(self) -> None:
        status, body = self.owner.podman.get(self.path)
        if status == 200 and self.path.split("?")[0].endswith("/json"):
            info = json.loads(body)
            if isinstance(info, dict) and "RootFS" in info:
                del info["RootFS"]
                body = json.dumps(info).encode()
        self._reply(status, body, {"Content-Type": "application/json"})


@pytest.mark.integration
def test_daemon_inspect_without_rootfs_is_an_error(built: dict[str, Any], podman: Any) -> None:
    """An image inspect with no RootFS is an error, never an image without layers."""
    with _Server(_NoRootFSHandler) as front:
        front.podman = podman  # type: ignore[attr-defined]
        options = SourceOptions(docker_host=f"tcp://{front.address}")
        with pytest.raises(SourceError, match=r"image inspect has no RootFS\.Layers"):
            DaemonSource(built["tag"], options).resolve()


@pytest.mark.integration
def test_bare_reference_prefers_the_daemon(
    built: dict[str, Any], podman: Any, fake_registry: list[str]
) -> None:
    """A bare NAME:TAG the daemon has resolves there and says so; one it lacks goes to the
    registry, which also says so."""
    options = SourceOptions(docker_host=podman.docker_host)
    resolved = open_source(built["tag"], options).resolve()
    assert DAEMON_NOTE in resolved.notes
    assert resolved.reference == built["tag"]
    assert [x.diff_id for x in resolved.layers] == built["config"]["rootfs"]["diff_ids"]
    notes = open_source("localhost/pinguard-test/absent:1", options).resolve().notes
    assert any(n.startswith(REGISTRY_NOTE) and "does not have it" in n for n in notes)
    assert fake_registry == ["localhost/pinguard-test/absent:1"]


@pytest.fixture
def fake_registry(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Stand-in for pinguard.sources.registry (another engineer's module)."""
    opened: list[str] = []

    class RegistrySource(ImageSource):
        def __init__(self, ref: str, options: SourceOptions) -> None:
            opened.append(ref)
            self.ref = ref

        def resolve(self) -> ResolvedImage:
            return ResolvedImage(self.ref, "docker", None, None)

        def open_blob(self, layer: LayerRef) -> Any:
            raise AssertionError("not used")

    module = types.ModuleType("pinguard.sources.registry")
    module.RegistrySource = RegistrySource  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pinguard.sources.registry", module)
    return opened


def test_bare_reference_without_a_socket_goes_to_the_registry(fake_registry: list[str]) -> None:
    """No daemon socket: the bare reference goes straight to the registry with a note."""
    options = SourceOptions(docker_host="unix:///nonexistent/pinguard.sock")
    resolved = open_source("localhost:5000/team/app:1", options).resolve()
    assert fake_registry == ["localhost:5000/team/app:1"]
    assert any("no daemon socket" in n for n in resolved.notes)
    open_source("docker://localhost:5000/team/app:1", options)
    assert fake_registry[-1] == "localhost:5000/team/app:1"


# --------------------------------------------------------------------------- a fake legacy docker


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def _legacy_daemon_handler(
    info: dict[str, Any], history: list[dict[str, Any]], export: bytes
) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        exports = 0

        def address_string(self) -> str:
            return "unix"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            name = "/images/app:1"
            if self.path == f"{name}/json":
                self._send(200, json.dumps(info).encode())
            elif self.path == f"{name}/history":
                self._send(200, json.dumps(history).encode())
            elif self.path == f"{name}/get":
                type(self).exports += 1
                self._send(200, export, "application/x-tar")
            else:
                self._send(404, b'{"message": "No such image"}')

    return Handler


def test_daemon_legacy_export_two_passes(tmp_path: Path) -> None:
    """A docker daemon whose export names layers ``<v1id>/layer.tar`` and has no libpod API:
    history comes from /history with inferred empty layers, layers from a hashed first pass
    and a second streamed pass."""
    layers = [tar_bytes({"a": b"1"}), tar_bytes({"b": b"2" * 5000})]
    ids = [sha256(x) for x in layers]
    info = {
        "Id": "sha256:" + "f" * 64,
        "Architecture": tg.host_platform().architecture,
        "Os": "linux",
        "Config": {"Env": ["A=1"]},
        "RootFS": {"Type": "layers", "Layers": ids},
    }
    history = [  # newest first, as docker returns it
        {"Created": 1700000003, "CreatedBy": "/bin/sh -c pip install b", "Size": 5120},
        {"Created": 1700000002, "CreatedBy": "/bin/sh -c #(nop)  ENV A=1", "Size": 0},
        {"Created": 1700000001, "CreatedBy": "/bin/sh -c #(nop) ADD file:x in /", "Size": 3},
    ]
    # v1 ids sort in the opposite order of the layers
    files = {"zz/layer.tar": layers[0], "aa/layer.tar": layers[1], "manifest.json": b"[]"}
    handler = _legacy_daemon_handler(info, history, tar_bytes(files))
    sock = tmp_path / "docker.sock"
    server = _UnixHTTPServer(str(sock), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        source = open_source("docker-daemon:app:1", SourceOptions(docker_host=f"unix://{sock}"))
        resolved = source.resolve()
        assert [x.diff_id for x in resolved.layers] == ids
        assert [
            (h["created_by"][-9:], bool(h.get("empty_layer"))) for h in resolved.config["history"]
        ] == [
            ("ADD file:x in /"[-9:], False),
            ("  ENV A=1"[-9:], True),
            ("install b"[-9:], False),
        ]
        assert resolved.config["history"][0]["created"] == "2023-11-14T22:13:21Z"
        assert stream_all(source, resolved) == {d: d for d in ids}
        assert handler.exports == 2  # type: ignore[attr-defined]
        with pytest.raises(ImageNotFound, match="No such image"):
            open_source(
                "docker-daemon:other:1", SourceOptions(docker_host=f"unix://{sock}")
            ).resolve()
    finally:
        server.shutdown()
        server.server_close()


def test_daemon_unreachable_is_a_source_error(tmp_path: Path) -> None:
    """An absent socket is a SourceError naming the host, not a crash."""
    source = DaemonSource("app:1", SourceOptions(docker_host=f"unix://{tmp_path}/none.sock"))
    with pytest.raises(SourceError, match=r"could not reach the Docker daemon at .*none\.sock"):
        source.resolve()


# --------------------------------------------------------------------------- multi-platform OCI


def make_multiplatform_layout(layout: Path, nested: bool) -> Path:
    """amd64 and arm64/v8 images plus an attestation-like unknown/unknown entry; either an
    index tagged ``multi`` inside index.json (itself without a mediaType), or the platform
    manifests listed directly."""
    writer = ImageWriter(layout)
    images = []
    for plat in ("linux/amd64", "linux/arm64/v8"):
        arch = plat.split("/", 2)[1]
        layer = writer.layer(layer_tar({"etc/arch": arch.encode()}, mtime=0))
        history: list[dict[str, object]] = [
            {"created_by": f"COPY arch-{arch} /etc/arch"},
            {"created_by": "ENV X=1", "empty_layer": True},
        ]
        images.append(writer.image([layer], history, platform=plat, env=()))
    entries = [img.manifest.to_json(platform=img.platform) for img in images]
    entries.append(dict(entries[0], platform={"os": "unknown", "architecture": "unknown"}))
    if nested:
        index = {"schemaVersion": 2, "mediaType": mt.OCI_INDEX, "manifests": entries}
        desc = writer.blob(json.dumps(index).encode(), mt.OCI_INDEX)
        top = {
            "schemaVersion": 2,
            "manifests": [desc.to_json(annotations={mf.REF_NAME_ANNOTATION: "multi"})],
        }
    else:
        top = {"schemaVersion": 2, "mediaType": mt.OCI_INDEX, "manifests": entries[:2]}
    writer.write_layout(top)
    return layout


def tar_directory(src: Path, dest: Path) -> Path:
    with tarfile.open(dest, "w") as tar:
        for path in sorted(src.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(src)), recursive=False)
    return dest


@pytest.mark.parametrize("nested", [True, False], ids=["nested-index", "top-level-entries"])
@pytest.mark.parametrize("transport", ["oci", "oci-archive"])
def test_multiplatform_layout_picks_a_platform(
    tmp_path: Path, nested: bool, transport: str
) -> None:
    """linux/arm64 picks the arm64/v8 manifest; an absent platform lists the present ones;
    the default is this machine's architecture."""
    layout = make_multiplatform_layout(tmp_path / "layout", nested)
    path = layout if transport == "oci" else tar_directory(layout, tmp_path / "layout.tar")
    ref = f"{transport}:{path}" + (":multi" if nested else "")
    source = open_source(ref, SourceOptions(platform=Platform("linux", "arm64")))
    resolved = source.resolve()
    assert resolved.platform == Platform("linux", "arm64", "v8")
    assert resolved.config["architecture"] == "arm64"
    assert resolved.config["history"][1]["empty_layer"] is True
    assert stream_all(source, resolved) == {x.digest: x.digest for x in resolved.layers}
    with source.open_blob(resolved.layers[0]) as stream:
        layer_tar = gzip.decompress(stream.read())
    with tarfile.open(fileobj=io.BytesIO(layer_tar)) as inner:
        member = inner.extractfile("etc/arch")
        assert member is not None
        assert member.read() == b"arm64"
    with pytest.raises(ImageNotFound, match=r"linux/s390x; present: linux/amd64, linux/arm64/v8$"):
        open_source(ref, SourceOptions(platform=Platform("linux", "s390x"))).resolve()
    with pytest.raises(ImageNotFound, match=r"present: .*linux/arm64/v8"):
        open_source(ref, SourceOptions(platform=Platform("linux", "arm64", "v7"))).resolve()
    default = tg.host_platform()
    if default.architecture in ("amd64", "arm64"):
        assert open_source(ref).resolve().config["architecture"] == default.architecture


def test_corrupt_manifest_blob_is_a_verification_error(tmp_path: Path) -> None:
    """A manifest blob whose bytes do not match its digest is refused."""
    from pinguard.errors import BlobVerificationError

    layout = make_multiplatform_layout(tmp_path / "layout", nested=False)
    entry = json.loads((layout / "index.json").read_text())["manifests"][1]
    blob = layout / "blobs" / "sha256" / entry["digest"][7:]
    blob.write_bytes(blob.read_bytes().replace(b'schemaVersion": 2', b'schemaVersion":  2'))
    with pytest.raises(BlobVerificationError):
        open_source(f"oci:{layout}", SourceOptions(platform=Platform("linux", "arm64"))).resolve()


# --------------------------------------------------------------------------- references


@pytest.mark.parametrize(
    ("reference", "expected"),
    [
        ("docker://localhost:5000/team/app:1", ("docker", "localhost:5000/team/app:1")),
        ("docker-daemon:app:1", ("docker-daemon", "app:1")),
        ("docker-archive:/x/y.tar:app:1", ("docker-archive", "/x/y.tar:app:1")),
        ("oci:/x/layout:tag", ("oci", "/x/layout:tag")),
        ("oci-archive:rel.tar", ("oci-archive", "rel.tar")),
        ("dir:/", ("dir", "/")),
        ("python:3.11", (None, "python:3.11")),
        ("localhost:5000/team/app:1", (None, "localhost:5000/team/app:1")),
        (
            "registry.example:443/a/b@sha256:" + "a" * 64,
            (None, "registry.example:443/a/b@sha256:" + "a" * 64),
        ),
        ("oci:5000/repo", ("oci", "5000/repo")),  # a known transport wins, as in skopeo
        ("xyz:abc", (None, "xyz:abc")),  # a valid docker reference: image xyz, tag abc
    ],
)
def test_split_transport(reference: str, expected: tuple[str | None, str]) -> None:
    """Transports are told apart from host:port/repo and from NAME:TAG."""
    assert split_transport(reference) == expected


@pytest.mark.parametrize(
    ("reference", "message"),
    [
        ("", "invalid image reference ''"),
        (" oci:x", "invalid image reference ' oci:x'"),
        ("xyz:/some/path", "unknown transport 'xyz'"),
        ("xyz://host/repo", "unknown transport 'xyz'"),
        ("docker:app:1", "written docker://"),
        ("Not A Reference", "invalid image reference 'Not A Reference'"),
        ("UPPER/case:1", "invalid image reference 'UPPER/case:1'"),
        ("oci:", "names nothing after oci:"),
        ("oci-archive:", "names nothing after oci-archive:"),
        ("docker-archive:", "names nothing"),
        ("docker-daemon:", "names nothing"),
        ("dir:", "names nothing"),
        ("docker://", "names nothing"),
        ("oci::tag", "names no path"),
        ("oci:/x:", "empty tag"),
    ],
)
def test_bad_references(reference: str, message: str) -> None:
    """Garbage raises InvalidReference quoting the value."""
    with pytest.raises(InvalidReference, match=message.replace("(", r"\(")):
        open_source(reference, SourceOptions(docker_host="unix:///nonexistent.sock"))


@pytest.mark.parametrize(
    "reference",
    [
        "oci:/nonexistent/pinguard/layout",
        "oci:/nonexistent/pinguard/layout:tag",
        "oci-archive:/nonexistent/pinguard.tar",
        "docker-archive:/nonexistent/pinguard.tar:app:1",
        "dir:/nonexistent/pinguard",
    ],
)
def test_nonexistent_paths_are_not_found(reference: str) -> None:
    """A path that is not there is ImageNotFound (exit 3), at open or at resolve."""
    with pytest.raises(ImageNotFound, match="nonexistent"):
        open_source(reference).resolve()


def test_not_a_layout_or_archive(tmp_path: Path) -> None:
    """A directory without index.json, or a file that is not a tar, is refused clearly."""
    (tmp_path / "junk.tar").write_bytes(b"not a tar at all" * 100)
    with pytest.raises(ImageNotFound, match=r"no index\.json"):
        open_source(f"oci:{tmp_path}")
    with pytest.raises(SourceError, match="not a readable tar"):
        open_source(f"oci-archive:{tmp_path / 'junk.tar'}")
    empty = tmp_path / "empty.tar"
    tarfile.open(empty, "w").close()
    with pytest.raises(ImageNotFound, match=r"no manifest\.json"):
        open_source(f"docker-archive:{empty}")


def test_dir_source(tmp_path: Path) -> None:
    """dir:PATH resolves to one layer: the directory tree, read in place (no blob)."""
    source = open_source(f"dir:{tmp_path}")
    assert isinstance(source, DirSource)
    resolved = source.resolve()
    tree_layer = LayerRef(digest="dir", size=None, tree=UnpackedTree(root=str(tmp_path)))
    assert (resolved.transport, resolved.layers, resolved.manifest_digest) == (
        "dir",
        (tree_layer,),
        None,
    )
    assert len(resolved.config["history"]) == 1
    with pytest.raises(ImageNotFound, match="no layer blobs"):
        source.open_blob(tree_layer)
    assert source.root == tmp_path
    assert os.path.isdir(source.root)


def test_default_platform_and_matching() -> None:
    """x86_64 maps to amd64, aarch64 to arm64; arm64 without variant matches arm64/v8."""
    assert tg.normalize_arch("x86_64") == "amd64"
    assert tg.normalize_arch("aarch64") == "arm64"
    assert tg.host_platform().os == "linux"
    assert tg.platform_matches(Platform("linux", "arm64", "v8"), Platform("linux", "arm64"))
    assert tg.platform_matches(Platform("linux", "arm64"), Platform("linux", "arm64", "v8"))
    assert not tg.platform_matches(Platform("linux", "arm", "v7"), Platform("linux", "arm", "v6"))
    assert tg.parse_platform("linux/aarch64") == Platform("linux", "arm64")
    with pytest.raises(ValueError, match="'linux'"):
        tg.parse_platform("linux")
