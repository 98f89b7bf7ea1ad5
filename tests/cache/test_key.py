"""The layer cache key covers every piece of code that produces a cached analysis.

A copy of the package is edited the way a real change would edit it (the tar walk, the
whiteout recording, an analyzer's parsing or its version) and imported in a fresh
interpreter: its key must differ from this checkout's, and an audit through it must not
reuse the entries this checkout wrote. An unedited copy gives the same key (the key is the
code, not where it is installed). ``--no-cache`` neither reads nor writes a cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import pinguard
from pinguard.audit.options import AuditOptions
from pinguard.audit.pipeline import audit_image
from pinguard.cache.entry import seal, unseal
from pinguard.cache.store import LocalCache
from pinguard.cli import main
from pinguard.layers.analysis import LayerAnalysis
from pinguard.testing.demo import build_demo

PACKAGE = Path(pinguard.__file__).parent

_PROBE = """
import sys
import pinguard
from pathlib import Path
from pinguard.audit.options import AuditOptions
from pinguard.audit.pipeline import audit_image
assert Path(pinguard.__file__).is_relative_to(sys.argv[1]), pinguard.__file__
if len(sys.argv) > 2:
    audit_image(sys.argv[2], options=AuditOptions(cache_dir=Path(sys.argv[3])))
print(AuditOptions().layers_key())
"""


def _copy(tmp_path: Path, edit: Callable[[Path], None] | None) -> Path:
    root = tmp_path / "copy"
    shutil.copytree(PACKAGE, root / "pinguard", ignore=shutil.ignore_patterns("__pycache__"))
    if edit is not None:
        edit(root / "pinguard")
    return root


def _key_in(root: Path, *audit: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, str(root), *audit],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return out.stdout.strip()


def _append(rel: str, text: str) -> Callable[[Path], None]:
    def edit(pkg: Path) -> None:
        path = pkg / rel
        path.write_text(path.read_text() + text)

    return edit


def _replace(rel: str, old: str, new: str) -> Callable[[Path], None]:
    def edit(pkg: Path) -> None:
        path = pkg / rel
        source = path.read_text()
        assert old in source, (rel, old)
        path.write_text(source.replace(old, new, 1))

    return edit


@pytest.fixture
def demo(tmp_path: Path) -> str:
    path = tmp_path / "demo.tar"
    build_demo(path, tag="t")
    return f"oci-archive:{path}:t"


def test_unedited_copy_has_the_same_key(tmp_path: Path) -> None:
    """The key depends on the code, not on where the package is installed."""
    assert _key_in(_copy(tmp_path, None)) == AuditOptions().layers_key()


EDITS = {
    "tar walk": _append("layers/tar.py", "\n# the walk was rewritten\n"),
    "whiteout recording": _replace(
        "layers/analysis.py", 'OPAQUE = ".wh..wh..opq"', 'OPAQUE = ".wh..opq"'
    ),
    "inflater": _append("layers/blob.py", "\nOUT_CHUNK = 1 << 20\n"),
    "python analyzer code, same VERSION": _append("catalog/python.py", "\n# parsing changed\n"),
    "python analyzer VERSION": _replace("catalog/python.py", 'VERSION = "3"', 'VERSION = "4"'),
    "dpkg analyzer": _append("catalog/dpkg.py", "\n# status parsing changed\n"),
    "analyzer registry": _append("catalog/registry.py", "\n# selection changed\n"),
    "a new module in catalog": lambda pkg: (pkg / "catalog" / "newly_added.py").write_text(
        "X = 1\n"
    ),
}


@pytest.mark.parametrize("what", sorted(EDITS))
def test_any_producing_code_change_changes_the_key(tmp_path: Path, what: str) -> None:
    """Editing any module that produces a cached analysis gives a different key."""
    assert _key_in(_copy(tmp_path, EDITS[what])) != AuditOptions().layers_key()


def test_options_change_the_key() -> None:
    """--verify-records keeps file hashes, so its entries are keyed apart."""
    assert AuditOptions(verify_records=True).layers_key() != AuditOptions().layers_key()


def test_entry_of_another_walker_is_not_reused(demo: str, tmp_path: Path) -> None:
    """Entries written by an older tar walk are ignored; this walk reads the layers again."""
    cache = tmp_path / "cache"
    old = _copy(tmp_path, EDITS["tar walk"])
    _key_in(old, demo, str(cache))
    written_by_old = _layer_entries(cache)
    assert len(written_by_old) == 4  # one entry per layer of the demo image

    audit_image(demo, options=AuditOptions(cache_dir=cache))
    after = _layer_entries(cache)
    assert len(after - written_by_old) == 4  # every layer analysed and cached again

    audit_image(demo, options=AuditOptions(cache_dir=cache))  # control: now they are reused
    assert _layer_entries(cache) == after


def _layer_entries(cache: Path) -> set[str]:
    """The layer analyses in ``cache`` (the image's replay entries aside)."""
    return {name for name in os.listdir(cache) if name.startswith("sha256-")}


def _poison(cache: Path) -> None:
    """Drop every captured dist-info file from the cached analyses: an audit that reads
    these entries sees no distributions at all. The entries are re-sealed with their content
    digest (as a writer of whole entries could), so that they are read. The image's replay
    entries are removed: a replay never reads the layer entries, so it would hide them."""
    for entry in cache.glob("replay-*.json"):
        entry.unlink()
    for entry in cache.glob("sha256-*.entry"):
        data = json.loads(entry.read_text())
        del data["content"]
        analysis = LayerAnalysis.from_json(data["analysis"])
        analysis.files = {p: b for p, b in analysis.files.items() if ".dist-info/" not in p}
        entry.write_text(seal({**data, "analysis": analysis.to_json()}))


def _packages(path: Path) -> int:
    doc = json.loads(path.read_text())
    return sum(len(e["packages"]) for e in doc["environments"])


def test_no_cache_neither_reads_nor_writes(
    demo: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With --no-cache a poisoned cache is not read, nothing is written, and the default
    cache directory is not even created."""
    cache = tmp_path / "cache"
    audit_image(demo, options=AuditOptions(cache_dir=cache))
    _poison(cache)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    common = ["audit", demo, "--fail-on", "never", "--format", "json"]

    poisoned, clean, default = tmp_path / "p.json", tmp_path / "c.json", tmp_path / "d.json"
    # control: the poisoned entries are what a cached run sees (no distribution, so no
    # Python environment: that fails even at --fail-on never)
    assert main([*common, "--cache-dir", str(cache), "-o", str(poisoned)]) == 1
    assert _packages(poisoned) == 0
    # (that run stored its replay of the poisoned entries; --no-cache must not touch it)
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in cache.iterdir()}

    assert main([*common, "--cache-dir", str(cache), "--no-cache", "-o", str(clean)]) == 0
    assert _packages(clean) == 6  # pip, nccl, cutlass-dsl, torch, numpy, flashinfer
    after = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in cache.iterdir()}
    assert after == before

    assert main([*common, "--no-cache", "-o", str(default)]) == 0
    assert not (tmp_path / "xdg").exists()


def test_cache_entry_round_trip_is_exact(tmp_path: Path) -> None:
    """An entry reads back equal, binary files and streamed results included."""
    analysis = LayerAnalysis(
        digest="sha256:" + "ab" * 32,
        files={"/a/METADATA": b"Name: a\n", "/b/bin": b"\xff\xfe\x00"},
        hashes={"/a/x.py": "sha256=abc"},
        whiteouts=["/opt"],
        opaque=["/usr/lib"],
        members=12,
        size=10240,
        unreadable=[("/c", "cannot read: Permission denied")],
        streamed={"/lib/libx.so.1": {"native": {"soname": "libx.so.1", "needed": ["libc.so.6"]}}},
    )
    cache = LocalCache(tmp_path / "c", "k1", ())
    cache.put(analysis)
    assert cache.get(analysis.digest) == analysis
    assert LocalCache(tmp_path / "c", "k2", ()).get(analysis.digest) is None  # other key: a miss
    assert [p.name for p in (tmp_path / "c").iterdir()] == [f"sha256-{'ab' * 32}.k1.entry"]


def test_a_sealed_entry_is_read_back_and_any_change_is_a_miss() -> None:
    """``seal`` puts the content digest first; ``unseal`` checks it over the stored bytes:
    the same entry back, and None for a changed byte, a changed digest, the same data
    written in another JSON layout (spaces), or text that is no sealed entry."""
    data: dict[str, object] = {"digest": "sha256:" + "a" * 64, "files": {"x": [1, "é"]}, "z": None}
    text = seal(data)
    assert text.startswith('{"content":"sha256:')
    assert json.loads(text)["content"] == entry_digest_of(data)
    assert unseal(text.encode()) == data
    assert unseal(seal({}).encode()) == {}
    assert unseal(text.replace('"x"', '"y"').encode()) is None
    assert unseal(text.replace("sha256:", "sha256:0", 1)[:-1].encode()) is None
    spaced = json.dumps(json.loads(text))
    assert unseal(spaced.encode()) is None
    assert unseal(b"") is None
    assert unseal(b"[1, 2]") is None


def entry_digest_of(data: dict[str, object]) -> str:
    """sha256 over the canonical JSON, computed here independently of the module."""
    body = json.dumps(data, separators=(",", ":"), sort_keys=True).encode()
    return "sha256:" + hashlib.sha256(body).hexdigest()


def test_the_disk_scan_reads_what_importlib_resources_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A package on disk is read with ``os.scandir`` (no ``importlib.resources``, which
    imports ``zipfile``, on a warm audit's path); inside a zipapp through
    ``importlib.resources``: the same names, order and bytes either way, so the same keys."""
    from pinguard.cache import key

    on_disk = key._walk("pinguard", None)
    modules = key._walk("pinguard", (".py", ".pyc"))
    assert key._directory("pinguard") == str(PACKAGE)
    monkeypatch.setattr(key, "_directory", lambda package: None)
    assert key._walk("pinguard", None) == on_disk
    assert key._walk("pinguard", (".py", ".pyc")) == modules
    assert len(on_disk) > len(modules) > 100


_ENV_READ = re.compile(
    r"""(?:environ\.get\(|environ\[|getenv\(|_ENV\s*=\s*)["']([A-Z][A-Z0-9_]*)["']"""
    r"""|["']([A-Z][A-Z0-9_]*)["']\s+in\s+os\.environ"""
)


def test_the_quick_key_covers_every_environment_variable_the_source_reads() -> None:
    """The quick key stands for the parsed command line, so it holds every variable that
    pinguard reads: named in ``READ_ENVIRONMENT``, or of a prefix it reads by prefix."""
    from pinguard.cache.key import READ_ENVIRONMENT, READ_ENVIRONMENT_PREFIXES

    read: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for found in _ENV_READ.finditer(path.read_text()):
            read.add(found.group(1) or found.group(2))
    assert {"DOCKER_CONFIG", "XDG_DATA_HOME", "PINGUARD_CACHE_PASSWORD"} <= read  # it finds them
    missing = sorted(
        n for n in read if n not in READ_ENVIRONMENT and not n.startswith(READ_ENVIRONMENT_PREFIXES)
    )
    assert missing == []
