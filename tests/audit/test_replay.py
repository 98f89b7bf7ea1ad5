"""The replay cache: a warm audit is the cold audit, read back without any layer.

An OCI layout with a requirement graph (``pinguard.testing.graphs``: 40 distributions, most
moved in the last step, so steps carry changes, causes and unmet requirements) is audited
cold with a cache directory; then its layer blobs are deleted, so a second audit can only
succeed from the replay entry, and it must equal the first, value for value and report byte
for byte. An entry altered into other valid JSON is a miss; another chain (one more layer)
gets its own entry; a distribution that several snapshots share is written once.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pinguard.audit.loading import load_layers
from pinguard.audit.options import AuditOptions
from pinguard.audit.pipeline import audit_image
from pinguard.audit.replay import Replay, StepEncoder, decode, encode
from pinguard.audit.steps import StepBuilder, build_result
from pinguard.errors import PinguardError
from pinguard.models import AuditResult, Snapshot
from pinguard.report.json import render
from pinguard.sources import open_source
from pinguard.testing.graphs import requirement_graph
from pinguard.testing.images import ImageWriter, layer_tar
from tests.factories import dist, environment, step

SITE = "/usr/local/lib/python3.12/site-packages"


def _metadata(name: str, version: str, requires: tuple[str, ...]) -> bytes:
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    lines += [f"Requires-Dist: {r}" for r in requires]
    return ("\n".join(lines) + "\n\n").encode()


def _layout(path: Path, extra_layer: bool = False) -> str:
    graph = requirement_graph(40, prefix="g")
    base = {
        f"{SITE}/{g.name.replace('-', '_')}-{g.before}.dist-info/METADATA": _metadata(
            g.name, g.before, g.requires
        )
        for g in graph
        if g.before is not None
    }
    step: dict[str, bytes] = {}
    gone: list[str] = []
    for g in graph:
        if g.before == g.after:
            continue
        if g.before is not None:
            gone.append(f"{SITE}/{g.name.replace('-', '_')}-{g.before}.dist-info")
        meta = f"{SITE}/{g.name.replace('-', '_')}-{g.after}.dist-info/METADATA"
        step[meta] = _metadata(g.name, g.after, g.requires)
    w = ImageWriter(path)
    layers = [
        w.layer(layer_tar(base, parents=True)),
        w.layer(layer_tar(step, whiteouts=gone, parents=True)),
    ]
    history = [{"created_by": "RUN pip install base"}, {"created_by": "RUN pip install step"}]
    if extra_layer:
        layers.append(w.layer(layer_tar({"/etc/motd": b"hi\n"}, parents=True)))
        history.append({"created_by": "RUN echo hi > /etc/motd"})
    img = w.image(layers, history, platform="linux/amd64")
    w.write_layout(w.index([img], tag="v1")[0])
    return f"oci:{path}:v1"


def _layer_blobs(layout: Path) -> list[Path]:
    index = json.loads((layout / "index.json").read_text())
    blobs = layout / "blobs" / "sha256"
    manifest = json.loads((blobs / index["manifests"][0]["digest"].split(":")[1]).read_bytes())
    return [blobs / layer["digest"].split(":")[1] for layer in manifest["layers"]]


def _json(result: AuditResult) -> str:
    return render(result)


def test_a_warm_audit_replays_without_reading_a_layer(tmp_path: Path) -> None:
    """Cold, then blobs deleted, then warm: equal results, equal JSON; changes with causes."""
    ref = _layout(tmp_path / "img")
    options = AuditOptions(cache_dir=tmp_path / "cache")
    cold = audit_image(ref, options=options)
    causes = [c for s in cold.steps for c in s.changes if c.causes]
    assert len(causes) >= 5
    assert any(s.unmet for s in cold.steps)
    assert len(list((tmp_path / "cache").glob("replay-*.json"))) == 1
    for blob in _layer_blobs(tmp_path / "img"):
        blob.unlink()
    with pytest.raises(PinguardError):  # without the cache the layers are gone
        audit_image(ref)
    warm = audit_image(ref, options=options)
    assert warm == cold
    assert _json(warm) == _json(cold)


def test_an_altered_entry_is_a_miss_and_another_chain_has_its_own(tmp_path: Path) -> None:
    """A version changed inside the entry (valid JSON) is not believed: the audit reads the
    layers again and gives the true result. One more layer: a second entry."""
    ref = _layout(tmp_path / "img")
    options = AuditOptions(cache_dir=tmp_path / "cache")
    cold = audit_image(ref, options=options)
    (entry,) = (tmp_path / "cache").glob("replay-*.json")
    data = json.loads(entry.read_text())
    text = json.dumps(data)
    assert '"raw_version": "1.2"' in text
    entry.write_text(text.replace('"raw_version": "1.2"', '"raw_version": "9.9"', 1))
    again = audit_image(ref, options=options)
    assert again == cold
    other = audit_image(_layout(tmp_path / "img2", extra_layer=True), options=options)
    assert len(other.steps) == 3
    assert len(list((tmp_path / "cache").glob("replay-*.json"))) == 2


def test_shared_distributions_are_written_once(tmp_path: Path) -> None:
    """Every distribution object appears once in the entry's table, however many snapshots
    hold it (the base's unchanged distributions are in both steps' snapshots)."""
    ref = _layout(tmp_path / "img")
    result = audit_image(ref, options=AuditOptions(cache_dir=tmp_path / "cache"))
    (entry,) = (tmp_path / "cache").glob("replay-*.json")
    table = json.loads(entry.read_text())["table"]
    rows = [t for t in table if "raw_version" in t]
    distinct = {
        (d.name, d.raw_version, d.metadata_path)
        for snap in result.snapshots
        for env in snap.environments
        for d in env.distributions
    }
    held = sum(len(env.distributions) for snap in result.snapshots for env in snap.environments)
    assert held > len(distinct)
    assert len(rows) == len(distinct)


def test_the_key_follows_everything_a_replay_depends_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """Analyzers and limits, platform, config, each layer digest and diff_id, their order,
    and the packaging release each give another key; the same inputs the same key."""
    import packaging

    from pinguard.cache.key import replay_key
    from pinguard.models import Platform
    from pinguard.sources.interface import LayerRef

    a = LayerRef("sha256:" + "a" * 64, 10, diff_id="sha256:" + "c" * 64)
    b = LayerRef("sha256:" + "b" * 64, 10, diff_id="sha256:" + "d" * 64)
    amd64 = Platform("linux", "amd64")
    config = {"history": [{"created_by": "RUN x"}]}
    base = replay_key("k1", amd64, config, [a, b])
    assert replay_key("k1", amd64, dict(config), [a, b]) == base
    others = [
        replay_key("k2", amd64, config, [a, b]),
        replay_key("k1", Platform("linux", "arm64"), config, [a, b]),
        replay_key("k1", amd64, {"history": [{"created_by": "RUN y"}]}, [a, b]),
        replay_key("k1", amd64, config, [b, a]),
        replay_key("k1", amd64, config, [a]),
        replay_key("k1", amd64, config, [a, LayerRef(b.digest, 10, diff_id="sha256:" + "e" * 64)]),
    ]
    monkeypatch.setattr(packaging, "__version__", "0.0")
    others.append(replay_key("k1", amd64, config, [a, b]))
    assert len({base, *others}) == len(others) + 1


def test_layers_replayed_as_they_arrive_give_the_whole_replay(tmp_path: Path) -> None:
    """``StepBuilder`` fed the layers last first replays nothing until the first layer is
    in, then gives what ``build_result`` gives; a replay entry encoded a step at a time
    (``StepEncoder``) decodes to the same ``Replay`` as one encoded whole."""
    ref = _layout(tmp_path / "img", extra_layer=True)
    options = AuditOptions()
    with open_source(ref, options.source) as source:
        resolved = source.resolve()
        analyses = load_layers(source, resolved.layers, options)
    whole = build_result(resolved, analyses, options.analyzers())
    encoder = StepEncoder()
    builder = StepBuilder(resolved, options.analyzers(), encoder)
    last_first = [(layer.digest, analyses[layer.digest]) for layer in reversed(resolved.layers)]
    for digest, analysis in last_first[:-1]:
        builder.add(digest, analysis)
    with pytest.raises(KeyError):
        builder.result()  # the first layer is missing: nothing replayed yet
    builder.add(*last_first[-1])
    builder.add(*last_first[0])  # a layer handed in again is taken once
    result = builder.result()
    assert result == whole
    assert _json(result) == _json(whole)
    data = encoder.finish(result.incomplete, result.notes, result.file_digests)
    replay = Replay(
        result.steps, result.snapshots, result.incomplete, result.notes, result.file_digests
    )
    assert decode(json.loads(json.dumps(data))) == replay
    assert decode(json.loads(json.dumps(encode(replay)))) == replay


def test_flat_fields_are_encoded_as_lists_and_read_back() -> None:
    """RECORD rows (pairs) and string tuples take the encoder's one-comprehension path: the
    entry holds them as JSON lists, exactly as the recursive path writes them, and they
    decode to the same values."""
    rows = [(f"g/m{i}.py", f"sha256={i:043d}") for i in range(300)]
    base = dist("g-one", "1.0", record=rows)
    snap = Snapshot(
        environments=(environment(base, dist("g-two", "2.0", record=rows[:3])),),
        os_release=(("ID", "debian"), ("VERSION_ID", "12")),
    )
    replay = Replay((step(1),), (snap,), (), ("a note",), (("/etc/x", "sha256=x"),))
    data = json.loads(json.dumps(encode(replay)))
    one = next(t for t in data["table"] if t.get("name") == "g-one")
    assert one["record"] == [[path, digest] for path, digest in base.record]
    assert data["replay"]["notes"] == ["a note"]
    assert data["replay"]["snapshots"][0]["os_release"] == [["ID", "debian"], ["VERSION_ID", "12"]]
    assert decode(data) == replay
