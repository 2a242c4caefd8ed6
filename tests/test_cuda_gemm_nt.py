"""The register GEMM main loop with B stored N x K (``tile.dot(a, b.T, acc)`` of a block
``b = tile.load_block(B, (n0, k), (BN, BK))``: a linear layer's weights, int8 GEMMs):
which loops take it (kernel/passes/gemm_loops.py), the emitted loop run by the lockstep
block emulator against NumPy for every operand dtype (edges, offsets, misaligned views,
the rotated 128 x 256 loop), the kernels on the CPU targets and under the warp simulator,
and PTX/SASS for sm_90: B's fragments by plain ``ldmatrix`` (no ``.trans``; no byte
permutes for 8-bit B)."""

from __future__ import annotations

import importlib.util
import os

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera import dtypes as D
from tessera import f16, f32, graph, group_id, i8, i32, kernel, mut, op, tile
from tessera.kernel import ir
from tessera.kernel.passes import gemm_loops
from tessera.kernel.pipeline import specialise
from tessera.kernel.targets import TARGETS
from tessera.kernel.targets.cuda import emulator, mainloop, sass, warp_sim
from tessera.kernel.targets.cuda.passes.mainloop import SHAPES, Mainloop, warp_grid
from tessera.ops.passes import lower
from tessera.ops.plan import operands

NO_PTX = pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or importlib.util.find_spec("numba.cuda") is None,
    reason="generated CUDA source and PTX need numba-cuda without its simulator",
)
NO_SASS = pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
    or importlib.util.find_spec("numba.cuda") is None
    or sass.nvdisasm() is None,
    reason="needs numba-cuda without its simulator and nvdisasm (the test extras install it)",
)
IN_SIMULATOR = pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") != "1",
    reason="runs in the simulator process (test_cuda_simulator.py starts it)",
)


@kernel(tile=(128,))
def gemm_nt(A: f16[M, K], B: f16[N, K], C: mut[f32[M, N]]):
    m0, n0 = group_id(0) * 64, group_id(1) * 64
    acc = tile.zeros((64, 64), f32)
    for k0 in tile.range(0, K, 32):
        a = tile.load_block(A, (m0, k0), (64, 32))
        b = tile.load_block(B, (n0, k0), (64, 32))
        acc = tile.dot(a, b.T, acc)
    tile.store_block(C, (m0, n0), acc)


@kernel(tile=(128,))
def gemm_nt_loaded_t(A: f16[M, K], B: f16[N, K], C: mut[f32[M, N]]):
    """The transpose written on the load instead of in the product."""
    m0, n0 = group_id(0) * 64, group_id(1) * 64
    acc = tile.zeros((64, 64), f32)
    for k0 in tile.range(0, K, 32):
        a = tile.load_block(A, (m0, k0), (64, 32))
        bt = tile.load_block(B, (n0, k0), (64, 32)).T
        acc = tile.dot(a, bt, acc)
    tile.store_block(C, (m0, n0), acc)


@kernel(tile=(128,))
def gemm_a_t(A: f16[K, M], B: f16[K, N], C: mut[f32[M, N]]):
    """A stored K x M: not this loop (the general path computes it)."""
    m0, n0 = group_id(0) * 64, group_id(1) * 64
    acc = tile.zeros((64, 64), f32)
    for k0 in tile.range(0, K, 32):
        a = tile.load_block(A, (k0, m0), (32, 64))
        b = tile.load_block(B, (k0, n0), (32, 64))
        acc = tile.dot(a.T, b, acc)
    tile.store_block(C, (m0, n0), acc)


@kernel(tile=(256,))
def igemm_nt(A: i8[M, K], B: i8[N, K], C: mut[i32[M, N]]):
    m0, n0 = group_id(0) * 128, group_id(1) * 128
    acc = tile.zeros((128, 128), i32)
    for k0 in tile.range(0, K, 64):
        a = tile.load_block(A, (m0, k0), (128, 64))
        b = tile.load_block(B, (n0, k0), (128, 64))
        acc = tile.dot(a, b.T, acc)
    tile.store_block(C, (m0, n0), acc)


@kernel(tile=(256,))
def gemm_nt_big(A: f16[M, K], B: f16[N, K], C: mut[f32[M, N]], BM: ts.constexpr, BN: ts.constexpr):
    m0, n0 = group_id(0) * BM, group_id(1) * BN
    acc = tile.zeros((BM, BN), f32)
    for k0 in tile.range(0, K, 32):
        a = tile.load_block(A, (m0, k0), (BM, 32))
        b = tile.load_block(B, (n0, k0), (BN, 32))
        acc = tile.dot(a, b.T, acc)
    tile.store_block(C, (m0, n0), acc)


def _operands(rng, m=128, n=128, k=96, dtype=np.float16):
    return rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((n, k)).astype(dtype)


# ----------------------------------------------------------------------------- which loops
def _loops(kern, *args):
    """The GEMM loops gemm_loops.find sees in ``kern``'s IR (after the CUDA passes) for
    these arguments."""
    bound = kern.bind(TARGETS["cuda"], args, (2, 2))
    kir = specialise(kern.ir, bound.constexprs, TARGETS["cuda"].passes).kir
    loops = [s for s in ir.walk_stmts(kir.body) if isinstance(s, ir.For)]
    return [g for g in (gemm_loops.find(s, kir) for s in loops) if g is not None]


@pytest.mark.parametrize("kern", [gemm_nt, gemm_nt_loaded_t])
def test_a_loop_over_b_stored_n_by_k_is_a_gemm_loop(kern, rng):
    A, B = _operands(rng)
    (g,) = _loops(kern, A, B, np.zeros((128, 128), np.float32))
    assert g.b_nk and (g.m, g.n, g.k) == (64, 64, 32) and g.dtype == D.f16


def test_a_stored_k_by_m_is_not_this_loop(rng):
    a, b = np.zeros((96, 128), np.float16), np.zeros((96, 128), np.float16)
    assert _loops(gemm_a_t, a, b, np.zeros((128, 128), np.float32)) == []


@graph.module("linear_nt")
def linear_nt(x, w):
    return op.matmul(x, w.T)  # w: out x in, as a linear layer keeps it


def test_a_product_with_a_transposed_weight_loads_it_n_by_k_in_128_by_256_blocks():
    """The operator layer reads ``w.T``'s blocks from ``w`` (``trans_b``) in the form the
    main loop takes, with the GPU's 128 x 256 blocks."""
    x, w = np.zeros((512, 256), np.float16), np.zeros((1024, 256), np.float16)
    lowered = lower(linear_nt._trace(operands("linear_nt", (x, w))), True)
    (source,) = [s.text for s in lowered.sources if s is not None]
    assert "acc = tile.zeros((128, 256), f32)" in source
    assert "yt = tile.load_block(" in source and "(256, 32))" in source
    assert "y = yt.T" in source and "acc = tile.dot(x, y, acc)" in source


# ----------------------------------------------------------------------------- the emulator
NUMPY = {
    "f16": np.float16,
    "bf16": ml_dtypes.bfloat16,
    "f64": np.float64,
    "i8": np.int8,
    "f8e4m3": ml_dtypes.float8_e4m3fn,
}
BK = {"f16": 32, "bf16": 32, "f64": 16, "i8": 64, "f8e4m3": 64}


def _plan(dtype: str, bm=64, bn=64, bk=None, threads=128, stages=3):
    d = getattr(D, dtype)
    wm, wn = warp_grid(bm, bn, threads // 32, SHAPES[d])
    bk = bk or BK[dtype]
    return Mainloop(
        None, "a", "b", "acc", "A", "B", None, None, bm, bn, bk, d, threads, wm, wn, stages,
        b_nk=True,
    )  # fmt: skip


def _block(X, r0, c0, rows, cols) -> np.ndarray:
    out = np.zeros((rows, cols))
    r_lo, r_hi = max(r0, 0), min(r0 + rows, X.shape[0])
    c_lo, c_hi = max(c0, 0), min(c0 + cols, X.shape[1])
    if r_lo < r_hi and c_lo < c_hi:
        out[r_lo - r0 : r_hi - r0, c_lo - c0 : c_hi - c0] = X[r_lo:r_hi, c_lo:c_hi]
    return out


def _values(rng, dtype: str, shape):
    if dtype == "i8":
        return rng.integers(-100, 100, shape).astype(np.int8)
    if dtype == "f8e4m3":
        return rng.integers(-16, 16, shape).astype(np.float32).astype(NUMPY[dtype]) / 4
    return rng.standard_normal(shape).astype(NUMPY[dtype])


def _check(plan, A, B, row0, col0, start, stop, rng, **variant):
    """Run the loop on ``A`` (M x K) and ``B`` (N x K); acc must be acc + A_blk @ B_blk.T."""
    step = plan.k
    acc_t = {D.f64: np.float64, D.i8: np.int32}.get(plan.dtype, np.float32)
    acc = (
        rng.integers(-9, 9, (plan.m, plan.n))
        if acc_t is np.int32
        else rng.standard_normal((plan.m, plan.n))
    ).astype(acc_t)
    want = acc.astype(np.float64)
    for k0 in range(start, stop, step):
        a = _block(A.astype(np.float64), row0, k0, plan.m, plan.k)
        b = _block(B.astype(np.float64), col0, k0, plan.n, plan.k)
        want = want + a @ b.T
    emu = emulator.run_mainloop(plan, A, B, acc, row0, col0, start, stop, step, **variant)
    if acc_t is np.int32:
        np.testing.assert_array_equal(acc, want.astype(np.int64))
    else:
        np.testing.assert_allclose(acc, want, rtol=1e-5, atol=1e-4)
    return emu


@pytest.mark.parametrize("dtype", list(NUMPY))
@pytest.mark.parametrize("variant", [{}, {"chunks": True, "whole": True}, {"chunks": False}])
def test_the_loop_over_b_stored_n_by_k_gives_the_blocks_product(dtype, variant, rng):
    """Every operand dtype, each steady loop a launch may choose; B's fragments by
    ``ldmatrix`` (8-byte loads for f64) without bank conflicts."""
    plan = _plan(dtype)
    k = 3 * plan.k
    A, B = _values(rng, dtype, (128, k)), _values(rng, dtype, (128, k))
    emu = _check(plan, A, B, 64, 0, 0, k, rng, **variant)
    assert all(
        emu.stats[c] == 0 for c in ("ldmatrix_conflicts", "lds64_conflicts", "cp16_conflicts")
    )
    if dtype != "f64":
        assert emu.stats["ldmatrix"] > 0 and emu.stats.get("lds32", 0) == 0  # no byte words


@pytest.mark.parametrize("dtype", ["f16", "i8", "f64"])
@pytest.mark.parametrize("row0, col0", [(80, 48), (-20, -8), (0, 2**62)])
def test_blocks_overhanging_an_n_by_k_b_read_zeros(dtype, row0, col0, rng):
    plan = _plan(dtype)
    k = 2 * plan.k + 8  # the last tile overhangs K
    A, B = _values(rng, dtype, (100, k)), _values(rng, dtype, (90, k))
    _check(plan, A, B, row0, col0, 0, k, rng)


def test_a_misaligned_n_by_k_view_is_copied_element_by_element(rng):
    plan = _plan("bf16")
    A0, B0 = _values(rng, "bf16", (64, 97)), _values(rng, "bf16", (64, 97))
    emu = _check(plan, A0[:, 1:], B0[:, 1:], 0, 0, 0, 96, rng)  # rows 2 bytes past alignment
    assert emu.stats["cp16"] == 0 and emu.stats["st16"] > 0


def test_the_rotated_128_by_256_loop_takes_b_stored_n_by_k(rng):
    plan = _plan("f16", 128, 256, 32, 256, 4)
    assert mainloop.rotates(plan)
    A, B = _values(rng, "f16", (128, 128)), _values(rng, "f16", (256, 128))
    _check(plan, A, B, 0, 0, 0, 128, rng, chunks=True, whole=True)


# ----------------------------------------------------------------------------- whole kernels
@pytest.mark.parametrize(
    "kern, target", [(gemm_nt, "cpu"), (gemm_nt, "debug"), (gemm_nt_loaded_t, "debug")]
)
def test_an_n_by_k_gemm_kernel_matches_numpy_on_the_cpu_targets(kern, target, rng):
    A, B = _operands(rng, 100, 90, 70)
    C = np.zeros((100, 90), np.float32)
    with ts.config(target=target):
        kern[2, 2](A, B, C)
    np.testing.assert_allclose(
        C, A.astype(np.float64) @ B.astype(np.float64).T, rtol=1e-3, atol=1e-3
    )


@IN_SIMULATOR
@pytest.mark.parametrize("m, n, k", [(128, 128, 96), (100, 90, 70)])
def test_an_n_by_k_gemm_kernel_runs_its_main_loop_under_the_warp_simulator(m, n, k, rng):
    A, B = _operands(rng, m, n, k)
    C = np.zeros((m, n), np.float32)
    warp_sim.run(gemm_nt, A, B, C, grid=(-(-m // 64), -(-n // 64)))
    np.testing.assert_allclose(
        C, A.astype(np.float64) @ B.astype(np.float64).T, rtol=1e-4, atol=1e-4
    )


# ----------------------------------------------------------------------------- PTX, SASS
@NO_PTX
def test_b_stored_n_by_k_takes_the_register_main_loop_with_plain_ldmatrix(rng):
    A, B = _operands(rng)
    source = gemm_nt.inspect("cuda", A, B, np.zeros((128, 128), np.float32), grid=(2, 2))
    assert "# register GEMM main loop: 64x64 f32 accumulator in registers" in source
    assert "B (N x K): one ldmatrix.x4 per pair of n8 tiles" in source
    assert "_ldsm4t(" not in source and "v_b = " not in source


@NO_SASS
@pytest.mark.parametrize(
    "bm, bn, k, hmma, ldsm, copies, ceiling",
    [
        (128, 128, 512, 32, 12, 4, 117),
        (128, 256, 512, 64, 16, 6, 162),
        (128, 128, 520, 32, 12, 4, 142),
    ],
)
def test_an_n_by_k_gemm_k_tile_is_its_products_copies_and_one_barrier(
    bm, bn, k, hmma, ldsm, copies, ceiling
):
    """As the K x N loop's (tests/test_cuda_sass.py), a few instructions shorter."""
    a, b = np.zeros((512, k), np.float16), np.zeros((512, k), np.float16)
    c = np.zeros((512, 512), np.float32)
    grid = (512 // bm, 512 // bn)
    text = gemm_nt_big.inspect("sass", a, b, c, bm, bn, grid=grid, arch="sm_90")
    (loop,) = [x for x in sass.loops(text) if sass.counts(x)["HMMA"]]
    ops = sass.counts(loop)
    assert (ops["HMMA"], ops["LDSM"], ops["LDGSTS"], ops["BAR"]) == (hmma, ldsm, copies, 1)
    assert len(loop.instructions) <= ceiling and not sass.local_memory(text)
    assert gemm_nt_big.metadata(a, b, c, bm, bn, grid=grid, arch="sm_90")["spill_bytes"] == 0


@NO_SASS
def test_an_n_by_k_i8_gemm_k_tile_is_imma_from_ldmatrix_without_byte_permutes():
    """8-bit B stored N x K has its k contiguous: ``ldmatrix`` gives its fragments (the K x
    N loop's 8 word loads and 32 PRMT a k-tile are gone: 117 instructions against 171)."""
    a = np.zeros((512, 512), np.int8)
    c = np.zeros((512, 512), np.int32)
    text = igemm_nt.inspect("sass", a, a, c, grid=(4, 4), arch="sm_90")
    (loop,) = [x for x in sass.loops(text) if sass.counts(x)["LDGSTS"]]
    ops = sass.counts(loop)
    assert (ops["IMMA"], ops["LDSM"], ops["LDGSTS"], ops["BAR"], ops["PRMT"]) == (32, 12, 4, 1, 0)
    assert len(loop.instructions) <= 117 and not sass.local_memory(text)
