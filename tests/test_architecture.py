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


def test_frontend_and_analyses_never_import_a_backend():
    for path in [
        PACKAGE / "kernel" / "frontend.py",
        *(PACKAGE / "kernel" / "analysis").glob("*.py"),
    ]:
        assert not any("backend" in name for name in _imports(path)), path


def test_kernel_package_never_imports_mesh_or_autotune():
    for path in (PACKAGE / "kernel").rglob("*.py"):
        bad = [n for n in _imports(path) if n.startswith(("tessera.mesh", "tessera.autotune"))]
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
