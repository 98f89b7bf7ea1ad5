"""The cheap lies a zstd:chunked TOC can tell are refused at once (issue 30.1).

One two-layer image (``foo 2.0`` and ``bar``, which needs ``foo>=2``; then a downgrade of
``foo`` to 1.9: two findings) is pushed by the real ``skopeo`` as zstd:chunked to a real
``docker-registry`` and copied back into an OCI layout as pushed. There one layer's TOC is
rewritten the way containers/storage's compressor writes one (the TOC in a skippable frame
where skopeo put it, then, for the tar-split cases, the tar-split in a frame of its own, then
the 40- or 64-byte footer), the manifest's TOC checksum is recomputed to match, and the
blob's digest and the manifest's too: the manifest vouches for every lie. The tar stream is
untouched, so a full read of every forged image still proves every DiffID.

The lies: two entries that claim one stored chunk (with different digests, or one file
pointed at another file's chunk with that chunk's digest), stored ranges that overlap, a
range past the end of the blob or inside the TOC; and, for a TOC that names a tar-split, one
that lists an entry the tar-split lacks, lacks one it has, or gives an entry another size or
type. skopeo 1.9 writes no tar-split (its TOC has no ``tarSplitDigest``, its footer and
annotations no tar-split position), so the tar-split is the one containers/storage itself
recorded for the same layer when skopeo copied the image into a containers-storage (vfs)
store: the same ``vbatts/tar-split`` JSON lines that containers/storage 1.47 and later
compress into a zstd:chunked blob. Before this change, each lie about a file nobody reads was
read lazily without a word.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import random
import re
import struct
import subprocess
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import zstandard

from pinguard.testing.images import ImageWriter, layer_tar
from tests.infra.cli import cli_streams
from tests.infra.registry import RegistryServer
from tests.infra.tools import require_root, require_tool

pytestmark = pytest.mark.integration

SITE = "usr/lib/python3.11/site-packages"
SKIPPABLE = b"\x50\x2a\x4d\x18"  # a zstd skippable frame's magic
FOOTER_MAGIC = b"GnUlInUx"
OLD_KEYS = (
    "io.containers.zstd-chunked.manifest-position",
    "io.containers.zstd-chunked.manifest-checksum",
)
NEW_KEYS = (
    "io.github.containers.zstd-chunked.manifest-position",
    "io.github.containers.zstd-chunked.manifest-checksum",
)
TAR_SPLIT_KEY = "io.github.containers.zstd-chunked.tarsplit-position"

Entries = list[dict[str, Any]]


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def _dist(name: str, version: str, files: dict[str, bytes], requires: str = "") -> dict[str, bytes]:
    info = f"{SITE}/{name}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{requires}\n".encode()
    record = [_record_line(p, d) for p, d in sorted(files.items())]
    record.append(f"{name}-{version}.dist-info/RECORD,,")
    out = {f"{SITE}/{p}": d for p, d in files.items()}
    out[f"{info}/METADATA"] = meta
    out[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    return out


def _layout(path: Path) -> str:
    """The honest image as an OCI layout with gzip layers; its reference."""
    base = {
        # data.bin: 2 MiB of seeded random bytes, so skopeo's rolling checksum cuts it into
        # several chunks, the same ones every run (256 KiB of os.urandom was sometimes one)
        **_dist(
            "foo",
            "2.0",
            {
                "foo/__init__.py": b"x = 2\n" * 50,
                "foo/data.bin": random.Random(0).randbytes(1 << 21),
            },
        ),
        **_dist("bar", "1.0", {"bar/__init__.py": b"y = 1\n" * 40}, "Requires-Dist: foo>=2\n"),
    }
    down = _dist("foo", "1.9", {"foo/__init__.py": b"x = 1\n" * 50})
    w = ImageWriter(path)
    layers = [
        w.layer(layer_tar(base, parents=True), "gzip"),
        w.layer(layer_tar(down, parents=True, whiteouts=[f"{SITE}/.wh.foo-2.0.dist-info"]), "gzip"),
    ]
    history = [{"created_by": "RUN pip install bar"}, {"created_by": "RUN pip install foo==1.9"}]
    w.write_layout(w.index([w.image(layers, history)], tag="v1")[0])
    return f"oci:{path}:v1"


@dataclass(frozen=True)
class Pushed:
    source: str  # the gzip OCI layout skopeo pushed
    chunked: str  # docker://... as skopeo wrote it, zstd:chunked


@pytest.fixture(scope="module")
def pushed(tmp_path_factory: pytest.TempPathFactory, scenario_registry: RegistryServer) -> Pushed:
    source = _layout(tmp_path_factory.mktemp("toclies") / "layout")
    repo = f"pinguard/toc-lies-{uuid.uuid4().hex[:8]}:v1"
    scenario_registry.push(source, repo, zstd_chunked=True)
    return Pushed(source, f"docker://{scenario_registry.ref(repo)}")


@pytest.fixture(scope="module")
def tar_splits(tmp_path_factory: pytest.TempPathFactory, pushed: Pushed) -> dict[str, bytes]:
    """diff_id -> the tar-split (JSON lines) containers/storage recorded for that layer when
    skopeo copied the honest image into a containers-storage (vfs) store of its own."""
    require_root()
    store = tmp_path_factory.mktemp("storage")
    ref = f"containers-storage:[vfs@{store}/root+{store}/run]localhost/toc-lies:v1"
    subprocess.run(
        [require_tool("skopeo"), "copy", "-q", pushed.source, ref], check=True, timeout=120
    )
    layers = json.loads((store / "root" / "vfs-layers" / "layers.json").read_text())
    out = {}
    for layer in layers:
        path = store / "root" / "vfs-layers" / f"{layer['id']}.tar-split.gz"
        out[layer["diff-digest"]] = gzip.decompress(path.read_bytes())
    return out


def _skippable(data: bytes) -> bytes:
    return SKIPPABLE + struct.pack("<I", len(data)) + data


@dataclass
class Forged:
    layout: Path
    layer: str  # the forged layer's new digest
    toc_offset: int


def _copy(tmp_path: Path, pushed: Pushed) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    layout = tmp_path / "forged"
    subprocess.run(
        [require_tool("skopeo"), "copy", "-q", "--preserve-digests", "--src-tls-verify=false",
         pushed.chunked, f"oci:{layout}:v1"],
        check=True, timeout=120,
    )  # fmt: skip
    return layout


def _forge(
    tmp_path: Path,
    pushed: Pushed,
    number: int,
    forge: Callable[[Entries, int], None],
    tar_split: dict[str, bytes] | None = None,
) -> Forged:
    """The pushed image as an OCI layout whose layer ``number`` (0-based) has its TOC
    rewritten by ``forge(entries, toc_offset)``, with the tar-split recorded for that layer's
    diff_id added when ``tar_split`` is given; checksums and digests recomputed to match."""
    layout = _copy(tmp_path, pushed)
    blobs = layout / "blobs" / "sha256"
    index = json.loads((layout / "index.json").read_text())
    manifest = json.loads((blobs / index["manifests"][0]["digest"][7:]).read_bytes())
    config = json.loads((blobs / manifest["config"]["digest"][7:]).read_bytes())
    desc = manifest["layers"][number]
    notes = desc["annotations"]
    blob = (blobs / desc["digest"][7:]).read_bytes()
    offset, length, size, _ = (int(p) for p in notes[OLD_KEYS[0]].split(":"))
    assert blob[offset - 8 : offset - 4] == SKIPPABLE  # the TOC's frame, where skopeo put it
    assert blob[-8:] == FOOTER_MAGIC
    assert TAR_SPLIT_KEY not in notes  # skopeo 1.9 places no tar-split
    toc = json.loads(
        zstandard.ZstdDecompressor().decompress(
            blob[offset : offset + length], max_output_size=size
        )
    )
    assert "tarSplitDigest" not in toc  # skopeo 1.9 writes no tar-split
    forge(toc["entries"], offset)
    split = b""
    if tar_split is not None:
        split = zstandard.ZstdCompressor().compress(tar_split[config["rootfs"]["diff_ids"][number]])
        toc["tarSplitDigest"] = "sha256:" + hashlib.sha256(split).hexdigest()
    plain = json.dumps(toc).encode()
    packed = zstandard.ZstdCompressor().compress(plain)
    new = blob[: offset - 8] + _skippable(packed)
    fields = [offset, len(packed), len(plain), 1]
    for key in OLD_KEYS:
        del notes[key]
    if tar_split is None:  # skopeo 1.9's layout: its keys and its 40-byte footer
        position, checksum = OLD_KEYS
    else:  # containers/storage 1.47+: TOC, tar-split, 64-byte footer naming both
        position, checksum = NEW_KEYS
        at = len(new) + 8
        notes[TAR_SPLIT_KEY] = (
            f"{at}:{len(split)}:{len(tar_split[config['rootfs']['diff_ids'][number]])}"
        )
        new += _skippable(split)
        fields += [at, len(split), int(notes[TAR_SPLIT_KEY].split(":")[2])]
    new += _skippable(struct.pack(f"<{len(fields)}Q", *fields) + FOOTER_MAGIC)
    notes[position] = f"{offset}:{len(packed)}:{len(plain)}:1"
    notes[checksum] = "sha256:" + hashlib.sha256(packed).hexdigest()
    digest = hashlib.sha256(new).hexdigest()
    (blobs / digest).write_bytes(new)
    desc.update(digest=f"sha256:{digest}", size=len(new))
    raw = json.dumps(manifest).encode()
    (blobs / hashlib.sha256(raw).hexdigest()).write_bytes(raw)
    index["manifests"][0].update(digest="sha256:" + hashlib.sha256(raw).hexdigest(), size=len(raw))
    (layout / "index.json").write_text(json.dumps(index))
    return Forged(layout, f"sha256:{digest}", offset)


def _lazy(forged: Forged, *extra: str) -> tuple[int, dict[str, Any], str]:
    code, out, err = cli_streams(
        "audit",
        "--no-cache",
        "-f",
        "json",
        "--layer-read",
        "lazy",
        *extra,
        f"oci:{forged.layout}:v1",
    )
    return code, json.loads(out) if out.strip() else {}, err


def _entry(entries: Entries, suffix: str, kind: str = "reg") -> dict[str, Any]:
    return next(e for e in entries if e["type"] == kind and e["name"].endswith(suffix))


def _chunk(entries: Entries, suffix: str, k: int) -> tuple[int, int, str, int]:
    """(start, end, digest, size) of the k-th stored chunk of a file in chunks."""
    start = next(
        i for i, e in enumerate(entries) if e["type"] == "reg" and e["name"].endswith(suffix)
    )
    group = [entries[start]]
    group += [
        e for e in entries[start + 1 :] if e["type"] == "chunk" and e["name"] == group[0]["name"]
    ]
    assert len(group) > k + 1, "data.bin is stored in several chunks"
    chunk = group[k]
    return chunk["offset"], group[k + 1]["offset"], chunk["chunkDigest"], chunk["chunkSize"]


def _unchanged(entries: Entries, toc_offset: int) -> None:
    return None


def test_an_honest_toc_written_again_is_read_lazily(
    tmp_path: Path, pushed: Pushed, tar_splits: dict[str, bytes]
) -> None:
    """Control (it passes before this change too): the TOC written again unchanged, and with
    the tar-split containers/storage recorded for the layer, is read lazily as pushed: the
    checks refuse nothing an honest writer makes."""
    for number in (0, 1):
        for split in (None, tar_splits):
            forged = _forge(
                tmp_path / f"{number}-{split is None}", pushed, number, _unchanged, split
            )
            code, doc, err = _lazy(forged)
            assert code == 1, err  # the downgrade and the requirement it leaves unmet
            assert [r["mode"] for r in doc["layer_reads"]] == ["lazy", "lazy"], doc["layer_reads"]
            assert sorted(f["rule"] for f in doc["findings"]) == ["downgrade", "unmet-requirement"]


def _one_chunk_two_digests(entries: Entries, toc_offset: int) -> None:
    """bar's __init__.py placed where foo's is stored, its own digest kept."""
    foo, bar = _entry(entries, "foo/__init__.py"), _entry(entries, "bar/__init__.py")
    bar.update(offset=foo["offset"], endOffset=foo["endOffset"])


def _pointed_at_anothers_chunk(entries: Entries, toc_offset: int) -> None:
    """bar's __init__.py pointed at the second chunk of foo's data.bin, with that chunk's
    digest: a consistent lie, every byte of which would verify."""
    start, end, digest, size = _chunk(entries, "foo/data.bin", 1)
    bar = _entry(entries, "bar/__init__.py")
    bar.update(offset=start, endOffset=end, digest=digest, size=size)


def _overlapping(entries: Entries, toc_offset: int) -> None:
    foo, bar = _entry(entries, "foo/__init__.py"), _entry(entries, "bar/__init__.py")
    bar.update(offset=foo["offset"] + 1, endOffset=foo["endOffset"] + 1)


def _past_the_blob(entries: Entries, toc_offset: int) -> None:
    _entry(entries, "bar/__init__.py").update(offset=1 << 40, endOffset=(1 << 40) + 64)


def _into_the_toc(entries: Entries, toc_offset: int) -> None:
    _entry(entries, "bar/__init__.py").update(offset=toc_offset + 4, endOffset=toc_offset + 40)


NAME = r"'[^']*{}'"
BYTES = r"bytes \d+-\d+"


@pytest.mark.parametrize(
    ("forge", "lie"),
    [
        (_one_chunk_two_digests, rf"claim one chunk \({BYTES}\) with different digests$"),
        (
            _pointed_at_anothers_chunk,
            rf"(the chunk of {NAME.format('foo/data.bin')} at \d+|{NAME.format('bar/__init__.py')})"
            rf" and (?!\1)(the chunk of {NAME.format('foo/data.bin')} at \d+|"
            rf"{NAME.format('bar/__init__.py')}) claim one chunk \({BYTES}\); a writer stores "
            "each file's content in bytes of its own$",
        ),
        (
            _overlapping,
            rf"{NAME.format('foo/__init__.py')} \({BYTES}\) and "
            rf"{NAME.format('bar/__init__.py')} \({BYTES}\) overlap$",
        ),
        (
            _past_the_blob,
            rf"{NAME.format('bar/__init__.py')} is placed past the end of the blob: "
            r"bytes 1099511627776-1099511627839, of \d+$",
        ),
        (
            _into_the_toc,
            rf"{NAME.format('bar/__init__.py')} is placed in {BYTES}, past the file data, "
            r"which ends where the TOC begins \(byte \d+\)$",
        ),
    ],
    ids=[
        "one-chunk-two-digests",
        "pointed-at-anothers-chunk",
        "overlap",
        "past-the-blob",
        "into-the-toc",
    ],
)
def test_a_toc_contradicting_its_own_places_is_refused(
    tmp_path: Path, pushed: Pushed, forge: Callable[[Entries, int], None], lie: str
) -> None:
    """A lie about where a file nobody reads is stored (bar's __init__.py: its RECORD digest
    comes from the TOC, unread, even with --verify-records) is refused before any chunk is
    fetched: exit 3, one line naming the layer and the entries, no report. Before, the lazy
    read never looked at those places and the audit went on (exit 1)."""
    forged = _forge(tmp_path, pushed, 0, forge)
    for extra in ((), ("--verify-records",), ("--allow-unproven", "--fail-on", "never")):
        code, doc, err = _lazy(forged, *extra)
        assert code == 3, (extra, err, doc.get("layer_reads"))
        assert doc == {}
        assert f"the zstd:chunked TOC of layer {forged.layer} lies: " in err, err
        assert re.search(lie, err.strip().splitlines()[-1]), err
    if forge is _one_chunk_two_digests:
        assert "bar/__init__.py" in err
        assert "foo/__init__.py" in err


def _a_whiteout_the_tar_lacks(entries: Entries, toc_offset: int) -> None:
    """The TOC of the downgrade hides bar: a whiteout of its dist-info no tar entry makes."""
    entries.append({"type": "reg", "name": f"{SITE}/.wh.bar-1.0.dist-info"})


def _a_metadata_dropped(entries: Entries, toc_offset: int) -> None:
    """The TOC of the downgrade leaves foo 1.9's METADATA out: foo would seem gone."""
    entries.remove(_entry(entries, "foo-1.9.dist-info/METADATA"))


def _another_size(entries: Entries, toc_offset: int) -> None:
    _entry(entries, "foo/__init__.py")["size"] += 1


def _another_type(entries: Entries, toc_offset: int) -> None:
    entry = _entry(entries, "foo/__init__.py")
    for key in ("size", "digest", "offset", "endOffset"):
        entry.pop(key, None)
    entry.update(type="symlink", linkName="/etc/passwd")


@pytest.mark.parametrize(
    ("forge", "lie"),
    [
        (
            _a_whiteout_the_tar_lacks,
            r"it lists (\d+) entries, its tar-split (\d+): "
            rf"{NAME.format('.wh.bar-1.0.dist-info')} not in the tar-split$",
        ),
        (
            _a_metadata_dropped,
            rf"its tar-split has {NAME.format('foo-1.9.dist-info/METADATA')}, "
            "which it does not list$",
        ),
        (
            _another_size,
            rf"it gives {NAME.format('foo/__init__.py')} 301 bytes, its tar-split 300 bytes$",
        ),
        (
            _another_type,
            rf"it gives {NAME.format('foo/__init__.py')} the type symlink, its tar-split reg$",
        ),
    ],
    ids=["extra-entry", "missing-entry", "size", "type"],
)
def test_a_toc_disagreeing_with_its_tar_split_is_refused(
    tmp_path: Path,
    pushed: Pushed,
    tar_splits: dict[str, bytes],
    forge: Callable[[Entries, int], None],
    lie: str,
) -> None:
    """The downgrade layer with the tar-split containers/storage recorded for it, and a TOC
    that lists an entry more, one fewer, or gives one another size or type: refused as
    containers/storage refuses it (``ensureTOCMatchesTarSplit``), exit 3 naming the entry.
    Before, the tar-split was not read and the lazy audit reported the TOC's story."""
    forged = _forge(tmp_path, pushed, 1, forge, tar_splits)
    code, doc, err = _lazy(forged)
    assert code == 3, (err, doc.get("layer_reads"))
    assert doc == {}
    line = err.strip().splitlines()[-1]
    assert f"the zstd:chunked TOC of layer {forged.layer} lies: " in line, err
    found = re.search(lie, line)
    assert found, err
    if forge is _a_whiteout_the_tar_lacks:
        assert int(found.group(1)) == int(found.group(2)) + 1
