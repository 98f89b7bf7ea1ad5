"""Environments reached through symlinks, in crafted layers through the real pipeline.

Each case writes layer tars with symbolic links (``pinguard.testing.images.layer_tar``) into
an OCI layout, audits it end to end and checks which environments, distributions and
incomplete items come out. Paths, versions, digests and messages are written by hand from
the bytes each test made (digests with ``hashlib``, not with pinguard).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path

import jsonschema
import pytest

from pinguard.audit.options import AuditOptions
from pinguard.audit.pipeline import audit_directory, audit_image
from pinguard.cli import main
from pinguard.layers.links import resolve, resolve_parent
from pinguard.models import AuditResult, ChangeKind, Severity
from pinguard.testing.images import ImageWriter, layer_tar
from tests.infra.native import build_so

SITE = "usr/local/lib/python3.11/site-packages"
OUTSIDE = (
    "distribution metadata in a directory no Python environment reaches (neither a "
    "site-packages/dist-packages path nor a symlink named so resolves to it); not audited"
)
Layer = tuple[dict[str, bytes], dict[str, str]]


def _metadata(name: str, version: str) -> bytes:
    return f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n".encode()


def _digest(data: bytes) -> str:
    raw = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + raw.decode()


def _dist(where: str, name: str, version: str, files: dict[str, bytes]) -> dict[str, bytes]:
    """A dist-info in ``where`` (relative) with RECORD rows for ``files`` (relative to it)."""
    info = f"{name}-{version}.dist-info"
    rows = [f"{path},{_digest(data)},{len(data)}" for path, data in sorted(files.items())]
    rows.append(f"{info}/METADATA,,")
    out = {f"{where}/{path}": data for path, data in files.items()}
    out[f"{where}/{info}/METADATA"] = _metadata(name, version)
    out[f"{where}/{info}/RECORD"] = ("\n".join(rows) + "\n").encode()
    return out


def _layout(
    tmp_path: Path,
    *layers: Layer,
    hardlinks: dict[str, str] | None = None,
    parents: bool = False,
) -> str:
    """An OCI layout of ``layers``; ``hardlinks`` go into the last one; with ``parents``
    every member's directories get entries of their own, as in the layers buildah writes."""
    writer = ImageWriter(tmp_path / "layout")
    descs = [
        writer.layer(
            layer_tar(
                files,
                symlinks=links,
                hardlinks=hardlinks if i == len(layers) - 1 else None,
                parents=parents,
            )
        )
        for i, (files, links) in enumerate(layers)
    ]
    image = writer.image(descs, [{"created_by": f"RUN step {i}"} for i in range(len(layers))])
    index, _ = writer.index([image], tag="t")
    writer.write_layout(index)
    return f"oci:{tmp_path / 'layout'}:t"


def _audit(
    tmp_path: Path, *layers: Layer, verify: bool = False, parents: bool = False
) -> AuditResult:
    return audit_image(
        _layout(tmp_path, *layers, parents=parents), options=AuditOptions(verify_records=verify)
    )


def _envs(result: AuditResult) -> list[tuple[str, str | None, str | None, list[tuple[str, str]]]]:
    return [
        (e.path, e.real_path, e.python, [(d.name, d.raw_version) for d in e.distributions])
        for e in result.final.environments
    ]


def _why(result: AuditResult) -> dict[str, str]:
    return {i.what: i.why for i in result.incomplete}


FOO = {"foo/__init__.py": b"print('foo')\n"}


@pytest.mark.parametrize(
    "target",
    [
        "/opt/pkgs",
        "../../../../opt/pkgs",  # relative to /usr/local/lib/python3.11
        "../../../../../../../../../opt/pkgs",  # escapes the root: clamped at /
        "/../../opt/./pkgs/",
    ],
)
def test_site_packages_link_then_pip_writes_through_it(tmp_path: Path, target: str) -> None:
    """The layer holds /opt/pkgs/... (pip wrote through the link); the environment is the
    link's path, the real directory is said, and the step adding the files adds foo."""
    result = _audit(tmp_path, ({}, {SITE: target}), (_dist("opt/pkgs", "foo", "1.0", FOO), {}))
    assert _envs(result) == [(f"/{SITE}", "/opt/pkgs", "3.11", [("foo", "1.0")])]
    (dist,) = result.final.environments[0].distributions
    assert dist.metadata_path == f"/{SITE}/foo-1.0.dist-info"
    assert (f"/{SITE}/foo/__init__.py", _digest(FOO["foo/__init__.py"])) in dist.record
    assert [(c.kind, c.name) for c in result.steps[1].changes] == [(ChangeKind.ADDED, "foo")]
    assert result.incomplete == ()


def test_files_first_then_the_link(tmp_path: Path) -> None:
    """Files written before the link: the step that links them adds the environment. The
    step before had the dist-info where no environment reached it (its snapshot says so), but
    the image as it ships is complete: nothing was importable before the link."""
    result = _audit(tmp_path, (_dist("opt/pkgs", "foo", "1.0", FOO), {}), ({}, {SITE: "/opt/pkgs"}))
    assert _envs(result) == [(f"/{SITE}", "/opt/pkgs", "3.11", [("foo", "1.0")])]
    assert result.snapshots[0].environments == ()
    assert [(i.what, i.why) for i in result.snapshots[0].incomplete] == [
        ("/opt/pkgs/foo-1.0.dist-info", OUTSIDE)
    ]
    assert [(c.kind, c.name) for c in result.steps[1].changes] == [(ChangeKind.ADDED, "foo")]
    assert _why(result) == {}
    assert result.verdict(Severity.ERROR) == "pass"


def test_files_written_through_the_link_path_land_in_the_target(tmp_path: Path) -> None:
    """A layer naming the link's path (as a naive tool writes it) lands in the real
    directory, as containerd applies it: one environment, one copy."""
    result = _audit(
        tmp_path,
        ({}, {SITE: "/opt/pkgs"}),
        (_dist(SITE, "foo", "1.0", FOO), {}),
        (_dist("opt/pkgs", "foo", "1.0", FOO), {}),
    )
    assert _envs(result) == [(f"/{SITE}", "/opt/pkgs", "3.11", [("foo", "1.0")])]
    assert [(c.kind, c.name) for c in result.steps[2].changes] == []


def test_lib64_link_of_a_venv_is_one_environment(tmp_path: Path) -> None:
    """uv/venv's lib64 -> lib: a dist-info written as lib/ and as lib64/ is one copy in one
    environment, named by the real lib/ path; the Python comes from pyvenv.cfg."""
    venv = "opt/venv/lib/python3.11/site-packages"
    alias = "opt/venv/lib64/python3.11/site-packages"
    result = _audit(
        tmp_path,
        (
            {"opt/venv/pyvenv.cfg": b"home = /usr/bin\nversion = 3.11.2\n"},
            {"opt/venv/lib64": "lib"},
        ),
        ({**_dist(venv, "foo", "1.0", FOO), **_dist(alias, "bar", "2.0", {})}, {}),
        (_dist(alias, "foo", "1.0", FOO), {}),
    )
    assert _envs(result) == [(f"/{venv}", None, "3.11.2", [("bar", "2.0"), ("foo", "1.0")])]
    assert [(c.kind, c.name) for c in result.steps[2].changes] == []


def test_higher_directory_link(tmp_path: Path) -> None:
    """/usr/lib/python3.11 -> /opt/python/lib/python3.11: files written through it land in
    the real site-packages, which is itself an environment path and names it."""
    real = "/opt/python/lib/python3.11/site-packages"
    result = _audit(
        tmp_path,
        ({}, {"usr/lib/python3.11": "/opt/python/lib/python3.11"}),
        (_dist("usr/lib/python3.11/site-packages", "foo", "1.0", FOO), {}),
    )
    assert _envs(result) == [(real, None, "3.11", [("foo", "1.0")])]


def test_whiteout_of_the_link_and_of_the_target(tmp_path: Path) -> None:
    """Whiting out the link leaves the files unreachable (reported); whiting out the target
    directory removes the environment (nothing to report)."""
    link: Layer = ({}, {SITE: "/opt/pkgs"})
    files: Layer = (_dist("opt/pkgs", "foo", "1.0", FOO), {})
    gone_link = _audit(
        tmp_path / "a", link, files, ({"usr/local/lib/python3.11/.wh.site-packages": b""}, {})
    )
    assert _envs(gone_link) == []
    assert [(c.kind, c.name) for c in gone_link.steps[2].changes] == [(ChangeKind.REMOVED, "foo")]
    assert _why(gone_link) == {"/opt/pkgs/foo-1.0.dist-info": OUTSIDE}
    gone_dir = _audit(tmp_path / "b", link, files, ({"opt/.wh.pkgs": b""}, {}))
    assert _envs(gone_dir) == []
    assert [(c.kind, c.name) for c in gone_dir.steps[2].changes] == [(ChangeKind.REMOVED, "foo")]
    assert gone_dir.incomplete == ()


def test_link_replacing_a_directory_hides_what_was_in_it(tmp_path: Path) -> None:
    """A symlink over a lower layer's directory replaces the directory and its files."""
    result = _audit(
        tmp_path,
        (_dist(SITE, "old", "1.0", {}), {}),
        ({**_dist("opt/pkgs", "new", "2.0", {})}, {SITE: "/opt/pkgs"}),
    )
    assert _envs(result) == [(f"/{SITE}", "/opt/pkgs", "3.11", [("new", "2.0")])]
    kinds = sorted((c.kind.value, c.name) for c in result.steps[1].changes)
    assert kinds == [("added", "new"), ("removed", "old")]


def test_directory_replacing_a_link_leaves_the_target_alone(tmp_path: Path) -> None:
    """``rm L && mkdir L``: overlayfs marks the new directory opaque, so the layer holds
    ``L/`` and ``L/.wh..wh..opq`` (as buildah writes it, every directory with its own
    entry); the link goes, the new files land in the directory, and what was written
    through the link stays in its target, which nothing reaches any more."""
    result = _audit(
        tmp_path,
        ({}, {SITE: "/opt/pkgs"}),
        (_dist("opt/pkgs", "old", "1.0", {}), {}),
        ({f"{SITE}/.wh..wh..opq": b"", **_dist(SITE, "new", "2.0", {})}, {}),
        parents=True,
    )
    assert _envs(result) == [(f"/{SITE}", None, "3.11", [("new", "2.0")])]
    kinds = sorted((c.kind.value, c.name) for c in result.steps[2].changes)
    assert kinds == [("added", "new"), ("removed", "old")]
    assert _why(result) == {"/opt/pkgs/old-1.0.dist-info": OUTSIDE}


def test_opaque_directory_below_a_link_lands_through_it(tmp_path: Path) -> None:
    """An opaque marker inside a linked directory clears the real directory's contents."""
    result = _audit(
        tmp_path,
        ({}, {SITE: "/opt/pkgs"}),
        (_dist("opt/pkgs/sub", "old", "1.0", {}) | _dist("opt/pkgs", "kept", "1.0", {}), {}),
        ({f"{SITE}/sub/.wh..wh..opq": b""}, {}),
    )
    assert _envs(result) == [(f"/{SITE}", "/opt/pkgs", "3.11", [("kept", "1.0")])]
    assert _why(result) == {}


VENV = "opt/venv/lib/python3.11/site-packages"
OPAQUE_WHY = (
    "its directory is a lower layer's symbolic link to '/{real}' and the layer makes no "
    "directory there; applied inside '/{real}', as containerd does (what the lower layers "
    "had there is gone), but overlayfs-based runtimes replace the link with a new directory "
    "and leave '/{real}' as it was"
)


@pytest.mark.parametrize("target", [f"/{VENV}", "venv/lib/python3.11/site-packages"])
def test_opaque_marker_inside_a_linked_directory_empties_the_target(
    tmp_path: Path, target: str
) -> None:
    """Issue 22: ``opt/link -> site-packages`` in a lower layer, then a layer holding only
    ``opt/link/.wh..wh..opq`` and new files. containerd resolves the marker's directory
    inside the root (``fs.RootPath``), so the venv loses the lower layer's distribution and
    the new one lands in it. overlayfs keeps them instead (the test below, on a real
    overlay mount), so the audit is also incomplete, naming the layer and the marker."""
    layout = _layout(
        tmp_path,
        (_dist(VENV, "old", "1.0", {}), {}),
        ({}, {"opt/link": target}),
        ({"opt/link/.wh..wh..opq": b"", **_dist("opt/link", "new", "2.0", {})}, {}),
    )
    result = audit_image(layout)
    assert _envs(result) == [(f"/{VENV}", None, "3.11", [("new", "2.0")])]
    kinds = sorted((c.kind.value, c.name) for c in result.steps[2].changes)
    assert kinds == [("added", "new"), ("removed", "old")]
    third = result.steps[2]
    marker = f"layer {third.layer_digest} (step {third.index}): opaque whiteout"
    assert _why(result) == {
        f"{marker} '/opt/link/.wh..wh..opq'": OPAQUE_WHY.format(real=VENV),
    }
    assert main(["audit", layout, "--no-cache"]) == 1  # incomplete: the gate fails


def test_opaque_link_directory_made_by_the_layer_replaces_the_link(tmp_path: Path) -> None:
    """The same marker in a layer that also has the directory entry ``opt/link/`` (what
    ``rm opt/link && mkdir opt/link`` makes): the directory replaces the link, the venv keeps
    its distribution, and the new one lies where no environment reaches it."""
    result = _audit(
        tmp_path,
        (_dist(VENV, "old", "1.0", {}), {}),
        ({}, {"opt/link": f"/{VENV}"}),
        ({"opt/link/.wh..wh..opq": b"", **_dist("opt/link", "new", "2.0", {})}, {}),
        parents=True,
    )
    assert _envs(result) == [(f"/{VENV}", None, "3.11", [("old", "1.0")])]
    assert _why(result) == {"/opt/link/new-2.0.dist-info": OUTSIDE}


def test_link_loop_is_bounded(tmp_path: Path) -> None:
    """A site-packages link into a loop reaches nothing; the audit ends at once."""
    started = time.monotonic()
    result = _audit(
        tmp_path,
        ({}, {SITE: "/loop/a/pkgs", "loop/a": "/loop/b", "loop/b": "a"}),
        (_dist("opt/pkgs", "foo", "1.0", {}), {}),
    )
    assert time.monotonic() - started < 30
    assert _envs(result) == []
    assert _why(result) == {"/opt/pkgs/foo-1.0.dist-info": OUTSIDE}


def test_metadata_outside_environments(tmp_path: Path) -> None:
    """A stray dist-info is reported; a vendored one inside a package (directly or through
    the link), uv's cache and a source tree's egg-info are not."""
    vendored = "usr/lib/python3/dist-packages/setuptools/_vendor/packaging-24.0.dist-info"
    result = _audit(
        tmp_path,
        ({}, {SITE: "/opt/pkgs"}),
        (
            {
                "opt/stray/lonely-1.0.dist-info/METADATA": _metadata("lonely", "1.0"),
                f"{vendored}/METADATA": _metadata("packaging", "24.0"),
                "opt/pkgs/pip/_vendor/x-1.dist-info/METADATA": _metadata("x", "1"),
                "root/.cache/uv/archive-v0/AbC/six-1.16.0.dist-info/METADATA": _metadata(
                    "six", "1.16.0"
                ),
                "srv/uvcache/archive-v0/Xy/six-1.16.0.dist-info/METADATA": _metadata(
                    "six", "1.16.0"
                ),
                "app/src/demo.egg-info/PKG-INFO": _metadata("demo", "0.1"),
                **_dist("opt/pkgs", "foo", "1.0", {}),
            },
            {},
        ),
    )
    assert _envs(result) == [(f"/{SITE}", "/opt/pkgs", "3.11", [("foo", "1.0")])]
    assert _why(result) == {"/opt/stray/lonely-1.0.dist-info": OUTSIDE}


def test_record_verification_and_collisions_under_the_real_directory(tmp_path: Path) -> None:
    """--verify-records checks files reached through the link (their digests are under the
    real path), and two distributions writing one file with different bytes collide."""
    good = {"foo/__init__.py": b"ok\n"}
    tampered = {**_dist("opt/pkgs", "foo", "1.0", good), "opt/pkgs/foo/__init__.py": b"evil\n"}
    clashing = _dist("opt/pkgs", "bar", "1.0", {"shared/x.py": b"bar\n"})
    clashing.update(_dist("opt/pkgs", "baz", "1.0", {"shared/x.py": b"baz\n"}))

    result = _audit(
        tmp_path / "ok",
        ({}, {SITE: "/opt/pkgs"}),
        (_dist("opt/pkgs", "foo", "1.0", good), {}),
        verify=True,
    )
    digests = dict(result.file_digests)
    assert digests[f"/{SITE}/foo/__init__.py"] == _digest(b"ok\n")
    assert digests["/opt/pkgs/foo/__init__.py"] == _digest(b"ok\n")

    def rules(*layers: Layer, name: str) -> list[tuple[str, str | None]]:
        ref = _layout(tmp_path / name, *layers)
        out = tmp_path / f"{name}.json"
        main(["audit", ref, "--no-cache", "--verify-records", "--format", "json", "-o", str(out)])
        doc = json.loads(out.read_text())
        return sorted((f["rule"], f["package"]) for f in doc["findings"])

    link: Layer = ({}, {SITE: "/opt/pkgs"})
    assert rules(link, (_dist("opt/pkgs", "foo", "1.0", good), {}), name="good") == []
    assert rules(link, (tampered, {}), name="bad") == [("record-mismatch", "foo")]
    # baz's copy of shared/x.py is the one in the image, so bar's RECORD no longer matches
    assert rules(link, (clashing, {}), name="clash") == [
        ("file-collision", "bar"),
        ("record-mismatch", "bar"),
    ]


def test_directory_source_follows_a_site_packages_link(tmp_path: Path) -> None:
    """dir: on a root filesystem whose site-packages is a real symlink finds the packages."""
    root = tmp_path / "root"
    for path, data in _dist("opt/pkgs", "foo", "1.0", FOO).items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    (root / SITE).parent.mkdir(parents=True)
    os.symlink("../../../../opt/pkgs", root / SITE)
    result = audit_directory(str(root))
    assert _envs(result) == [(f"/{SITE}", "/opt/pkgs", "3.11", [("foo", "1.0")])]


@pytest.mark.parametrize(
    ("path", "links", "want"),
    [
        ("/a/b/c", {}, "/a/b/c"),
        ("/a/b/c", {"/a/b": "/x"}, "/x/c"),
        ("/a/b/c", {"/a/b": "../x"}, "/x/c"),
        ("/a/b/c", {"/a/b": "../../../../x"}, "/x/c"),  # clamped at the root
        ("/a/b/c", {"/a/b": "/x", "/x": "y/z"}, "/y/z/c"),
        ("/a/../b", {}, "/b"),
        ("/l/..", {"/l": "/p/q"}, "/p"),  # '..' after a link is taken on its target
        ("/a/b/c", {"/a/b": "/a/b"}, None),  # a loop
        ("/a/b/c", {"/a/b": "/a/c", "/a/c": "/a/b"}, None),
    ],
)
def test_resolve(path: str, links: dict[str, str], want: str | None) -> None:
    """The one resolver: links followed inside the root, loops bounded."""
    assert resolve(path, links) == want


def test_resolve_parent_keeps_the_last_component() -> None:
    """A member's own name is not followed: it replaces what is there."""
    assert resolve_parent("/a/l", {"/a/l": "/x", "/a": "/b"}) == "/b/l"
    assert resolve_parent("/top", {"/top": "/x"}) == "/top"


def test_json_says_the_real_directory_and_validates(tmp_path: Path) -> None:
    """The JSON report names the environment by the link and adds real_path; it stays valid
    against the audit schema, and an environment without a link has no real_path."""
    ref = _layout(
        tmp_path,
        ({}, {SITE: "/opt/pkgs"}),
        (
            {
                **_dist("opt/pkgs", "foo", "1.0", FOO),
                **_dist("opt/venv/lib/python3.11/site-packages", "bar", "2.0", {}),
            },
            {},
        ),
    )
    out = tmp_path / "audit.json"
    assert main(["audit", ref, "--no-cache", "--format", "json", "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    schema = Path(__file__).parents[2] / "src/pinguard/schemas/audit-v1.schema.json"
    jsonschema.validate(doc, json.loads(schema.read_text()))
    got = [(e["path"], e.get("real_path")) for e in doc["environments"]]
    assert got == [("/opt/venv/lib/python3.11/site-packages", None), (f"/{SITE}", "/opt/pkgs")]
    (pkg,) = doc["environments"][1]["packages"]
    assert pkg["metadata_path"] == f"/{SITE}/foo-1.0.dist-info"


def test_native_library_under_the_real_directory_is_owned_by_its_wheel(tmp_path: Path) -> None:
    """A wheel's shared objects in /opt/pkgs (real gcc builds; an extension module outside
    any lib* directory included) are owned by the wheel through the link, and the JSON
    lists them with that environment."""
    with tempfile.TemporaryDirectory() as tmp:
        so = build_so(Path(tmp) / "libfoo.so", soname="libfoo.so").read_bytes()
    ref = _layout(
        tmp_path,
        ({}, {SITE: "/opt/pkgs"}),
        (
            _dist(
                "opt/pkgs",
                "foo",
                "1.0",
                {"foo/lib/libfoo.so": so, "foo/_ext.cpython-311-x86_64-linux-gnu.so": so},
            ),
            {},
        ),
    )
    out = tmp_path / "audit.json"
    main(["audit", ref, "--no-cache", "--format", "json", "-o", str(out)])
    (env,) = json.loads(out.read_text())["environments"]
    libs = [(x["path"], x["soname"], x["owner"]) for x in env["native_libraries"]]
    owner = {"kind": "wheel", "name": "foo", "version": "1.0", "environment": f"/{SITE}"}
    assert libs == [
        ("/opt/pkgs/foo/_ext.cpython-311-x86_64-linux-gnu.so", "libfoo.so", owner),
        ("/opt/pkgs/foo/lib/libfoo.so", "libfoo.so", owner),
    ]


def test_metadata_hard_linked_from_uv_cache(tmp_path: Path) -> None:
    """uv links the files of its cache into site-packages: the layer holds METADATA once, in
    the cache, and the site-packages copy as a hard link to it (or, with
    ``--link-mode=symlink``, a symlink); the distributions are found, and the cache itself is
    not an environment."""
    cache = "root/.cache/uv/archive-v0/Qx1/six-1.16.0.dist-info"
    info = f"{SITE}/six-1.16.0.dist-info"
    files = {
        f"{cache}/METADATA": _metadata("six", "1.16.0"),
        f"{info}/RECORD": b"six-1.16.0.dist-info/METADATA,,\n",
        "root/.cache/uv/archive-v0/Zz9/attrs-23.1.0.dist-info/METADATA": _metadata(
            "attrs", "23.1.0"
        ),
    }
    # uv --link-mode=symlink
    target = "/root/.cache/uv/archive-v0/Zz9/attrs-23.1.0.dist-info/METADATA"
    links = {f"{SITE}/attrs-23.1.0.dist-info/METADATA": target}
    ref = _layout(tmp_path, (files, links), hardlinks={f"{info}/METADATA": f"{cache}/METADATA"})
    result = audit_image(ref)
    assert _envs(result) == [(f"/{SITE}", None, "3.11", [("attrs", "23.1.0"), ("six", "1.16.0")])]
    assert result.incomplete == ()
