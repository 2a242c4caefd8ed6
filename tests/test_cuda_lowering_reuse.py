"""A kernel lowered by numba-cuda's front end once in a process is only compiled again
by NVVM for another architecture (toolchain.ptx_codes) — no GPU needed."""

from __future__ import annotations

import importlib.util
import os
import re

import numpy as np
import pytest

from tessera import f32, kernel, mut, tile

pytestmark = pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or importlib.util.find_spec("numba.cuda") is None,
    reason="PTX needs numba-cuda without its simulator",
)


@kernel
def saxpy(a: f32, x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    if i < n:
        y[i] = a * x[i] + y[i]


def _lowered_entries(name: str) -> list:
    from tessera.kernel.targets.cuda import toolchain

    return [key for key in toolchain._lowered if key[0][1] == name]


def test_a_second_architecture_reuses_the_lowered_kernel():
    from tessera.kernel.targets.cuda import toolchain

    if toolchain._lowering() is None:
        pytest.skip("this numba-cuda has no separate lowering step")
    x = np.zeros(64, np.float32)
    sm80 = saxpy.inspect("ptx", np.float32(2), x, x, arch="sm_80")
    sm86 = saxpy.inspect("ptx", np.float32(2), x, x, arch="sm_86")
    assert len(_lowered_entries("saxpy")) == 1  # lowered once, for both
    assert ".target sm_80" in sm80 and ".target sm_86" in sm86


def test_ptx_from_a_reused_lowering_is_numba_cudas_own_compile():
    from tessera.kernel.targets.cuda import toolchain

    x = np.zeros(64, np.float32)
    saxpy.inspect("ptx", np.float32(2), x, x, arch="sm_80")  # lowered (maybe already)
    function = next(iter(saxpy._programs.values())).python_function()
    (key,) = _lowered_entries("saxpy")
    reused = toolchain.ptx_codes(function, key[1], (8, 9), key[2], key[0])
    fresh = toolchain.ptx_codes(function, key[1], (8, 9), key[2])  # compile_all's own way
    # the same code; only the mangled symbol differs (Numba numbers each compile)
    assert [_unnumbered(p) for p in reused] == [_unnumbered(p) for p in fresh]


def _unnumbered(ptx: str) -> str:
    return re.sub(r"_ZN\w+", "SYMBOL", ptx)
