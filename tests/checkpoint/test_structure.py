"""The checkpoint package's structure (issue 14): one module per level, a static table, no import circle,
small modules and functions."""

from __future__ import annotations

import ast
from pathlib import Path

from ftkit.checkpoint.levels import LEVELS, recovery_chain

from ..conftest import REPO

PKG = REPO / "src" / "ftkit" / "checkpoint"


def _module_name(path: Path) -> str:
    rel = path.relative_to(REPO / "src").with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """ftkit modules imported by ``path`` anywhere (module level or inside functions)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("ftkit")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.startswith("ftkit"):
                found.add(mod)
                found |= {f"{mod}.{a.name}" for a in node.names}
    return found


def _graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PKG.rglob("*.py")}
    return {m: {i for i in _imports(p) if i in files and i != m} for m, p in files.items()}


def test_no_import_circle_in_the_checkpoint_package():
    graph = _graph()
    state: dict[str, int] = {}

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph[m]):
            # A package importing its own submodules (``levels/__init__`` building the table) is not a circle.
            if m.startswith(n + ".") or n.startswith(m + "."):
                continue
            assert state.get(n) != 1, "import circle: " + " -> ".join([*stack, m, n])
            if n not in state:
                visit(n, [*stack, m])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])


def test_contract_imports_no_level_and_levels_import_no_executor():
    graph = _graph()
    assert not any(i.startswith("ftkit.checkpoint.levels") for i in graph["ftkit.checkpoint.contract"])
    executors = {"ftkit.checkpoint.post", "ftkit.checkpoint.head", "ftkit.checkpoint.offload",
                 "ftkit.checkpoint.pipeline", "ftkit.checkpoint.recovery", "ftkit.checkpoint.checkpointer"}
    for m, deps in graph.items():
        if m.startswith("ftkit.checkpoint.levels"):
            assert not deps & executors, f"{m} imports {deps & executors}"
    for level in ("local", "partner", "encoded", "pfs"):
        others = {f"ftkit.checkpoint.levels.{o}" for o in ("local", "partner", "encoded", "pfs")
                  if o != level}
        assert not graph[f"ftkit.checkpoint.levels.{level}"] & others, f"level {level} imports another level"


def test_the_level_table_is_static_and_complete():
    assert sorted(LEVELS) == [1, 2, 3, 4]
    assert [LEVELS[n].name for n in (1, 2, 3, 4)] == ["local", "partner", "encoded", "pfs"]
    assert LEVELS[1].post is None and all(LEVELS[n].post is not None for n in (2, 3, 4))
    assert [(type(s).__name__, s.level) for s in recovery_chain()] == [
        ("LocalStep", 1), ("PartnerStep", 2), ("EncodedStep", 3), ("DcpStep", 4), ("PFSStep", 4)]
    for path in PKG.rglob("*.py"):
        text = path.read_text()
        assert "POST_STEPS" not in text and "install_recovery_steps" not in text, path


def _code_lines(fn: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]) -> int:
    doc: set[int] = set()
    first = fn.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value,
                                                                                            str):
        doc = set(range(first.lineno, first.end_lineno + 1))
    return sum(1 for i in range(fn.lineno, fn.end_lineno + 1)
               if i not in doc and lines[i - 1].strip() and not lines[i - 1].strip().startswith("#"))


def test_modules_and_functions_are_small():
    for path in PKG.rglob("*.py"):
        text = path.read_text()
        lines = text.splitlines()
        assert len(lines) <= 450, f"{path}: {len(lines)} lines"
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node) or ""
                assert _code_lines(node, lines) <= 80 or "longer" in doc, f"{path}: {node.name}"
