"""The shared layer cache in a directory (``file:///DIR``): hits, verification, faults.

The demo image is audited through ``audit_image`` with a ``CacheSpec`` naming a directory;
hits are counted by the progress callback and the entries are read from the directory
itself; the packages are compared with an audit made without any cache.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pinguard.cache.backends.directory import SUFFIX
from pinguard.cache.entry import unseal
from pinguard.cache.store import CacheSpec
from pinguard.errors import UsageError
from tests.infra.layercache import LAYERS, audit, inventory


def test_a_second_audit_reads_every_layer_from_the_directory(demo: str, tmp_path: Path) -> None:
    """Entries land as verified-entry files, one per layer; the second audit reads them all."""
    spec = CacheSpec(f"file://{tmp_path / 'shared'}")
    plain, _ = audit(demo, None)
    first, cached_first = audit(demo, spec, jobs=2)
    second, cached_second = audit(demo, spec)
    assert (cached_first, cached_second) == (0, LAYERS)
    assert inventory(first) == inventory(second) == inventory(plain)
    files = sorted((tmp_path / "shared").iterdir())
    assert len(files) == LAYERS
    assert all(f.name.endswith(SUFFIX) and f.name.startswith("sha256-") for f in files)
    entry = unseal(files[0].read_bytes())  # sealed as every entry is, its digest first
    assert entry is not None
    assert entry["format"] == "pinguard/layer-cache-entry/2"
    assert entry["layer"] == files[0].name.split(".")[0].replace("-", ":", 1)
    assert all(f.stat().st_mode & 0o777 == 0o644 for f in files)  # other workers read them
    assert not any("layer cache" in n for n in second.notes)


def test_a_truncated_file_is_rejected_and_reported(demo: str, tmp_path: Path) -> None:
    """A half-written entry is a reported miss: that one layer is analysed again."""
    spec = CacheSpec(f"file://{tmp_path / 'shared'}")
    plain, _ = audit(demo, spec)
    victim = sorted((tmp_path / "shared").iterdir())[0]
    victim.write_bytes(victim.read_bytes()[:100])
    again, cached = audit(demo, spec)
    assert cached == LAYERS - 1
    assert inventory(again) == inventory(plain)
    [note] = [n for n in again.notes if "layer cache" in n]
    assert f"file://{tmp_path / 'shared'}" in note
    assert "rejected the entry" in note
    assert "not JSON (truncated?)" in note


def test_an_unwritable_directory_is_reported_and_the_audit_goes_on(
    demo: str, tmp_path: Path
) -> None:
    """A path under a regular file cannot be a directory: audited without it, and said so."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    result, cached = audit(demo, CacheSpec(f"file://{blocker / 'cache'}"))
    assert cached == 0
    [note] = [n for n in result.notes if "layer cache" in n]
    assert "unavailable" in note
    assert "audited without the shared cache" in note


def test_a_relative_path_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="file:///ABSOLUTE/PATH"):
        CacheSpec("file://relative/dir").backend()
