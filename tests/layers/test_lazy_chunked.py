"""Lazy reads of zstd:chunked layers pushed by the real ``skopeo`` to a real registry.

One two-layer image (an install, then a downgrade that leaves a requirement unmet: two
findings) is pushed twice to a real ``docker-registry``: as written (gzip) and as
zstd:chunked. Both are audited in full, and the zstd:chunked one lazily: same packages,
native facts, findings and exit code; the lazy read fetches a small share of the blob (a
4 MB file nobody analyses is never read), says it did in the JSON and the table, and
takes RECORD digests from the TOC. A TOC that does not match the manifest's checksum, a
TOC whose digests do not match the chunks, and a blob that does not verify either fall back
to a full read or fail closed; a registry front that answers multi-range requests with the
whole blob is read with single ranges.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import zstandard

from pinguard.audit.options import AuditOptions
from pinguard.audit.pipeline import audit_image
from pinguard.catalog import AnalyzerOptions, Analyzers
from pinguard.layers.chunked import LazyUnavailable, TocPosition, analyze_chunked
from pinguard.sources.interface import SourceOptions
from pinguard.testing.images import ImageWriter, layer_tar
from tests.infra.cli import cli
from tests.infra.registry import HTTPFront, RegistryServer

pytestmark = pytest.mark.integration

SCHEMAS = Path(__file__).resolve().parents[2] / "src" / "pinguard" / "schemas"

SITE = "usr/lib/python3.11/site-packages"
LIBZ = Path("/usr/lib/x86_64-linux-gnu/libz.so.1")
BIG = 4 << 20


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def _dist(name: str, version: str, files: dict[str, bytes], requires: str = "") -> dict[str, bytes]:
    info = f"{SITE}/{name}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{requires}\n".encode()
    record = [_record_line(p, d) for p, d in sorted(files.items())]
    record.append(_record_line(f"{name}-{version}.dist-info/METADATA", meta))
    record.append(f"{name}-{version}.dist-info/RECORD,,")
    out = {f"{SITE}/{p}": d for p, d in files.items()}
    out[f"{info}/METADATA"] = meta
    out[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    return out


def _layout(path: Path) -> str:
    """The image as an OCI layout with gzip layers; its reference."""
    libz = LIBZ.read_bytes()
    base = {
        **_dist("foo", "2.0", {"foo/__init__.py": b"x = 2\n" * 200, "foo/libz.so.1": libz}),
        **_dist("bar", "1.0", {"bar/__init__.py": b"y = 1\n"}, "Requires-Dist: foo>=2\n"),
        f"{SITE}/foo/big.bin": os.urandom(BIG),
        **_dist("zoo", "1.0", {"zoo.py": b"z = 1\n"}),  # after big.bin in the blob
        "etc/ld.so.conf": b"/usr/local/lib\n",
    }
    down = _dist("foo", "1.9", {"foo/__init__.py": b"x = 1\n" * 200, "foo/libz.so.1": libz})
    w = ImageWriter(path)
    layers = [
        w.layer(layer_tar(base, parents=True), "gzip"),
        w.layer(layer_tar(down, parents=True, whiteouts=[f"{SITE}/.wh.foo-2.0.dist-info"]), "gzip"),
    ]
    history = [{"created_by": "RUN pip install bar"}, {"created_by": "RUN pip install foo==1.9"}]
    img = w.image(layers, history)
    w.write_layout(w.index([img], tag="v1")[0])
    return f"oci:{path}:v1"


@pytest.fixture(scope="module")
def pushed(
    tmp_path_factory: pytest.TempPathFactory, scenario_registry: RegistryServer
) -> dict[str, str]:
    """The image in the registry as gzip and as zstd:chunked: {"gzip": ref, "chunked": ref}."""
    source = _layout(tmp_path_factory.mktemp("lazy") / "layout")
    # one repository each: skopeo reuses a blob the destination repository already has
    # (the gzip one, by the source's digest) whatever --dest-compress-format says
    repo = f"pinguard/lazy-{uuid.uuid4().hex[:8]}"
    scenario_registry.push(source, f"{repo}-chunked:v1", zstd_chunked=True)
    scenario_registry.push(source, f"{repo}-gzip:v1")
    return {
        kind: f"docker://{scenario_registry.ref(f'{repo}-{kind}:v1')}"
        for kind in ("gzip", "chunked")
    }


def _audit_json(*argv: str) -> tuple[int, dict[str, Any]]:
    code, out = cli("audit", "--no-cache", "--format", "json", *argv)
    start = out.index("{")
    return code, json.loads(out[: out.rindex("}") + 1][start:])


def _no_layers(value: Any) -> Any:
    """``value`` without its ``layer`` fields (blob digests differ between compressions)."""
    if isinstance(value, dict):
        return {k: _no_layers(v) for k, v in value.items() if k != "layer"}
    if isinstance(value, list):
        return [_no_layers(v) for v in value]
    return value


def _facts(doc: dict[str, Any]) -> dict[str, Any]:
    """What must not depend on how the layers were read or compressed."""
    keys = ("environments", "findings", "incomplete", "verdict", "native_libraries")
    return {k: _no_layers(doc.get(k)) for k in keys}


def test_lazy_and_full_reads_agree_with_the_gzip_twin(pushed: dict[str, str]) -> None:
    """gzip in full, zstd:chunked in full and lazily: same packages, native facts, findings
    and exit code (two findings: the downgrade and the unmet requirement); the lazy read says
    so, proves no DiffID, and fetches under 5% of the blobs (4 MB of random bytes unread)."""
    runs = {
        "gzip": _audit_json(pushed["gzip"], "--verify-records"),
        "chunked": _audit_json(pushed["chunked"], "--verify-records"),
        "lazy": _audit_json(pushed["chunked"], "--verify-records", "--layer-read", "lazy"),
    }
    codes = {k: code for k, (code, _doc) in runs.items()}
    assert codes == {"gzip": 1, "chunked": 1, "lazy": 1}
    facts = {k: _facts(doc) for k, (_code, doc) in runs.items()}
    assert facts["chunked"] == facts["gzip"]
    assert facts["lazy"] == facts["gzip"]
    rules = sorted(f["rule"] for f in runs["gzip"][1]["findings"])
    assert rules == ["downgrade", "unmet-requirement"]
    assert "layer_reads" not in runs["chunked"][1]
    schema = json.loads((SCHEMAS / "audit-v1.schema.json").read_text())
    jsonschema.validate(runs["lazy"][1], schema)  # revision 7: layer_reads
    reads = runs["lazy"][1]["layer_reads"]
    assert [r["mode"] for r in reads] == ["lazy", "lazy"], reads
    assert not any(r["diff_id_proven"] for r in reads)
    assert all(r["chunks_verified"] > 0 and r["files_whole"] > 0 for r in reads)
    assert all(r["files_in_parts"] == 1 for r in reads)  # libz.so.1, read in parts
    assert sum(r["digests_from_toc"] for r in reads) > 0  # --verify-records: from the TOC
    fetched, stored = sum(r["fetched"] for r in reads), sum(r["blob_size"] for r in reads)
    assert stored > BIG
    assert fetched < 0.05 * stored, (fetched, stored)

    code, table = cli("audit", "--no-cache", "--layer-read", "lazy", pushed["chunked"])
    assert code == 1
    assert "layers read lazily: 2 of 2" in table
    assert "DiffIDs are not proven" in table


def test_a_gzip_image_read_lazily_is_read_in_full_and_says_why(pushed: dict[str, str]) -> None:
    """No TOC: each layer is streamed and checked against its DiffID, with the reason."""
    code, doc = _audit_json(pushed["gzip"], "--layer-read", "lazy")
    assert code == 1
    assert [(r["mode"], r["diff_id_proven"]) for r in doc["layer_reads"]] == [("full", True)] * 2
    assert all("no zstd:chunked table of contents" in r["reason"] for r in doc["layer_reads"])


def _lazy_through(front: HTTPFront, ref: str) -> tuple[Any, list[str]]:
    """A lazy audit of ``ref`` through ``front``: the result, and the blob requests' ranges."""
    ref = ref.replace(ref.split("/")[2], front.address)
    options = AuditOptions(
        source=SourceOptions(insecure_registries=(front.address,)), layer_read="lazy", jobs=1
    )
    result = audit_image(ref, options=options)
    assert [r.mode for r in result.layer_reads] == ["lazy", "lazy"]
    names = {(d.name, d.raw_version) for e in result.final.environments for d in e.distributions}
    assert names == {("foo", "1.9"), ("bar", "1.0"), ("zoo", "1.0")}
    fetched = sum(r.fetched for r in result.layer_reads)
    assert fetched < 0.05 * sum(r.blob_size or 0 for r in result.layer_reads)
    return result, [r.headers.get("Range", "") for r in front.requests if "/blobs/" in r.path]


def test_a_registry_refusing_multi_range_is_read_with_single_ranges(
    pushed: dict[str, str], scenario_registry: RegistryServer
) -> None:
    """docker-registry answers several ranges in one multipart request; behind a front that
    answers them with the whole blob (200), the fetcher closes that answer unread, reads
    single ranges from then on, and gets the same packages from a small share of bytes."""
    with HTTPFront(scenario_registry.address) as plain:
        _result, direct = _lazy_through(plain, pushed["chunked"])
    with HTTPFront(scenario_registry.address, drop_multi_range=True) as dropping:
        _result, ranges = _lazy_through(dropping, pushed["chunked"])
    assert any("," in r for r in direct)  # the registry served a multi-range request
    multi = [r for r in ranges if "," in r]
    single = [r for r in ranges if r and "," not in r]
    assert len(multi) == 1, ranges  # asked once; after the whole blob came back, never again
    assert len(single) > len([r for r in direct if r])


def _chunked_layout(tmp_path: Path, scenario_registry: RegistryServer, ref: str) -> Path:
    """The zstd:chunked image copied from the registry into an OCI layout, as pushed."""
    import subprocess

    out = tmp_path / "chunked"
    subprocess.run(
        [
            "skopeo",
            "copy",
            "-q",
            "--preserve-digests",
            "--src-tls-verify=false",
            ref,
            f"oci:{out}:v1",
        ],
        check=True,
        timeout=120,
    )
    return out


def _manifest(layout: Path) -> tuple[dict[str, Any], Path]:
    index = json.loads((layout / "index.json").read_text())
    path = layout / "blobs" / "sha256" / index["manifests"][0]["digest"].split(":")[1]
    return json.loads(path.read_bytes()), path


def _rewrite_manifest(layout: Path, manifest: dict[str, Any]) -> None:
    """Store ``manifest`` as the layout's image manifest (index updated)."""
    raw = json.dumps(manifest).encode()
    digest = hashlib.sha256(raw).hexdigest()
    (layout / "blobs" / "sha256" / digest).write_bytes(raw)
    index = json.loads((layout / "index.json").read_text())
    index["manifests"][0].update(digest=f"sha256:{digest}", size=len(raw))
    (layout / "index.json").write_text(json.dumps(index))


def _keys(desc: dict[str, Any]) -> tuple[str, str]:
    notes = desc["annotations"]
    position = next(k for k in notes if k.endswith("manifest-position"))
    return position, next(k for k in notes if k.endswith("manifest-checksum"))


def test_a_toc_not_matching_the_manifest_checksum_is_read_in_full(
    tmp_path: Path, scenario_registry: RegistryServer, pushed: dict[str, str]
) -> None:
    """A wrong checksum annotation: the TOC is not used, the layer is streamed and its
    DiffID proven; the reason names the checksum."""
    layout = _chunked_layout(tmp_path, scenario_registry, pushed["chunked"])
    manifest, _ = _manifest(layout)
    _position, checksum = _keys(manifest["layers"][0])
    manifest["layers"][0]["annotations"][checksum] = "sha256:" + "0" * 64
    _rewrite_manifest(layout, manifest)
    result = audit_image(f"oci:{layout}:v1", options=AuditOptions(layer_read="lazy"))
    first, second = result.layer_reads
    assert first.mode == "full"
    assert "does not match the manifest's TOC checksum" in first.reason
    assert second.mode == "lazy"


def test_a_tampered_blob_fails_closed(
    tmp_path: Path, scenario_registry: RegistryServer, pushed: dict[str, str]
) -> None:
    """One byte of a METADATA frame changed in the stored blob: the lazy read finds the
    chunk does not match its TOC digest, falls back to the full read, and the full read
    refuses the blob (its digest): the audit fails, nothing tampered is used."""
    layout = _chunked_layout(tmp_path, scenario_registry, pushed["chunked"])
    manifest, _ = _manifest(layout)
    desc = manifest["layers"][1]
    blob = layout / "blobs" / "sha256" / desc["digest"].split(":")[1]
    data = bytearray(blob.read_bytes())
    position, _checksum = _keys(desc)
    offset, length, size, _ = (int(p) for p in desc["annotations"][position].split(":"))
    toc = json.loads(
        zstandard.ZstdDecompressor().decompress(
            bytes(data[offset : offset + length]), max_output_size=size
        )
    )
    meta = next(e for e in toc["entries"] if e["name"].endswith("foo-1.9.dist-info/METADATA"))
    frame = zstandard.ZstdCompressor().compress(b"Metadata-Version: 2.1\nName: foo\nVersion: 9\n")
    assert len(frame) <= meta["endOffset"] - meta["offset"]
    data[meta["offset"] : meta["offset"] + len(frame)] = frame
    blob.write_bytes(bytes(data))
    code, out = cli("audit", "--no-cache", "--layer-read", "lazy", f"oci:{layout}:v1")
    assert code == 3, out
    assert "Version: 9" not in out
    assert desc["digest"] in out


def _lie_about_a_digest(entries: list[dict[str, Any]]) -> None:
    for entry in entries:
        if entry["name"].endswith("bar-1.0.dist-info/METADATA"):
            entry["digest"] = "sha256:" + hashlib.sha256(b"something else").hexdigest()


def _misplace_a_chunk(entries: list[dict[str, Any]]) -> None:
    chunk = next(e for e in entries if e["type"] == "chunk" and e["name"].endswith("libz.so.1"))
    chunk["chunkOffset"] += 1


@pytest.mark.parametrize(
    ("forge", "message"),
    [
        (_lie_about_a_digest, r"bar-1\.0\.dist-info/METADATA"),
        (_misplace_a_chunk, r"chunks of .*libz\.so\.1.* do not tile"),
    ],
)
def test_toc_digests_and_chunk_places_are_checked(
    tmp_path: Path,
    scenario_registry: RegistryServer,
    pushed: dict[str, str],
    forge: Any,
    message: str,
) -> None:
    """A TOC that lies about one file's digest, or places a chunk of a library where its
    neighbours do not end, with a checksum to match (a manifest that vouches for it): the
    read does not verify and nothing is returned."""
    layout = _chunked_layout(tmp_path, scenario_registry, pushed["chunked"])
    manifest, _ = _manifest(layout)
    desc = manifest["layers"][0]
    data = (layout / "blobs" / "sha256" / desc["digest"].split(":")[1]).read_bytes()
    real = TocPosition.of(desc["annotations"].get)
    assert real is not None
    toc = json.loads(
        zstandard.ZstdDecompressor().decompress(
            data[real.offset : real.offset + real.length], max_output_size=real.uncompressed
        )
    )
    forge(toc["entries"])
    plain = json.dumps(toc).encode()
    forged = zstandard.ZstdCompressor().compress(plain)
    checksum = "sha256:" + hashlib.sha256(forged).hexdigest()
    position = TocPosition(real.offset, len(forged), len(plain), checksum)

    def fetch(ranges: Any) -> list[bytes]:
        return [
            forged if (a, b) == (position.offset, position.offset + len(forged)) else data[a:b]
            for a, b in ranges
        ]

    analyzers = Analyzers.for_options(AnalyzerOptions())
    with pytest.raises(LazyUnavailable, match=message):
        analyze_chunked(
            fetch,
            position,
            digest=desc["digest"],
            size=None,  # the forged TOC is longer than the real one
            select=analyzers.selector(),
            open_stream=analyzers.open_stream,
            open_parts=analyzers.open_parts,
        )
    # the real TOC, read the same way, gives the analysis
    analysis = analyze_chunked(
        lambda ranges: [data[a:b] for a, b in ranges],
        real,
        digest=desc["digest"],
        size=len(data),
        select=analyzers.selector(),
        open_stream=analyzers.open_stream,
        open_parts=analyzers.open_parts,
    )
    assert any(p.endswith("bar-1.0.dist-info/METADATA") for p in analysis.files)


def test_lazy_entries_never_answer_for_a_full_read(tmp_path: Path, pushed: dict[str, str]) -> None:
    """One cache directory, a lazy audit then a full one: the full audit does not take the
    lazy entries (whose DiffIDs are unproven: it would refuse them), it reads and proves
    every layer; the lazy audit run again takes its own entries and still says lazy."""
    address = pushed["chunked"].split("/")[2]
    source = SourceOptions(insecure_registries=(address,))
    cache = tmp_path / "cache"
    lazy = AuditOptions(source=source, cache_dir=cache, layer_read="lazy")
    first = audit_image(pushed["chunked"], options=lazy)
    assert [r.mode for r in first.layer_reads] == ["lazy", "lazy"]
    full = audit_image(pushed["chunked"], options=AuditOptions(source=source, cache_dir=cache))
    assert full.layer_reads == ()
    assert [s.changes for s in full.steps] == [s.changes for s in first.steps]
    again = audit_image(pushed["chunked"], options=lazy)
    assert [r.mode for r in again.layer_reads] == ["lazy", "lazy"]
    entries = [p.name for p in cache.rglob("sha256-*")]
    lazy_entries = [n for n in entries if n.endswith("-lazy.entry")]
    assert len(lazy_entries) == 2, entries  # beside the two full entries, never instead
    assert len([n for n in entries if n.startswith("sha256-")]) == 4, entries
