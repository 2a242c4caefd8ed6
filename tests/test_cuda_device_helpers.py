"""The helpers generated CUDA code calls (own math, 8- and 16-bit float conversions,
narrow atomics) are typed and lowered once per signature in a process and inlined by
NVVM (device_helpers.py) — no GPU needed."""

from __future__ import annotations

import importlib.util
import math
import os

import numpy as np
import pytest

from tessera import f32, kernel, mut, tile

pytestmark = pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or importlib.util.find_spec("numba.cuda") is None,
    reason="PTX needs numba-cuda without its simulator",
)


@kernel
def exps(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    if i < n:
        y[i] = math.exp(x[i]) + math.exp(-x[i])


@kernel
def exp_and_tanh(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    if i < n:
        y[i] = math.exp(x[i]) * math.tanh(x[i])


def _exp_helper():
    from tessera.kernel.targets.cuda import runtime

    return runtime.namespace(False)["_exp_f32"]


def test_a_helper_is_lowered_once_for_every_kernel_that_calls_it():
    from numba import types

    from tessera.kernel.targets.cuda import device_helpers

    if device_helpers._helper_class() is None:
        pytest.skip("this numba-cuda's helpers are inlined by Numba (no compile_cuda forceinline)")

    x = np.zeros(64, np.float32)
    exps.inspect("ptx", x, x, arch="sm_90")
    helper = _exp_helper()
    lowered = helper.overloads[(types.float32,)]
    exp_and_tanh.inspect("ptx", x, x, arch="sm_80")  # another kernel, another arch
    assert list(helper.overloads) == [(types.float32,)]
    assert helper.overloads[(types.float32,)] is lowered


def test_nvvm_inlines_the_helpers_the_ptx_calls_nothing():
    x = np.zeros(64, np.float32)
    ptx = exps.inspect("ptx", x, x, arch="sm_90")
    assert "call" not in ptx and ".func" not in ptx
    assert ptx.count("fma.rn.f32") >= 2 * 4  # both exps' polynomials, in the kernel
