"""The import graph of ``src/pinguard``: no module imports itself back, through any path, and
no package (``pinguard.<name>``) does either; layers/ never names the catalog above it, nor
imports the sources or the cache; sources/ imports neither, nor anything above; cache/
imports no analyzer and nothing of the audit, policy, report or command line; the cache's
key, entry and backend interface load nothing above ``errors`` and ``fileio`` (a warm audit
reads its entry with them alone); and
nothing outside sources/ imports one of the registry client's modules (only its package).

Every ``import`` statement counts, at module level or inside a function (a lazy import is
still a loop), read with ``ast`` from the source files.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "pinguard"


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _edges(modules: dict[str, Path]) -> dict[str, set[str]]:
    def owner(name: str) -> str:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name

    edges: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [
                    f"{node.module}.{a.name}"
                    if f"{node.module}.{a.name}" in modules
                    else node.module
                    for a in node.names
                ]
            for target in targets:
                if target.startswith("pinguard"):
                    edges[name].add(owner(target))
        edges[name] -= {name, "pinguard"}
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (iterative Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_loop() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_itself_back() -> None:
    assert _cycles(_edges(_modules())) == []


def test_no_package_imports_itself_back() -> None:
    def package(name: str) -> str:
        return ".".join(name.split(".")[:2])

    packages: dict[str, set[str]] = {}
    for name, targets in _edges(_modules()).items():
        packages.setdefault(package(name), set()).update(
            package(t) for t in targets if package(t) != package(name)
        )
    assert _cycles(packages) == []


def test_layers_never_names_the_catalog() -> None:
    """Not by an import, nor by a string handed to ``import_module``."""
    for path in sorted((SRC / "layers").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        strings = [
            node.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
        ]
        named = [s for s in strings if s.startswith("pinguard.catalog")]
        assert named == [], path.name
    edges = _edges(_modules())
    assert not any(
        t.startswith("pinguard.catalog")
        for m, ts in edges.items()
        if m.startswith("pinguard.layers")
        for t in ts
    )


def test_only_sources_opens_the_registry_packages_modules() -> None:
    """Outside ``pinguard.sources``, the registry client is imported from
    ``pinguard.sources.registry`` (its re-exports), never from one of its modules, so the
    modules can be split or renamed without touching their users."""
    private = [
        f"{m} -> {t}"
        for m, ts in sorted(_edges(_modules()).items())
        if not m.startswith("pinguard.sources")
        for t in sorted(ts)
        if t.startswith("pinguard.sources.registry.")
    ]
    assert private == []


def _outside(package: str) -> set[str]:
    """What the modules of ``package`` import from outside it."""
    return {
        t
        for m, ts in _edges(_modules()).items()
        if m == package or m.startswith(package + ".")
        for t in ts
        if not (t == package or t.startswith(package + "."))
    }


def test_layers_imports_nothing_from_sources_nor_the_cache() -> None:
    """layers/ reads a stream it is handed: it knows neither where the stream came from
    (sources/, the registry client) nor where its analysis is kept (cache/)."""
    named = sorted(
        t
        for t in _outside("pinguard.layers")
        if t.startswith(("pinguard.sources", "pinguard.cache"))
    )
    assert named == []


def test_sources_and_the_cache_import_nothing_above_them() -> None:
    """sources/ hands out streams, it never reads them (layers/), keeps them (cache/) or
    analyses them; cache/ keeps what it is handed, knowing no analyzer (the catalog hands
    the layer key its parts) and nothing of the audit, policy, report or command line."""
    above = ("pinguard.audit", "pinguard.policy", "pinguard.report", "pinguard.cli")
    sources = _outside("pinguard.sources")
    assert sorted(t for t in sources if t.startswith(("pinguard.layers", "pinguard.cache"))) == []
    assert sorted(t for t in sources if t.startswith(("pinguard.catalog", *above))) == []
    cache = _outside("pinguard.cache")
    assert sorted(t for t in cache if t.startswith(("pinguard.catalog", *above))) == []


def test_the_cache_ground_imports_nothing_above_fileio() -> None:
    """What a warm audit reads its entry with: importing the key, entry and backend interface
    modules loads no other pinguard module but ``errors`` and ``fileio`` (in a fresh
    interpreter, as the warm audit starts)."""
    names = ("pinguard.cache.key", "pinguard.cache.entry", "pinguard.cache.interface")
    probe = f"import sys, {', '.join(names)}; print(' '.join(sorted(sys.modules)))"
    env = {**os.environ, "PYTHONPATH": str(SRC.parent)}
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    loaded = {m for m in out.stdout.split() if m.startswith("pinguard")}
    assert loaded <= {"pinguard", "pinguard.cache", "pinguard.errors", "pinguard.fileio", *names}
    assert "packaging" not in out.stdout.split()


#: What audit/ may name of the catalog: the package (its re-exports: ``Analyzers``,
#: ``Catalog``, ``StateView``, ``StepFacts``, ...) and the protocol module.
CATALOG_INTERFACE = frozenset({"pinguard.catalog", "pinguard.catalog.interface"})


def test_audit_imports_only_the_catalogs_interface() -> None:
    """No module of audit/ names a concrete analyzer (``catalog.python``, ``catalog.native``,
    ...) or the registry, by an import or by a string handed to ``import_module``: the audit
    runs whatever analyzers the registry lists, through the protocol."""
    named: list[str] = []
    for path in sorted((SRC / "audit").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        named += [
            f"{path.name}: {node.value}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.startswith("pinguard.catalog")
            and node.value not in CATALOG_INTERFACE
        ]
    for module, targets in sorted(_edges(_modules()).items()):
        if module.startswith("pinguard.audit"):
            named += [
                f"{module} -> {t}"
                for t in sorted(targets)
                if t.startswith("pinguard.catalog") and t not in CATALOG_INTERFACE
            ]
    assert named == []


def test_the_audit_rule_sees_a_concrete_analyzer() -> None:
    """The edge finder reports an import from an analyzer's module (the registry's
    ``from pinguard.catalog.python import PythonAnalyzer``) as an edge to that module, not
    to the package, so the rule above could fail."""
    edges = _edges(_modules())
    assert "pinguard.catalog.python" in edges["pinguard.catalog.registry"]
    assert "pinguard.catalog.native.analyzer" in edges["pinguard.catalog.registry"]
