"""The house's rules, read from the source: no import circle anywhere in kvconform (function bodies
included), imports that point down the layers of kvconform.conformance (conformance/README.md, "The
layers"), and no module past ~400 lines unless it is a table of data."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: the import packages and their folders (setup.py ROOTS)
PACKAGES = {"kvconform.reference": "reference", "kvconform.backends": "backends",
            "kvconform.adapters": "adapters", "kvconform.conformance": "conformance", "kvconform": "kvconform"}
#: rank of each layer, lowest first: a module may import its own layer and any layer of a LOWER rank; two
#: layers of one rank are independent rooms and may not import each other
RANKS = {
    "kvconform.version": 0,
    "kvconform.reference": 1,
    "kvconform.adapters": 2,
    "kvconform.backends": 3,
    "kvconform.conformance.dimensions": 3,   # data: the sizes of the ops' arguments (mutants and strategies read it)
    "kvconform.conformance.engine": 4,
    "kvconform.conformance.mutants": 4,
    "kvconform.conformance.permissions": 4,
    "kvconform.conformance.strategies": 5,
    "kvconform.conformance.harness": 6,
    "kvconform.conformance.run": 6,
    "kvconform.conformance.suite": 7,
    "kvconform.conformance.models_suite": 7,
    "kvconform.conformance.scale_suite": 7,
    "kvconform.conformance.report": 7,
    "kvconform.conformance.cli": 8,
    "kvconform.conformance.plugin": 8,
    "kvconform.conformance": 8,
    "kvconform": 9,     # the package root: a facade over every layer (kvconform/__init__.py)
}
MAX_LINES = 400
#: modules allowed past MAX_LINES, each with the reason (a table of data, or a suite module mirroring
#: one spec file whose tests are one table of clauses)
LONG_MODULES: dict[str, str] = {}


def modules() -> dict[str, Path]:
    found = {}
    for package, folder in PACKAGES.items():
        base = ROOT / folder
        for path in base.rglob("*.py"):
            if "__pycache__" in path.parts:
                continue
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([package, *parts])] = path
    return found


MODULES = modules()


def _absolute(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module.split(".")
    if MODULES[module].name != "__init__.py":
        package = package[:-1]
    package = package[:len(package) - node.level + 1]
    return ".".join(package + ([node.module] if node.module else []))


def _known(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str) -> dict[str, int]:
    """{imported kvconform module: line} of every import statement in `module`, at any depth (function
    bodies included) and `importlib.import_module("...")` with a literal name."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    out: dict[str, int] = {}
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, node)
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            names = [node.args[0].value]
        for name in names:
            target = _known(name) if name.startswith("kvconform") else None
            if target and target != module:
                out.setdefault(target, node.lineno)
    return out


GRAPH = {m: imports_of(m) for m in MODULES}


def layer_of(module: str) -> str:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in RANKS:
            return ".".join(parts[:n])
    raise AssertionError(f"{module} is in no layer of RANKS")


def cycles(graph: dict[str, dict]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each as a closed path."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
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
                found.append(sorted(comp))
    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_import_circle():
    found = cycles(GRAPH)
    assert not found, "import circles (each a set of modules that import each other, function bodies " \
        "included):\n" + "\n".join(" <-> ".join(c) for c in found)


def test_imports_point_down_the_layers():
    wrong = []
    for module, targets in GRAPH.items():
        mine = layer_of(module)
        for target, line in targets.items():
            theirs = layer_of(target)
            if theirs != mine and RANKS[theirs] >= RANKS[mine]:
                wrong.append(f"{MODULES[module].relative_to(ROOT)}:{line}: {module} ({mine}, rank {RANKS[mine]}) "
                             f"imports {target} ({theirs}, rank {RANKS[theirs]})")
    assert not wrong, "imports that point up or sideways:\n" + "\n".join(wrong)


def test_modules_have_one_job():
    long = {str(p.relative_to(ROOT)): n for p in MODULES.values()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    unexplained = {p: n for p, n in long.items() if p not in LONG_MODULES}
    assert not unexplained, f"modules over {MAX_LINES} lines (split them, or list a table of data in " \
        f"LONG_MODULES with the reason): {unexplained}"


def test_the_checks_can_fail():
    """The circle and layer checks see what they must: a made-up circle is found and named."""
    assert cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == [["a", "b", "c"]]
    assert layer_of("kvconform.conformance.engine.worker") == "kvconform.conformance.engine"
    assert "kvconform.conformance.engine.case" in GRAPH["kvconform.conformance.harness.core"]


def test_old_module_paths_still_import_with_a_deprecation_warning():
    """A module that moved into a layer keeps its old path (kvconform.conformance.MOVED): the same module
    object, and a DeprecationWarning that names the new path."""
    import importlib
    import sys
    import kvconform.conformance as conformance
    for old, new in conformance.MOVED.items():
        sys.modules.pop(f"kvconform.conformance.{old}", None)
        with pytest.warns(DeprecationWarning, match=f"kvconform.conformance.{new}"):
            module = importlib.import_module(f"kvconform.conformance.{old}")
        assert module is importlib.import_module(f"kvconform.conformance.{new}")
