"""What a worker parses of a layer (``Analyzer.prepare``) gives the states a parent parse gives.

The worker process that reads a layer parses its metadata directories (METADATA, RECORD and
the rest, ``catalog.python.prepare_distributions``) so the parent that replays the states
does not. A parse made there holds only for the very files it read: each scenario replays
real tar streams (``tarfile``) twice, once with what ``prepare`` made and once without it,
and the snapshots must be equal; where the worker's parse is used, the parent parses nothing.
A later layer that rewrites a dist-info's METADATA, one that adds a file to it (REQUESTED),
one that removes it, and a layer written through a lower layer's symlink to site-packages (its
files land elsewhere than where they were parsed) all make the parent parse again.
"""

from __future__ import annotations

import dataclasses
import io
import pickle

import pytest

from pinguard.audit.state import State
from pinguard.catalog import AnalyzerOptions, Analyzers
from pinguard.catalog import python as py
from pinguard.layers.analysis import LayerAnalysis, analyze_stream
from pinguard.models import Snapshot
from pinguard.testing.images import layer_tar

SITE = "usr/local/lib/python3.12/site-packages"
ANALYZERS = Analyzers.for_options(AnalyzerOptions())


def _dist(site: str, name: str, version: str, extra: bytes = b"") -> dict[str, bytes]:
    meta = f"{site}/{name}-{version}.dist-info"
    record = f"{name}/__init__.py,sha256=abc,0\n{name}/_c.so,sha256=def,9\n{meta}/RECORD,,\n"
    return {
        f"{meta}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
        + extra,
        f"{meta}/RECORD": record.replace(f"{site}/", "").encode(),
        f"{meta}/INSTALLER": b"pip\n",
    }


def _layer(
    files: dict[str, bytes],
    whiteouts: tuple[str, ...] = (),
    symlinks: dict[str, str] | None = None,
) -> LayerAnalysis:
    tar = layer_tar(files, whiteouts=whiteouts, symlinks=symlinks, parents=True)
    analysis = analyze_stream(io.BytesIO(tar), digest=None, size=None, select=ANALYZERS.selector())
    ANALYZERS.prepare(analysis)
    # as the parent gets it from a worker: pickled (the bytes a parse read stay one object)
    back: LayerAnalysis = pickle.loads(pickle.dumps(analysis))
    return back


def _replay(layers: list[LayerAnalysis], prepared: bool) -> list[Snapshot]:
    state = State(ANALYZERS)
    out = []
    for layer in layers:
        out.append(state.apply(layer if prepared else dataclasses.replace(layer, prepared={})))
    return out


def _parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    real = py.parse_distribution

    def counting(meta_dir: str, files: object) -> object:
        seen.append(meta_dir)
        return real(meta_dir, files)  # type: ignore[arg-type]

    monkeypatch.setattr(py, "parse_distribution", counting)
    return seen


def test_the_workers_parse_is_the_parents_and_spares_it(monkeypatch: pytest.MonkeyPatch) -> None:
    layers = [_layer(_dist(SITE, "torch", "2.11.0")), _layer(_dist(SITE, "numpy", "2.3.0"))]
    assert set(layers[0].prepared["python"]) == {f"/{SITE}/torch-2.11.0.dist-info"}
    unprepared = _replay(layers, prepared=False)
    parses = _parses(monkeypatch)
    assert _replay(layers, prepared=True) == unprepared
    assert parses == []  # every distribution came parsed from its layer


def test_a_file_a_later_layer_changed_is_parsed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    meta = f"{SITE}/torch-2.11.0.dist-info"
    layers = [
        _layer(_dist(SITE, "torch", "2.11.0")),
        _layer({f"{meta}/METADATA": b"Metadata-Version: 2.1\nName: torch\nVersion: 2.11.0\n\nx"}),
        _layer({f"{meta}/REQUESTED": b""}),
        _layer({}, whiteouts=(f"{meta}/INSTALLER",)),
    ]
    unprepared = _replay(layers, prepared=False)
    parses = _parses(monkeypatch)
    assert _replay(layers, prepared=True) == unprepared
    assert parses == [f"/{meta}"] * 3  # the first layer's parse served the first state only
    assert unprepared[2].environments[0].distributions[0].requested
    assert unprepared[3].environments[0].distributions[0].installer is None


def test_files_landing_through_a_link_are_parsed_where_they_land(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A layer written through ``/opt/pkgs -> /usr/local/.../site-packages``: its dist-info was
    parsed (in the worker) under /opt/pkgs, where no environment reaches; it lands in
    site-packages, and is parsed there."""
    layers = [
        _layer({f"{SITE}/.keep": b""}, symlinks={"opt/pkgs": f"/{SITE}"}),
        _layer(_dist("opt/pkgs", "flash-attn", "2.8.0")),
    ]
    assert set(layers[1].prepared["python"]) == {"/opt/pkgs/flash-attn-2.8.0.dist-info"}
    unprepared = _replay(layers, prepared=False)
    parses = _parses(monkeypatch)
    prepared = _replay(layers, prepared=True)
    assert prepared == unprepared
    assert parses == [f"/{SITE}/flash-attn-2.8.0.dist-info"]
    (env,) = prepared[1].environments
    assert [d.name for d in env.distributions] == ["flash-attn"]
    assert env.distributions[0].record[0][0].startswith(f"/{SITE}/")


def test_the_cache_entry_keeps_no_prepared_parse() -> None:
    layer = _layer(_dist(SITE, "torch", "2.11.0"))
    assert layer.prepared
    assert "prepared" not in layer.to_json()
    assert LayerAnalysis.from_json(layer.to_json()).prepared == {}
