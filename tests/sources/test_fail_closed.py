"""Fail-closed sources: hostile registry answers and crafted layouts are refused, never audited.

Every fault is built for real: an ``HTTPFront`` proxy in front of the real ``docker-registry``
rewrites manifests (with a matching ``Docker-Content-Digest``, as a hostile registry would),
breaks blob streams half way (a closed or RST-reset connection), sets cookies and redirects;
small servers here answer a token request with an endless body and redirect https to http
(a real TLS server with an ``openssl`` certificate); artifacts (an SBOM, a signature, a
layerless manifest) are pushed into the real registry over its HTTP API; OCI layouts are
written with ``build_oci_layout`` and then damaged. Expected digests and messages are written
by hand or computed with hashlib from the bytes the test itself made.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests

from pinguard.cli import main
from pinguard.digest import Digest
from pinguard.errors import (
    ConfigError,
    InvalidDigest,
    SourceError,
    UnsupportedArtifact,
)
from pinguard.sources.interface import LayerRef, SourceOptions
from pinguard.sources.mediatypes import OCI_INDEX, OCI_MANIFEST
from pinguard.sources.oci import OCIArchiveSource, OCILayoutSource
from pinguard.sources.registry import RegistrySource
from tests.infra.registry import (
    HeaderRecorder,
    HTTPFront,
    RegistryServer,
    _Handler,
    _Server,
    build_oci_layout,
    tls_context,
)
from tests.sources.conftest import ConfigWriter, Images

pytestmark = pytest.mark.integration


def _read_all(source: RegistrySource, layer: LayerRef) -> bytes:
    with source.open_blob(layer) as stream:
        return stream.read()


def _manifest_rewriter(
    edit: Callable[[dict[str, Any]], dict[str, Any]], *, only_tags: bool = True
) -> dict[str, Any]:
    """HTTPFront hooks that rewrite manifests fetched by tag and send a matching digest header."""

    def transform(path: str, body: bytes) -> bytes:
        if "/manifests/" not in path or (only_tags and "sha256:" in path):
            return body
        return json.dumps(edit(json.loads(body))).encode()

    def headers(path: str, body: bytes, out: dict[str, str]) -> dict[str, str]:
        if "/manifests/" in path:
            out["Docker-Content-Digest"] = "sha256:" + hashlib.sha256(body).hexdigest()
        return out

    return {"transform": transform, "header_transform": headers}


# --- the Digest value type ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "sha256:" + "0" * 64,
        "sha512:" + "f" * 128,
    ],
)
def test_valid_digests(text: str) -> None:
    digest = Digest.parse(text)
    assert str(digest) == text
    assert digest.relpath == f"blobs/{text.replace(':', '/')}"


@pytest.mark.parametrize(
    "text",
    [
        "sha256:../../x",
        "sha256:" + "0" * 63,
        "sha256:" + "0" * 65,
        "sha256:" + "A" * 64,
        "sha512:" + "0" * 64,
        "md5:" + "0" * 32,
        "sha384:" + "0" * 96,
        "sha256",
        "sha256:" + "0" * 62 + "/x",
        ":" + "0" * 64,
        "",
    ],
)
def test_invalid_digests_are_refused(text: str) -> None:
    with pytest.raises(InvalidDigest, match=r"invalid digest|is not a digest"):
        Digest.parse(text)


def test_digest_of_bytes() -> None:
    assert str(Digest.of(b"abc")) == (
        "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    )
    assert Digest.parse(str(Digest.of(b"abc", "sha512"))).matches(b"abc")


# --- digests from a hostile registry --------------------------------------------------------------


@pytest.mark.parametrize("where", ["layer", "config"])
def test_traversal_digest_in_a_manifest_builds_no_request(
    registry: RegistryServer, where: str
) -> None:
    """A layer or config digest ``sha256:../../x`` is refused before any URL is built."""
    evil = "sha256:../../../v2/_catalog"

    def edit(doc: dict[str, Any]) -> dict[str, Any]:
        if where == "layer":
            doc["layers"][0]["digest"] = evil
        else:
            doc["config"]["digest"] = evil
        return doc

    with HTTPFront(registry.address, **_manifest_rewriter(edit)) as front:
        with pytest.raises(InvalidDigest, match=r"'sha256:\.\./\.\./\.\./v2/_catalog'"):
            RegistrySource(f"{front.address}/app/single:v1", SourceOptions()).resolve()
        assert [r.path for r in front.requests if "/blobs/" in r.path] == []
        assert all(".." not in r.path for r in front.requests)


def test_bad_docker_content_digest_header_is_refused(registry: RegistryServer) -> None:
    def headers(path: str, body: bytes, out: dict[str, str]) -> dict[str, str]:
        if "/manifests/" in path:
            out["Docker-Content-Digest"] = "md5:" + hashlib.md5(body).hexdigest()
        return out

    with (
        HTTPFront(registry.address, header_transform=headers) as front,
        pytest.raises(InvalidDigest, match=r"Docker-Content-Digest.*'md5:"),
    ):
        RegistrySource(f"{front.address}/app/single:v1", SourceOptions()).resolve()


# --- ambiguous documents ------------------------------------------------------------------------


def test_manifest_with_manifests_and_layers_is_refused(
    registry: RegistryServer, images: Images
) -> None:
    """CVE-2021-41190: a document that is both a manifest and an index is not read either way."""
    other = images.multi.images[0]

    def edit(doc: dict[str, Any]) -> dict[str, Any]:
        doc["manifests"] = [{"mediaType": OCI_MANIFEST, "digest": other.manifest_digest, "size": 1}]
        return doc

    with (
        HTTPFront(registry.address, **_manifest_rewriter(edit)) as front,
        pytest.raises(SourceError, match="ambiguous: it has both 'manifests' and 'layers'"),
    ):
        RegistrySource(f"{front.address}/app/single:v1", SourceOptions()).resolve()


def test_media_type_disagreeing_with_content_type_is_refused(registry: RegistryServer) -> None:
    def headers(path: str, body: bytes, out: dict[str, str]) -> dict[str, str]:
        if "/manifests/" in path:
            out["Content-Type"] = OCI_INDEX
        return out

    with (
        HTTPFront(registry.address, header_transform=headers) as front,
        pytest.raises(SourceError, match=r"ambiguous: its mediaType says .*Content-Type says"),
    ):
        RegistrySource(f"{front.address}/app/single:v1", SourceOptions()).resolve()


def test_index_entry_media_type_disagreeing_with_the_child_is_refused(
    registry: RegistryServer,
) -> None:
    """The index says its entries are indexes; the children it points at are manifests."""

    def edit(doc: dict[str, Any]) -> dict[str, Any]:
        for entry in doc["manifests"]:
            entry["mediaType"] = OCI_INDEX
        return doc

    with (
        HTTPFront(registry.address, **_manifest_rewriter(edit)) as front,
        pytest.raises(SourceError, match=r"ambiguous: .*descriptor that pointed at it says"),
    ):
        RegistrySource(f"{front.address}/app/multi:v1", SourceOptions()).resolve()


def test_layout_descriptor_disagreeing_with_the_blob_is_refused(tmp_path: Path) -> None:
    layout = build_oci_layout(tmp_path / "l")
    index = json.loads((layout.path / "index.json").read_text())
    index["manifests"][0]["mediaType"] = OCI_INDEX
    (layout.path / "index.json").write_text(json.dumps(index))
    with pytest.raises(SourceError, match="ambiguous"):
        OCILayoutSource(str(layout.path)).resolve()


def test_md5_digest_in_index_json_is_refused(tmp_path: Path) -> None:
    layout = build_oci_layout(tmp_path / "l")
    index = json.loads((layout.path / "index.json").read_text())
    index["manifests"][0]["digest"] = "md5:" + "0" * 32
    (layout.path / "index.json").write_text(json.dumps(index))
    with pytest.raises(InvalidDigest, match=r"'md5:0+'"):
        OCILayoutSource(str(layout.path)).resolve()


def test_traversal_layer_digest_in_a_layout_is_refused(tmp_path: Path) -> None:
    """The manifest blob is rewritten (and re-addressed) to name ``sha256:../../etc/passwd``."""
    layout = build_oci_layout(tmp_path / "l")
    blobs = layout.path / "blobs" / "sha256"
    old = layout.images[0].manifest_digest
    manifest = json.loads((blobs / old.split(":")[1]).read_text())
    manifest["layers"][0]["digest"] = "sha256:../../../../etc/passwd"
    data = json.dumps(manifest).encode()
    new = hashlib.sha256(data).hexdigest()
    (blobs / new).write_bytes(data)
    index = json.loads((layout.path / "index.json").read_text())
    index["manifests"][0].update(digest=f"sha256:{new}", size=len(data))
    (layout.path / "index.json").write_text(json.dumps(index))
    with pytest.raises(InvalidDigest, match="etc/passwd"):
        OCILayoutSource(str(layout.path)).resolve()


# --- non-image artifacts in a real registry ------------------------------------------------------


def _push_blob(registry: RegistryServer, repo: str, data: bytes) -> dict[str, Any]:
    start = requests.post(f"{registry.url}/v2/{repo}/blobs/uploads/", timeout=10)
    assert start.status_code == 202, start.text
    location = requests.compat.urljoin(registry.url, start.headers["Location"])
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    sep = "&" if "?" in location else "?"
    put = requests.put(f"{location}{sep}digest={digest}", data=data, timeout=10)
    assert put.status_code == 201, put.text
    return {"digest": digest, "size": len(data)}


def _push_manifest(registry: RegistryServer, repo: str, tag: str, manifest: dict[str, Any]) -> None:
    response = requests.put(
        f"{registry.url}/v2/{repo}/manifests/{tag}",
        data=json.dumps(manifest).encode(),
        headers={"Content-Type": manifest["mediaType"]},
        timeout=10,
    )
    assert response.status_code == 201, response.text


def _tar_bytes(name: str, data: bytes) -> bytes:
    import io

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture(scope="module")
def artifacts(registry: RegistryServer) -> RegistryServer:
    """An SBOM (artifactType, empty config), a signature (JSON layer) and a layerless image."""
    empty = _push_blob(registry, "art/sbom", b"{}")
    sbom = _push_blob(registry, "art/sbom", b'{"bomFormat": "CycloneDX"}')
    _push_manifest(
        registry,
        "art/sbom",
        "v1",
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "artifactType": "application/vnd.cyclonedx+json",
            "config": {"mediaType": "application/vnd.oci.empty.v1+json", **empty},
            "layers": [{"mediaType": "application/vnd.cyclonedx+json", **sbom}],
        },
    )
    config = json.dumps(
        {"os": "linux", "architecture": "amd64", "rootfs": {"type": "layers", "diff_ids": []}}
    ).encode()
    cfg = _push_blob(registry, "art/sig", config)
    sig = _push_blob(registry, "art/sig", b'{"critical": {}}')
    _push_manifest(
        registry,
        "art/sig",
        "v1",
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **cfg},
            "layers": [{"mediaType": "application/vnd.dev.cosign.simplesigning.v1+json", **sig}],
        },
    )
    cfg = _push_blob(registry, "art/empty", config)
    _push_manifest(
        registry,
        "art/empty",
        "v1",
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **cfg},
            "layers": [],
        },
    )
    return registry


@pytest.mark.parametrize(
    ("repo", "message"),
    [
        ("art/sbom", "is an artifact of type 'application/vnd.cyclonedx+json'"),
        ("art/sig", "layer of media type 'application/vnd.dev.cosign.simplesigning.v1+json'"),
        ("art/empty", "has no layers"),
    ],
)
def test_non_image_artifacts_are_unsupported(
    artifacts: RegistryServer, repo: str, message: str
) -> None:
    with pytest.raises(
        UnsupportedArtifact, match=f"unsupported: not an image: .*{re.escape(message)}"
    ):
        RegistrySource(artifacts.ref(f"{repo}:v1"), SourceOptions()).resolve()


def test_audit_of_an_artifact_exits_3(
    artifacts: RegistryServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["audit", f"docker://{artifacts.ref('art/sbom:v1')}", "--no-cache"])
    out, err = capsys.readouterr()
    assert code == 3
    assert "unsupported: not an image" in err
    assert out == ""


# --- broken blob streams ----------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["truncate", "reset"])
def test_broken_blob_streams_are_fetched_again(
    registry: RegistryServer, images: Images, mode: Any
) -> None:
    """Two broken bodies, then a good one: the stream delivers exactly the blob's bytes."""
    expected = images.single.images[0].layers[1][1]
    with HTTPFront(registry.address, break_blobs=2, break_mode=mode) as front:
        source = RegistrySource(f"{front.address}/app/single:v1", SourceOptions(max_retries=3))
        image = source.resolve()  # the config GET is a blob too: it takes one break
        assert _read_all(source, image.layers[1]) == expected
        blob_gets = [r for r in front.requests if "/blobs/" in r.path]
        assert len(blob_gets) == 4  # config (broken, again) + layer (broken, again)


def test_broken_blob_streams_are_retried_a_bounded_number_of_times(
    registry: RegistryServer, images: Images
) -> None:
    source = RegistrySource(registry.ref("app/single:v1"), SourceOptions())
    image = source.resolve()
    with HTTPFront(registry.address, break_blobs=100) as front:
        broken = RegistrySource(f"{front.address}/app/single:v1", SourceOptions(max_retries=2))
        with pytest.raises(SourceError, match=r"reading blob sha256:\w+ .* failed after \d+ bytes"):
            _read_all(broken, image.layers[1])
        assert len([r for r in front.requests if "/blobs/" in r.path]) == 3


# --- token bodies, cookies, redirects to plain http ------------------------------------------


class _ChallengeHandler(_Handler):
    def do_GET(self) -> None:
        realm = self.owner.realm
        self._reply(401, b"{}", {"WWW-Authenticate": f'Bearer realm="{realm}",service="x"'})


class _EndlessHandler(_Handler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Connection", "close")
        self.end_headers()
        chunk = b" " * 65536
        self.owner.sent = 0
        try:
            while self.owner.sent < (256 << 20):
                self.wfile.write(chunk)
                self.owner.sent += len(chunk)
        except OSError:
            pass
        self.close_connection = True


def test_endless_token_body_is_capped() -> None:
    with _Server(_EndlessHandler) as endless, _Server(_ChallengeHandler) as front:
        front.realm = f"{endless.url}/token"  # type: ignore[attr-defined]
        source = RegistrySource(f"{front.address}/app/x:1", SourceOptions())
        started = time.monotonic()
        with pytest.raises(SourceError, match=r"token answer .* is larger than 1048576 bytes"):
            source.resolve()
        assert time.monotonic() - started < 30
        time.sleep(0.2)
        assert endless.sent < (64 << 20)  # type: ignore[attr-defined]


def test_cookies_are_not_sent_to_another_port(
    basic_registry: RegistryServer, docker_config: ConfigWriter, images: Images
) -> None:
    user, password = basic_registry.username, basic_registry.password
    with (
        HeaderRecorder(host="127.0.0.1") as storage,
        HTTPFront(
            basic_registry.address, redirect_blobs_to=storage.url, set_cookie="sid=secret; Path=/"
        ) as front,
    ):
        for blob_file in (images.single.path / "blobs" / "sha256").iterdir():
            storage.blobs[f"/v2/app/single/blobs/sha256:{blob_file.name}"] = blob_file.read_bytes()
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        docker_config({"auths": {front.address: {"auth": token}}})
        source = RegistrySource(f"{front.address}/app/single:v1", SourceOptions())
        image = source.resolve()
        assert _read_all(source, image.layers[0]) == images.single.images[0].layers[0][1]
        assert storage.requests
        assert all("Cookie" not in r.headers for r in storage.requests)
        assert all("Cookie" not in r.headers for r in front.requests)


class _DowngradeHandler(_Handler):
    def do_GET(self) -> None:
        self._reply(302, b"", {"Location": f"{self.owner.plain}{self.path}"})


def test_https_to_http_redirect_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    context, cert = tls_context(tmp_path)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(cert))
    with HeaderRecorder(host="127.0.0.1") as plain, _Server(_DowngradeHandler) as tls:
        tls.plain = plain.url  # type: ignore[attr-defined]
        tls.httpd.socket = context.wrap_socket(tls.httpd.socket, server_side=True)
        source = RegistrySource(f"{tls.address}/app/x:1", SourceOptions(max_retries=0))
        # A loopback registry is spoken to in plain HTTP; this one is the https case.
        source.base_url = f"https://{tls.address}"
        with pytest.raises(SourceError, match="redirected from https to http; refusing"):
            source.resolve()
        assert plain.requests == []


# --- config.json -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("auth", "why"),
    [
        ("!!!not*base64", "not valid base64"),
        (base64.b64encode(b"nocolon").decode(), "no ':' between user and password"),
    ],
)
def test_malformed_config_auth_names_file_and_host(
    basic_registry: RegistryServer, docker_config: ConfigWriter, auth: str, why: str
) -> None:
    path = docker_config({"auths": {basic_registry.address: {"auth": auth}}})
    with pytest.raises(ConfigError) as info:
        RegistrySource(basic_registry.ref("app/single:v1"), SourceOptions()).resolve()
    message = str(info.value)
    assert repr(str(path)) in message
    assert repr(basic_registry.address) in message
    assert why in message


# --- OCI layout marker ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        (None, "no oci-layout file"),
        ('{"imageLayoutVersion": "2.0.0"}', "imageLayoutVersion '2.0.0'"),
        ("{}", "imageLayoutVersion None"),
        ("not json", "oci-layout is not valid JSON"),
    ],
)
def test_layout_without_a_valid_marker_is_refused(
    tmp_path: Path, marker: str | None, message: str
) -> None:
    layout = build_oci_layout(tmp_path / "l")
    if marker is None:
        (layout.path / "oci-layout").unlink()
    else:
        (layout.path / "oci-layout").write_text(marker)
    with pytest.raises(SourceError, match=message):
        OCILayoutSource(str(layout.path)).resolve()
    archive = tmp_path / "l.tar"
    with tarfile.open(archive, "w") as tar:
        for item in sorted(layout.path.rglob("*")):
            tar.add(item, arcname=str(item.relative_to(layout.path)), recursive=False)
    with pytest.raises(SourceError, match=message):
        OCIArchiveSource(str(archive)).resolve()
    shutil.rmtree(layout.path)


def test_a_valid_layout_still_resolves(tmp_path: Path) -> None:
    layout = build_oci_layout(tmp_path / "l")
    image = OCILayoutSource(str(layout.path)).resolve()
    assert image.manifest_digest == layout.images[0].manifest_digest
