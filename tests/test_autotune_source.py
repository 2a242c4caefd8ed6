"""Kernels compile from the source they had when decorated (issue 26, item 5): a file
edited after the decorator ran never changes what a later compile builds, whether the
later compile is another autotune config, another group shape or a helper first used
by a kernel compiled later."""

from __future__ import annotations

import importlib.util
import os
import sys
import textwrap

import numpy as np
import pytest

import tessera

N = 64

AUTOTUNED = """
from __future__ import annotations
from tessera import f32, group_linear_id, kernel, mut, tile

@kernel.autotune(space=dict(BM=[16, 32]), key=["n"], tile=lambda c: (c.BM,))
def bump(x: f32[n], y: mut[f32[n]]):
    i = group_linear_id() * BM + tile.linear_id()
    if i < n:
        y[i] = x[i] + ADDEND
"""

SHAPED = """
from __future__ import annotations
from tessera import constexpr, f32, group_linear_id, kernel, mut, tile

@kernel(tile=("BLOCK",))
def bump(x: f32[n], y: mut[f32[n]], BLOCK: constexpr):
    i = group_linear_id() * BLOCK + tile.linear_id()
    if i < n:
        y[i] = x[i] + ADDEND
"""

HELPER = """
from __future__ import annotations
import tessera

@tessera.func
def addend(v):
    return v + ADDEND
"""

USER = """
from __future__ import annotations
from tessera import f32, kernel, mut
from edited_helper import addend

@kernel
def bump(x: f32[n], y: mut[f32[n]]):
    for i in range(n):
        y[i] = addend(x[i])
"""


def _module(tmp_path, name: str, text: str, addend: str):
    """Import ``text`` (with ADDEND spelled ``addend``) as module ``name`` from a file."""
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(text).replace("ADDEND", addend))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module, path


def _edit(path, text: str, addend: str) -> None:
    """Rewrite the file with another body; its time stamp moves so linecache sees it."""
    path.write_text(textwrap.dedent(text).replace("ADDEND", addend))
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))


@pytest.fixture
def arrays():
    return np.arange(N, dtype=np.float32), np.zeros(N, np.float32)


def test_a_later_autotune_config_compiles_the_decorated_source(tmp_path, arrays):
    module, path = _module(tmp_path, "edited_autotuned", AUTOTUNED, "1.0")
    _edit(path, AUTOTUNED, "100.0")
    x, y = arrays
    later = module.bump.configs[1]  # not compiled by the decorator
    with tessera.config(cache="off", target="cpu"):
        module.bump.kernel_for(later)[N // later.BM](x, y)
    np.testing.assert_array_equal(y, x + 1)


def test_a_later_group_shape_compiles_the_decorated_source(tmp_path, arrays):
    module, path = _module(tmp_path, "edited_shaped", SHAPED, "1.0")
    _edit(path, SHAPED, "100.0")
    x, y = arrays
    with tessera.config(cache="off", target="cpu"):
        module.bump[N // 16](x, y, 16)
    np.testing.assert_array_equal(y, x + 1)


def test_a_helper_first_used_later_keeps_its_decorated_source(tmp_path, arrays):
    _, path = _module(tmp_path, "edited_helper", HELPER, "1.0")
    _edit(path, HELPER, "100.0")  # then a kernel that calls the helper is declared
    user, _ = _module(tmp_path, "edited_helper_user", USER, "")
    x, y = arrays
    with tessera.config(cache="off", target="cpu"):
        user.bump[1](x, y)
    np.testing.assert_array_equal(y, x + 1)
