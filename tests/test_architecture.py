"""The package's shape, as docs/architecture.md draws it: imports run one way, down the layers below (lazy imports
inside functions count too), and no module imports itself back through others."""
from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "argus_inductor"
# each top-level part of argus_inductor and its layer: a module may import its own part and lower layers only
LAYERS = {
    "config": 0,
    "dsl": 1, "layout": 1,
    "invariants": 2, "kernels": 2, "runtime": 2,
    "hopper": 3,
    "specs": 4,
    "ops": 5,
    "graph": 6,
    "agent": 7,
    "backend": 8, "cli": 8, "demo": 8, "vllm_plugin": 8, "": 9,  # "": the package root (argus_inductor/__init__)
}


def _modules() -> dict[str, Path]:
    out = {}
    for p in PKG.rglob("*.py"):
        parts = list(p.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        is_pkg = p.name == "__init__.py"
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = m.split(".") if is_pkg else m.split(".")[:-1]
                    base = base[: len(base) - node.level + 1]
                    stem = ".".join(base + ([node.module] if node.module else []))
                else:
                    stem = node.module or ""
                targets = [stem, *(f"{stem}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            for t in targets:  # a module's own ancestors (packages) are not dependencies of it
                if t in mods and t != m and not m.startswith(t + "."):
                    edges[m].add(t)
    return edges


def _part(m: str) -> str:
    parts = m.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_imports_run_down_the_layers() -> None:
    mods = _modules()
    assert {_part(m) for m in mods} <= set(LAYERS), f"parts with no layer: {({_part(m) for m in mods} - set(LAYERS))}"
    upward = sorted(f"{m} -> {t}" for m, ts in _imports(mods).items() for t in ts
                    if _part(t) != _part(m) and LAYERS[_part(t)] >= LAYERS[_part(m)])
    assert not upward, "imports that do not run down the layers:\n" + "\n".join(upward)


def test_no_import_circles() -> None:
    edges = _imports(_modules())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
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
                circles.append(sorted(comp))

    for v in edges:
        if v not in index:
            visit(v)
    assert not circles, f"import circles: {circles}"



def test_modules_stay_one_job_long() -> None:
    long = {str(p.relative_to(PKG.parent)): n for p in PKG.rglob("*.py") if (n := len(p.read_text().splitlines())) > 1000}
    assert not long, f"modules over ~1,000 lines (two jobs: split them): {long}"
