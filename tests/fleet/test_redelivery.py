"""A worker killed with SIGKILL mid-audit: its task is delivered again and gives one result.

The image is served through an ``HTTPFront`` that stalls the first layer download, so the
first worker is surely inside the audit when it is killed; a second worker then gets the
task again (late acks: the message was never acknowledged; the Redis transport restores it
once the visibility timeout has passed) and finishes it. One record, the right one.
"""

from __future__ import annotations

from pathlib import Path

from pinguard.fleet.dispatch import wait
from pinguard.fleet.records import ResultStore
from tests.infra.fleet import enqueue_until_stalled, start_worker, stop_all
from tests.infra.redis import RedisServer
from tests.infra.registry import HTTPFront, RegistryServer

FleetRegistry = tuple[RegistryServer, dict[str, str]]
VISIBILITY = "4"


def test_sigkill_mid_audit_is_redelivered_and_gives_one_result(
    tmp_path: Path, broker: RedisServer, fleet_registry: FleetRegistry
) -> None:
    registry, _ = fleet_registry
    stalled_once: list[str] = []

    def stall_first_blob(path: str) -> bool:
        if stalled_once:
            return False
        stalled_once.append(path)
        return True

    results = tmp_path / "results"
    with HTTPFront(registry.address, stall=stall_first_blob) as front:
        ref = f"docker://{front.address}/team/serve:b"
        first = start_worker(
            tmp_path / "w1", broker.url(), results, "--visibility-timeout", VISIBILITY
        )
        second = None
        try:
            app, tasks = enqueue_until_stalled(broker.url(), ref, front, first)
            assert ResultStore(results).ids() == []  # mid-audit: nothing written yet
            first.kill()
            assert first.process.returncode == -9
            second = start_worker(
                tmp_path / "w2",
                broker.url(),
                results,
                "--visibility-timeout",
                VISIBILITY,
                name="w2",
            )
            records = wait(app, tasks, ResultStore(results), timeout=120)
        finally:
            stop_all(first, second)
    assert second is not None
    [record] = records
    assert record.verdict == "pass", (record, second.text()[-3000:])
    assert record.reference == ref
    assert record.versions("nvidia-nccl-cu13") == ("2.29.7",)
    assert len(ResultStore(results).ids()) == 1
    assert tasks[0].task_id in second.text()  # the second worker ran the same task
    assert app.AsyncResult(tasks[0].task_id).state == "SUCCESS"
