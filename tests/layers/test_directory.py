"""The directory walk (``dir:`` and the in-build guard) reads nothing outside its root.

Symbolic links, to files or to directories, inside or pointing outside the root, are never
followed or read; pseudo filesystems and excluded trees are not entered.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pinguard.audit.pipeline import audit_directory
from pinguard.catalog import AnalyzerOptions, Analyzers
from pinguard.layers.analysis import analyze_directory

SITE = "usr/lib/python3/dist-packages"


def _meta(name: str, version: str) -> bytes:
    return f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A root with one real distribution, and an outside tree holding another one."""
    root = tmp_path / "root"
    site = root / SITE
    (site / "inside-1.0.dist-info").mkdir(parents=True)
    (site / "inside-1.0.dist-info" / "METADATA").write_bytes(_meta("inside", "1.0"))
    outside = tmp_path / "outside" / "site"
    (outside / "outside-6.6.dist-info").mkdir(parents=True)
    (outside / "outside-6.6.dist-info" / "METADATA").write_bytes(_meta("outside", "6.6"))
    (root / "opt").mkdir()
    # a directory symlink to the outside tree, placed where an environment would be
    os.symlink(outside, root / "opt" / "site-packages")
    os.symlink(outside, site / "linked")
    # a file symlink pointing outside, named like metadata pinguard captures
    (site / "evil-0.1.dist-info").mkdir()
    os.symlink(
        outside / "outside-6.6.dist-info" / "METADATA", site / "evil-0.1.dist-info" / "METADATA"
    )
    return root


def test_symlinks_out_of_the_root_are_not_followed(tree: Path) -> None:
    """Only the distribution really inside the root is found; links to outside are skipped."""
    analyzers = Analyzers.for_options(AnalyzerOptions(verify_records=True))
    analysis = analyze_directory(str(tree), select=analyzers.selector())
    assert sorted(analysis.files) == [f"/{SITE}/inside-1.0.dist-info/METADATA"]
    assert all("outside" not in p and "/linked/" not in p for p in analysis.hashes)
    result = audit_directory(str(tree))
    names = [(d.name, d.raw_version) for e in result.final.environments for d in e.distributions]
    assert names == [("inside", "1.0")]


def test_excluded_and_pseudo_trees_are_not_entered(tree: Path) -> None:
    """Excluded in-image paths and /proc are neither read nor counted."""
    proc = tree / "proc" / "1"
    proc.mkdir(parents=True)
    (proc / "METADATA").write_bytes(b"x")
    analyzers = Analyzers.for_options(AnalyzerOptions())
    everything = analyze_directory(str(tree), select=analyzers.selector())
    excluded = analyze_directory(str(tree), select=analyzers.selector(), exclude=(f"/{SITE}",))
    assert excluded.files == {}
    # inside's METADATA and the file symlink beside it; /proc's file is not counted
    assert (everything.members, excluded.members) == (2, 0)
