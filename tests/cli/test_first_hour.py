"""A new user's first hour, through the CLI: references typed as syft and trivy users type
them (a plain path to an OCI archive, a docker save tar, an OCI layout, a root filesystem),
the short flags trivy users reach for, and what ``-o`` says. The images are the demo story
written as a real OCI archive, copied into the other forms with skopeo."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

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
    assert "cannot reach localhost" in err
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
