"""The layout rules of ARCHITECTURE.md, checked so they stay true."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).parent.parent / "tessera"


def _modules():
    return sorted(PACKAGE.rglob("*.py"))


def _imports(path: Path) -> set[str]:
    """Absolute names of the tessera modules ``path`` imports."""
    tree = ast.parse(path.read_text())
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    package = list(rel.parts[:-1]) if rel.name != "__init__" else list(rel.parts[:-1])
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            out.add(name)
            out.update(f"{name}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {n for n in out if n.startswith("tessera")}


def test_no_module_is_longer_than_800_lines():
    long = {p.name: n for p in _modules() if (n := len(p.read_text().splitlines())) > 800}
    assert not long


def test_frontend_and_passes_never_import_a_target():
    for path in [
        PACKAGE / "kernel" / "frontend.py",
        PACKAGE / "kernel" / "frontend_calls.py",
        *(PACKAGE / "kernel" / "passes").glob("*.py"),
    ]:
        assert not any("targets" in name for name in _imports(path)), path


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_level_imports() -> dict[str, set[str]]:
    """Each module → the tessera modules it imports when it is imported."""
    names = {_module_name(p): p for p in _modules()}
    graph = {}
    for name, path in names.items():
        tree = ast.parse(path.read_text())
        found = set()
        for node in tree.body:
            nodes = [node] + (list(ast.walk(node)) if isinstance(node, (ast.If, ast.Try)) else [])
            for n in nodes:
                if isinstance(n, (ast.Import, ast.ImportFrom)):
                    found |= {m for m in _resolve(name, path, n, names) if m != name}
        graph[name] = found
    return graph


def _resolve(name: str, path: Path, node, modules) -> set[str]:
    """The modules an import statement loads: ``from pkg import mod`` is ``pkg.mod``,
    ``from pkg import name`` is ``pkg``."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    if isinstance(node, ast.Import):
        return {a.name for a in node.names} & set(modules)
    base = package[: len(package) - node.level + 1] if node.level else []
    module = ".".join(base + ([node.module] if node.module else []))
    found = {
        f"{module}.{a.name}" if f"{module}.{a.name}" in modules else module for a in node.names
    }
    return found & set(modules)


def test_there_are_no_import_cycles():
    graph = _module_level_imports()
    state: dict[str, int] = {}
    cycles = []

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycles.append(stack[stack.index(n) :] + [n] if n in stack else [m, n])
            elif n not in state:
                visit(n, stack + [n])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not cycles, cycles


def test_no_function_imports_a_tessera_module():
    """Imports inside functions hide cycles; only heavy third-party modules are imported
    late (numba, numba.cuda, mpi4py, cupy)."""
    late = []
    for path in _modules():
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and (
                    node.level or (node.module or "").startswith("tessera")
                ):
                    late.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
                elif isinstance(node, ast.Import) and any(
                    a.name.startswith("tessera") for a in node.names
                ):
                    late.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert not late


def test_no_target_is_named_outside_the_targets_package():
    """Target names appear as code only in kernel/targets/ (the CLI's help and docs may
    name them; mesh/ names devices such as "cpu" and "cuda:0", not targets; aot/ names
    the kinds of machine code an ahead-of-time image holds, as its file format does)."""
    from tessera.kernel.targets import TARGETS

    allowed = (PACKAGE / "kernel" / "targets", PACKAGE / "mesh", PACKAGE / "aot")
    allowed += (PACKAGE / "cli" / "__init__.py",)
    spelled = []
    for path in _modules():
        if any(path == a or a in path.parents for a in allowed):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in TARGETS:
                spelled.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert not spelled


def test_every_primitive_has_a_lowering_on_every_target():
    from tessera.kernel.targets import TARGETS
    from tessera.tile.primitives import REGISTRY

    missing = [
        (t.name, p.name)
        for t in TARGETS.values()
        for p in REGISTRY.values()
        if p not in t.lowerings
    ]
    assert not missing


def test_the_docs_primitive_table_is_the_declarations_table():
    from tessera.tile.primitives import table

    docs = (PACKAGE.parent / "docs" / "language.md").read_text()
    assert table() in docs, "paste tessera.tile.primitives.table() into docs/language.md"


def test_a_target_folder_has_the_same_file_roles():
    for name in ("cpu", "cuda", "debug"):
        folder = PACKAGE / "kernel" / "targets" / name
        roles = {"__init__.py", "codegen.py", "lowerings.py", "program.py", "runtime.py"}
        assert roles <= {p.name for p in folder.glob("*.py")}, name


def test_kernel_package_never_imports_mesh_or_autotune():
    for path in (PACKAGE / "kernel").rglob("*.py"):
        bad = [n for n in _imports(path) if n.startswith(("tessera.mesh", "tessera.autotune"))]
        assert not bad, (path, bad)


def test_autotune_and_mesh_never_import_each_other():
    """Both wait on other ranks through tessera.runtime.timed and find the process world in
    tessera.runtime.world, below them both."""
    for package, other in (("autotune", "tessera.mesh"), ("mesh", "tessera.autotune")):
        for path in (PACKAGE / package).rglob("*.py"):
            bad = [n for n in _imports(path) if n.startswith(other)]
            assert not bad, (path, bad)


def test_tile_declarations_never_import_the_compiler():
    for path in (PACKAGE / "tile").glob("*.py"):
        assert not any(n.startswith("tessera.kernel") for n in _imports(path)), path


def test_import_tessera_loads_no_optional_heavy_module():
    code = (
        "import sys, tessera; "
        "print(sorted(m for m in ('numba.cuda', 'mpi4py', 'cupy') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]"
