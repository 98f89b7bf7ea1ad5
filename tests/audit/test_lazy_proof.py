"""A lazy read may fail a gate, never pass one on its TOC's word alone.

The image: an install of ``foo 2.0`` and ``bar`` (which needs ``foo>=2``), then a step that
downgrades ``foo`` to 1.9: a gate fails on it. skopeo pushes it as zstd:chunked to a real
registry; it is copied to an OCI layout, and there its second layer is made to tell a
consistent lie: a new zstd frame holding ``foo``'s METADATA as version 2.0 is appended to the
blob, and a new TOC points ``foo-1.9.dist-info/METADATA`` at it, with that frame's digest, the
TOC's checksum in the manifest recomputed and the blob's digest too (the registry's manifest
vouches for all of it). Every chunk the lazy read fetches verifies; only the layer's DiffID,
which no lazy read can prove, gives the lie away.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import zstandard

from pinguard.testing.images import ImageWriter, layer_tar
from tests.infra.cli import cli_streams
from tests.infra.registry import RegistryServer
from tests.infra.tools import require_tool

pytestmark = pytest.mark.integration

SITE = "usr/lib/python3.11/site-packages"


def _dist(name: str, version: str, requires: str = "") -> dict[str, bytes]:
    info = f"{SITE}/{name}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{requires}\n".encode()
    code = f"__version__ = {version!r}\n".encode()
    digest = base64.urlsafe_b64encode(hashlib.sha256(code).digest()).rstrip(b"=").decode()
    record = (
        f"{name}/__init__.py,sha256={digest},{len(code)}\n{name}-{version}.dist-info/RECORD,,\n"
    )
    return {
        f"{SITE}/{name}/__init__.py": code,
        f"{info}/METADATA": meta,
        f"{info}/RECORD": record.encode(),
    }


def _honest_layout(path: Path) -> str:
    w = ImageWriter(path)
    base = {**_dist("foo", "2.0"), **_dist("bar", "1.0", "Requires-Dist: foo>=2\n")}
    down = _dist("foo", "1.9")
    layers = [
        w.layer(layer_tar(base, parents=True), "gzip"),
        w.layer(layer_tar(down, parents=True, whiteouts=[f"{SITE}/.wh.foo-2.0.dist-info"]), "gzip"),
    ]
    history = [{"created_by": "RUN pip install bar"}, {"created_by": "RUN pip install foo==1.9"}]
    w.write_layout(w.index([w.image(layers, history)], tag="v1")[0])
    return f"oci:{path}:v1"


@pytest.fixture(scope="module")
def chunked(tmp_path_factory: pytest.TempPathFactory, scenario_registry: RegistryServer) -> str:
    """The honest image, pushed by skopeo as zstd:chunked: its ``docker://`` reference."""
    source = _honest_layout(tmp_path_factory.mktemp("lazyproof") / "layout")
    repo = f"pinguard/lazy-proof-{uuid.uuid4().hex[:8]}:v1"
    scenario_registry.push(source, repo, zstd_chunked=True)
    return f"docker://{scenario_registry.ref(repo)}"


def _lying_layout(tmp_path: Path, chunked: str) -> Path:
    """The pushed image as an OCI layout whose second layer's TOC tells the lie."""
    layout = tmp_path / "lie"
    subprocess.run(
        [require_tool("skopeo"), "copy", "-q", "--preserve-digests", "--src-tls-verify=false",
         chunked, f"oci:{layout}:v1"],
        check=True, timeout=120,
    )  # fmt: skip
    blobs = layout / "blobs" / "sha256"
    index = json.loads((layout / "index.json").read_text())
    manifest = json.loads((blobs / index["manifests"][0]["digest"].split(":")[1]).read_bytes())
    desc = manifest["layers"][1]
    notes = desc["annotations"]
    position_key = next(k for k in notes if k.endswith("manifest-position"))
    checksum_key = next(k for k in notes if k.endswith("manifest-checksum"))
    blob = (blobs / desc["digest"].split(":")[1]).read_bytes()
    offset, length, size, _ = (int(p) for p in notes[position_key].split(":"))
    toc = json.loads(
        zstandard.ZstdDecompressor().decompress(
            blob[offset : offset + length], max_output_size=size
        )
    )
    fake = b"Metadata-Version: 2.1\nName: foo\nVersion: 2.0\n\n"
    frame = zstandard.ZstdCompressor().compress(fake)
    entry = next(e for e in toc["entries"] if e["name"].endswith("foo-1.9.dist-info/METADATA"))
    entry.update(
        offset=len(blob),
        endOffset=len(blob) + len(frame),
        size=len(fake),
        digest="sha256:" + hashlib.sha256(fake).hexdigest(),
    )
    plain = json.dumps(toc).encode()
    forged = zstandard.ZstdCompressor().compress(plain)
    lying = blob + frame + forged
    digest = hashlib.sha256(lying).hexdigest()
    (blobs / digest).write_bytes(lying)
    notes[position_key] = f"{len(blob) + len(frame)}:{len(forged)}:{len(plain)}:1"
    notes[checksum_key] = "sha256:" + hashlib.sha256(forged).hexdigest()
    desc.update(digest=f"sha256:{digest}", size=len(lying))
    raw = json.dumps(manifest).encode()
    (blobs / hashlib.sha256(raw).hexdigest()).write_bytes(raw)
    index["manifests"][0].update(digest="sha256:" + hashlib.sha256(raw).hexdigest(), size=len(raw))
    (layout / "index.json").write_text(json.dumps(index))
    return layout


def _audit(*argv: str) -> tuple[int, dict[str, Any], str]:
    code, out, err = cli_streams("audit", "--no-cache", "-f", "json", *argv)
    return code, json.loads(out) if out.strip() else {}, err


def test_the_honest_image_fails_fast_lazily(chunked: str) -> None:
    """The downgrade fails the gate from the lazy read alone: no full read confirms a fail."""
    code, doc, err = _audit(chunked, "--layer-read", "lazy")
    assert code == 1, err
    assert [r["mode"] for r in doc["layer_reads"]] == ["lazy", "lazy"]
    assert any(f["rule"] == "downgrade" for f in doc["findings"])


def test_a_consistent_lie_in_the_toc_cannot_pass_the_gate(tmp_path: Path, chunked: str) -> None:
    """The lie would pass (foo stays 2.0): the pass is confirmed by a full read, which finds
    the layer's tar is not its DiffID: exit 3, nothing of the lie in the output."""
    layout = _lying_layout(tmp_path, chunked)
    code, out, err = cli_streams("audit", "--no-cache", "--layer-read", "lazy", f"oci:{layout}:v1")
    assert code == 3, (out, err)
    assert "diff" in err.lower(), err
    assert "verdict: pass" not in out


def test_an_unproven_pass_is_accepted_only_in_so_many_words(tmp_path: Path, chunked: str) -> None:
    """--allow-unproven takes the lazy read's word: exit 0, but the verdict is `unproven` in
    the JSON and the table, never `pass`, and the layers say their DiffIDs are unproven."""
    layout = _lying_layout(tmp_path, chunked)
    ref = f"oci:{layout}:v1"
    code, doc, err = _audit(ref, "--layer-read", "lazy", "--allow-unproven")
    assert code == 0, err
    assert doc["verdict"] == "unproven"
    assert not any(r["diff_id_proven"] for r in doc["layer_reads"])
    code, out, _ = cli_streams(
        "audit", "--no-cache", "--layer-read", "lazy", "--allow-unproven", ref
    )
    assert code == 0
    verdicts = [line for line in out.splitlines() if line.startswith("verdict:")]
    assert verdicts, out
    assert verdicts[0].startswith("verdict: unproven"), out
    assert "--allow-unproven" in verdicts[0]


def test_an_honest_lazy_pass_is_confirmed_in_full(tmp_path: Path, chunked: str) -> None:
    """With the downgrade (and the requirement it leaves unmet) waived, the honest image
    passes: confirmed by a full read (the report is the full read's, with a note saying so),
    exit 0."""
    policy = tmp_path / "waive.toml"
    waiver = '[[waiver]]\nrule = "{}"\npackage = "foo"\nreason = "test"\nexpires = "2099-01-01"\n'
    policy.write_text(waiver.format("downgrade") + waiver.format("unmet-requirement"))
    code, doc, err = _audit(chunked, "--layer-read", "lazy", "--policy", str(policy))
    assert code == 0, (err, doc.get("findings"), doc.get("verdict"))
    assert doc["verdict"] == "pass"
    assert "layer_reads" not in doc  # the full read's report
    assert any("confirmed by a full read" in n for n in doc["notes"]), doc["notes"]
