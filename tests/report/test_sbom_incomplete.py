"""What could not be read is in both SBOMs, on crafted OCI layouts through the real CLI.

Each layout is written by ``pinguard.testing.images`` (a site-packages reached through a
symlink, a ``direct_url.json`` that is not JSON, a dist-info no environment reaches, a layer
member with a ``..`` name) and audited with ``pinguard audit --format cyclonedx|spdx``. The
CycloneDX document is validated against the strict 1.6 schema and must carry a
``compositions`` entry ``aggregate: incomplete`` and one ``pinguard:incomplete`` property per
item; the SPDX document is validated against the vendored 2.3 schema and by spdx-tools after
parsing it back, and must carry one ``OTHER`` annotation per item. The item texts, the
manifest digest (read from the layout's ``index.json``) and the paths are written here by
hand. A complete image's documents carry none of it. The table shows a symlinked
environment's ``real_path``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import jsonschema
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from spdx_tools.spdx.parser.parse_anything import parse_file
from spdx_tools.spdx.validation.document_validator import validate_full_spdx_document

from pinguard.testing.images import ImageWriter, layer_tar
from tests.infra.cli import cli_streams

SITE = "usr/local/lib/python3.11/site-packages"
SPDX_SCHEMA = Path(__file__).parents[1] / "data" / "spdx-schema-2.3.json"
FOO = f"/{SITE}/foo-1.0.dist-info"
STRAY = "/srv/stray/baz-3.0.dist-info"
OUTSIDE = (
    "distribution metadata in a directory no Python environment reaches (neither a "
    "site-packages/dist-packages path nor a symlink named so resolves to it); not audited"
)
STRAY_TEXT = f"{STRAY}: {OUTSIDE}"
DIRECT_URL_TEXT = f"{FOO}/direct_url.json: not valid JSON"
Layer = tuple[dict[str, bytes], dict[str, str]]


def _metadata(name: str, version: str) -> bytes:
    return f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n".encode()


def _layout(directory: Path, *layers: Layer) -> tuple[str, str]:
    """(``oci:DIR:t``, the manifest digest as ``index.json`` records it)."""
    writer = ImageWriter(directory)
    descs = [writer.layer(layer_tar(files, symlinks=links)) for files, links in layers]
    image = writer.image(descs, [{"created_by": f"RUN step {i}"} for i in range(len(layers))])
    index, _ = writer.index([image], tag="t")
    writer.write_layout(index)
    (manifest,) = json.loads((directory / "index.json").read_text())["manifests"]
    return f"oci:{directory}:t", str(manifest["digest"])


def _holes(directory: Path) -> tuple[str, str]:
    """site-packages -> /opt/pkgs; foo 1.0 with a broken direct_url.json; baz in /srv."""
    return _layout(
        directory,
        ({}, {SITE: "/opt/pkgs"}),
        (
            {
                "opt/pkgs/foo-1.0.dist-info/METADATA": _metadata("foo", "1.0"),
                "opt/pkgs/foo-1.0.dist-info/direct_url.json": b"{not json",
                "srv/stray/baz-3.0.dist-info/METADATA": _metadata("baz", "3.0"),
            },
            {},
        ),
    )


def _complete(directory: Path) -> tuple[str, str]:
    """The same symlinked environment with a readable foo and nothing stray."""
    return _layout(
        directory,
        ({}, {SITE: "/opt/pkgs"}),
        ({"opt/pkgs/foo-1.0.dist-info/METADATA": _metadata("foo", "1.0")}, {}),
    )


def _run(ref: str, fmt: str, *extra: str) -> tuple[int, str]:
    code, out, err = cli_streams("audit", ref, "--no-cache", "--format", fmt, *extra)
    assert err == ""
    return code, out


def _cyclonedx(ref: str, *extra: str) -> tuple[int, str, dict[str, Any]]:
    code, out = _run(ref, "cyclonedx", *extra)
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(out) is None
    return code, out, json.loads(out)


def _spdx(ref: str, tmp_path: Path) -> tuple[int, str, dict[str, Any]]:
    code, out = _run(ref, "spdx")
    doc = json.loads(out)
    jsonschema.validate(doc, json.loads(SPDX_SCHEMA.read_text()))
    path = tmp_path / "doc.spdx.json"
    path.write_text(out)
    assert validate_full_spdx_document(parse_file(str(path)), "SPDX-2.3") == []
    return code, out, doc


def _props(component: dict[str, Any], name: str) -> list[str]:
    return [p["value"] for p in component.get("properties", []) if p["name"] == name]


def test_cyclonedx_marks_the_inventory_incomplete(tmp_path: Path) -> None:
    """A composition ``incomplete`` over the image and foo (whose item names it); the stray
    dist-info on the image, the bad direct_url.json on foo; exit 1 (0 allowed)."""
    ref, digest = _holes(tmp_path / "layout")
    code, _, bom = _cyclonedx(ref)
    assert code == 1
    assert bom["compositions"] == [
        {"aggregate": "incomplete", "assemblies": [f"image:{digest}", FOO]}
    ]
    image = bom["metadata"]["component"]
    assert image["bom-ref"] == f"image:{digest}"
    assert _props(image, "pinguard:incomplete") == [STRAY_TEXT]
    (foo,) = [c for c in bom["components"] if c["name"] == "foo"]
    assert foo["bom-ref"] == FOO
    assert _props(foo, "pinguard:incomplete") == [DIRECT_URL_TEXT]
    # the stray distribution is not in the inventory: that is why it is incomplete
    assert [c["name"] for c in bom["components"]] == ["foo"]
    assert _run(ref, "cyclonedx", "--allow-incomplete")[0] == 0


def test_spdx_annotates_the_image_and_the_package(tmp_path: Path) -> None:
    """One ``OTHER`` annotation per item: the stray dist-info on SPDXRef-Image, the bad
    direct_url.json on foo's package, worded ``pinguard:incomplete=<what>: <why>``."""
    ref, _ = _holes(tmp_path / "layout")
    code, _, doc = _spdx(ref, tmp_path)
    assert code == 1
    by_name = {p["name"]: p for p in doc["packages"]}
    image = next(p for p in doc["packages"] if p["SPDXID"] == "SPDXRef-Image")
    assert [(a["annotationType"], a["comment"]) for a in image["annotations"]] == [
        ("OTHER", f"pinguard:incomplete={STRAY_TEXT}")
    ]
    foo = [a["comment"] for a in by_name["foo"]["annotations"]]
    assert [c for c in foo if c.startswith("pinguard:incomplete=")] == [
        f"pinguard:incomplete={DIRECT_URL_TEXT}"
    ]
    assert sorted(by_name) == [str(tmp_path / "layout"), "foo"]  # the stray baz is not in it


def test_a_flagged_member_name_goes_on_the_image(tmp_path: Path) -> None:
    """A layer member named ``../usr/...`` names no package: the image carries it in both
    formats, with the layer's digest and step as the JSON report words it."""
    name = f"../{SITE}/x-1.0.dist-info/METADATA"
    ref, _ = _layout(tmp_path / "layout", ({name: _metadata("x", "1.0")}, {}))
    _, json_out = _run(ref, "json")
    ((what, why),) = [(i["what"], i["why"]) for i in json.loads(json_out)["incomplete"]]
    assert what.startswith("layer sha256:")
    assert what.endswith(f" (step 1): member {name!r}")
    assert why.startswith("name has a '..' component; read as ")
    code, _, bom = _cyclonedx(ref)
    assert code == 1
    assert _props(bom["metadata"]["component"], "pinguard:incomplete") == [f"{what}: {why}"]
    assert bom["compositions"][0]["assemblies"] == [bom["metadata"]["component"]["bom-ref"]]
    assert [_props(c, "pinguard:incomplete") for c in bom["components"]] == [[]]
    _, _, doc = _spdx(ref, tmp_path)
    image = next(p for p in doc["packages"] if p["SPDXID"] == "SPDXRef-Image")
    assert [a["comment"] for a in image["annotations"]] == [f"pinguard:incomplete={what}: {why}"]


def test_same_image_same_bytes(tmp_path: Path) -> None:
    """The layout written twice at the same path gives the same documents."""
    outputs = []
    for _ in range(2):
        ref, _ = _holes(tmp_path / "layout")
        outputs.append([_run(ref, fmt)[1] for fmt in ("cyclonedx", "spdx")])
        shutil.rmtree(tmp_path / "layout")
    assert outputs[0] == outputs[1]


def test_items_in_what_order(tmp_path: Path) -> None:
    """Stray dist-infos written z first come out a, m, z on the image, in both formats."""
    files = {f"srv/{d}/{d}-1.0.dist-info/METADATA": _metadata(d, "1.0") for d in ("z", "a", "m")}
    ref, _ = _layout(
        tmp_path / "layout",
        ({f"{SITE}/bar-2.0.dist-info/METADATA": _metadata("bar", "2.0")}, {}),
        (files, {}),
    )
    want = [f"/srv/{d}/{d}-1.0.dist-info: {OUTSIDE}" for d in ("a", "m", "z")]
    _, _, bom = _cyclonedx(ref)
    assert _props(bom["metadata"]["component"], "pinguard:incomplete") == want
    _, _, doc = _spdx(ref, tmp_path)
    image = next(p for p in doc["packages"] if p["SPDXID"] == "SPDXRef-Image")
    assert [a["comment"] for a in image["annotations"]] == [
        f"pinguard:incomplete={w}" for w in want
    ]


def test_a_complete_image_has_no_incomplete_marks(tmp_path: Path) -> None:
    """No composition, no ``pinguard:incomplete`` property or annotation; exit 0."""
    ref, _ = _complete(tmp_path / "layout")
    code, out, bom = _cyclonedx(ref)
    assert code == 0
    assert "compositions" not in bom
    assert "pinguard:incomplete" not in out
    code, out, doc = _spdx(ref, tmp_path)
    assert code == 0
    assert "pinguard:incomplete" not in out
    assert "annotations" not in next(p for p in doc["packages"] if p["SPDXID"] == "SPDXRef-Image")


def test_table_shows_the_real_path_only_when_set(tmp_path: Path) -> None:
    """The summary's environment row says ``real_path /opt/pkgs`` for the symlinked
    site-packages; an environment that is its own directory has no such words."""
    linked, _ = _complete(tmp_path / "linked")
    code, out = _run(linked, "table")
    assert code == 0
    rows = [ln.split("│")[1:-1] for ln in out.splitlines() if ln.startswith(f"│ /{SITE}")]
    assert [[c.strip() for c in r] for r in rows] == [
        [f"/{SITE} (real_path /opt/pkgs)", "3.11", "1", "1"]
    ]
    plain, _ = _layout(
        tmp_path / "plain", ({f"{SITE}/bar-2.0.dist-info/METADATA": _metadata("bar", "2.0")}, {})
    )
    code, out = _run(plain, "table")
    assert code == 0
    rows = [ln.split("│")[1:-1] for ln in out.splitlines() if ln.startswith(f"│ /{SITE}")]
    assert [[c.strip() for c in r] for r in rows] == [[f"/{SITE}", "3.11", "1", "1"]]
    assert "(real_path" not in out
