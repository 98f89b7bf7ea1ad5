"""attest -> push -> verify against real registries, for images built by the tests.

Debian's ``docker-registry`` (distribution 2.8, no referrers API) is the real test of the
referrers tag schema: attestations land in a ``sha256-<hex>`` index that these tests read
back with plain HTTP. Images are built with buildah (``FROM scratch`` + a site-packages tree
of real wheels) and pushed with skopeo. The referrers API path runs against
``tests.infra.referrers.ReferrersFront`` (the spec's documented responses in front of the same
real registry), since no registry with that API can be installed here.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import requests

from pinguard.attest.statement import PREDICATE_TYPE
from pinguard.attest.store import push_attestation
from pinguard.cli import main
from pinguard.sources.interface import SourceOptions
from pinguard.sources.registry import Descriptor, RegistrySource, attach, subject_descriptor
from tests.attest.conftest import ConfigWriter, Keys
from tests.conftest import require_build_tools
from tests.infra.build import build_scratch_image, remove_image
from tests.infra.referrers import ReferrersFront
from tests.infra.registry import (
    DEFAULT_PASSWORD,
    DEFAULT_USER,
    TOKEN_SERVICE,
    AuthMode,
    RegistryServer,
    build_oci_layout,
    start_registry,
)
from tests.infra.wheels import WheelSpec, build_wheel

pytestmark = pytest.mark.integration

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
IN_TOTO = "application/vnd.in-toto+json"
POLICY = '# the team policy\n[rules.downgrade]\nseverity = "error"\n'
FORBID = '[[forbidden]]\npackage = "demo-lib"\nversion = "==1.1"\nreason = "broken"\n'


@dataclass(frozen=True)
class Built:
    """Two images built by buildah, differing in one wheel version."""

    a: str  # containers-storage tag, demo-lib 1.0
    b: str  # demo-lib 1.1


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    require_build_tools()
    root = tmp_path_factory.mktemp("attest-images")
    run = uuid.uuid4().hex[:8]
    tags = []
    for name, version in (("a", "1.0"), ("b", "1.1")):
        wheels = root / f"wheels-{name}"
        steps = [
            [build_wheel(WheelSpec("demo-base", "2.0"), wheels)],
            [build_wheel(WheelSpec("demo-lib", version, ("demo-base>=2",)), wheels)],
        ]
        tag = f"localhost/pinguard-test/attest-{name}:{run}"
        build_scratch_image(root / f"ctx-{name}", tag, steps).check()
        tags.append(tag)
    yield Built(a=tags[0], b=tags[1])
    for tag in tags:
        remove_image(tag)


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryServer]:
    server = start_registry(tmp_path_factory.mktemp("attest-registry"))
    yield server
    server.stop()


@pytest.fixture
def policy(tmp_path: Path) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(POLICY)
    return path


def digest_of(registry_url: str, repo: str, tag: str, auth: Any = None) -> str:
    """The manifest digest, by hashing the bytes the registry serves (not pinguard's view)."""
    response = requests.get(
        f"{registry_url}/v2/{repo}/manifests/{tag}",
        headers={"Accept": f"{OCI_MANIFEST}, application/vnd.docker.distribution.manifest.v2+json"},
        auth=auth,
        timeout=10,
    )
    response.raise_for_status()
    return "sha256:" + hashlib.sha256(response.content).hexdigest()


def tag_index(registry_url: str, repo: str, digest: str, auth: Any = None) -> dict[str, Any]:
    tag = "sha256-" + digest.split(":", 1)[1]
    response = requests.get(
        f"{registry_url}/v2/{repo}/manifests/{tag}",
        headers={"Accept": OCI_INDEX},
        auth=auth,
        timeout=10,
    )
    response.raise_for_status()
    index: dict[str, Any] = response.json()
    return index


def tags(registry_url: str, repo: str) -> list[str]:
    response = requests.get(f"{registry_url}/v2/{repo}/tags/list", timeout=10)
    response.raise_for_status()
    return sorted(response.json().get("tags") or [])


@dataclass
class Ctx:
    """One test's registry, fresh repository, policy file, keys and captured CLI output."""

    built: Built
    registry: RegistryServer
    repo: str
    policy: Path
    keys: Keys
    tmp_path: Path
    capsys: pytest.CaptureFixture[str]

    def ref(self, tag: str = "v1") -> str:
        return f"docker://{self.registry.ref(self.repo)}:{tag}"

    def push(self, image: str, tag: str = "v1") -> str:
        """Push a built image with skopeo; its digest as the registry serves it."""
        self.registry.push(f"containers-storage:{image}", f"{self.repo}:{tag}")
        return digest_of(self.registry.url, self.repo, tag)

    def run(self, *argv: str) -> tuple[int, str, str]:
        code = main(list(argv))
        out, err = self.capsys.readouterr()
        return code, out, err

    def attest(self, ref: str, *extra: str) -> tuple[int, str, str]:
        key, cache = str(self.keys.private), str(self.tmp_path / "cache")
        policy = str(self.policy)
        return self.run(
            "attest", ref, "--policy", policy, "--key", key, "--cache-dir", cache, *extra
        )

    def verify(self, ref: str, *extra: str, key: Path | None = None) -> tuple[int, str, str]:
        return self.run("verify", ref, "--key", str(key or self.keys.public), *extra)


@pytest.fixture
def ctx(
    built: Built,
    registry: RegistryServer,
    policy: Path,
    keys: Keys,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> Ctx:
    repo = f"team/app-{uuid.uuid4().hex[:8]}"  # fresh: tests never see each other's attestations
    return Ctx(built, registry, repo, policy, keys, tmp_path, capsys)


def test_attest_push_verify_round_trip_on_the_tag_schema(ctx: Ctx) -> None:
    """A built image, pushed, attested and verified: the tag schema index holds the artifact,
    whose manifest names the image as subject and whose layer is the envelope."""
    image = ctx.push(ctx.built.a, "v1")
    ref = ctx.ref()
    saved = ctx.tmp_path / "e.json"
    code, _, err = ctx.attest(ref, "--push", "-o", str(saved))
    assert code == 0, err
    assert f"to {image} (via tag sha256-{image[7:]})" in err

    assert tags(ctx.registry.url, ctx.repo) == sorted(["v1", f"sha256-{image[7:]}"])
    index = tag_index(ctx.registry.url, ctx.repo, image)
    assert index["mediaType"] == OCI_INDEX
    [entry] = index["manifests"]
    assert entry["artifactType"] == IN_TOTO
    assert entry["mediaType"] == OCI_MANIFEST
    assert entry["annotations"]["in-toto.io/predicate-type"] == PREDICATE_TYPE
    artifact = requests.get(
        f"{ctx.registry.url}/v2/{ctx.repo}/manifests/{entry['digest']}",
        headers={"Accept": OCI_MANIFEST},
        timeout=10,
    )
    assert hashlib.sha256(artifact.content).hexdigest() == entry["digest"][7:]
    manifest = artifact.json()
    assert manifest["subject"]["digest"] == image
    assert manifest["artifactType"] == IN_TOTO
    assert manifest["config"]["mediaType"] == "application/vnd.oci.empty.v1+json"
    [layer] = manifest["layers"]
    assert layer["mediaType"] == "application/vnd.dsse.envelope.v1+json"
    blob = requests.get(
        f"{ctx.registry.url}/v2/{ctx.repo}/blobs/{layer['digest']}", timeout=10
    ).content
    assert blob == saved.read_bytes()  # the pushed envelope is the one -o wrote
    statement = json.loads(base64.b64decode(json.loads(blob)["payload"]))
    assert statement["subject"][0]["digest"]["sha256"] == image[7:]
    assert statement["predicate"]["audit"]["environments"][0]["packages"]

    code, out, err = ctx.verify(
        ref, "--policy", str(ctx.policy), "--max-age", "1d", "--format", "json"
    )
    assert code == 0, out + err
    doc = json.loads(out)
    schema = json.loads(
        resources.files("pinguard").joinpath("schemas/verify-v1.schema.json").read_text()
    )
    jsonschema.Draft202012Validator(schema).validate(doc)
    assert doc["result"] == "verified"
    assert doc["image_digest"] == image
    assert [(a["source"], a["via"], a["ok"]) for a in doc["attestations"]] == [
        (entry["digest"], "tag-schema", True)
    ]


def test_two_attestations_for_one_digest_and_one_for_another(ctx: Ctx) -> None:
    """Each digest's tag schema index lists its own attestations only; verify reads both of
    one digest's and the one of the other."""
    a, b = ctx.push(ctx.built.a, "a"), ctx.push(ctx.built.b, "b")
    assert a != b
    ref_a, ref_b = ctx.ref("a"), ctx.ref("b")
    for ref in (ref_a, ref_a, ref_b):
        code, _, err = ctx.attest(ref, "--push")
        assert code == 0, err
    index_a, index_b = (
        tag_index(ctx.registry.url, ctx.repo, a),
        tag_index(ctx.registry.url, ctx.repo, b),
    )
    assert len(index_a["manifests"]) == 2
    assert len(index_b["manifests"]) == 1
    assert not {m["digest"] for m in index_a["manifests"]} & {
        m["digest"] for m in index_b["manifests"]
    }
    code, out, _ = ctx.verify(ref_a, "--format", "json")
    assert code == 0
    assert sorted(x["source"] for x in json.loads(out)["attestations"]) == sorted(
        m["digest"] for m in index_a["manifests"]
    )
    code, out, _ = ctx.verify(ref_b, "--format", "json")
    assert code == 0
    assert [x["source"] for x in json.loads(out)["attestations"]] == [
        index_b["manifests"][0]["digest"]
    ]


def test_a_retagged_image_with_another_digest_fails(ctx: Ctx) -> None:
    """The tag moved to an unattested image: verify exits 1 naming the new digest; the
    attested digest itself still verifies."""
    attested = ctx.push(ctx.built.a, "v1")
    ref = ctx.ref()
    assert ctx.attest(ref, "--push")[0] == 0
    moved = ctx.push(ctx.built.b, "v1")
    assert moved != attested
    code, out, _ = ctx.verify(ref)
    assert code == 1
    assert f"digest {moved}" in out
    assert "no attestation is attached to this digest" in out
    code, _, _ = ctx.verify(f"docker://{ctx.registry.ref(ctx.repo)}@{attested}")
    assert code == 0


def test_a_tampered_envelope_fails(ctx: Ctx) -> None:
    """An envelope whose payload was edited after signing (a policy digest swapped) and then
    attached fails on its signature."""
    image = ctx.push(ctx.built.a, "v1")
    ref = ctx.ref()
    saved = ctx.tmp_path / "e.json"
    assert ctx.attest(ref, "-o", str(saved))[0] == 0
    envelope = json.loads(saved.read_text())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["predicate"]["policies"][0]["digest"]["sha256"] = "0" * 64
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    with RegistrySource(ctx.ref().removeprefix("docker://"), SourceOptions()) as source:
        assert isinstance(source, RegistrySource)
        push_attestation(
            source,
            image,
            json.dumps(envelope).encode(),
            predicate_type=PREDICATE_TYPE,
            created="2026-12-01T00:00:00Z",
        )
    code, out, _ = ctx.verify(ref)
    assert code == 1
    assert "no signature verifies with the key" in out
    # The untampered envelope, checked as a file, passes: the registry path is what failed.
    assert ctx.verify(ref, "--attestation", str(saved))[0] == 0


def test_wrong_key_expired_and_changed_policy_each_fail_with_their_reason(
    ctx: Ctx,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One attestation made 40 days ago: another key, --max-age 30d and an edited policy file
    each fail it (exit 1) with their reason; without those demands it verifies."""
    ctx.push(ctx.built.a, "v1")
    ref = ctx.ref()
    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(int(time.time()) - 40 * 86400))
    assert ctx.attest(ref, "--push")[0] == 0
    monkeypatch.delenv("SOURCE_DATE_EPOCH")

    assert ctx.verify(ref, "--policy", str(ctx.policy))[0] == 0
    code, out, _ = ctx.verify(ref, key=ctx.keys.other_public)
    assert code == 1
    assert "signed by another key" in out
    code, out, _ = ctx.verify(ref, "--max-age", "30d")
    assert code == 1
    assert "40.0d old" in out
    assert "older than --max-age 30.0d" in out
    ctx.policy.write_text(POLICY + FORBID)
    code, out, _ = ctx.verify(ref, "--policy", str(ctx.policy))
    assert code == 1
    assert "the policy changed since" in out


def test_a_failing_verdict_is_attested_but_never_verifies(ctx: Ctx) -> None:
    """A forbidden version: attest records verdict fail and exits 1; verify refuses it."""
    ctx.push(ctx.built.b, "v1")
    ctx.policy.write_text(POLICY + FORBID)
    ref = ctx.ref()
    code, _, err = ctx.attest(ref, "--push")
    assert code == 1
    assert "attested verdict: fail" in err
    code, out, _ = ctx.verify(ref)
    assert code == 1
    assert "the attested verdict is 'fail', not 'pass'" in out


def test_an_incomplete_audit_is_not_attested_unless_allowed(ctx: Ctx) -> None:
    """A dist-info without Name/Version: attest exits 3 and pushes nothing; with
    --allow-incomplete (and --allow-no-python: nothing else is there) it attests, and verify
    accepts that only with --allow-incomplete (and --allow-no-python)."""
    site = "usr/local/lib/python3.11/site-packages"
    layout = build_oci_layout(
        ctx.tmp_path / "layout",
        layers=[{f"{site}/broken-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\n"}],
    )
    ctx.registry.push(layout.source, f"{ctx.repo}:v1")
    ref = ctx.ref()
    code, _, err = ctx.attest(ref, "--push")
    assert code == 3
    assert "not attesting" in err
    assert "metadata has no Name" in err
    assert tags(ctx.registry.url, ctx.repo) == ["v1"]
    # its one distribution unread, the image has no Python environment either
    code, _, err = ctx.attest(ref, "--push", "--allow-incomplete", "--allow-no-python")
    assert code == 0, err
    code, out, _ = ctx.verify(ref)
    assert code == 1
    assert "could not read everything" in out
    code, out, _ = ctx.verify(ref, "--allow-incomplete")
    assert code == 1
    assert "no Python environment" in out
    assert ctx.verify(ref, "--allow-incomplete", "--allow-no-python")[0] == 0


def test_unreadable_image_and_usage_errors(ctx: Ctx) -> None:
    """A missing image exits 3; attest without --policy (or with --policy none), --push to a
    non-registry, a bad --max-age and a private key given to verify exit 2 with a message."""
    code, _, err = ctx.verify(f"docker://{ctx.registry.ref(ctx.repo)}:nope")
    assert code == 3
    assert "not found" in err
    code, _, err = ctx.run("attest", ctx.ref(), "--key", str(ctx.keys.private))
    assert code == 2
    assert "attest needs --policy FILE" in err
    # --policy none judges nothing, so there is nothing to attest
    code, _, err = ctx.run("attest", ctx.ref(), "--key", str(ctx.keys.private), "--policy", "none")
    assert code == 2
    assert "attest needs --policy FILE" in err
    code, _, err = ctx.attest("oci:/nowhere:x", "--push")
    assert code == 2
    assert "--push needs a registry reference" in err
    with pytest.raises(SystemExit) as info:
        ctx.verify(ctx.ref(), "--max-age", "soon")
    assert info.value.code == 2
    assert "invalid duration 'soon'" in ctx.capsys.readouterr().err
    code, _, err = ctx.verify(ctx.ref(), key=ctx.keys.private)
    assert code == 2
    assert "holds a private key" in err


class _Bearer(requests.auth.AuthBase):
    def __init__(self, token: str) -> None:
        self.token = token

    def __call__(self, r: requests.PreparedRequest) -> requests.PreparedRequest:
        r.headers["Authorization"] = f"Bearer {self.token}"
        return r


def _raw_auth(server: RegistryServer, repo: str) -> Any:
    """Credentials for this test's own HTTP reads: Basic, or a pull token fetched by hand."""
    basic = (DEFAULT_USER, DEFAULT_PASSWORD)
    if server.token_server is None:
        return basic
    response = requests.get(
        server.token_server.realm,
        params={"scope": f"repository:{repo}:pull", "service": TOKEN_SERVICE},
        auth=basic,
        timeout=10,
    )
    response.raise_for_status()
    return _Bearer(response.json()["token"])


@pytest.mark.parametrize("auth", ["htpasswd", "token"])
def test_round_trip_with_auth(ctx: Ctx, docker_config: ConfigWriter, auth: AuthMode) -> None:
    """Credentials from config.json (htpasswd Basic auth, or Bearer tokens whose scope grows to
    pull,push) carry the pushes (blob upload, manifest and index PUTs) and the reads; without
    credentials verify exits 3."""
    server = start_registry(ctx.tmp_path / "registry", auth=auth)
    try:
        server.push(f"containers-storage:{ctx.built.a}", f"{ctx.repo}:v1")
        ref = f"docker://{server.ref(ctx.repo)}:v1"
        code, _, err = ctx.verify(ref)
        assert code == 3
        assert f"no credentials for {server.address}" in err
        token = base64.b64encode(f"{DEFAULT_USER}:{DEFAULT_PASSWORD}".encode()).decode()
        docker_config({"auths": {server.address: {"auth": token}}})
        assert ctx.attest(ref, "--push")[0] == 0
        auth = _raw_auth(server, ctx.repo)
        image = digest_of(server.url, ctx.repo, "v1", auth=auth)
        assert len(tag_index(server.url, ctx.repo, image, auth=auth)["manifests"]) == 1
        code, out, err = ctx.verify(ref, "--policy", str(ctx.policy))
        assert code == 0, out + err
        assert "(tag-schema)" in out
    finally:
        server.stop()


@pytest.mark.parametrize(("apply_filters", "page_size"), [(True, None), (False, 1)])
def test_referrers_api_path(ctx: Ctx, apply_filters: bool, page_size: int | None) -> None:
    """Through a registry with the referrers API (the spec's documented answers): the push is
    acknowledged with OCI-Subject, so no referrers tag is written; verify finds both
    attestations through the API, paged or not, and drops an artifact of another type even
    when the registry does not filter."""
    image = ctx.push(ctx.built.a, "v1")
    with ReferrersFront(
        ctx.registry.address, apply_filters=apply_filters, page_size=page_size
    ) as api:
        ref = f"docker://{api.address}/{ctx.repo}:v1"
        for _ in range(2):
            code, _, err = ctx.attest(ref, "--push")
            assert code == 0, err
            assert "(via the referrers API)" in err
        with RegistrySource(f"{api.address}/{ctx.repo}:v1", SourceOptions()) as source:
            assert isinstance(source, RegistrySource)
            attach(
                source,
                subject_descriptor(source, image),
                "application/vnd.example.sbom+json",
                [("application/vnd.example.sbom+json", b'{"sbom":true}')],
                {},
            )
        assert tags(ctx.registry.url, ctx.repo) == ["v1"]  # nothing in the tag schema
        assert len(api.referrers[(ctx.repo, image)]) == 3
        code, out, err = ctx.verify(ref, "--format", "json")
        assert code == 0, out + err
        found = json.loads(out)["attestations"]
        assert [a["via"] for a in found] == ["referrers-api", "referrers-api"]
        in_toto = {
            d["digest"] for d in api.referrers[(ctx.repo, image)] if d["artifactType"] == IN_TOTO
        }
        assert {a["source"] for a in found} == in_toto
        listed = [r.path for r in api.requests if "/referrers/" in r.path]
        assert any("artifactType=application%2Fvnd.in-toto%2Bjson" in p for p in listed)
        if page_size:
            assert any("page=" in p for p in listed)


def test_descriptor_round_trip() -> None:
    """Descriptors drop what they cannot hold: a size that is not an int, a missing digest."""
    assert Descriptor.from_dict({"digest": "sha256:x", "size": True}) is None
    assert Descriptor.from_dict({"size": 3}) is None
    d = Descriptor.from_dict(
        {"mediaType": "m", "digest": "sha256:x", "size": 3, "annotations": {"b": "2", "a": "1"}}
    )
    assert d is not None
    assert d.to_dict() == {
        "mediaType": "m",
        "digest": "sha256:x",
        "size": 3,
        "annotations": {"a": "1", "b": "2"},
    }


def test_envelopes_are_deterministic_apart_from_time_and_signature(
    ctx: Ctx, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two attestations of one image at one $SOURCE_DATE_EPOCH carry identical payload bytes;
    only the (randomised ECDSA) signatures differ, and both verify."""
    ctx.push(ctx.built.a)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1764579600")  # 2025-12-01T09:00:00Z
    one, two = ctx.tmp_path / "one.json", ctx.tmp_path / "two.json"
    assert ctx.attest(ctx.ref(), "-o", str(one))[0] == 0
    assert ctx.attest(ctx.ref(), "-o", str(two))[0] == 0
    first, second = json.loads(one.read_text()), json.loads(two.read_text())
    assert first["payload"] == second["payload"]
    assert first["signatures"][0]["keyid"] == second["signatures"][0]["keyid"]
    assert first["signatures"][0]["sig"] != second["signatures"][0]["sig"]
    statement = json.loads(base64.b64decode(first["payload"]))
    assert statement["predicate"]["timestamp"] == "2025-12-01T09:00:00Z"
    code, out, _ = ctx.verify(ctx.ref(), "--attestation", str(one), "--attestation", str(two))
    assert code == 0
    assert out.count("  ok   ") == 2
