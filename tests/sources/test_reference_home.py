"""The registry transport's ``docker://`` has one home, ``sources/reference.py``: no other
module of ``src/pinguard`` writes a reference with it (``f"docker://{name}"``), tests a
reference for it (``.startswith("docker://")``) or strips it, and the helpers there round-trip.
Messages and help texts that show the syntax to a person (``docker://HOST/REPO:TAG``) may."""

from __future__ import annotations

import ast
from pathlib import Path

from pinguard.sources import (
    image_name,
    is_registry_reference,
    registry_reference,
    resolve_reference,
    split_transport,
    strip_registry_prefix,
)

SRC = Path(__file__).resolve().parents[2] / "src" / "pinguard"
HOME = SRC / "sources" / "reference.py"


def _prefix_uses(tree: ast.AST) -> list[int]:
    """Lines where ``docker://`` is the prefix itself: the bare constant, or the first part of
    an f-string."""
    lines = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and node.value == "docker://") or (
            isinstance(node, ast.JoinedStr)
            and node.values
            and isinstance(first := node.values[0], ast.Constant)
            and first.value == "docker://"
        ):
            lines.append(node.lineno)
    return sorted(set(lines))


def test_only_reference_py_reads_or_writes_the_prefix() -> None:
    found = {
        str(path.relative_to(SRC)): lines
        for path in sorted(SRC.rglob("*.py"))
        if path != HOME and (lines := _prefix_uses(ast.parse(path.read_text(encoding="utf-8"))))
    }
    assert found == {}
    assert _prefix_uses(ast.parse(HOME.read_text(encoding="utf-8")))  # it is there


def test_the_finder_sees_both_forms() -> None:
    tree = ast.parse('a = "docker://"\nb = f"docker://{a}"\nc = "docker://HOST/REPO:TAG"\n')
    assert _prefix_uses(tree) == [1, 2]


def test_the_registry_prefix_round_trips() -> None:
    name = "localhost:5000/team/app@sha256:" + "a" * 64
    reference = registry_reference(name)
    assert reference == "docker://" + name
    assert is_registry_reference(reference)
    assert not is_registry_reference(name)
    assert strip_registry_prefix(reference) == name == strip_registry_prefix(name)
    assert split_transport(reference) == ("docker", name)
    assert resolve_reference(reference).canonical == reference
    assert resolve_reference(reference).registry_name == name
    assert image_name(reference) == "localhost:5000/team/app"
