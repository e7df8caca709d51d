"""The package's import graph has no cycle, counting every import statement, also those inside
functions (a deferred import hides a cycle from Python, not from a reader): each module can be
read knowing only what it imports."""

from __future__ import annotations

import ast
from pathlib import Path

import gradcode

SRC = Path(gradcode.__file__).resolve().parent.parent


def _modules() -> dict[str, Path]:
    out = {}
    for path in (SRC / "gradcode").rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The gradcode modules ``name`` imports (``from a import b`` counts ``a`` and, if it is a
    module, ``a.b``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                package = package[: len(package) - node.level + 1]
                base = ".".join(package + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    return {m for m in found if m in modules and m != name}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on:
                    low[v] = min(low[v], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_no_import_cycle_in_the_package():
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert len(graph) > 50 and graph["gradcode.sim.simulator"]  # the walk found the package
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_cycles():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_every_error_class_is_a_gradcode_error():
    """``except GradcodeError`` catches whatever gradcode raises of its own (warnings aside)."""
    import importlib
    import inspect

    from gradcode.errors import GradcodeError, StopTraining

    loose = []
    for name in _modules():
        if name.endswith((".engine", ".cluster", ".watchdog")):  # import ray (only warnings there); a script
            continue
        for obj in vars(importlib.import_module(name)).values():
            if (inspect.isclass(obj) and issubclass(obj, Exception) and not issubclass(obj, Warning)
                    and obj.__module__.startswith("gradcode") and not issubclass(obj, GradcodeError)
                    and obj is not StopTraining):  # raised by the user's callback to stop a run, not an error
                loose.append(f"{obj.__module__}.{obj.__qualname__}")
    assert loose == []


#: compiled kernels whose one loop plays a whole run (a numba function cannot be split into
#: calls without losing the inlining the speed relies on)
LONG_KERNELS = {("schemes/sgc/rounds.py", "srsgc_rounds"), ("schemes/sgc/rounds.py", "msgc_rounds")}


def test_functions_classes_and_the_code_contract_read_in_one_sitting():
    """An AST scan of the package: no function over 80 lines but the compiled kernels, no class
    with more than 40 methods of its own, and the code contract (``codes/base.py``) under 500
    lines, its solving and checks in modules of their own."""
    long_functions, big_classes = [], []
    for path in sorted((SRC / "gradcode").rglob("*.py")):
        where = path.relative_to(SRC / "gradcode").as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if node.end_lineno - node.lineno + 1 > 80 and (where, node.name) not in LONG_KERNELS:
                    long_functions.append(f"{where}:{node.lineno} {node.name}")
            elif isinstance(node, ast.ClassDef):
                methods = sum(isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef)) for b in node.body)
                if methods > 40:
                    big_classes.append(f"{where}:{node.lineno} {node.name} ({methods} methods)")
    assert long_functions == [] and big_classes == []
    assert len((SRC / "gradcode" / "codes" / "base.py").read_text().splitlines()) < 500
