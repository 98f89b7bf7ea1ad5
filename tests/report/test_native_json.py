"""Native libraries in the JSON document: per environment, per step, valid against the schema."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jsonschema

from pinguard.models import NativeLibrary, Resolution, Snapshot
from pinguard.report.json import render
from tests.factories import ENV, dist, environment, result, step

SCHEMA = json.loads(
    (Path(__file__).parents[2] / "src/pinguard/schemas/audit-v1.schema.json").read_text()
)
WHEEL = f"{ENV}/nvidia/nccl/lib/libnccl.so.2"
DEB = "/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.9"


def lib(path: str, version: str, owner: str, kind: str, layer: int) -> NativeLibrary:
    return NativeLibrary(
        path=path,
        digest="sha256=abc-_",
        size=3,
        layer=f"sha256:{layer:064x}",
        soname="libnccl.so.2",
        needed=("libc.so.6",),
        library="nccl",
        version=version,
        owner_kind=kind,
        owner=owner,
        owner_version=version.split("+", maxsplit=1)[0],
        owner_environment=ENV if kind == "wheel" else None,
    )


def test_native_fields_validate_and_sit_where_documented() -> None:
    """Wheel libraries under their environment, others top-level, step diffs per step."""
    deb = lib(DEB, "2.28.9", "libnccl2", "deb", 1)
    wheel = lib(WHEEL, "2.30.3", "nvidia-nccl-cu13", "wheel", 2)
    res = Resolution(f"{ENV}/torch/lib/libtorch_cuda.so", "libnccl.so.2", WHEEL, WHEEL, "DT_RPATH")
    base = result(environment(dist("nvidia-nccl-cu13", "2.30.3")), steps=[step(1), step(2)])
    first = Snapshot(native=(deb,))
    final = dataclasses.replace(base.final, native=(wheel, deb), resolutions=(res,))
    doc = json.loads(render(dataclasses.replace(base, final=final, snapshots=(first, final))))
    jsonschema.validate(doc, SCHEMA)
    assert [x["path"] for x in doc["native_libraries"]] == [DEB]
    assert [x["path"] for x in doc["environments"][0]["native_libraries"]] == [WHEEL]
    assert doc["environments"][0]["native_libraries"][0]["owner"] == {
        "kind": "wheel",
        "name": "nvidia-nccl-cu13",
        "version": "2.30.3",
        "environment": ENV,
    }
    assert doc["steps"][0]["native"]["libraries"] == [
        {
            "path": DEB,
            "change": "added",
            "soname": "libnccl.so.2",
            "version": "2.28.9",
            "owner": "libnccl2",
            "owner_version": "2.28.9",
        }
    ]
    assert [x["path"] for x in doc["steps"][1]["native"]["libraries"]] == [WHEEL]
    assert doc["resolutions"][0]["via"] == "DT_RPATH"


def test_no_native_libraries_keeps_the_revision_1_document() -> None:
    """An image without native libraries gives no new keys at all (old consumers see v1)."""
    doc = json.loads(render(result(environment(dist("a", "1.0")), steps=[step(1)])))
    assert "native_libraries" not in doc
    assert "resolutions" not in doc
    assert "native" not in doc["steps"][0]
    assert "native_libraries" not in doc["environments"][0]
    jsonschema.validate(doc, SCHEMA)
    assert render(result()) == render(result())
