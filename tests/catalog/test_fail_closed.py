"""Fail-closed catalog: crafted dist-infos and egg-infos in real OCI layouts.

Each case writes the metadata a careless build, an interrupted pip or a distribution's own
packaging leaves behind into a layer tar (``pinguard.testing.images``), audits the layout
end to end and asserts what the catalog lists and what it reports as incomplete. Expected
names, versions and messages are written by hand from the bytes each test made.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from pinguard.audit.pipeline import audit_image
from pinguard.cli import main
from pinguard.models import AuditResult
from pinguard.testing.images import ImageWriter, layer_tar

SITE = "usr/local/lib/python3.12/site-packages"
DIST = "usr/lib/python3/dist-packages"


def _metadata(name: str = "demo", version: str | None = "1.0", extra: str = "") -> bytes:
    text = f"Metadata-Version: 2.1\nName: {name}\n"
    if version is not None:
        text += f"Version: {version}\n"
    return (text + extra + "\n").encode()


def _layout(tmp_path: Path, *layers: dict[str, bytes]) -> str:
    writer = ImageWriter(tmp_path / "layout")
    descs = [writer.layer(layer_tar(files)) for files in layers]
    image = writer.image(descs, [{"created_by": f"RUN step {i}"} for i in range(len(layers))])
    index, _ = writer.index([image], tag="t")
    writer.write_layout(index)
    return f"oci:{tmp_path / 'layout'}:t"


def _audit(tmp_path: Path, *layers: dict[str, bytes]) -> tuple[AuditResult, str]:
    ref = _layout(tmp_path, *layers)
    return audit_image(ref), ref


def _listed(result: AuditResult) -> list[tuple[str, str, str]]:
    return [
        (env.path, d.name, d.raw_version)
        for env in result.final.environments
        for d in env.distributions
    ]


def _why(result: AuditResult) -> dict[str, str]:
    return {i.what: i.why for i in result.incomplete}


def test_directory_name_disagreeing_with_metadata_name_is_flagged(tmp_path: Path) -> None:
    result, ref = _audit(
        tmp_path,
        {
            f"{SITE}/requests-2.31.0.dist-info/METADATA": _metadata("urllib3", "2.31.0"),
            f"{SITE}/Foo_Bar-1.0.dist-info/METADATA": _metadata("foo-bar", "1.0"),
        },
    )
    assert _listed(result) == [
        ("/" + SITE, "foo-bar", "1.0"),
        ("/" + SITE, "urllib3", "2.31.0"),
    ]
    assert _why(result) == {
        f"/{SITE}/requests-2.31.0.dist-info": (
            "directory name says 'requests' but METADATA Name is 'urllib3'"
        )
    }
    assert main(["audit", ref, "--no-cache"]) == 1


def test_tilde_leftover_is_not_a_second_copy(tmp_path: Path) -> None:
    result, _ = _audit(
        tmp_path,
        {
            f"{SITE}/numpy-2.0.0.dist-info/METADATA": _metadata("numpy", "2.0.0"),
            f"{SITE}/~umpy-1.26.0.dist-info/METADATA": _metadata("numpy", "1.26.0"),
        },
    )
    assert _listed(result) == [("/" + SITE, "numpy", "2.0.0")]
    why = _why(result)
    assert list(why) == [f"/{SITE}/~umpy-1.26.0.dist-info"]
    assert "leftover of an interrupted pip install" in why[f"/{SITE}/~umpy-1.26.0.dist-info"]


def test_non_utf8_metadata_is_decoded_with_replacement_and_flagged(tmp_path: Path) -> None:
    # the \xe9 is at offset 57: 22 + 11 + 13 + len("Author: Jos")
    latin1 = b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\nAuthor: Jos\xe9\n\n"
    result, ref = _audit(tmp_path, {f"{SITE}/demo-1.0.dist-info/METADATA": latin1})
    assert _listed(result) == [("/" + SITE, "demo", "1.0")]
    assert _why(result) == {
        f"/{SITE}/demo-1.0.dist-info": (
            "metadata is not UTF-8 (byte b'\\xe9' at offset 57); "
            "decoded with replacement characters"
        )
    }
    assert main(["audit", ref, "--no-cache"]) == 1


def test_oversized_headers_are_capped(tmp_path: Path) -> None:
    long_req = "x" * 5000
    result, _ = _audit(
        tmp_path,
        {
            f"{SITE}/big-1.0.dist-info/METADATA": _metadata("big", "9" * 300),
            f"{SITE}/req-1.0.dist-info/METADATA": _metadata(
                "req", "1.0", f"Requires-Dist: {long_req}\nRequires-Dist: six\n"
            ),
        },
    )
    assert _listed(result) == [("/" + SITE, "req", "1.0")]
    (req,) = result.final.environments[0].distributions
    assert req.requires_dist == ("six",)
    assert _why(result) == {
        f"/{SITE}/big-1.0.dist-info": "metadata has no Version",
        f"/{SITE}/req-1.0.dist-info": (
            "Requires-Dist header is 5000 characters, above the cap of 4096"
        ),
    }
    big = [i.why for i in result.incomplete if i.what.endswith("big-1.0.dist-info")]
    assert big == [
        "Version header is 300 characters, above the cap of 256",
        "metadata has no Version",
    ]


def test_suffixes_match_in_any_case(tmp_path: Path) -> None:
    result, _ = _audit(
        tmp_path,
        {
            f"{SITE}/upper-1.0.DIST-INFO/METADATA": _metadata("upper", "1.0"),
            f"{SITE}/Mixed-2.0.Egg-Info/PKG-INFO": _metadata("mixed", "2.0"),
            f"{DIST}/single-3.0.EGG-INFO": _metadata("single", "3.0"),
        },
    )
    assert _listed(result) == [
        ("/" + DIST, "single", "3.0"),
        ("/" + SITE, "mixed", "2.0"),
        ("/" + SITE, "upper", "1.0"),
    ]
    assert result.incomplete == ()


def test_egg_info_without_version_is_listed_unknown_and_incomplete(tmp_path: Path) -> None:
    result, ref = _audit(
        tmp_path, {f"{DIST}/noversion.egg-info/PKG-INFO": _metadata("noversion", None)}
    )
    assert _listed(result) == [("/" + DIST, "noversion", "")]
    assert result.final.environments[0].distributions[0].version is None
    assert _why(result) == {
        f"/{DIST}/noversion.egg-info": "egg-info has no Version; listed as unknown"
    }
    assert main(["audit", ref, "--no-cache"]) == 1


def test_interpreter_egg_info_is_not_a_distribution(tmp_path: Path) -> None:
    result, ref = _audit(
        tmp_path,
        {
            f"{DIST}/Python-3.11.egg-info": _metadata("Python", "3.11.2"),
            f"{DIST}/six-1.16.0.egg-info": _metadata("six", "1.16.0"),
        },
    )
    assert _listed(result) == [("/" + DIST, "six", "1.16.0")]
    assert result.incomplete == ()
    assert main(["audit", ref, "--no-cache"]) == 0


@pytest.mark.parametrize("name", ["python-dateutil", "pythonista"])
def test_only_the_interpreter_is_skipped(tmp_path: Path, name: str) -> None:
    """A project whose egg-info merely starts with "Python" is still a distribution."""
    result, _ = _audit(tmp_path, {f"{DIST}/{name}-2.0.egg-info": _metadata(name, "2.0")})
    assert _listed(result) == [("/" + DIST, name, "2.0")]


def test_unknown_version_is_never_pinned(tmp_path: Path) -> None:
    """Constraints pin what is known: an egg-info without Version gets no '===' line."""
    from pinguard.repair.constraints import merge_pins

    result, _ = _audit(
        tmp_path,
        {
            f"{DIST}/noversion.egg-info/PKG-INFO": _metadata("noversion", None),
            f"{DIST}/six-1.16.0.egg-info": _metadata("six", "1.16.0"),
        },
    )
    (env,) = result.final.environments
    assert [(c.name, c.specifier) for c in merge_pins(env, {})] == [("six", "==1.16.0")]


def test_legacy_version_change_is_never_an_upgrade_or_downgrade(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``6.7.8.9-10.el7`` -> ``6.7.8.9-9.el7`` has no PEP 440 order: the change is
    ``changed`` and the downgrade rule, which needed the order, fails the gate."""
    meta = f"{SITE}/rpmish-6.7.8.9.dist-info/METADATA"
    ref = _layout(
        tmp_path,
        {meta: _metadata("rpmish", "6.7.8.9-10.el7")},
        {meta: _metadata("rpmish", "6.7.8.9-9.el7")},
    )
    result = audit_image(ref)
    changes = [(c.name, c.kind.value, c.before, c.after) for s in result.steps for c in s.changes]
    assert changes == [
        ("rpmish", "added", None, "6.7.8.9-10.el7"),
        ("rpmish", "changed", "6.7.8.9-10.el7", "6.7.8.9-9.el7"),
    ]
    assert main(["audit", ref, "--no-cache", "--format", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    schema = Path(__file__).parents[2] / "src/pinguard/schemas/audit-v1.schema.json"
    jsonschema.validate(doc, json.loads(schema.read_text()))
    assert '"kind": "changed"' in json.dumps(doc)
    assert [f["rule"] for f in doc["findings"]] == ["downgrade"]
    assert "whether this is a downgrade is unknown" in doc["findings"][0]["message"]


def test_every_format_renders_a_changed_kind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pinguard.report.formats import FORMATS

    meta = f"{SITE}/rpmish-1.dist-info/METADATA"
    ref = _layout(
        tmp_path,
        {meta: _metadata("rpmish", "1-el7")},
        {meta: _metadata("rpmish", "1-el8")},
    )
    for name in FORMATS:
        assert main(["audit", ref, "--no-cache", "--format", name]) == 1, name
        assert "1-el8" in capsys.readouterr().out, name
