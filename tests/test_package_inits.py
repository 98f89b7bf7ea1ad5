"""Every package's ``__init__.py`` under ``src/pinguard`` re-exports, and holds no logic.

Allowed: the docstring, imports (also under ``if TYPE_CHECKING:``), ``__all__``, and PEP 562
lazy re-exports: a module ``__getattr__`` and the constant table of where each name lives
(``policy/``). Anything else (a function, a class, a computed value) belongs in a module of
the package, where the architecture map names it.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "pinguard"


def _constant_data(node: ast.expr) -> bool:
    """A literal, or literals joined by ``**`` and ``dict.fromkeys`` (no other call)."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and not (
            isinstance(sub.func, ast.Attribute)
            and sub.func.attr == "fromkeys"
            and isinstance(sub.func.value, ast.Name)
            and sub.func.value.id == "dict"
        ):
            return False
        if isinstance(sub, (ast.Lambda, ast.NamedExpr, ast.comprehension)):
            return False
    return True


def _logic(tree: ast.Module) -> list[str]:
    """The statements of ``tree`` that are more than re-exports, as ``KIND:LINE``."""
    out: list[str] = []
    for index, node in enumerate(tree.body):
        if index == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Name)
            and node.test.id == "TYPE_CHECKING"
            and not node.orelse
            and all(isinstance(n, (ast.Import, ast.ImportFrom)) for n in node.body)
        ):
            continue
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            if names == ["__all__"] or (len(names) == len(targets) and _constant_data(node.value)):
                continue
        if isinstance(node, ast.FunctionDef) and node.name in ("__getattr__", "__dir__"):
            continue
        out.append(f"{type(node).__name__}:{node.lineno}")
    return out


def test_every_package_init_only_re_exports() -> None:
    found = {
        str(path.relative_to(SRC)): logic
        for path in sorted(SRC.rglob("__init__.py"))
        if (logic := _logic(ast.parse(path.read_text(encoding="utf-8"))))
    }
    assert found == {}


def test_the_checker_sees_logic() -> None:
    tree = ast.parse(
        '"""Doc."""\nimport os\n__all__ = ["x"]\nX = {"a": 1}\n'
        "def f():\n    pass\nY = os.getcwd()\nclass C:\n    pass\n"
    )
    assert _logic(tree) == ["FunctionDef:5", "Assign:7", "ClassDef:8"]
