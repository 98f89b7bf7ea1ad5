"""Reasons up front (issue 28): the verdict says why, the summary counts what could not be read.

The root filesystems are real-shaped: ``tests/data/cuda-13.0-dist-info/`` holds three
dist-info directories copied verbatim (licenses left out) from a host whose CUDA 13.0 toolkit
was assembled from NVIDIA's ``nvidia-*`` wheels: ``/usr/local/cuda-13.0/dist-info/`` keeps
each wheel's metadata while its files lie in ``lib/``, ``include/`` and ``bin/`` (the RECORDs
list ``nvidia/cu13/...`` paths; ``direct_url.json`` names the wheel). The Python environment
beside them holds the ``packaging`` distribution's real METADATA, read from this test run's own
environment. Names and versions are checked against ``importlib.metadata`` reading the same
directories (the reference reader), never against values written here by hand.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import shutil
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from pinguard.cli import main
from tests.infra.paths import DATA

CUDA = DATA / "cuda-13.0-dist-info"
ENV = "usr/lib/python3/dist-packages"
STEP_COMMAND = "(directory {root})"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _environment(root: Path) -> None:
    """A Debian-style dist-packages with one real distribution (packaging's METADATA)."""
    dist = importlib.metadata.distribution("packaging")
    meta = root / ENV / f"packaging-{dist.version}.dist-info"
    meta.mkdir(parents=True)
    (meta / "METADATA").write_text(dist.read_text("METADATA") or "", encoding="utf-8")


def _components(where: Path) -> list[Path]:
    """The CUDA fixture's dist-info directories copied into ``where``."""
    out = []
    for src in sorted(CUDA.iterdir()):
        shutil.copytree(src, where / src.name)
        out.append(where / src.name)
    return out


@pytest.fixture
def cuda_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """/usr/local/cuda-13.0 as the toolkit built from wheels lays it out, beside a Python."""
    monkeypatch.chdir(tmp_path)  # no pinguard.toml of the checkout is discovered
    root = tmp_path / "root"
    toolkit = root / "usr/local/cuda-13.0"
    (toolkit / "dist-info").mkdir(parents=True)
    (toolkit / "lib").mkdir()
    (toolkit / "lib64").symlink_to("lib")
    (root / "usr/local/cuda").symlink_to("cuda-13.0")
    _components(toolkit / "dist-info")
    _environment(root)
    return root


@pytest.fixture
def outside_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The same metadata in /opt/wheels, as ``pip install --target /opt/wheels`` leaves it:
    a directory some PYTHONPATH may name, not a record directory: still incomplete."""
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "root"
    (root / "opt/wheels").mkdir(parents=True)
    _components(root / "opt/wheels")
    _environment(root)
    return root


def test_cuda_toolkit_dist_info_is_catalogued_not_incomplete(
    cuda_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The toolkit's dist-info records read: each is a generic python package owned by the
    toolkit's tree, named and versioned as importlib.metadata reads it; nothing is incomplete
    and the verdict passes."""
    code, out, _ = _run(capsys, "audit", f"dir:{cuda_root}", "--no-cache", "-f", "json")
    doc = json.loads(out)
    expected = []
    for meta in sorted((cuda_root / "usr/local/cuda-13.0/dist-info").iterdir()):
        oracle = importlib.metadata.Distribution.at(meta)
        name = canonicalize_name(oracle.metadata["Name"])
        url = json.loads(oracle.read_text("direct_url.json") or "{}")["url"]
        expected.append(
            {
                "kind": "python",
                "name": name,
                "version": oracle.version,
                "location": f"/usr/local/cuda-13.0/dist-info/{meta.name}",
                "owner": "/usr/local/cuda-13.0",
                "properties": {
                    "installer": (oracle.read_text("INSTALLER") or "").strip(),
                    "url": url,
                },
                "purl": f"pkg:pypi/{name}@{oracle.version}",
            }
        )
    assert [p["name"] for p in expected] == [
        "nvidia-cuda-nvcc",
        "nvidia-cuda-runtime",
        "nvidia-nvvm",
    ]
    assert sorted(doc.get("packages", []), key=lambda p: p["location"]) == expected
    assert doc["incomplete"] == []
    assert (code, doc["verdict"]) == (0, "pass")
    # the table says they are there, though it does not list them
    code, out, _ = _run(capsys, "audit", f"dir:{cuda_root}", "--no-cache")
    assert "other packages: 3 python in /usr/local/cuda-13.0" in out
    assert (code, out.splitlines()[-1]) == (0, "verdict: pass")


def test_table_says_why_up_front(outside_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Metadata no environment reaches is still incomplete; the summary counts it before the
    steps and the verdict line names it as the reason, in the words of the issue."""
    code, out, _ = _run(capsys, "audit", f"dir:{outside_root}", "--no-cache")
    lines = out.splitlines()
    count = (
        "could not be read: 3 entries, listed at the end as incomplete "
        "(the verdict fails unless --allow-incomplete)"
    )
    assert count in lines
    first_incomplete = next(i for i, ln in enumerate(lines) if ln.startswith("incomplete: /opt"))
    assert lines.index(count) < lines.index("steps that changed something:") < first_incomplete
    assert (code, lines[-1]) == (1, "verdict: fail (3 entries could not be read: incomplete)")

    code, out, _ = _run(capsys, "audit", f"dir:{outside_root}", "--no-cache", "--allow-incomplete")
    assert "(allowed by --allow-incomplete)" in out
    assert (code, out.splitlines()[-1]) == (
        0,
        "verdict: pass (3 entries could not be read: incomplete, allowed by --allow-incomplete)",
    )


def test_markdown_and_html_say_why(outside_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The Markdown heading and the HTML verdict carry the same reason."""
    code, out, _ = _run(capsys, "audit", f"dir:{outside_root}", "--no-cache", "-f", "markdown")
    assert code == 1
    assert out.splitlines()[0] == (
        f"### :x: pinguard: **fail** for `dir:{outside_root}` "
        "(3 entries could not be read: incomplete)"
    )
    code, out, _ = _run(capsys, "audit", f"dir:{outside_root}", "--no-cache", "-f", "html")
    found = re.search(r'<span id="verdict-reasons" class="verdict-reasons">([^<]*)</span>', out)
    assert found is not None
    assert (code, found.group(1)) == (1, "3 entries could not be read: incomplete")


def _unmet_root(root: Path, bar: str) -> Path:
    """foo 1.0 requires bar>=2 in a dist-packages holding bar ``bar``: an unmet requirement."""
    env = root / ENV
    for name, version, requires in (("foo", "1.0", "bar>=2"), ("bar", bar, "")):
        meta = env / f"{name}-{version}.dist-info"
        meta.mkdir(parents=True)
        text = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        (meta / "METADATA").write_text(text + (f"Requires-Dist: {requires}\n" if requires else ""))
    return root


def test_findings_reason_and_the_step_caption_above_its_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A failing finding is the verdict's reason; a step table's environment line comes
    between its title and its top border, not under the table."""
    monkeypatch.chdir(tmp_path)
    root = _unmet_root(tmp_path / "root", "1.0")
    code, out, _ = _run(capsys, "audit", f"dir:{root}", "--no-cache")
    lines = out.splitlines()
    assert (code, lines[-1]) == (1, "verdict: fail (findings at error or above: 1 error)")
    title = next(i for i, ln in enumerate(lines) if ln.startswith("step 1  (directory "))
    assert lines[title + 1].rstrip() == "/usr/lib/python3/dist-packages"
    assert lines[title + 2].startswith("┏")
    bottom = next(i for i in range(title, len(lines)) if lines[i].startswith("└"))
    assert not lines[bottom + 1].startswith("/usr/lib/python3/dist-packages")


def test_compare_of_directories_says_what_each_side_lacks_and_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """compare dir:A dir:B: no empty "A:" line, and the verdict gives its reason."""
    monkeypatch.chdir(tmp_path)
    a = _unmet_root(tmp_path / "a", "2.0")
    b = _unmet_root(tmp_path / "b", "1.0")
    code, out, _ = _run(capsys, "compare", f"dir:{a}", f"dir:{b}", "--no-cache")
    lines = out.splitlines()
    assert lines[1:3] == [
        "  A: no manifest digest or platform: read from a directory",
        "  B: no manifest digest or platform: read from a directory",
    ]
    assert (code, lines[-1]) == (1, "verdict: fail (findings at error or above: 2 errors)")
