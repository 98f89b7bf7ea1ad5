"""``fleet run REF...`` reads each reference with the one resolver before anything is enqueued.

Real parts: a ``redis-server`` broker (whose queue is looked at: nothing may be in it after a
refused run), a ``pinguard worker`` started in a directory of its own, and OCI archives
written in the directory ``fleet run`` runs in. Bad syntax is exit 2 and a path that names
nothing exit 3, each one line as ``pinguard audit`` says it, with nothing enqueued even for
the good references beside it; a relative local path is sent as its transport and absolute
path, so the worker reads the file the user named, not one in its own directory.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import redis

from pinguard.cli import main
from pinguard.errors import EXIT_IMAGE, EXIT_PASS, EXIT_USAGE
from pinguard.fleet.app import QUEUE
from pinguard.fleet.records import ResultStore
from pinguard.testing.demo import write_oci_archive
from tests.infra.fleet import fleet_layers, start_worker
from tests.infra.redis import RedisServer
from tests.infra.registry import free_port


@pytest.mark.parametrize(
    ("bad", "code", "message"),
    [
        ("Python:3.12", EXIT_USAGE, "invalid image reference 'Python:3.12': repository name "
         "must be lowercase"),
        ("./nope.tar", EXIT_IMAGE, "no such file: ./nope.tar"),
        ("oci-archive:gone/app.tar:t", EXIT_IMAGE, "no such file: gone/app.tar"),
        ("foo:bar:baz", EXIT_USAGE, "unknown transport 'foo' in image reference 'foo:bar:baz' "
         "(known: docker://, docker-daemon:, docker-archive:, oci:, oci-archive:, dir:, "
         "containers-storage:)"),
    ],
)  # fmt: skip
def test_a_bad_reference_fails_before_anything_is_enqueued(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    broker: RedisServer,
    bad: str,
    code: int,
    message: str,
) -> None:
    results = tmp_path / "results"
    results.mkdir()
    monkeypatch.chdir(tmp_path)
    good = f"docker://127.0.0.1:{free_port()}/team/serve:1"  # never contacted
    listed = tmp_path / "images.txt"
    listed.write_text(f"{good}\n")
    started = time.monotonic()
    args = ["run", bad, "--file", str(listed), "--broker", broker.url()]
    got = main(["fleet", *args, "--results", str(results), "--timeout", "5"])
    elapsed = time.monotonic() - started
    err = capsys.readouterr().err
    assert got == code, err
    assert err.splitlines() == [f"pinguard: error: {message}"]
    assert elapsed < 4
    client = redis.Redis.from_url(broker.url())
    assert client.llen(QUEUE) == 0  # not even the good reference was sent
    assert not ResultStore(results).ids()


def test_a_relative_path_is_sent_as_its_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, broker: RedisServer
) -> None:
    """The worker runs in another directory: it audits the archive the user named (sent as
    ``oci-archive:/.../out/app.tar``), and two spellings of one path are one audit."""
    here = tmp_path / "client"
    archive = here / "out" / "app.tar"
    archive.parent.mkdir(parents=True)
    write_oci_archive(fleet_layers("2.11.0+cu130", "2.30.3"), archive, tag="t")
    results = tmp_path / "results"
    worker = start_worker(tmp_path / "worker", broker.url(), results)
    monkeypatch.chdir(here)
    report = here / "fleet.json"
    try:
        refs = ["out/app.tar", "./out/app.tar", "oci-archive:out/app.tar:t"]
        where = ["--broker", broker.url(), "--results", str(results), "--timeout", "120"]
        code = main(["fleet", "run", *refs, *where, "-f", "json", "-o", str(report)])
    finally:
        worker.stop()
    doc = json.loads(report.read_text())
    assert code == EXIT_PASS, (doc, worker.text()[-3000:])
    absolute = str(archive.resolve())
    assert sorted(i["reference"] for i in doc["images"]) == [
        f"oci-archive:{absolute}",
        f"oci-archive:{absolute}:t",
    ]
    assert {i["verdict"] for i in doc["images"]} == {"pass"}
    records = ResultStore(results).all()
    assert sorted(r.reference for r in records) == sorted(i["reference"] for i in doc["images"])
    assert all(r.distributions for r in records)
