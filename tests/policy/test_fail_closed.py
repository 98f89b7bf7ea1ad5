"""Fail-closed policy: a pin that matches nothing is a warning finding, end to end.

A real OCI layout (``pinguard.testing.images``) holding one distribution is audited with a
policy file pinning a package the image does not have; the finding and the exit codes under
``--fail-on warning`` and the default ``--fail-on error`` are written by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pinguard.cli import main
from pinguard.testing.images import ImageWriter, layer_tar

SITE = "usr/local/lib/python3.12/site-packages"


def _layout(tmp_path: Path) -> str:
    writer = ImageWriter(tmp_path / "layout")
    meta = b"Metadata-Version: 2.1\nName: six\nVersion: 1.16.0\n\n"
    desc = writer.layer(layer_tar({f"{SITE}/six-1.16.0.dist-info/METADATA": meta}))
    image = writer.image([desc], [{"created_by": "RUN pip install six"}])
    index, _ = writer.index([image], tag="t")
    writer.write_layout(index)
    return f"oci:{tmp_path / 'layout'}:t"


def test_pin_matching_nothing_is_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ref = _layout(tmp_path)
    policy = tmp_path / "policy.toml"
    policy.write_text('[[pin]]\npackage = "numpyy"\nversion = ">=1,<2"\n')
    args = ["audit", ref, "--no-cache", "--policy", str(policy), "--format", "json"]
    assert main(args) == 0  # a warning does not fail the default --fail-on error
    doc = json.loads(capsys.readouterr().out)
    assert [(f["rule"], f["severity"], f["package"]) for f in doc["findings"]] == [
        ("pin-violation", "warning", "numpyy")
    ]
    assert doc["findings"][0]["message"] == (
        "pin matches nothing: no distribution named numpyy is installed in any "
        "environment the pin numpyy<2,>=1 covers"
    )
    assert main([*args, "--fail-on", "warning"]) == 1


def test_duplicate_key_in_a_policy_file_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by tests/test_fuzz.py: tomlkit's KeyAlreadyPresent is not a ParseError."""
    policy = tmp_path / "policy.toml"
    policy.write_text('[[pin]]\npackage = "six"\npackage = "six"\nversion = ">=1"\n')
    assert main(["audit", _layout(tmp_path), "--no-cache", "--policy", str(policy)]) == 2
    err = capsys.readouterr().err
    assert 'invalid TOML: Key "package" already exists' in err
    assert "Traceback" not in err
