"""The house's shape, read from the code: every import (lazy and TYPE_CHECKING ones included) points down a layer
or stays inside its own module group, there is no import cycle of any length, no function is over 100 lines, a
module over 600 lines says why in its docstring, and no command module is over 300 lines.

The layers, lowest first (docs/architecture.md draws them). A module may import its own layer's modules (without
a cycle) and any lower layer's; ``drivers``, ``history`` and ``present`` are peers that never import each other.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "llmbench"

LAYERS: list[tuple[str, ...]] = [
    ("llmbench.core",),
    ("llmbench.results",),
    ("llmbench.workloads",),
    ("llmbench.spec",),
    ("llmbench.options",),
    ("llmbench.machine",),
    ("llmbench.engines",),
    ("llmbench.backends",),
    ("llmbench.runner",),
    ("llmbench.analysis",),
    ("llmbench.drivers", "llmbench.history", "llmbench.present"),
    ("llmbench.api", "llmbench.serve"),
    ("llmbench.cli",),
    ("llmbench", "llmbench.__main__"),
]


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        out[".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str:
    """The module ``name`` is, or is inside (``llmbench.x.f`` -> ``llmbench.x``)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def imports_of(module: str) -> set[str]:
    """Every llmbench module ``module`` imports anywhere in its text, lazy and TYPE_CHECKING imports included."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {_resolve(a.name) for a in node.names if a.name.startswith("llmbench")}
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(max(node.level - 1, 0)):
                base = base.rpartition(".")[0]
            full = (base + "." + node.module if node.module else base) if node.level else (node.module or "")
            if full == "llmbench" or full.startswith("llmbench."):
                for a in node.names:  # `from llmbench.x import y`: y may be a module itself
                    found.add(_resolve(f"{full}.{a.name}") if f"{full}.{a.name}" in MODULES else _resolve(full))
    found.discard(module)
    found.discard("")
    return found


def layer_of(module: str) -> tuple[int, str]:
    """(layer index, the group the module belongs to)."""
    best: tuple[int, str] | None = None
    for i, groups in enumerate(LAYERS):
        for g in groups:
            if (module == g or module.startswith(g + ".")) and (best is None or len(g) > len(best[1])):
                best = (i, g)
    assert best is not None, f"{module} is in no layer: place it in LAYERS"
    return best


def test_every_import_points_down_a_layer():
    upward = []
    for m in MODULES:
        mine, group = layer_of(m)
        for dep in imports_of(m):
            theirs, their_group = layer_of(dep)
            if theirs > mine or (theirs == mine and their_group != group):
                upward.append(f"{m} -> {dep}")
    assert not upward, "imports that point up or sideways:\n" + "\n".join(sorted(upward))


def test_no_import_cycle_of_any_length():
    graph = {m: imports_of(m) for m in MODULES}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for m in graph:
        if m not in index:
            visit(m)
    assert not cycles, cycles


def test_the_checker_sees_lazy_and_type_checking_imports(tmp_path):
    """The graph must not miss what a function body or a TYPE_CHECKING block imports (that is where cycles hid)."""
    assert "llmbench.workloads.request" in imports_of("llmbench.backends")  # a module-level re-export
    lazy = [m for m in MODULES if any(isinstance(n, ast.FunctionDef) and any(
        isinstance(x, ast.ImportFrom) and (x.module or "").startswith("llmbench") for x in ast.walk(n))
        for n in ast.walk(ast.parse(MODULES[m].read_text(encoding="utf-8"))))]  # fmt: skip
    assert lazy, "no lazy import found: the walk is broken"
    for m in lazy[:5]:
        assert imports_of(m), m


def _functions(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def test_no_function_is_over_100_lines():
    long = []
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        long += [f"{name}.{f.name}: {f.end_lineno - f.lineno + 1}" for f in _functions(tree)
                 if f.end_lineno - f.lineno + 1 > 100]  # fmt: skip
    assert not long


def test_a_module_over_600_lines_says_why():
    unexplained = []
    for name, path in MODULES.items():
        text = path.read_text(encoding="utf-8")
        if text.count("\n") > 600:
            doc = ast.get_docstring(ast.parse(text)) or ""
            if "600" not in doc:  # e.g. "Why one module of 600-odd lines: ..."
                unexplained.append(f"{name}: {text.count(chr(10))} lines")
    assert not unexplained, "say in the module docstring why it is over 600 lines:\n" + "\n".join(unexplained)


def test_command_modules_are_short():
    big = [f"{n}: {p.read_text(encoding='utf-8').count(chr(10))}" for n, p in MODULES.items()
           if n.startswith("llmbench.cli") and p.read_text(encoding="utf-8").count("\n") > 300]  # fmt: skip
    assert not big, big


def test_commands_only_translate():
    """A command parses, calls one core function and renders: its body stays short."""
    bodies = {}
    for n, p in MODULES.items():
        if n.startswith("llmbench.cli"):
            tree = ast.parse(p.read_text(encoding="utf-8"))
            tops = [f for f in _functions(tree) if f.col_offset == 0]
            bodies |= {f"{n}.{f.name}": f.end_lineno - f.body[0].lineno + 1 for f in tops}
    assert bodies and max(bodies.values()) <= 60, {k: v for k, v in bodies.items() if v > 60}
