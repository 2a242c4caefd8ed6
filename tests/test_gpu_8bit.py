"""8-bit GEMM loops on a real GPU (the register main loop on ``mma.sync.m16n8k32``): every
integer pair (i8, u8, either sign mixed) exact in i32 against NumPy, and on sm_89 and
newer the 8-bit float pairs (f8e4m3, f8e5m2, one of each) within one f32 rounding a k32
step. The same loops run in the lockstep emulator without a GPU (tests/test_cuda_mma8.py,
tests/test_mixed_dots.py). Skipped without an NVIDIA GPU (never under the simulator)."""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera import dtypes as D
from tessera import f32, group_id, i32, kernel, mut, tile
from tessera.kernel.targets.cuda.streams import gpu_usable

pytestmark = pytest.mark.skipif(not gpu_usable(), reason="needs an NVIDIA GPU")

NUMPY = {"i8": np.int8, "u8": np.uint8, "f8e4m3": ml_dtypes.float8_e4m3fn}
NUMPY["f8e5m2"] = ml_dtypes.float8_e5m2


@functools.cache
def gemm(a_name: str, b_name: str):
    """A 128 x 128-block GEMM loop of an ``a_name`` A by a ``b_name`` B."""
    a_t, b_t = getattr(D, a_name), getattr(D, b_name)
    acc_t = i32 if a_name in ("i8", "u8") else f32

    @kernel(tile=(256,))
    def loop(A: a_t[M, K], B: b_t[K, N], C: mut[acc_t[M, N]]):
        m0, n0 = group_id(0) * 128, group_id(1) * 128
        acc = tile.zeros((128, 128), acc_t)
        for k0 in tile.range(0, K, 64):
            a = tile.load_block(A, (m0, k0), (128, 64))
            b = tile.load_block(B, (k0, n0), (64, 128))
            acc = tile.dot(a, b, acc)
        tile.store_block(C, (m0, n0), acc)

    return loop


def _sm89() -> bool:
    from numba import cuda

    return cuda.get_current_device().compute_capability >= (8, 9)


@pytest.mark.parametrize("a, b", [("i8", "i8"), ("u8", "u8"), ("u8", "i8"), ("i8", "u8")])
@pytest.mark.parametrize("m, k, n", [(256, 512, 384), (200, 448, 136)])
def test_an_8_bit_integer_gemm_on_the_gpu_is_exact(a, b, m, k, n, rng):
    low = {"i8": -128, "u8": 0}
    A = rng.integers(low[a], low[a] + 256, (m, k)).astype(NUMPY[a])
    B = rng.integers(low[b], low[b] + 256, (k, n)).astype(NUMPY[b])
    C = np.zeros((m, n), np.int32)
    with ts.config(target="cuda"):
        gemm(a, b)[(-(-m // 128), -(-n // 128))](A, B, C)
    np.testing.assert_array_equal(C, A.astype(np.int64) @ B.astype(np.int64))


@pytest.mark.parametrize(
    "a, b", [("f8e4m3", "f8e4m3"), ("f8e5m2", "f8e5m2"), ("f8e4m3", "f8e5m2"), ("f8e5m2", "f8e4m3")]
)
def test_an_8_bit_float_gemm_on_the_gpu_rounds_once_a_k32_step(a, b, rng):
    if not _sm89():
        pytest.skip("8-bit float tensor cores need sm_89 or newer")
    m, k, n = 256, 512, 256
    A = rng.standard_normal((m, k)).astype(NUMPY[a])
    B = rng.standard_normal((k, n)).astype(NUMPY[b])
    C = np.zeros((m, n), np.float32)
    with ts.config(target="cuda"):
        gemm(a, b)[(m // 128, n // 128)](A, B, C)
    x, y = A.astype(np.float64), B.astype(np.float64)
    bound = (k // 32) * 2.0**-23 * (np.abs(x) @ np.abs(y))
    assert np.all(np.abs(C - x @ y) <= bound)
