"""Replaying layers into a state: the OCI whiteout rules, as the image spec states them.

A whiteout ``.wh.NAME`` removes NAME and everything below it from the lower layers (also at
the root: ``/.wh.opt`` removes ``/opt``), but never a sibling that merely shares a prefix; an
opaque whiteout ``.wh..wh..opq`` empties its directory of lower-layer content while the same
layer's own files in it stay, and where that directory is a lower layer's link it empties the
link's target, as containerd's applier resolves it (unless the layer made a directory there:
then the directory replaces the link). The layers are real tar streams written by
``tarfile``.
"""

from __future__ import annotations

import io

from pinguard.audit.state import State
from pinguard.catalog import AnalyzerOptions, Analyzers
from pinguard.layers.analysis import LayerAnalysis, analyze_stream
from pinguard.models import Snapshot
from pinguard.testing.images import layer_tar

VENV = "opt/venv/lib/python3.12/site-packages"
SYSTEM = "usr/lib/python3/dist-packages"


def _dist(site: str, name: str, version: str) -> dict[str, bytes]:
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    return {f"{site}/{name}-{version}.dist-info/METADATA": meta}


def _layer(
    files: dict[str, bytes],
    whiteouts: tuple[str, ...] = (),
    symlinks: dict[str, str] | None = None,
    parents: bool = False,
) -> LayerAnalysis:
    tar = layer_tar(files, whiteouts=whiteouts, symlinks=symlinks, parents=parents)
    analyzers = Analyzers.for_options(AnalyzerOptions(verify_records=True))
    return analyze_stream(io.BytesIO(tar), digest=None, size=None, select=analyzers.selector())


def _names(snap: Snapshot) -> dict[str, list[str]]:
    return {
        env.path: [f"{d.name}=={d.raw_version}" for d in env.distributions]
        for env in snap.environments
    }


def _state(*layers: LayerAnalysis) -> tuple[State, Snapshot]:
    state = State(Analyzers.for_options(AnalyzerOptions(verify_records=True)))
    snap = Snapshot()
    for layer in layers:
        snap = state.apply(layer)
    return state, snap


BASE = _layer(
    {
        **_dist(VENV, "torch", "2.11.0"),
        f"{VENV}/torch/__init__.py": b"",
        **_dist(SYSTEM, "six", "1.16.0"),
        **_dist("opt/other/lib/python3.12/site-packages", "keep", "1.0"),
    }
)


def test_root_level_whiteout_removes_the_directory() -> None:
    """``/.wh.opt`` removes every file below /opt and nothing else."""
    wh = _layer({}, whiteouts=(".wh.opt",))
    assert wh.whiteouts == ["/opt"]
    state, snap = _state(BASE, wh)
    assert _names(snap) == {f"/{SYSTEM}": ["six==1.16.0"]}
    assert not [p for p in (*state.files, *state.hashes) if p.startswith("/opt/")]


def test_whiteout_does_not_remove_a_sibling_sharing_its_prefix() -> None:
    """Whiting out /opt/venv leaves /opt/venv2 alone (a path prefix is not a parent)."""
    layer = _layer(_dist("opt/venv2/lib/python3.12/site-packages", "numpy", "2.3.5"))
    wh = _layer({}, whiteouts=("opt/.wh.venv",))
    _, snap = _state(BASE, layer, wh)
    assert _names(snap) == {
        "/opt/other/lib/python3.12/site-packages": ["keep==1.0"],
        "/opt/venv2/lib/python3.12/site-packages": ["numpy==2.3.5"],
        f"/{SYSTEM}": ["six==1.16.0"],
    }


def test_whiteout_of_a_dist_info_removes_the_distribution() -> None:
    """pip uninstall in a later step: the dist-info's whiteout removes the distribution."""
    wh = _layer({}, whiteouts=(f"{VENV}/.wh.torch-2.11.0.dist-info",))
    _, snap = _state(BASE, wh)
    assert f"/{VENV}" not in _names(snap)
    assert _names(snap)[f"/{SYSTEM}"] == ["six==1.16.0"]


def test_opaque_whiteout_hides_lower_layers_but_keeps_its_own_files() -> None:
    """An opaque site-packages loses torch from below but keeps what the same layer wrote."""
    layer = _layer(_dist(VENV, "torch", "2.12.1"), whiteouts=(f"{VENV}/.wh..wh..opq",))
    assert layer.opaque == [f"/{VENV}"]
    state, snap = _state(BASE, layer)
    assert _names(snap)[f"/{VENV}"] == ["torch==2.12.1"]
    assert f"/{VENV}/torch/__init__.py" not in state.hashes
    assert _names(snap)[f"/{SYSTEM}"] == ["six==1.16.0"]


def test_opaque_whiteout_at_a_parent_empties_everything_below() -> None:
    """An opaque /opt (a directory replaced wholesale) drops both environments under it."""
    layer = _layer({}, whiteouts=("opt/.wh..wh..opq",))
    assert layer.opaque == ["/opt"]
    _, snap = _state(BASE, layer)
    assert _names(snap) == {f"/{SYSTEM}": ["six==1.16.0"]}


def test_a_later_layer_reinstalls_after_a_whiteout() -> None:
    """Whiteout then a fresh install of the same path in a later layer: the new one shows."""
    wh = _layer({}, whiteouts=(".wh.opt",))
    again = _layer(_dist(VENV, "torch", "2.12.1"))
    _, snap = _state(BASE, wh, again)
    assert _names(snap)[f"/{VENV}"] == ["torch==2.12.1"]


def test_opaque_marker_in_a_linked_directory_empties_the_target() -> None:
    """``opt/link -> /VENV`` then a bare ``opt/link/.wh..wh..opq``: torch goes from VENV,
    the same layer's new files land there, the link stays and the state names the marker."""
    link = _layer({}, symlinks={"opt/link": f"/{VENV}"})
    layer = _layer(_dist("opt/link", "torch", "2.12.1"), whiteouts=("opt/link/.wh..wh..opq",))
    assert (layer.opaque, layer.opaque_made) == (["/opt/link"], [])
    state, snap = _state(BASE, link, layer)
    assert _names(snap)[f"/{VENV}"] == ["torch==2.12.1"]
    assert f"/{VENV}/torch/__init__.py" not in state.hashes
    assert state.links == {"/opt/link": f"/{VENV}"}
    assert state.opaque_through_links == [("/opt/link", f"/{VENV}")]


def test_opaque_directory_the_layer_made_replaces_the_link() -> None:
    """The same marker with the directory entry ``opt/link/`` in the layer: the link goes,
    VENV keeps torch 2.11.0 and the new files stay in /opt/link."""
    link = _layer({}, symlinks={"opt/link": f"/{VENV}"})
    layer = _layer(
        _dist("opt/link", "torch", "2.12.1"), whiteouts=("opt/link/.wh..wh..opq",), parents=True
    )
    assert layer.opaque_made == ["/opt/link"]
    state, snap = _state(BASE, link, layer)
    assert _names(snap)[f"/{VENV}"] == ["torch==2.11.0"]
    assert state.links == {}
    assert "/opt/link/torch-2.12.1.dist-info/METADATA" in state.files
    assert state.opaque_through_links == []


def test_the_tree_knows_every_directory_that_holds_a_kept_path() -> None:
    """``_Tree`` counts at each directory only what is directly in it; after any sequence of
    adds, replacements, drops and whiteouts its directories are exactly those above a kept
    path (``posixpath.dirname`` taken level by level, ``/`` left out), so a whiteout finds
    everything below it and nothing else. Unnormalised paths (``//``, a trailing ``/``)
    included."""
    import posixpath
    import random

    from pinguard.audit.state import _Tree

    def above(path: str) -> set[str]:
        out, d = set(), posixpath.dirname(path)
        while d.strip("/"):
            out.add(d)
            d = posixpath.dirname(d)
        return out

    rng = random.Random(29)
    names = ["a", "b", "ab"]
    tree: _Tree[int] = _Tree()
    for i in range(1500):
        depth = rng.randint(1, 4)
        path = "/" + "/".join(rng.choice(names) for _ in range(depth))
        if rng.random() < 0.05:
            path = path.replace("/", "//", 1) if rng.random() < 0.5 else path + "/"
        roll = rng.random()
        if roll < 0.6:
            tree.add(path, i)
        elif roll < 0.9:
            before = set(tree.items)
            gone = tree.remove_tree(path, keep_root=rng.random() < 0.3)
            assert set(gone) == before - set(tree.items)
            assert all(p == path or p.startswith(path.rstrip("/") + "/") for p in gone)
        elif tree.items:
            tree.remove_tree(rng.choice(sorted(tree.items)), keep_root=False)
        want = set().union(*(above(p) for p in tree.items)) if tree.items else set()
        assert set(tree._dirs) == want
