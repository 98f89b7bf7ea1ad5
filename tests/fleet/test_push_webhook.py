"""Audit on push: a real ``docker-registry`` notifies ``pinguard fleet receive``, a real worker
audits what was pushed, attaches a signed attestation, and ``pinguard verify`` sees it.

The receiver runs as its own process; the registry's config has a
``notifications.endpoints`` entry with the bearer token header, as docs/fleet.md shows. The
attestation the worker attaches is itself a push (a ``sha256-<hex>`` tag), which the
receiver must ignore rather than audit.
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from pinguard.cli import main
from pinguard.fleet.records import ResultStore
from pinguard.testing.demo import write_oci_archive
from tests.infra.fleet import (
    Receiver,
    fleet_layers,
    post_events,
    push_event,
    start_receiver,
    start_worker,
)
from tests.infra.keys import ec_key_pair
from tests.infra.redis import RedisServer
from tests.infra.registry import free_port, running_registry

TOKEN = "push-token-0123456789abcdef"


@pytest.fixture
def receiver(tmp_path: Path, broker: RedisServer) -> Iterator[Receiver]:
    rec = start_receiver(tmp_path, broker.url(), TOKEN, "--attest")
    try:
        yield rec
    finally:
        rec.stop()


def test_broker_down_answers_503_so_the_registry_retries(tmp_path: Path) -> None:
    rec = start_receiver(tmp_path, f"redis://127.0.0.1:{free_port()}/0", TOKEN, "--attest")
    try:
        nothing = push_event("sha256-" + "cd" * 32)  # a referrers tag: nothing to send
        assert post_events(rec.address, nothing, TOKEN) == 200
        assert post_events(rec.address, push_event("1.0"), TOKEN) == 503
    finally:
        rec.stop()
    assert "enqueued" not in rec.text()


def test_receive_rejects_a_request_without_the_token(receiver: Receiver) -> None:
    request = urllib.request.Request(
        f"http://{receiver.address}/events", data=b'{"events": []}', method="POST"
    )
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=10)
    assert info.value.code == 401
    request.add_header("Authorization", "Bearer " + TOKEN[:-1] + "x")
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=10)
    assert info.value.code == 401
    request = urllib.request.Request(
        f"http://{receiver.address}/events",
        data=b"[1, 2]",
        method="POST",
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=10)
    assert info.value.code == 400


def notifications(receiver: Receiver) -> str:
    return (
        "notifications:\n"
        "  endpoints:\n"
        "    - name: pinguard\n"
        f"      url: http://{receiver.address}/events\n"
        "      headers:\n"
        f"        Authorization: [Bearer {TOKEN}]\n"
        "      timeout: 5s\n"
        "      threshold: 3\n"
        "      backoff: 1s\n"
    )


def test_a_push_is_audited_attested_and_verified(
    tmp_path: Path,
    broker: RedisServer,
    receiver: Receiver,
    capsys: pytest.CaptureFixture[str],
) -> None:
    key, pub = ec_key_pair(tmp_path, "attest")
    results = tmp_path / "results"
    worker = start_worker(tmp_path / "w", broker.url(), results, "--attest-key", str(key))
    archive = tmp_path / "serve.tar"
    digest = write_oci_archive(fleet_layers("2.11.0+cu130", "2.30.3"), archive, tag="t")
    try:
        with running_registry(
            tmp_path / "registry", extra_config=notifications(receiver)
        ) as registry:
            registry.push(f"oci-archive:{archive}:t", "team/serve:1.0")
            ref = f"docker://{registry.address}/team/serve@{digest}"
            receiver.wait_for(re.escape(f"enqueued {ref} (pushed as team/serve:1.0@{digest})"))
            store = ResultStore(results)
            worker.wait_until(store.ids, 120, "writing the record")
            # the attestation the worker attached is a push too: ignored, not audited
            receiver.wait_for(r"ignored team/serve:sha256-[0-9a-f]{64}\S*: a referrers tag")
            [record] = store.all()
            assert record.reference == ref
            assert record.verdict == "pass", (record, worker.text()[-3000:])
            assert record.manifest_digest == digest
            assert record.attestation is not None
            capsys.readouterr()
            tagged = f"docker://{registry.address}/team/serve:1.0"
            assert main(["verify", tagged, "--key", str(pub), "-f", "json"]) == 0
            assert record.attestation in capsys.readouterr().out
            assert len(store.ids()) == 1
    finally:
        worker.stop()
