"""Whole register-path CUDA kernels (main loop, register epilogue, grouped raster,
stores) run under numba-cuda's simulator with their inline PTX replaced by warp-collective
twins (targets/cuda/warp_sim.py): the very source a GPU compiles, checked against NumPy
without a GPU. Runs in the suite's simulator process (NUMBA_ENABLE_CUDASIM=1)."""

from __future__ import annotations

import math
import os
import threading

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera import bf16, f8e4m3, f8e5m2, f16, f32, f64, group_id, i8, i32, kernel, mut, tile
from tessera.kernel.targets.cuda import warp_sim

IN_SIMULATOR = pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") != "1",
    reason="runs in the simulator process (test_cuda_simulator.py starts it)",
)


@kernel(tile=(64,))
def small_linear(A: f16[M, K], B: f16[K, N], bias: f32[N], C: mut[f16[M, N]]):
    m0, n0 = group_id(0) * 32, group_id(1) * 64
    acc = tile.zeros((32, 64), f32)
    for k0 in tile.range(0, K, 32):
        a = tile.load_block(A, (m0, k0), (32, 32))
        b = tile.load_block(B, (k0, n0), (32, 64))
        acc = tile.dot(a, b, acc)
    y = acc + tile.load_block(bias, (n0,), (64,))[None, :]
    tile.store_block(C, (m0, n0), max(y, 0.0).astype(f16))


@kernel(tile=(64,))
def small_bf16(A: bf16[M, K], B: bf16[K, N], C: mut[f32[M, N]]):
    m0, n0 = group_id(0) * 32, group_id(1) * 32
    acc = tile.full((32, 32), 0.5, f32)
    for k0 in tile.range(0, K, 32, prefetch=1):
        a = tile.load_block(A, (m0, k0), (32, 32))
        b = tile.load_block(B, (k0, n0), (32, 32))
        acc = tile.dot(a, b, acc)
    tile.store_block(C, (m0, n0), acc)


@kernel(tile=(64,))
def small_dgemm(A: f64[M, K], B: f64[K, N], C: mut[f64[M, N]]):
    m0, n0 = group_id(0) * 32, group_id(1) * 32
    acc = tile.zeros((32, 32), f64)
    for k0 in tile.range(0, K, 16):
        a = tile.load_block(A, (m0, k0), (32, 16))
        b = tile.load_block(B, (k0, n0), (16, 32))
        acc = tile.dot(a, b, acc)
    tile.store_block(C, (m0, n0), acc)


@kernel(tile=(64,))
def small_attention(q: f16[M, 32], k: f16[N, 32], v: f16[N, 32], o: mut[f32[M, 32]]):
    m0 = group_id(0) * 32
    qb = tile.load_block(q, (m0, 0), (32, 32))
    row_max = tile.full((32,), -math.inf, f32)
    row_sum = tile.zeros((32,), f32)
    acc = tile.zeros((32, 32), f32)
    for n0 in tile.range(0, N, 32):
        kb = tile.load_block(k, (n0, 0), (32, 32))
        vb = tile.load_block(v, (n0, 0), (32, 32))
        s = tile.dot(qb, kb.T) * 0.25
        new_max = max(row_max, s.max(axis=1))
        p = math.exp(s - new_max[:, None])
        rescale = math.exp(row_max - new_max)
        row_sum = row_sum * rescale + p.sum(axis=1)
        acc = acc * rescale[:, None] + tile.dot(p.astype(f16), vb)
        row_max = new_max
    tile.store_block(o, (m0, 0), acc / row_sum[:, None])


@kernel(tile=(64,))
def small_causal(q: f16[M, 32], k: f16[N, 32], v: f16[N, 32], o: mut[f32[M, 32]]):
    m0 = group_id(0) * 32
    qb = tile.load_block(q, (m0, 0), (32, 32))
    row_max = tile.full((32,), -math.inf, f32)
    row_sum = tile.zeros((32,), f32)
    acc = tile.zeros((32, 32), f32)
    for n0 in tile.range(0, min(N, m0 + 32), 32):
        kb = tile.load_block(k, (n0, 0), (32, 32))
        vb = tile.load_block(v, (n0, 0), (32, 32))
        cols = (tile.arange(32) + n0)[None, :]
        rows = (tile.arange(32) + m0)[:, None]
        s = tile.where((cols <= rows) & (cols < N), tile.dot(qb, kb.T) * 0.25, -math.inf)
        new_max = max(row_max, s.max(axis=1))
        p = math.exp(s - new_max[:, None])
        rescale = math.exp(row_max - new_max)
        row_sum = row_sum * rescale + p.sum(axis=1)
        acc = acc * rescale[:, None] + tile.dot(p.astype(f16), vb)
        row_max = new_max
    tile.store_block(o, (m0, 0), acc / row_sum[:, None])


@kernel(tile=(128,), num_warps=4)
def wide_gemm(A: f16[M, K], B: f16[K, N], C: mut[f32[M, N]]):
    """Four warps of 64 x 64 accumulators: one block an SM, so the steady loop loads its
    fragments a k16 step ahead (mainloop.rotates) where K is whole blocks."""
    m0, n0 = group_id(0) * 128, group_id(1) * 128
    acc = tile.zeros((128, 128), f32)
    for k0 in tile.range(0, K, 32):
        a = tile.load_block(A, (m0, k0), (128, 32))
        b = tile.load_block(B, (k0, n0), (32, 128))
        acc = tile.dot(a, b, acc)
    tile.store_block(C, (m0, n0), acc)


@kernel(tile=(64,))
def small_igemm(A: i8[M, K], B: i8[K, N], scale: f32[N], C: mut[i32[M, N]], Y: mut[f32[M, N]]):
    """i8 x i8 -> i32 on mma.sync m16n8k32, its epilogue (a dequantisation) in registers."""
    m0, n0 = group_id(0) * 32, group_id(1) * 32
    acc = tile.zeros((32, 32), i32)
    for k0 in tile.range(0, K, 64):
        a = tile.load_block(A, (m0, k0), (32, 64))
        b = tile.load_block(B, (k0, n0), (64, 32))
        acc = tile.dot(a, b, acc)
    tile.store_block(C, (m0, n0), acc)
    tile.store_block(Y, (m0, n0), acc.astype(f32) * tile.load_block(scale, (n0,), (32,))[None, :])


@kernel(tile=(64,))
def small_e4m3(A: f8e4m3[M, K], B: f8e4m3[K, N], C: mut[f32[M, N]]):
    m0, n0 = group_id(0) * 32, group_id(1) * 32
    acc = tile.full((32, 32), 0.25, f32)
    for k0 in tile.range(0, K, 32):
        a = tile.load_block(A, (m0, k0), (32, 32))
        b = tile.load_block(B, (k0, n0), (32, 32))
        acc = tile.dot(a, b, acc)
    tile.store_block(C, (m0, n0), acc)


@kernel(tile=(64,))
def small_e5m2(A: f8e5m2[M, K], B: f8e5m2[K, N], C: mut[f32[M, N]]):
    m0, n0 = group_id(0) * 32, group_id(1) * 32
    acc = tile.zeros((32, 32), f32)
    for k0 in tile.range(0, K, 32):
        a = tile.load_block(A, (m0, k0), (32, 32))
        b = tile.load_block(B, (k0, n0), (32, 32))
        acc = tile.dot(a, b, acc)
    tile.store_block(C, (m0, n0), acc)


def _run(k, *args, grid):
    program = warp_sim.run(k, *args, grid=grid)
    assert "register GEMM main loop" in program.source or "register row loop" in program.source
    return program


@IN_SIMULATOR
def test_an_f16_gemm_with_its_epilogue_in_registers_matches_numpy(rng):
    a = rng.standard_normal((30, 40)).astype(np.float16)  # edges: rows, k and columns
    b = rng.standard_normal((40, 50)).astype(np.float16)  # 50 columns: element copies
    bias = rng.standard_normal(50).astype(np.float32)
    y = np.full((30, 50), np.nan, np.float16)
    program = _run(small_linear, a, b, bias, y, grid=(1, 1))
    assert "v_acc[" not in program.source  # acc never went to shared memory
    want = np.maximum(a.astype(np.float64) @ b.astype(np.float64) + bias, 0)
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=2e-3, atol=2e-2)


@IN_SIMULATOR
def test_a_bf16_gemm_from_a_constant_over_two_stages_matches_numpy(rng):
    a = rng.standard_normal((32, 72)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((72, 32)).astype(ml_dtypes.bfloat16)
    c = np.zeros((32, 32), np.float32)
    _run(small_bf16, a, b, c, grid=(1, 1))
    want = a.astype(np.float64) @ b.astype(np.float64) + 0.5
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-4)


@IN_SIMULATOR
def test_an_f64_gemm_on_dmma_matches_numpy(rng):
    a, b = rng.standard_normal((32, 24)), rng.standard_normal((24, 32))
    c = np.zeros((32, 32))
    _run(small_dgemm, a, b, c, grid=(1, 1))
    np.testing.assert_allclose(c, a @ b, rtol=1e-12, atol=1e-12)


@IN_SIMULATOR
def test_flash_attention_as_a_register_row_loop_matches_the_cpu(rng):
    """Two key blocks through the ring, both products on (twinned) tensor cores, the row
    max and sum by butterflies, P packed from registers: against the same kernel on the
    CPU (P rounded to f16 there too; the products' sums in another order)."""
    q = rng.standard_normal((32, 32)).astype(np.float16)
    k, v = (rng.standard_normal((64, 32)).astype(np.float16) for _ in range(2))
    o = np.zeros((32, 32), np.float32)
    program = _run(small_attention, q, k, v, o, grid=(1,))
    assert "v_s[" not in program.source and "v_p[" not in program.source
    want = np.zeros_like(o)
    with ts.config(target="cpu"):
        small_attention[1](q, k, v, want)
    np.testing.assert_allclose(o, want, rtol=2e-3, atol=2e-3)


@IN_SIMULATOR
def test_causal_attention_with_index_masks_matches_the_cpu(rng):
    """The causal mask and the keys' end, computed from each element's indices (rows of
    the second query block see both key blocks, partly masked), against the CPU."""
    q = rng.standard_normal((64, 32)).astype(np.float16)
    k, v = (rng.standard_normal((50, 32)).astype(np.float16) for _ in range(2))
    o = np.zeros((64, 32), np.float32)
    program = _run(small_causal, q, k, v, o, grid=(2,))
    assert "register row loop" in program.source
    want = np.zeros_like(o)
    with ts.config(target="cpu"):
        small_causal[2](q, k, v, want)
    np.testing.assert_allclose(o, want, rtol=2e-3, atol=2e-3)


def _lanes(twins, count, value, errors, results):
    """``count`` threads posing as lanes 0.. of warp 0 of block 0, each running one
    collective of ``twins`` (what the simulator's threads do)."""

    def lane(i):
        me = threading.current_thread()
        me.thread_id, me.blockIdx = i, (0, 0, 0)
        try:
            results[i] = twins.collective(value(i), lambda posted: posted[::-1])
        except warp_sim.WarpSimError as error:
            errors.append(error)

    threads = [threading.Thread(target=lane, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)


def test_a_collective_gives_each_lane_its_part_of_what_all_32_posted():
    results, errors = {}, []
    _lanes(warp_sim.Twins(), 32, lambda i: i * 10, errors, results)
    assert not errors and results == {i: (31 - i) * 10 for i in range(32)}


def test_a_collective_that_not_every_lane_reaches_is_an_error(monkeypatch):
    monkeypatch.setattr(warp_sim, "RENDEZVOUS_S", 0.3)
    results, errors = {}, []
    _lanes(warp_sim.Twins(), 16, lambda i: i, errors, results)  # half a warp: divergence
    assert len(errors) == 16 and not results
    assert "not every lane reached" in str(errors[0])


@IN_SIMULATOR
def test_a_gemm_loading_fragments_a_step_ahead_matches_numpy(rng):
    a = rng.standard_normal((128, 96)).astype(np.float16)  # K: three whole blocks of 32
    b = rng.standard_normal((96, 128)).astype(np.float16)
    c = np.zeros((128, 128), np.float32)
    program = _run(wide_gemm, a, b, c, grid=(1, 1))
    assert "(step 1)" in program._variants[True, True].source  # the rotated loop ran
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c, want, rtol=1e-3, atol=1e-2)


@IN_SIMULATOR
def test_an_i8_gemm_on_m16n8k32_is_exact_with_its_epilogue_in_registers(rng):
    a = rng.integers(-128, 128, (40, 136)).astype(np.int8)  # edges: rows, k and columns
    b = rng.integers(-128, 128, (136, 50)).astype(np.int8)  # 50 columns: element copies
    scale = rng.standard_normal(50).astype(np.float32)
    c = np.zeros((40, 50), np.int32)
    y = np.full((40, 50), np.nan, np.float32)
    program = _run(small_igemm, a, b, scale, c, y, grid=(2, 2))
    assert "v_acc[" not in program.source  # acc never went to shared memory
    want = a.astype(np.int64) @ b.astype(np.int64)
    np.testing.assert_array_equal(c, want)
    np.testing.assert_array_equal(y, want.astype(np.float32) * scale)


@IN_SIMULATOR
@pytest.mark.parametrize(
    "kern, fp8, k, n",
    [
        (small_e4m3, ml_dtypes.float8_e4m3fn, 80, 40),  # edges: the general loop
        (small_e5m2, ml_dtypes.float8_e5m2, 96, 64),  # whole chunks and tiles: branch-free
    ],
)
def test_an_f8_gemm_on_m16n8k32_matches_numpy(kern, fp8, k, n, rng):
    # halves and small integers: every product and partial sum is exact in f32, so the
    # hardware's order of additions cannot change a bit (f8 dot's f32 accumulation)
    a = (rng.integers(-8, 9, (32, k)) / 2).astype(fp8)
    b = (rng.integers(-8, 9, (k, n)) / 2).astype(fp8)
    c = np.zeros((32, n), np.float32)
    program = _run(kern, a, b, c, grid=(1, 2))
    assert list(program._variants) == [(n == 64, n == 64)]  # the loop its arrays allow
    want = a.astype(np.float64) @ b.astype(np.float64) + (0.25 if kern is small_e4m3 else 0)
    np.testing.assert_array_equal(c, want)
