"""constraints and plan refuse an audit that could not read everything, or found no Python.

Crafted OCI layouts (``pinguard.testing.images``) through the real CLI: one layer without any
Python, one whose only dist-info has a METADATA without a Version (the catalog lists it with
an unknown version and reports it incomplete). A constraints file from such an audit would
quietly miss what was not read, so the command exits 1, names the reason, and writes nothing
unless ``--allow-incomplete`` / ``--allow-no-python`` say to go on.
"""

from __future__ import annotations

from pathlib import Path

from pinguard.testing.images import ImageWriter, layer_tar
from tests.infra.cli import cli

SITE = "usr/lib/python3/dist-packages"


def _layout(tmp_path: Path, files: dict[str, bytes]) -> str:
    writer = ImageWriter(tmp_path / "layout")
    image = writer.image([writer.layer(layer_tar(files))], [{"created_by": "RUN step 0"}])
    index, _ = writer.index([image], tag="t")
    writer.write_layout(index)
    return f"oci:{tmp_path / 'layout'}:t"


def test_constraints_of_an_image_without_python(tmp_path: Path) -> None:
    ref = _layout(tmp_path, {"etc/hello": b"x\n"})
    target = tmp_path / "constraints.txt"
    code, out = cli("constraints", ref, "--no-cache", "-o", str(target))
    assert code == 1
    assert (
        f"no Python environment found in {ref}: nothing to make constraints from "
        "(--allow-no-python to go on)"
    ) in " ".join(out.split())
    assert not target.exists()
    code, _ = cli("constraints", ref, "--no-cache", "--allow-no-python", "-o", str(target))
    assert code == 0
    assert target.exists()


def test_constraints_and_plan_of_an_incomplete_audit(tmp_path: Path) -> None:
    meta = b"Metadata-Version: 2.1\nName: six\n\n"
    good = b"Metadata-Version: 2.1\nName: idna\nVersion: 3.7\n\n"
    ref = _layout(
        tmp_path,
        {
            f"{SITE}/six-1.16.0.dist-info/METADATA": meta,
            f"{SITE}/idna-3.7.dist-info/METADATA": good,
        },
    )
    target = tmp_path / "constraints.txt"
    target.write_text("previous\n")
    code, out = cli("constraints", ref, "--no-cache", "-o", str(target))
    assert code == 1
    assert f"the audit of {ref} is incomplete (1 item(s); first: /{SITE}/six-1.16.0.dist-info" in (
        " ".join(out.split())
    )
    assert "constraints made from it could miss what was not read" in " ".join(out.split())
    assert target.read_text() == "previous\n"  # untouched
    code, _ = cli("constraints", ref, "--no-cache", "--allow-incomplete", "-o", str(target))
    assert code == 0
    assert "idna==3.7" in target.read_text().splitlines()
    code, out = cli("plan", ref, "--no-cache", "--", "pip", "install", "idna==3.8")
    assert code == 1
    assert "a plan made from it could miss what was not read" in " ".join(out.split())
