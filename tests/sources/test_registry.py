"""Tests for the docker:// transport against real ``docker-registry`` processes on 127.0.0.1.

Images are hand-made OCI layouts pushed with skopeo (as OCI manifests and indexes and as
Docker v2 manifests and manifest lists); auth runs through htpasswd Basic auth and a real
Bearer token server; small HTTP fronts inject 503s and cross-host redirects.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import multiprocessing
import os
import pickle
import stat
import sys
import traceback
from pathlib import Path
from typing import Any

import pytest
import requests

from pinguard.errors import (
    AuthError,
    BlobVerificationError,
    ImageNotFound,
    InvalidReference,
    SourceError,
)
from pinguard.models import Platform
from pinguard.sources.interface import ImageSource, LayerRef, SourceOptions
from pinguard.sources.mediatypes import DOCKER_LIST, DOCKER_MANIFEST, OCI_INDEX, OCI_MANIFEST
from pinguard.sources.reference import DockerReference, parse_reference
from pinguard.sources.registry import (
    Credentials,
    RegistrySource,
    lookup_credentials,
    parse_www_authenticate,
)
from pinguard.target import platform_matches
from tests.infra.registry import (
    DEFAULT_PASSWORD,
    DEFAULT_USER,
    HeaderRecorder,
    HTTPFront,
    RegistryServer,
)
from tests.sources.conftest import ConfigWriter, Images

pytestmark = pytest.mark.integration


def _auths(
    registry: str, user: str = DEFAULT_USER, password: str = DEFAULT_PASSWORD
) -> dict[str, Any]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"auths": {registry: {"auth": token}}}


def _read_all(source: ImageSource, layer: LayerRef, chunk: int = 7) -> bytes:
    parts = []
    with source.open_blob(layer) as stream:
        while data := stream.read(chunk):
            parts.append(data)
    return b"".join(parts)


def _media_type(registry: RegistryServer, repo_tag: str, auth: str | None = None) -> str:
    repo, _, tag = repo_tag.partition(":")
    headers = {"Accept": ", ".join((OCI_INDEX, DOCKER_LIST, OCI_MANIFEST, DOCKER_MANIFEST))}
    response = requests.get(
        f"{registry.url}/v2/{repo}/manifests/{tag}", headers=headers, timeout=10
    )
    response.raise_for_status()
    return response.headers["Content-Type"]


def _write_helper(bindir: Path, name: str, registry: str, user: str, secret: str) -> Path:
    """A docker-credential-NAME script that answers for one server URL only."""
    bindir.mkdir(exist_ok=True)
    script = bindir / f"docker-credential-{name}"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        "assert sys.argv[1:] == ['get'], sys.argv\n"
        "server = sys.stdin.read().strip()\n"
        f"if server != {registry!r}:\n"
        "    print('credentials not found in native keychain'); sys.exit(1)\n"
        f"print(json.dumps({{'ServerURL': server, 'Username': {user!r}, 'Secret': {secret!r}}}))\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


# --- anonymous registry ---------------------------------------------------------------------


def test_resolve_and_stream_anonymously(registry: RegistryServer, images: Images) -> None:
    """An OCI manifest by tag resolves to its digest, config and layers; blobs stream as stored."""
    expected = images.single.images[0]
    with RegistrySource(registry.ref("app/single:v1"), SourceOptions()) as source:
        image = source.resolve()
        assert image.transport == "docker"
        assert image.reference == f"docker://{registry.ref('app/single:v1')}"
        assert image.manifest_digest == expected.manifest_digest
        assert image.platform == Platform("linux", "amd64")
        assert image.config["rootfs"]["diff_ids"] == list(expected.diff_ids)
        assert [layer.digest for layer in image.layers] == [d for d, _ in expected.layers]
        assert [layer.diff_id for layer in image.layers] == list(expected.diff_ids)
        assert [layer.size for layer in image.layers] == [len(b) for _, b in expected.layers]
        assert {layer.media_type for layer in image.layers} == {
            "application/vnd.oci.image.layer.v1.tar+gzip"
        }
        for layer, (_, blob) in zip(image.layers, expected.layers, strict=True):
            assert _read_all(source, layer) == blob
        blobs = [stream.read() for _, stream in source.iter_blobs(image.layers)]
        assert blobs == [b for _, b in expected.layers]


def test_resolve_by_digest(registry: RegistryServer, images: Images) -> None:
    """A reference by digest fetches exactly that manifest and reports the same digest."""
    digest = images.single.images[0].manifest_digest
    image = RegistrySource(registry.ref(f"app/single@{digest}"), SourceOptions()).resolve()
    assert image.manifest_digest == digest
    assert len(image.layers) == 2


def test_unknown_digest_tag_and_repository_are_not_found(registry: RegistryServer) -> None:
    """Missing tags, repositories, manifests and blobs raise ImageNotFound."""
    missing = "sha256:" + "0" * 64
    for ref in ("app/single:nope", "app/nothing:v1", f"app/single@{missing}"):
        with pytest.raises(ImageNotFound):
            RegistrySource(registry.ref(ref), SourceOptions()).resolve()
    source = RegistrySource(registry.ref("app/single:v1"), SourceOptions())
    with pytest.raises(ImageNotFound, match="blob"):
        source.open_blob(LayerRef(digest=missing, size=1))


@pytest.mark.parametrize("repo", ["app/multi:v1", "app/multi-v2s2:v1"])
@pytest.mark.parametrize(
    ("wanted", "expected"),
    [
        (Platform("linux", "arm64"), "linux/arm64/v8"),
        (Platform("linux", "aarch64"), "linux/arm64/v8"),
        (Platform("linux", "arm64", "v8"), "linux/arm64/v8"),
        (Platform("linux", "x86_64"), "linux/amd64"),
        (Platform("linux", "amd64"), "linux/amd64"),
    ],
)
def test_multi_platform_index_picks_the_platform(
    registry: RegistryServer, images: Images, repo: str, wanted: Platform, expected: str
) -> None:
    """From an OCI index or a Docker manifest list the wanted platform's manifest is chosen."""
    chosen = next(i for i in images.multi.images if i.platform == expected)
    image = RegistrySource(registry.ref(repo), SourceOptions(platform=wanted)).resolve()
    assert str(image.platform) == expected
    assert image.config["architecture"] == expected.split("/")[1]
    if repo == "app/multi:v1":  # v2s2 conversion rewrites the manifests, so digests differ
        assert image.manifest_digest == chosen.manifest_digest
        assert [layer.digest for layer in image.layers] == [d for d, _ in chosen.layers]


def test_pushed_media_types(registry: RegistryServer) -> None:
    """The fixtures really hold all four manifest kinds the transport must read."""
    assert _media_type(registry, "app/single:v1") == OCI_MANIFEST
    assert _media_type(registry, "app/v2s2:v1") == DOCKER_MANIFEST
    assert _media_type(registry, "app/multi:v1") == OCI_INDEX
    assert _media_type(registry, "app/multi-v2s2:v1") == DOCKER_LIST


def test_docker_v2_manifest(registry: RegistryServer, images: Images) -> None:
    """A Docker v2 schema2 manifest resolves with Docker layer media types."""
    image = RegistrySource(registry.ref("app/v2s2:v1"), SourceOptions()).resolve()
    assert {layer.media_type for layer in image.layers} == {
        "application/vnd.docker.image.rootfs.diff.tar.gzip"
    }
    assert [layer.diff_id for layer in image.layers] == list(images.single.images[0].diff_ids)


def test_index_by_digest_and_streaming_the_chosen_platform(
    registry: RegistryServer, images: Images
) -> None:
    """An index addressed by digest is verified, and the chosen platform's blob streams."""
    assert images.multi.index_digest is not None
    arm = next(i for i in images.multi.images if i.platform.startswith("linux/arm64"))
    source = RegistrySource(
        registry.ref(f"app/multi@{images.multi.index_digest}"),
        SourceOptions(platform=Platform("linux", "arm64")),
    )
    image = source.resolve()
    assert image.manifest_digest == arm.manifest_digest
    assert _read_all(source, image.layers[0], chunk=1 << 20) == arm.layers[0][1]


def test_missing_platform_lists_the_available_ones(registry: RegistryServer) -> None:
    """Asking an index for a platform it lacks raises ImageNotFound naming the ones it has."""
    source = RegistrySource(
        registry.ref("app/multi:v1"), SourceOptions(platform=Platform("linux", "s390x"))
    )
    with pytest.raises(ImageNotFound) as info:
        source.resolve()
    message = str(info.value)
    assert "linux/s390x" in message
    assert "linux/amd64, linux/arm64/v8" in message


def test_single_platform_image_with_another_platform_requested(registry: RegistryServer) -> None:
    """An explicit platform a single-platform image does not have is an error too."""
    source = RegistrySource(
        registry.ref("app/single:v1"), SourceOptions(platform=Platform("linux", "arm64"))
    )
    with pytest.raises(ImageNotFound, match=r"available: linux/amd64"):
        source.resolve()


def test_picklable_and_usable_after_fork(registry: RegistryServer, images: Images) -> None:
    """A resolved source survives pickling and streams blobs from a forked worker."""
    source = RegistrySource(registry.ref("app/single:v1"), SourceOptions())
    image = source.resolve()
    clone = pickle.loads(pickle.dumps(source))
    assert _read_all(clone, image.layers[0]) == images.single.images[0].layers[0][1]

    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(2) as pool:
        digests = pool.map(_digest_in_worker, [(source, layer) for layer in image.layers])
    assert digests == [layer.digest for layer in image.layers]


def _digest_in_worker(args: tuple[RegistrySource, LayerRef]) -> str:
    source, layer = args
    with source.open_blob(layer) as stream:
        return "sha256:" + hashlib.sha256(stream.read()).hexdigest()


# --- credentials and auth ----------------------------------------------------------------------


@pytest.mark.parametrize("style", ["auth", "username-password", "https-key"])
def test_basic_auth_from_config_auths(
    basic_registry: RegistryServer, docker_config: ConfigWriter, images: Images, style: str
) -> None:
    """htpasswd Basic auth works with credentials from config.json ``auths``."""
    address = basic_registry.address
    if style == "auth":
        docker_config(_auths(address))
    elif style == "username-password":
        entry = {"username": DEFAULT_USER, "password": DEFAULT_PASSWORD}
        docker_config({"auths": {address: entry}})
    else:
        docker_config(_auths(f"http://{address}/v1/"))
    source = RegistrySource(basic_registry.ref("app/single:v1"), SourceOptions())
    image = source.resolve()
    assert image.manifest_digest == images.single.images[0].manifest_digest
    assert _read_all(source, image.layers[1]) == images.single.images[0].layers[1][1]


def test_basic_auth_without_credentials(basic_registry: RegistryServer) -> None:
    """A Basic-auth registry and no credentials: AuthError saying none were found."""
    with pytest.raises(AuthError, match="no credentials"):
        RegistrySource(basic_registry.ref("app/single:v1"), SourceOptions()).resolve()


@pytest.mark.parametrize("fixture", ["basic_registry", "token_registry"])
def test_wrong_credentials_never_leak(
    request: pytest.FixtureRequest,
    docker_config: ConfigWriter,
    caplog: pytest.LogCaptureFixture,
    fixture: str,
) -> None:
    """Wrong credentials raise AuthError; the password is in no message, cause or log line."""
    server: RegistryServer = request.getfixturevalue(fixture)
    wrong = "WrongPassw0rd-do-not-print"
    config_path = docker_config(_auths(server.address, password=wrong))
    caplog.set_level(logging.DEBUG)
    with pytest.raises(AuthError) as info:
        RegistrySource(server.ref("app/single:v1"), SourceOptions()).resolve()
    text = "".join(traceback.format_exception(info.value))
    encoded = base64.b64encode(f"{DEFAULT_USER}:{wrong}".encode()).decode()
    for secret in (wrong, encoded):
        assert secret not in text
        assert secret not in caplog.text
    assert f"{str(config_path)!r} auths" in str(info.value)


@pytest.mark.parametrize("via", ["credHelpers", "credsStore"])
def test_credential_helper(
    *,
    basic_registry: RegistryServer,
    docker_config: ConfigWriter,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    images: Images,
    via: str,
) -> None:
    """Credentials come from docker-credential-pgtest via credHelpers or credsStore."""
    bindir = tmp_path / "bin"
    _write_helper(bindir, "pgtest", basic_registry.address, DEFAULT_USER, DEFAULT_PASSWORD)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    if via == "credHelpers":
        docker_config({"credHelpers": {basic_registry.address: "pgtest"}})
    else:
        docker_config({"credsStore": "pgtest"})
    image = RegistrySource(basic_registry.ref("app/single:v1"), SourceOptions()).resolve()
    assert image.manifest_digest == images.single.images[0].manifest_digest


def test_bearer_token_flow(
    token_registry: RegistryServer, docker_config: ConfigWriter, images: Images
) -> None:
    """The Bearer flow: challenge, token fetched with Basic creds, cached across requests."""
    assert token_registry.token_server is not None
    docker_config(_auths(token_registry.address))
    source = RegistrySource(token_registry.ref("app/multi:v1"), SourceOptions())
    image = source.resolve()
    for layer in image.layers:
        _read_all(source, layer)
    scope = "repository:app/multi:pull"
    assert token_registry.token_server.issued.get(scope) == 1
    assert image.platform is not None


def test_bearer_identity_token(
    token_registry: RegistryServer, docker_config: ConfigWriter, images: Images
) -> None:
    """An ``identitytoken`` in auths is exchanged with the OAuth2 refresh_token grant."""
    docker_config({"auths": {token_registry.address: {"identitytoken": "refresh-me-42"}}})
    image = RegistrySource(token_registry.ref("app/single:v1"), SourceOptions()).resolve()
    assert image.manifest_digest == images.single.images[0].manifest_digest


def test_bearer_anonymous_is_denied(token_registry: RegistryServer) -> None:
    """Without credentials the token carries no access: AuthError, not a crash."""
    with pytest.raises(AuthError, match="no credentials"):
        RegistrySource(token_registry.ref("app/single:v1"), SourceOptions()).resolve()


# --- retries and redirects ------------------------------------------------------------------------


def test_retries_on_503_with_retry_after(registry: RegistryServer, images: Images) -> None:
    """Two 503s with Retry-After: 0 are retried; the third request passes through."""
    with HTTPFront(registry.address, fail_first=2) as front:
        image = RegistrySource(f"{front.address}/app/single:v1", SourceOptions()).resolve()
        assert image.manifest_digest == images.single.images[0].manifest_digest
        manifest_gets = [r for r in front.requests if "/manifests/" in r.path]
        assert len(manifest_gets) == 3


def test_retries_are_bounded(registry: RegistryServer) -> None:
    """When the registry keeps failing, the error comes after max_retries retries."""
    with HTTPFront(registry.address, fail_first=100, fail_status=429) as front:
        source = RegistrySource(f"{front.address}/app/single:v1", SourceOptions(max_retries=2))
        with pytest.raises(SourceError, match="429"):
            source.resolve()
        assert len(front.requests) == 3


def test_tampered_manifest_by_digest_is_rejected(registry: RegistryServer, images: Images) -> None:
    """A manifest whose bytes do not hash to the digest asked for (by digest) or to the
    registry's Docker-Content-Digest (by tag) raises BlobVerificationError."""
    digest = images.single.images[0].manifest_digest

    def tamper(path: str, body: bytes) -> bytes:
        return (
            body.replace(b'"schemaVersion"', b' "schemaVersion"') if "/manifests/" in path else body
        )

    with HTTPFront(registry.address, transform=tamper) as front:
        with pytest.raises(BlobVerificationError, match=digest):
            RegistrySource(f"{front.address}/app/single@{digest}", SourceOptions()).resolve()
        # By tag, the registry's Docker-Content-Digest header names the real digest.
        with pytest.raises(BlobVerificationError, match=f"expected {digest}"):
            RegistrySource(f"{front.address}/app/single:v1", SourceOptions()).resolve()


def test_connection_errors_are_retried_then_reported() -> None:
    """A registry that is not there fails with SourceError after bounded retries."""
    from tests.infra.registry import free_port

    source = RegistrySource(f"127.0.0.1:{free_port()}/app/x:1", SourceOptions(max_retries=1))
    with pytest.raises(
        SourceError,
        match=r"could not reach 127\.0\.0\.1:\d+: connection refused \(after 2 attempts\)",
    ):
        source.resolve()


def test_redirect_to_another_host_drops_authorization(
    basic_registry: RegistryServer, docker_config: ConfigWriter, images: Images
) -> None:
    """Blob GETs redirected to another host are followed without the Authorization header."""
    with (
        HeaderRecorder() as storage,
        HTTPFront(basic_registry.address, redirect_blobs_to=storage.url) as front,
    ):
        for blob_file in (images.single.path / "blobs" / "sha256").iterdir():
            path = f"/v2/app/single/blobs/sha256:{blob_file.name}"
            storage.blobs[path] = blob_file.read_bytes()
        docker_config(_auths(front.address))
        source = RegistrySource(f"{front.address}/app/single:v1", SourceOptions())
        image = source.resolve()
        config_digest = images.single.images[0].config_digest
        assert any(config_digest in r.path for r in storage.requests)  # config was redirected
        for layer, (_, blob) in zip(image.layers, images.single.images[0].layers, strict=True):
            assert _read_all(source, layer) == blob
        assert storage.requests
        assert all("Authorization" not in r.headers for r in storage.requests)
        blob_gets = [r for r in front.requests if "/blobs/" in r.path]
        assert any(r.headers.get("Authorization", "").startswith("Basic ") for r in blob_gets)


# --- pure units: references, challenges, platforms, config lookup ----------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("python", DockerReference("docker.io", "library/python", "latest")),
        ("python:3.12", DockerReference("docker.io", "library/python", "3.12")),
        ("docker.io/python", DockerReference("docker.io", "library/python", "latest")),
        ("index.docker.io/team/app:1", DockerReference("docker.io", "team/app", "1")),
        ("team/app", DockerReference("docker.io", "team/app", "latest")),
        ("localhost/app", DockerReference("localhost", "app", "latest")),
        ("localhost:5000/a/b/c:t", DockerReference("localhost:5000", "a/b/c", "t")),
        ("127.0.0.1:5000/app:v1", DockerReference("127.0.0.1:5000", "app", "v1")),
        ("[::1]:5000/app", DockerReference("[::1]:5000", "app", "latest")),
        (
            "ghcr.io/o/r@sha256:" + "a" * 64,
            DockerReference("ghcr.io", "o/r", None, "sha256:" + "a" * 64),
        ),
        (
            "ghcr.io/o/r:t@sha256:" + "a" * 64,
            DockerReference("ghcr.io", "o/r", "t", "sha256:" + "a" * 64),
        ),
    ],
)
def test_parse_reference(text: str, expected: DockerReference) -> None:
    """References normalise as docker does: docker.io, library/, latest; digests win."""
    assert parse_reference(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "UPPER/case",
        "host.io/",
        "app:",
        "app:bad tag",
        "app@sha256:abc",
        "app@sha256:" + "A" * 64,
        "a//b",
        "-app",
        "host.io/app:" + "x" * 200,
    ],
)
def test_parse_reference_rejects(text: str) -> None:
    """Malformed references raise InvalidReference quoting the value."""
    with pytest.raises(InvalidReference, match=r"'"):
        parse_reference(text)


def test_hub_api_host_and_schemes() -> None:
    """Docker Hub is served by registry-1.docker.io; only loopback/insecure hosts get HTTP."""
    assert RegistrySource("python", SourceOptions()).base_url == "https://registry-1.docker.io"
    assert RegistrySource("reg.example/a", SourceOptions()).base_url == "https://reg.example"
    insecure = SourceOptions(insecure_registries=("reg.example:5000",))
    assert RegistrySource("reg.example:5000/a", insecure).base_url == "http://reg.example:5000"
    assert RegistrySource("localhost:5000/a", SourceOptions()).scheme == "http"
    assert RegistrySource("127.1.2.3:5000/a", SourceOptions()).scheme == "http"
    assert RegistrySource("[::1]:5000/a", SourceOptions()).scheme == "http"


def test_parse_www_authenticate() -> None:
    """Challenges parse with quoted commas and several schemes in one header."""
    header = (
        'Bearer realm="https://auth.example/token",service="reg",'
        'scope="repository:a/b:pull,push", Basic realm="x"'
    )
    bearer, basic = parse_www_authenticate(header)
    assert bearer.scheme == "bearer"
    assert bearer.params == {
        "realm": "https://auth.example/token",
        "service": "reg",
        "scope": "repository:a/b:pull,push",
    }
    assert basic.scheme == "basic"
    assert basic.params == {"realm": "x"}


@pytest.mark.parametrize(
    ("wanted", "candidate", "ok"),
    [
        (Platform("linux", "arm64"), Platform("linux", "arm64", "v8"), True),
        (Platform("linux", "arm64"), Platform("linux", "arm64"), True),
        (Platform("linux", "arm64", "v8"), Platform("linux", "arm64"), True),
        (Platform("linux", "aarch64"), Platform("linux", "arm64", "v8"), True),
        (Platform("linux", "x86_64"), Platform("linux", "amd64"), True),
        (Platform("linux", "arm"), Platform("linux", "arm", "v7"), True),
        (Platform("linux", "arm", "v6"), Platform("linux", "arm", "v7"), False),
        (Platform("linux", "amd64"), Platform("windows", "amd64"), False),
        (Platform("linux", "s390x"), Platform("linux", "amd64"), False),
    ],
)
def test_platform_matches(wanted: Platform, candidate: Platform, ok: bool) -> None:
    """Architectures normalise and arm64 without a variant means v8."""
    assert platform_matches(wanted, candidate) is ok


def test_credentials_repr_hides_secrets() -> None:
    """Credentials never show their password or token in repr."""
    text = repr(Credentials(username="u", password="hunter2", identity_token="tok-9"))
    assert "hunter2" not in text
    assert "tok-9" not in text


def test_lookup_credentials_for_docker_hub(docker_config: ConfigWriter) -> None:
    """Docker Hub credentials are found under the key docker login writes."""
    docker_config(_auths("https://index.docker.io/v1/", "hubuser", "hubpass"))
    creds = lookup_credentials("docker.io")
    assert creds is not None
    assert (creds.username, creds.password) == ("hubuser", "hubpass")
    assert lookup_credentials("ghcr.io") is None


def test_missing_helper_is_an_auth_error(docker_config: ConfigWriter) -> None:
    """A credHelpers entry naming a helper that is not installed raises AuthError."""
    docker_config({"credHelpers": {"reg.example": "pinguard-no-such-helper"}})
    with pytest.raises(AuthError, match="not on PATH"):
        lookup_credentials("reg.example")
