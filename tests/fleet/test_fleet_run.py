"""``pinguard fleet run`` against real ``pinguard worker`` processes on a real Redis broker.

The registry holds four images on one base layer; one more reference names a registry
nobody listens on. Every test reads the fleet report the command wrote and the records the
workers left in the result store.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import redis

from pinguard.cache.backends.redis import PREFIX
from pinguard.cli import main
from pinguard.fleet.records import ResultStore
from tests.infra.fleet import start_worker
from tests.infra.redis import RedisServer
from tests.infra.registry import RegistryServer, free_port

FleetRegistry = tuple[RegistryServer, dict[str, str]]


def fleet_json(tmp_path: Path, *args: str) -> tuple[int, dict[str, Any]]:
    out = tmp_path / "fleet.json"
    code = main(["fleet", *args, "-f", "json", "-o", str(out)])
    doc = json.loads(out.read_text())
    schema = json.loads(
        resources.files("pinguard").joinpath("schemas/fleet-v1.schema.json").read_text()
    )
    jsonschema.validate(doc, schema)
    return code, doc


def test_fleet_audits_every_image_reports_the_matrix_and_the_unreachable_one_fails_with_3(
    tmp_path: Path,
    broker: RedisServer,
    cache_redis: RedisServer,
    fleet_registry: FleetRegistry,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, refs = fleet_registry
    results = tmp_path / "results"
    dead = f"docker://127.0.0.1:{free_port()}/team/gone:1"
    worker = start_worker(
        tmp_path / "w", broker.url(), results,
        "--cache", cache_redis.url(), "--cache-unsigned", "--jobs", "1",
    )  # fmt: skip
    try:
        code, doc = fleet_json(
            tmp_path,
            "run",
            *sorted(refs.values()),
            dead,
            "--broker",
            broker.url(),
            "--results",
            str(results),
            "--timeout",
            "240",
        )
    finally:
        worker.stop()
    assert code == 3, worker.text()[-3000:]
    images = doc["images"]
    assert isinstance(images, list)
    by_ref = {i["reference"]: i for i in images}
    assert images[0]["reference"] == dead  # unreadable first
    assert by_ref[dead]["exit_code"] == 3
    assert by_ref[dead]["verdict"] == "error"
    assert "127.0.0.1" in by_ref[dead]["error"]
    # failing audits next, passing last
    assert [i["verdict"] for i in images] == ["error", "fail", "pass", "pass", "pass"]
    assert images[1]["reference"] == refs["team/story:bad"]
    assert doc["packages"] == [
        "flashinfer-python",
        "nvidia-cutlass-dsl",
        "nvidia-nccl-cu13",
        "torch",
    ]
    assert by_ref[refs["team/serve:b"]]["packages"] == {
        "flashinfer-python": [],
        "nvidia-cutlass-dsl": [],
        "nvidia-nccl-cu13": ["2.29.7"],
        "torch": ["2.12.1+cu130"],
    }
    assert by_ref[refs["team/serve:a"]]["packages"]["nvidia-nccl-cu13"] == ["2.30.3"]
    assert by_ref[refs["team/story:bad"]]["packages"]["nvidia-nccl-cu13"] == ["2.29.7"]
    assert all(i["platform"] == "linux/amd64" for i in images[1:])
    # one record per image in the store, the base layer analysed once for all four
    assert len(ResultStore(results).ids()) == 5
    cached = redis.Redis.from_url(cache_redis.url()).keys(PREFIX + "*")
    # the shared base once, serve:a's layer (train:1 has the same bytes), serve:b's, and
    # the story's other three: 6 distinct layers among the 4 images' 11
    assert len(cached) == 6
    # the store reads back as the same report, and as a table with failing images first
    capsys.readouterr()
    assert main(["fleet", "report", "--results", str(results)]) == 3
    table = capsys.readouterr().out
    lines = table.splitlines()
    assert lines[0].startswith("pinguard ")
    assert "5 image(s), 3 pass, 1 fail, 1 could not be audited" in lines[0]
    assert lines[4].startswith(dead)
    assert lines[5].strip() == by_ref[dead]["error"]


def test_every_tag_of_a_repository_and_html(
    tmp_path: Path, broker: RedisServer, fleet_registry: FleetRegistry
) -> None:
    registry, refs = fleet_registry
    results = tmp_path / "results"
    worker = start_worker(tmp_path / "w", broker.url(), results)
    out = tmp_path / "fleet.html"
    try:
        repo = f"docker://{registry.ref('team/serve')}"
        code = main(
            [
                *("fleet", "run", "--repository", repo, "--broker", broker.url()),
                *("--results", str(results), "--timeout", "240"),
                *("--package", "torch", "-f", "html", "-o", str(out)),
            ]
        )
    finally:
        worker.stop()
    assert code == 0, worker.text()[-3000:]
    page = out.read_text()
    assert page.count('<tr class="pass">') == 2
    assert refs["team/serve:a"] in page
    assert refs["team/serve:b"] in page
    assert "team/train" not in page
    assert "<th>torch</th>" in page
    assert "nvidia-nccl" not in page


def test_the_cache_redis_down_and_restarted_between_fleet_runs(
    tmp_path: Path,
    broker: RedisServer,
    cache_redis: RedisServer,
    fleet_registry: FleetRegistry,
) -> None:
    _, refs = fleet_registry
    images = [refs["team/serve:a"], refs["team/serve:b"]]
    results = tmp_path / "results"
    worker = start_worker(
        tmp_path / "w", broker.url(), results,
        "--cache", cache_redis.url(), "--cache-unsigned", "--jobs", "1",
    )  # fmt: skip
    run = ["run", *images, "--broker", broker.url(), "--results", str(results)]
    try:
        code, _ = fleet_json(tmp_path, *run, "--timeout", "120")
        assert code == 0
        cache_redis.stop()
        code, doc = fleet_json(tmp_path, *run, "--timeout", "120")
        assert code == 0, worker.text()[-3000:]
        for image in doc["images"]:
            assert image["verdict"] == "pass"
            [note] = [n for n in image["notes"] if "layer cache" in n]
            assert "unavailable" in note
            assert "audited without the shared cache" in note
        cache_redis.start()  # restarted, empty: audits use it again
        code, doc = fleet_json(tmp_path, *run, "--timeout", "120")
        assert code == 0
        assert all(not [n for n in i["notes"] if "layer cache" in n] for i in doc["images"])
        assert len(redis.Redis.from_url(cache_redis.url()).keys(PREFIX + "*")) == 3
    finally:
        worker.stop()
