"""The conda analyzer on real conda-meta records, laid out as image layers.

The records in ``tests/data/conda-meta/`` were captured from real environments (anchore/syft's
conda cataloger testdata: conda-forge's zlib 1.2.11 and jupyterlab 4.4.3, and a record that is
not JSON). They are written into an OCI layout as layers of their own and audited as any image
is; what must come out is read off the records by hand. The same audit then goes through every
consumer that reads generic package records: the JSON report (validated against its schema),
CycloneDX and SPDX (validated against the official schemas), the HTML report and the policy.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import jsonschema
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from pinguard.audit.pipeline import audit_image
from pinguard.catalog.conda import is_record, parse_record
from pinguard.models import AuditResult, Incomplete, Package
from pinguard.policy.engine import evaluate
from pinguard.policy.load import parse_policy
from pinguard.report import cyclonedx, html, spdx
from pinguard.report import json as json_report
from pinguard.testing.images import ImageWriter, layer_tar

DATA = Path(__file__).parents[1] / "data" / "conda-meta"
SPDX_SCHEMA = Path(__file__).parents[1] / "data" / "spdx-schema-2.3.json"
ZLIB = "zlib-1.2.11-h90dfc92_1014.json"
JUPYTERLAB = "jupyterlab-4.4.3-pyhd8ed1ab_0.json"
BAD = "package-1.2.3-pyhd8ed1ab_0.json"
PREFIX = "opt/conda"


def _record(name: str) -> bytes:
    return (DATA / name).read_bytes()


def _audit(tmp_path: Path, *layers: tuple[dict[str, bytes], tuple[str, ...]]) -> AuditResult:
    writer = ImageWriter(tmp_path / "layout")
    descs = [writer.layer(layer_tar(files, whiteouts=wh, parents=True)) for files, wh in layers]
    image = writer.image(descs, [{"created_by": f"RUN step {i}"} for i in range(len(layers))])
    index, _ = writer.index([image], tag="t")
    writer.write_layout(index)
    return audit_image(f"oci:{tmp_path / 'layout'}:t")


def _two_steps(tmp_path: Path) -> AuditResult:
    return _audit(
        tmp_path,
        ({f"{PREFIX}/conda-meta/{ZLIB}": _record(ZLIB), f"{PREFIX}/conda-meta/history": b""}, ()),
        ({f"{PREFIX}/conda-meta/{JUPYTERLAB}": _record(JUPYTERLAB)}, ()),
    )


def test_records_become_packages_owned_by_their_prefix(tmp_path: Path) -> None:
    result = _two_steps(tmp_path)
    first, second = result.snapshots
    assert [(p.name, p.version) for p in first.packages] == [("zlib", "1.2.11")]
    assert [(p.kind, p.name, p.version, p.owner) for p in second.packages] == [
        ("conda", "jupyterlab", "4.4.3", "/opt/conda"),
        ("conda", "zlib", "1.2.11", "/opt/conda"),
    ]
    zlib = second.packages_of("conda")[1]
    assert zlib.location == f"/{PREFIX}/conda-meta/{ZLIB}"
    assert (
        zlib.purl
        == "pkg:conda/zlib@1.2.11?build=h90dfc92_1014&channel=conda-forge&subdir=osx-arm64"
    )
    assert zlib.value_of("license") == "Zlib"
    assert zlib.value_of("build_number") == "1014"
    assert zlib.value_of("sha256") == (
        "a70c028fd3b9af1d7ea3d7099d810f3d2588096237bb472db331a51a36f931c0"
    )
    assert result.incomplete == ()


def test_a_whited_out_prefix_takes_its_records_with_it(tmp_path: Path) -> None:
    result = _audit(
        tmp_path,
        ({f"{PREFIX}/conda-meta/{ZLIB}": _record(ZLIB)}, ()),
        ({"etc/hostname": b"x\n"}, ("opt/.wh.conda",)),
    )
    assert [p.name for p in result.snapshots[0].packages] == ["zlib"]
    assert result.final.packages == ()


def test_a_record_that_is_not_json_is_incomplete_not_skipped(tmp_path: Path) -> None:
    result = _audit(tmp_path, ({f"{PREFIX}/conda-meta/{BAD}": _record(BAD)}, ()))
    assert result.final.packages == ()
    assert [i.what for i in result.incomplete] == [f"/{PREFIX}/conda-meta/{BAD}"]
    assert result.incomplete[0].why.startswith("conda-meta record is not JSON")


def test_only_records_in_a_conda_meta_directory_count() -> None:
    assert is_record("/opt/conda/conda-meta/zlib-1.2.11-0.json")
    assert not is_record("/opt/conda/conda-meta/history")
    assert not is_record("/opt/conda/pkgs/zlib/info/index.json")
    assert isinstance(parse_record("/p/conda-meta/x.json", b"[1]"), Incomplete)
    assert isinstance(parse_record("/p/conda-meta/x.json", b'{"name": "x"}'), Incomplete)
    assert isinstance(parse_record("/p/conda-meta/x.json", _record(ZLIB)), Package)


def test_every_consumer_reads_the_generic_records(tmp_path: Path) -> None:
    """JSON, CycloneDX, SPDX, HTML and the policy, none of which knows conda."""
    result = _two_steps(tmp_path)
    doc = json_report.to_dict(result)
    schema = json.loads(
        resources.files("pinguard").joinpath("schemas/audit-v1.schema.json").read_text()
    )
    jsonschema.validate(doc, schema)
    packages = doc["packages"]
    assert isinstance(packages, list)
    assert [(p["kind"], p["name"], p["version"]) for p in packages] == [
        ("conda", "jupyterlab", "4.4.3"),
        ("conda", "zlib", "1.2.11"),
    ]

    bom_text = cyclonedx.render(result)
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(bom_text) is None
    bom = json.loads(bom_text)
    purls = {c["name"]: c.get("purl") for c in bom["components"]}
    assert purls["zlib"].startswith("pkg:conda/zlib@1.2.11?")
    assert purls["jupyterlab"] == (
        "pkg:conda/jupyterlab@4.4.3?build=pyhd8ed1ab_0&channel=conda-forge&subdir=noarch"
    )

    sdoc = json.loads(spdx.render(result))
    jsonschema.validate(sdoc, json.loads(SPDX_SCHEMA.read_text()))
    assert {(p["name"], p["versionInfo"]) for p in sdoc["packages"]} >= {
        ("zlib", "1.2.11"),
        ("jupyterlab", "4.4.3"),
    }

    page = html.render(result)
    assert '<tr data-kind="conda"><td>conda</td><td><code>zlib</code></td><td>1.2.11</td>' in page

    policy = parse_policy(
        '[[forbidden]]\npackage = "zlib"\nversion = "<1.2.12"\nreason = "CVE-2018-25032"\n'
    )
    found = [f for f in evaluate(result, policy) if f.rule == "forbidden-version"]
    assert [(f.package, f.environment, f.versions) for f in found] == [
        ("zlib", "/opt/conda", ("1.2.11",))
    ]
    assert "conda package zlib 1.2.11 is forbidden" in found[0].message
