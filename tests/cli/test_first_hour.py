"""A new user's first hour, through the CLI: references typed as syft and trivy users type
them (a plain path to an OCI archive, a docker save tar, an OCI layout, a root filesystem),
the short flags trivy users reach for, and what ``-o`` says. The images are the demo story
written as a real OCI archive, copied into the other forms with skopeo."""

from __future__ import annotations

import hashlib
import json
import socket
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

import pinguard
from pinguard.cli import main
from pinguard.testing.demo import build_demo
from tests.infra.cli import cli_streams
from tests.infra.tools import require_tool


@pytest.fixture
def demo_tar(tmp_path: Path) -> Path:
    path = tmp_path / "glm-serving-demo.tar"
    build_demo(path, tag="2026-11-29")
    return path


def skopeo(source: str, dest: str) -> None:
    subprocess.run(
        [require_tool("skopeo"), "--insecure-policy", "copy", "--quiet", source, dest],
        check=True,
        capture_output=True,
        timeout=300,
    )


# --------------------------------------------------------------------------- references


def test_a_plain_path_to_an_oci_archive_is_read_as_one(
    demo_tar: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`pinguard audit examples/out/demo.tar`, relative, as syft and trivy accept it: read in
    place (no registry is asked), with a note naming the transport used."""
    monkeypatch.chdir(demo_tar.parent)
    code, out, err = cli_streams("audit", demo_tar.name, "--no-cache", "-f", "json")
    assert code == 1, err  # the story's downgrade
    doc = json.loads(out)
    assert doc["image"]["reference"] == f"oci-archive:{demo_tar.name}"
    assert (
        f"{demo_tar.name} is a local OCI archive: read as oci-archive:{demo_tar.name}"
        in (doc["notes"])
    )
    # PATH:TAG picks the tag, as oci-archive:PATH:TAG would
    code, out, err = cli_streams("audit", f"{demo_tar.name}:2026-11-29", "--no-cache", "-f", "json")
    assert code == 1, err
    assert json.loads(out)["image"]["reference"] == f"oci-archive:{demo_tar.name}:2026-11-29"


def test_docker_archive_and_oci_layout_paths_are_recognised(demo_tar: Path, tmp_path: Path) -> None:
    """A `docker save` tarball and an OCI layout directory (both written by skopeo) are
    recognised by what they hold, not by their names."""
    saved = tmp_path / "saved-image"  # no .tar suffix: the content decides
    skopeo(f"oci-archive:{demo_tar}:2026-11-29", f"docker-archive:{saved}:demo:1")
    layout = tmp_path / "layout"
    skopeo(f"oci-archive:{demo_tar}:2026-11-29", f"oci:{layout}:1")
    for path, transport in ((saved, "docker-archive"), (layout, "oci")):
        code, out, err = cli_streams("audit", str(path), "--no-cache", "-f", "json")
        assert code == 1, err
        doc = json.loads(out)
        assert doc["image"]["reference"] == f"{transport}:{path}"
        changed = {
            c["name"]: c["kind"] for s in doc["steps"] if s["index"] == 6 for c in s["changes"]
        }
        assert changed["nvidia-nccl-cu13"] == "downgraded"


def test_a_directory_is_a_root_filesystem(tmp_path: Path) -> None:
    """A bare directory path (`pinguard audit ./rootfs`, `pinguard audit /`) is `dir:`."""
    site = tmp_path / "rootfs/usr/lib/python3/dist-packages/six-1.16.0.dist-info"
    site.mkdir(parents=True)
    (site / "METADATA").write_text("Metadata-Version: 2.1\nName: six\nVersion: 1.16.0\n")
    code, out, err = cli_streams(
        "audit", str(tmp_path / "rootfs"), "--no-cache", "-f", "json", "--policy", "none"
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["image"]["reference"] == f"dir:{tmp_path / 'rootfs'}"
    assert [p["name"] for p in doc["environments"][0]["packages"]] == ["six"]


def test_a_local_path_that_is_no_image_is_named_when_the_reference_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gzipped `docker save` (any file that is not an image archive) is tried as the docker
    reference it also is, and when that fails the error says what the local file is."""
    monkeypatch.chdir(tmp_path)
    Path("localhost").mkdir()
    Path("localhost/app.tar.gz").write_bytes(b"\x1f\x8b\x08\x00" + b"\x00" * 60)
    # localhost/...: a registry on localhost:443, where nothing listens
    code, _, err = cli_streams("audit", "localhost/app.tar.gz", "--no-cache")
    assert code == 3
    assert "could not reach localhost: connection refused" in err  # one line (issues 22, 28)
    assert "a local path 'localhost/app.tar.gz' exists, but it is gzip-compressed" in err


# --------------------------------------------------------------------------- flags


def test_f_is_format_and_o_says_what_it_wrote(demo_tar: Path, tmp_path: Path) -> None:
    """trivy's `-f/--format` with `-o/--output`: the report goes to the file, stdout stays
    empty, and stderr says what was written where (as `constraints -o` does)."""
    out_file = tmp_path / "report.json"
    code, out, err = cli_streams(
        "audit", str(demo_tar), "--no-cache", "-f", "json", "-o", str(out_file)
    )
    assert code == 1
    assert out == ""
    size = out_file.stat().st_size
    assert f"wrote the json report ({size} bytes) to {out_file}" in err
    assert json.loads(out_file.read_text())["schema"] == "pinguard/audit/v1"


@pytest.mark.parametrize(
    ("command", "value"),
    [
        ("audit", "sarif"),
        ("compare", "json"),
        ("constraints", "pylock"),
        ("gate", "json"),
        ("guard", "json"),
        ("lint", "sarif"),
        ("verify", "json"),
    ],
)
def test_every_format_option_has_the_short_flag(
    command: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each command with `--format` takes `-f` for it; a wrong value names the choices."""
    with pytest.raises(SystemExit) as exited:
        main([command, "-f", "no-such-format", "x"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "argument -f/--format: invalid choice: 'no-such-format'" in err
    assert value in err


# --------------------------------------------------------------------------- headers


def test_every_format_names_the_policy_its_digest_and_the_version(
    demo_tar: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A discovered pinguard.toml is named, with the sha256 of its bytes, in the header of
    every format; so are the platform and pinguard's version."""
    work = tmp_path / "project"
    work.mkdir()
    policy = work / "pinguard.toml"
    policy.write_text('[[pin]]\npackage = "nvidia-nccl-cu13"\nversion = ">=2.30,<2.31"\n')
    digest = "sha256:" + hashlib.sha256(policy.read_bytes()).hexdigest()
    path = str(policy.resolve())
    monkeypatch.chdir(work)
    outputs = {}
    for fmt in ("table", "json", "sarif", "junit", "markdown", "html", "cyclonedx", "spdx"):
        code, out, err = cli_streams("audit", str(demo_tar), "--no-cache", "-f", fmt)
        assert code == 1, err
        outputs[fmt] = out
    assert f"pinguard {pinguard.__version__}  policy: {path} (discovered, {digest[:19]})" in (
        outputs["table"].splitlines()
    )
    doc = json.loads(outputs["json"])
    assert doc["pinguard"] == {"version": pinguard.__version__}
    assert doc["policy"] == {"source": "discovered", "files": [{"path": path, "digest": digest}]}
    assert doc["image"]["platform"] == "linux/amd64"
    run = json.loads(outputs["sarif"])["runs"][0]
    assert run["properties"]["policy"] == doc["policy"]
    assert run["tool"]["driver"]["version"] == pinguard.__version__
    suite = ET.fromstring(outputs["junit"])
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["policy:source"] == "discovered"
    assert props["policy:file"] == f"{path} {digest}"
    assert props["pinguard:version"] == pinguard.__version__
    assert props["platform"] == "linux/amd64"
    assert (
        f"pinguard `{pinguard.__version__}`, policy: {path} (discovered, {digest[:19]})."
        in (outputs["markdown"])
    )
    assert f'<dd class="policy">{path} (discovered, {digest[:19]})</dd>' in outputs["html"]
    bom = json.loads(outputs["cyclonedx"])
    assert {"name": "pinguard:policy:file", "value": f"{path} {digest}"} in bom["metadata"][
        "properties"
    ]
    spdx = json.loads(outputs["spdx"])
    assert (
        f"policy:source=discovered; policy:file={path} {digest}"
        in (spdx["creationInfo"]["comment"])
    )
    # --policy FILE: "given", with the same digest; --policy none says so
    code, out, _ = cli_streams(
        "audit", str(demo_tar), "--no-cache", "-f", "json", "--policy", "pinguard.toml"
    )
    assert json.loads(out)["policy"] == {
        "source": "given",
        "files": [{"path": "pinguard.toml", "digest": digest}],
    }
    code, out, _ = cli_streams("audit", str(demo_tar), "--no-cache", "--policy", "none")
    assert "policy: none (--policy none: an inventory)" in out


# --------------------------------------------------------------------------- summary first


def _rootfs(root: Path, per_env: int) -> list[str]:
    """A root filesystem with four environments of ``per_env`` distributions each."""
    names = []
    for env in (
        "usr/lib/python3/dist-packages",
        "usr/local/lib/python3.11/site-packages",
        "opt/venv/lib/python3.11/site-packages",
        "opt/tools/lib/python3.11/site-packages",
    ):
        for i in range(per_env):
            name = f"pkg-{i:03d}"
            info = root / env / f"pkg_{i:03d}-1.{i}.dist-info"
            info.mkdir(parents=True)
            requires = f"Requires-Dist: pkg-{i + 1:03d}\n" if i + 1 < per_env else ""
            (info / "METADATA").write_text(
                f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.{i}\n{requires}"
            )
            names.append(name)
    return names


def test_a_big_root_filesystem_fits_one_screen(tmp_path: Path) -> None:
    """`pinguard audit DIR` of a root filesystem with 264 distributions in four environments
    prints the header, the summary and the flagged rows: a screen, not 22,000 lines (each
    distribution with its cause chain). `--all` lists every one; JSON is unchanged by it."""
    root = tmp_path / "rootfs"
    names = _rootfs(root, 66)
    policy = tmp_path / "policy.toml"
    policy.write_text('[[forbidden]]\npackage = "pkg-007"\nversion = "1.7"\nreason = "bad"\n')
    code, out, err = cli_streams("audit", str(root), "--no-cache", "--policy", str(policy))
    assert code == 1, err  # pkg-007 1.7 is forbidden
    lines = out.splitlines()
    head = lines[: lines.index("")]  # header, summary, findings count, steps: one screen
    assert len(head) <= 20, out
    assert [ln.split("│")[1].strip() for ln in head if ln.startswith("│ /")] == [
        "/opt/tools/lib/python3.11/site-packages",
        "/opt/venv/lib/python3.11/site-packages",
        "/usr/lib/python3/dist-packages",
        "/usr/local/lib/python3.11/site-packages",
    ]
    assert "  step 1   +264" in out
    assert len(lines) < 80, out  # then the flagged rows (a 7-deep cause chain each)
    assert "findings: 4 errors, 0 warnings, 0 info" in out
    # only the flagged distribution is listed, once per environment, with its reason
    listed = [ln for ln in lines if "│ added" in ln]
    assert len(listed) == 4
    assert all("pkg-007" in ln for ln in listed)
    assert "260 distribution(s) added to environments new in their step" in out
    code, full, _ = cli_streams("audit", str(root), "--no-cache", "--policy", str(policy), "--all")
    assert code == 1
    rows = [ln for ln in full.splitlines() if "│ added" in ln]
    assert len(rows) == 264
    assert {ln.split("│")[2].strip() for ln in rows} == set(names)


def test_json_carries_the_tables_reasons_in_cause_order(demo_tar: Path) -> None:
    """What a step asked for has a reason in the JSON too, worded as in the table, and a
    cause chain reads nearest cause first; the document validates against its schema."""
    code, out, _ = cli_streams("audit", str(demo_tar), "--no-cache", "-f", "json")
    assert code == 1
    doc = json.loads(out)
    schema = json.loads(
        (Path(pinguard.__file__).parent / "schemas/audit-v1.schema.json").read_text()
    )
    jsonschema.validate(doc, schema)
    changes = {(s["index"], c["name"]): c for s in doc["steps"] for c in s["changes"]}
    torch = changes[(3, "torch")]
    assert torch["causes"] == []
    assert torch["reasons"] == ["asked for by this step (torch==2.11.0+cu130)"]
    nccl = changes[(6, "nvidia-nccl-cu13")]
    assert nccl["reasons"] == [
        'torch 2.12.1+cu130 requires nvidia-nccl-cu13==2.29.7; platform_system == "Linux"',
        "flashinfer-python 0.6.18.dev20261120 requires torch>=2.12",
    ]
    assert [c["package"] for c in nccl["causes"]] == ["torch", "flashinfer-python"]


# --------------------------------------------------------------------------- network


def test_an_unreachable_index_in_the_history_is_exit_3_naming_the_host(tmp_path: Path) -> None:
    """`constraints --verify` without --index-url replays each step with the index its
    history names; one nothing answers on is "could not reach HOST", exit 3 (the README's
    network code), not "uv pip compile failed" with the usage code."""
    from pinguard.testing.demo import Dist, Layer, write_oci_archive

    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now: connections are refused
    index = f"http://127.0.0.1:{port}/simple/"
    archive = tmp_path / "img.tar"
    write_oci_archive(
        [
            Layer("ADD rootfs /", add=[Dist("pip", "25.0")]),
            Layer(f"pip install --index-url {index} six==1.16.0", add=[Dist("six", "1.16.0")]),
            Layer(f"pip install --index-url {index} six==1.17.0", add=[Dist("six", "1.17.0")]),
        ],
        archive,
        tag="t",
    )
    code, out, err = cli_streams(
        "constraints", f"oci-archive:{archive}:t", "--no-cache", "--step", "3", "--verify"
    )
    assert code == 3, out + err
    assert f"could not reach the package index 127.0.0.1:{port}" in err
    assert "Connection refused" in err
