"""Tests that need a real NVIDIA GPU: they run where one is present (never under the
simulator) and are skipped elsewhere. CI machines of this project have no GPU, so these
have not run in CI; see docs/targets.md for how to run them."""

from __future__ import annotations

import os

import numpy as np
import pytest
from classic_kernels import axpy_tiled, block_reduce_tree, matmul

import tessera as ts


def _gpu_present() -> bool:
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return False
    try:
        from numba import cuda

        return cuda.is_available()
    except Exception:
        return False


pytestmark = pytest.mark.skipif(not _gpu_present(), reason="needs an NVIDIA GPU")


def test_reduction_on_the_gpu_is_bitwise_equal_to_the_cpu():
    x = np.random.default_rng(0).standard_normal(1 << 16).astype(np.float32)
    cpu, gpu = np.zeros(256, np.float32), np.zeros(256, np.float32)
    with ts.config(target="cpu"):
        block_reduce_tree[256](x, cpu)
    with ts.config(target="cuda"):
        block_reduce_tree[256](x, gpu)
    assert cpu.tobytes() == gpu.tobytes()


def test_async_copies_double_buffer_on_the_gpu():
    from numba import cuda

    m = 1 << 14
    x = np.random.default_rng(1).random(m).astype(np.float16)
    y0 = np.random.default_rng(2).random(m).astype(np.float16)
    dy = cuda.to_device(y0)
    axpy_tiled[m // 512](cuda.to_device(x), dy, 0.5)
    expected = (np.float32(0.5) * x.astype(np.float32) + y0.astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(dy.copy_to_host(), expected)


def test_matmul_on_the_gpu_matches_numpy():
    from numba import cuda

    a = np.random.default_rng(3).random((256, 256), dtype=np.float32)
    b = np.random.default_rng(4).random((256, 256), dtype=np.float32)
    dc = cuda.device_array((256, 256), np.float32)
    matmul[(16, 16)](cuda.to_device(a), cuda.to_device(b), dc)
    ts.synchronize()
    np.testing.assert_allclose(dc.copy_to_host(), a @ b, rtol=1e-4)
