"""The package's shape stays as ARCHITECTURE.md describes it: layers import downwards only (between top-level
modules, and between the parts of ``ftkit.linalg`` and ``ftkit.storage``), no import circle, no module name
used in two packages, small modules and functions.

Imports are read with :mod:`ast` (nothing is imported), including imports inside functions (a late import
hides a circle, it does not remove it) and ``if TYPE_CHECKING:`` blocks (a type-only import is a real
coupling). Only ``checkpointer.py`` assigns attributes of a Checkpointer: the rest of the package takes and
returns sessions (``checkpoint/session.py``).
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "ftkit"

#: Layer of each top-level module or package of ``ftkit``: a module may import only from a lower layer or
#: from its own package, or from another module of its own layer, except the pairs in ``APART``.
LAYERS: dict[str, int] = {
    "errors": 0, "_wait": 0, "_paths": 0, "_jobproc": 0, "_jobwatch": 0, "_watchdog": 0, "jobstatus": 0,
    "_jobverdict": 0, "_ranksite": 0, "_heartbeat": 0, "eventlog": 0, "_shm_segments": 0, "_shm_reaper": 0,
    "_pipewatch": 0,
    "codec": 1, "config": 1, "config_fti": 1, "config_notes": 1, "topology": 1, "launch": 1, "inject": 1,
    "launchers": 1, "mpienv": 1, "walltime": 1,
    "uncaught": 1,
    "storage": 2, "models": 2,
    "failure": 3,
    "checkpoint": 4, "linalg": 4,
    "cli": 5, "relaunch": 5, "__main__": 5, "__init__": 5,
}

#: Packages of one layer that must not import each other.
APART = {("checkpoint", "linalg"), ("linalg", "checkpoint")}

#: Layer of each part of ``ftkit.linalg`` (its modules and sub-packages), the same rule one level down: the
#: distributed matrix, then the plain PBLAS and their engines, the checksum algebra, the process-failure
#: routines, the ABFT routines (whose ``protect_inputs=`` path runs a process-failure one), the Cholesky
#: solver; above the package, the kernels' warm-up that calls its public routines (``python -m
#: ftkit.linalg._warm``).
LINALG_LAYERS: dict[str, int] = {
    "grid": 0, "descriptor": 0, "matrix": 0, "_blas": 0, "_grid_failure": 0,
    "pblas": 1,
    "checksums": 2,
    "resilient": 3,
    "abft": 4,
    "cholesky": 5,
    "__init__": 6,
    "_warm": 7,
}

#: Layer of each part of ``ftkit.storage`` (its sub-packages and top modules): the file-system helpers and
#: the manifest, then the checkpoint file's format, the readers and stores built on it, where a level's files
#: live, the group codes that protect them, the level table naming them, the locate-and-rebuild engine and
#: the offline tools on it, export.
STORAGE_LAYERS: dict[str, int] = {
    "_fsutil": 0, "_writeback": 0, "_stream": 0, "_progress": 0, "manifest": 0, "halt": 0, "runactivity": 0,
    "_dirsync": 0, "_jsonslots": 0, "_bgsync": 0, "_direct": 0, "_recycle": 0,
    "format": 1,
    "pending": 2, "inputs": 2, "_export_out": 2,
    "placement": 3,
    "groupcode": 4,
    "levels": 5,
    "repair": 6,
    "export": 7,
    "__init__": 8,
}

#: Module file names that may repeat across packages: a package's own ``__init__``, and private kernels owned
#: by two packages that never import each other.
REPEATABLE_NAMES = {"__init__.py", "_kernels.py"}

MAX_MODULE_LINES = 450
MAX_FUNCTION_CODE_LINES = 80
#: A function may be longer when its docstring says why, in a paragraph starting with this word.
LONG_FUNCTION_MARK = "Length:"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def _import_nodes(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of ``tree``: at module level, in functions, under ``if TYPE_CHECKING:``."""
    return [node for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)]


def import_graph() -> dict[str, set[str]]:
    """Return, for each ftkit module, the ftkit modules it imports (type-only imports included)."""
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        targets: set[str] = set()
        for node in _import_nodes(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names if a.name in mods)
                continue
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                candidate = f"{module}.{alias.name}"
                if candidate in mods:
                    targets.add(candidate)
                elif module in mods:
                    targets.add(module)
        graph[name] = {t for t in targets if t != name}
    return graph


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def strongconnect(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    return found


def test_no_import_circle():
    graph = import_graph()  # type-only imports count: they couple the modules as much
    # A package's __init__ re-exports its submodules; a submodule importing its own package's __init__ is
    # what makes such a circle, and is reported like any other.
    circles = _cycles(graph)
    assert circles == [], f"import circles (a late import does not break one): {circles}"


def test_every_top_level_module_has_a_layer():
    unknown = sorted({_top(m) for m in _modules()} - set(LAYERS))
    assert unknown == [], f"add these top-level modules to LAYERS in {Path(__file__).name}: {unknown}"


def test_imports_point_down_the_layers():
    upward = []
    for module, targets in import_graph().items():
        src = _top(module)
        for target in targets:
            dst = _top(target)
            if src == dst or src not in LAYERS or dst not in LAYERS:
                continue
            if LAYERS[dst] > LAYERS[src] or (src, dst) in APART:
                upward.append(f"{module} -> {target}")
    assert sorted(upward) == [], f"imports that point up (or between checkpoint and linalg): {sorted(upward)}"


def _part(module: str, package: str) -> str | None:
    parts = module.split(".")
    if parts[:2] != ["ftkit", package]:
        return None
    return parts[2] if len(parts) > 2 else "__init__"


def _linalg_part(module: str) -> str | None:
    return _part(module, "linalg")


def test_linalg_parts_have_a_layer():
    unknown = sorted({p for m in _modules() if (p := _linalg_part(m))} - set(LINALG_LAYERS))
    assert unknown == [], f"add these ftkit.linalg parts to LINALG_LAYERS in {Path(__file__).name}: {unknown}"


def test_linalg_imports_point_down_its_parts():
    upward = []
    for module, targets in import_graph().items():
        src = _linalg_part(module)
        for target in targets:
            dst = _linalg_part(target)
            if src is None or dst is None or src == dst:
                continue
            if LINALG_LAYERS[dst] > LINALG_LAYERS[src]:
                upward.append(f"{module} -> {target}")
    assert sorted(upward) == [], f"ftkit.linalg imports that point up its parts: {sorted(upward)}"


def test_storage_parts_have_a_layer():
    unknown = sorted({p for m in _modules() if (p := _part(m, "storage"))} - set(STORAGE_LAYERS))
    assert unknown == [], f"add these ftkit.storage parts to STORAGE_LAYERS in {Path(__file__).name}: " \
                          f"{unknown}"


def test_storage_imports_point_down_its_parts():
    upward = []
    for module, targets in import_graph().items():
        src = _part(module, "storage")
        for target in targets:
            dst = _part(target, "storage")
            if src is None or dst is None or src == dst:
                continue
            if STORAGE_LAYERS[dst] > STORAGE_LAYERS[src]:
                upward.append(f"{module} -> {target}")
    assert sorted(upward) == [], f"ftkit.storage imports that point up its parts: {sorted(upward)}"


def test_module_names_do_not_repeat_across_packages():
    where: dict[str, list[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        where.setdefault(path.name, []).append(str(path.parent.relative_to(SRC.parent)))
    repeated = {name: dirs for name, dirs in where.items() if len(dirs) > 1 and name not in REPEATABLE_NAMES}
    assert repeated == {}, f"module names used in several packages (name them by what they hold): {repeated}"


#: The group operations that decide what an L2/L3 group lost and rebuild it, and the one module outside their
#: own package (``storage/groupcode/``) that calls them: the engine every rebuild goes through.
_GROUP_REBUILDS = {"assess_partner", "rebuild_partner", "assess_group", "rebuild_group",
                   "assess_partner_files", "rebuild_partner_files",
                   "assess_group_files", "rebuild_group_files"}
_REBUILD_ENGINE = "storage/repair/rebuild.py"


def test_group_rebuilds_go_through_one_engine():
    callers = set()
    for path in SRC.rglob("*.py"):
        rel = str(path.relative_to(SRC))
        if rel.startswith("storage/groupcode/") or rel == _REBUILD_ENGINE:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
                if name in _GROUP_REBUILDS:
                    callers.add(f"{rel}: {name}")
    assert sorted(callers) == [], f"group rebuilds outside {_REBUILD_ENGINE} (call its assess/rebuild): " \
                                  f"{sorted(callers)}"


def test_modules_are_small():
    big = {name: n for name, path in _modules().items()
           if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert big == {}, f"modules over {MAX_MODULE_LINES} lines, split them along their seams: {big}"


def _code_lines(node: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]) -> int:
    body = node.body
    skip: set[int] = set()
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        skip.update(range(body[0].lineno, (body[0].end_lineno or body[0].lineno) + 1))
    count = 0
    for lineno in range(node.lineno, (node.end_lineno or node.lineno) + 1):
        text = lines[lineno - 1].strip()
        if lineno in skip or not text or text.startswith("#"):
            continue
        count += 1
    return count


def test_functions_are_short_or_say_why():
    long = []
    for name, path in _modules().items():
        text = path.read_text()
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            n = _code_lines(node, lines)
            if n > MAX_FUNCTION_CODE_LINES and LONG_FUNCTION_MARK not in (ast.get_docstring(node) or ""):
                long.append(f"{name}.{node.name}: {n} lines")
    assert long == [], (f"functions over {MAX_FUNCTION_CODE_LINES} lines of code: cut them into phases, or "
                        f"say why in a docstring paragraph starting with {LONG_FUNCTION_MARK!r}: {long}")


#: The only module that may assign an attribute of a Checkpointer (``ckpt.x = ...``, ``self.x = ...`` in it).
CHECKPOINTER_MODULE = "ftkit.checkpoint.checkpointer"
#: Names that hold a Checkpointer outside its own module (parameters, locals, attributes).
CHECKPOINTER_NAMES = ("ckpt", "checkpointer", "_ckpt")


def _checkpointer_classes() -> set[str]:
    """``Checkpointer`` and the classes it is made of (its bases: their ``self`` is a Checkpointer)."""
    tree = ast.parse((SRC / "checkpoint" / "checkpointer.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "Checkpointer":
            return {"Checkpointer"} | {b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "")
                                       for b in node.bases}
    raise AssertionError("checkpointer.py defines no class Checkpointer")


def _holds_checkpointer(target: ast.expr, self_is_ckpt: bool) -> bool:
    """Whether ``target`` is ``<a Checkpointer>.attr`` (``ckpt.x``, ``self._ckpt.x``, ``self.x`` in a part of
    the Checkpointer)."""
    if not isinstance(target, ast.Attribute):
        return False
    holder = target.value
    if isinstance(holder, ast.Name):
        return holder.id in CHECKPOINTER_NAMES or (self_is_ckpt and holder.id == "self")
    return isinstance(holder, ast.Attribute) and holder.attr in CHECKPOINTER_NAMES


def checkpointer_assignments(tree: ast.AST, parts: set[str]) -> list[str]:
    """Where ``tree`` assigns an attribute of a Checkpointer (``line: target``); ``parts``: the classes whose
    ``self`` is one (the Checkpointer and its mixins)."""
    found: list[str] = []

    def visit(node: ast.AST, self_is_ckpt: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inside = child.name in parts if isinstance(child, ast.ClassDef) else self_is_ckpt
            if isinstance(child, ast.Assign | ast.AugAssign | ast.AnnAssign):
                targets = child.targets if isinstance(child, ast.Assign) else [child.target]
                flat = [t for x in targets for t in (x.elts if isinstance(x, ast.Tuple | ast.List) else [x])]
                found.extend(f"{child.lineno}: {ast.unparse(t)}" for t in flat
                             if _holds_checkpointer(t, self_is_ckpt))
            is_setattr = isinstance(child, ast.Call) and isinstance(child.func, ast.Name) \
                and child.func.id == "setattr" and bool(child.args)
            if is_setattr and _holds_checkpointer(ast.Attribute(value=child.args[0], attr="?"), self_is_ckpt):
                found.append(f"{child.lineno}: setattr({ast.unparse(child.args[0])}, ...)")
            visit(child, inside)

    visit(tree, False)
    return found


def test_only_the_checkpointer_assigns_its_attributes():
    # The run's state has one owner: other modules take and return sessions (checkpoint/session.py).
    parts = _checkpointer_classes()
    offenders = {name: hits for name, path in _modules().items() if name != CHECKPOINTER_MODULE
                 and (hits := checkpointer_assignments(ast.parse(path.read_text()), parts))}
    assert offenders == {}, ("modules that assign a Checkpointer's attributes (return a session instead): "
                             f"{offenders}")


def test_the_online_package_does_not_know_the_checkpointer():
    # online recovery takes and returns sessions; it reaches the Checkpointer only through online.host.Host.
    graph = import_graph()
    above = {CHECKPOINTER_MODULE, "ftkit.checkpoint.opening", "ftkit.checkpoint"}
    reach = sorted(f"{m} -> {t}" for m, targets in graph.items() if m.startswith("ftkit.checkpoint.online")
                   for t in targets if t in above)
    assert reach == [], f"the online package imports the Checkpointer: {reach}"


def test_the_assignment_rule_sees_an_assignment():
    # The checker itself must work: ckpt.x, a tuple target, setattr and self in a mixin are found.
    tree = ast.parse("def f(ckpt):\n    ckpt._a = 1\n    ckpt.b, y = 2, 3\n    setattr(ckpt, 'c', 4)\n"
                     "    ckpt.d.e = 5\n    other.f = 6\n"
                     "class Mixin:\n    def g(self):\n        self.h = 7\n"
                     "class Other:\n    def g(self):\n        self.h = 8\n")
    assert checkpointer_assignments(tree, {"Mixin"}) == [
        "2: ckpt._a", "3: ckpt.b", "4: setattr(ckpt, ...)", "9: self.h"]


def test_the_analysis_sees_a_circle():
    # The checker itself must work: a two-module circle is found, a chain is not.
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
