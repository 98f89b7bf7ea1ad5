"""``containers-storage:`` over real buildah-built images, read in place from the storage.

The GLM story's bad image is audited from containers-storage and, pushed by skopeo, from the
registry through ``docker://``: the two JSON reports agree on everything but the image block
(reference, transport, digests). The reassembled layer streams are checked against the
config's diff_ids (the audit verifies every blob) and against ``hashlib`` directly; damage is
made on copies of a layer's tar-split and files, never in the shared storage.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from pinguard.errors import ImageNotFound, InvalidReference, SourceError
from pinguard.sources import open_source, split_transport
from pinguard.sources.storage import ContainersStorageSource, TarSplitStream, default_root
from tests.infra.build import image_config
from tests.infra.cli import cli
from tests.infra.scenario import Scenario

pytestmark = pytest.mark.integration


def _report(tmp_path: Path, ref: str) -> dict[str, Any]:
    out = tmp_path / "report.json"
    code, _ = cli("audit", ref, "--no-cache", "-f", "json", "-o", str(out), "--fail-on", "never")
    assert code == 0
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc


def _by_layer_position(doc: dict[str, Any]) -> Any:
    """The report with every layer digest replaced by the layer's position in the image."""
    digests = [s["layer_digest"] for s in doc["steps"] if s["layer_digest"]]
    names = {d: f"layer {i}" for i, d in enumerate(digests)}

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return names.get(value, value) if isinstance(value, str) else value

    return walk(doc)


def test_the_same_packages_and_findings_as_the_pushed_image_read_from_the_registry(
    tmp_path: Path, scenario: Scenario, bad_image_registry: str
) -> None:
    """Every step, change, cause, environment, Debian package, native library and finding is
    the same, once layers are named by position: the local read names them by their
    diff_ids, the registry read by their gzip digests."""
    local = _report(tmp_path, f"containers-storage:{scenario.bad.tag}")
    pushed = _report(tmp_path, bad_image_registry)
    assert local["image"]["transport"] == "containers-storage"
    assert local["image"]["reference"] == f"containers-storage:{scenario.bad.tag}"
    diff_ids = image_config(scenario.bad.tag)["rootfs"]["diff_ids"]
    assert [s["layer_digest"] for s in local["steps"] if s["layer_digest"]] == diff_ids
    local, pushed = _by_layer_position(local), _by_layer_position(pushed)
    for key in set(local) | set(pushed):
        if key not in ("image",):
            assert local.get(key) == pushed.get(key), key
    assert local["findings"]  # the story's NCCL downgrade, among others
    assert any(
        c["name"] == "nvidia-nccl-cu13" and c["kind"] == "downgraded"
        for step in local["steps"]
        for c in step.get("changes", [])
    )


def test_each_layer_stream_is_the_layers_tar_byte_for_byte(scenario: Scenario) -> None:
    """The reassembled streams hash to the config's diff_ids (hashlib, not pinguard)."""
    source = ContainersStorageSource(scenario.good.tag)
    resolved = source.resolve()
    assert resolved.platform is not None
    assert resolved.platform.os == "linux"
    assert [layer.digest for layer in resolved.layers] == image_config(scenario.good.tag)["rootfs"][
        "diff_ids"
    ]
    for layer in resolved.layers[-3:]:
        h = hashlib.sha256()
        with source.open_blob(layer) as stream:
            while chunk := stream.read(1 << 16):
                h.update(chunk)
        assert "sha256:" + h.hexdigest() == layer.digest


def test_a_store_spec_an_id_prefix_and_a_bare_name_find_the_image(scenario: Scenario) -> None:
    image_id = scenario.bad.image_id.removeprefix("sha256:")
    repo_tag = scenario.bad.tag.removeprefix("localhost/")  # "pinguard-test/glm-serving:bad"
    for ref in (
        f"[overlay@{default_root()}]{scenario.bad.tag}",
        image_id[:12],
        image_id,
        repo_tag,  # tried as localhost/... as podman does
    ):
        resolved = ContainersStorageSource(ref).resolve()
        assert resolved.config["rootfs"] == image_config(scenario.bad.tag)["rootfs"], ref


@pytest.mark.parametrize(
    ("ref", "error", "message"),
    [
        ("localhost/pinguard-test/no-such-image:1", ImageNotFound, "no image"),
        ("[vfs@/var/lib/containers/storage]x:1", InvalidReference, "only the overlay driver"),
        ("[overlay@/nonexistent/storage]x:1", SourceError, "no image list"),
    ],
)
def test_what_cannot_be_read_says_why(
    ref: str, error: type[Exception], message: str, scenario: Scenario
) -> None:
    with pytest.raises(error, match=message):
        ContainersStorageSource(ref).resolve()


def test_the_cli_exit_code_for_a_missing_local_image() -> None:
    code, output = cli("audit", "containers-storage:localhost/pinguard-test/absent:0", "--no-cache")
    assert code == 3
    assert "no image 'localhost/pinguard-test/absent:0'" in output


def test_the_transport_is_dispatched() -> None:
    assert split_transport("containers-storage:localhost/x:1") == (
        "containers-storage",
        "localhost/x:1",
    )
    assert isinstance(open_source("containers-storage:localhost/x:1"), ContainersStorageSource)


def _layer_copy(scenario: Scenario, tmp_path: Path) -> tuple[Path, Path, str]:
    """A copy of the bad image's last pip layer: (tar-split, diff dir, diff digest)."""
    source = ContainersStorageSource(scenario.bad.tag)
    resolved = source.resolve()
    layer = resolved.layers[-2]
    layer_id = source._ids[layer.digest]  # the layer's id in the store
    root = default_root()
    split = tmp_path / "layer.tar-split.gz"
    shutil.copyfile(root / "overlay-layers" / f"{layer_id}.tar-split.gz", split)
    diff = tmp_path / "diff"
    shutil.copytree(root / "overlay" / layer_id / "diff", diff, symlinks=True)
    return split, diff, layer.digest


def test_a_layer_file_shorter_than_its_tar_entry_is_an_error(
    scenario: Scenario, tmp_path: Path
) -> None:
    split, diff, digest = _layer_copy(scenario, tmp_path)
    stream = TarSplitStream(split, diff)
    assert "sha256:" + hashlib.sha256(stream.read()).hexdigest() == digest  # the copy is whole
    victim = max(
        (p for p in diff.rglob("*") if p.is_file() and not p.is_symlink()),
        key=lambda p: p.stat().st_size,
    )
    victim.write_bytes(victim.read_bytes()[:-1])
    with pytest.raises(SourceError, match="bytes shorter than the layer's tar says"):
        TarSplitStream(split, diff).read()
    victim.unlink()
    with pytest.raises(SourceError, match="layer file"):
        TarSplitStream(split, diff).read()
