"""The register GEMM main loop over transposed operands: B stored N x K
(``tile.dot(a, b.T, acc)`` of a block ``b = tile.load_block(B, (n0, k), (BN, BK))``: a
linear layer's weights, int8 GEMMs) and A stored K x M (``tile.dot(a.T, b, acc)``: a
backward pass's ``x.T @ g``): which loops take it (kernel/passes/gemm_loops.py), the
emitted loop run by the lockstep block emulator against NumPy for every operand dtype
(edges, offsets, misaligned views, the rotated 128 x 256 loop), the kernels on the CPU
targets and under the warp simulator, the operator layer's transposed products, and SASS
for sm_90: B's fragments by plain ``ldmatrix`` (no byte permutes for 8-bit B), A's by
``ldmatrix.trans``."""

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
def gemm_tn(A: f16[K, M], B: f16[K, N], C: mut[f32[M, N]]):
    """A stored K x M."""
    m0, n0 = group_id(0) * 64, group_id(1) * 64
    acc = tile.zeros((64, 64), f32)
    for k0 in tile.range(0, K, 32):
        a = tile.load_block(A, (k0, m0), (32, 64))
        b = tile.load_block(B, (k0, n0), (32, 64))
        acc = tile.dot(a.T, b, acc)
    tile.store_block(C, (m0, n0), acc)


@kernel(tile=(128,))
def gemm_tt(A: f16[K, M], B: f16[N, K], C: mut[f32[M, N]]):
    """Both transposed."""
    m0, n0 = group_id(0) * 64, group_id(1) * 64
    acc = tile.zeros((64, 64), f32)
    for k0 in tile.range(0, K, 32):
        a = tile.load_block(A, (k0, m0), (32, 64))
        b = tile.load_block(B, (n0, k0), (64, 32))
        acc = tile.dot(a.T, b.T, acc)
    tile.store_block(C, (m0, n0), acc)


@kernel(tile=(128,))
def igemm_tn(A: i8[K, M], B: i8[K, N], C: mut[i32[M, N]]):
    """8-bit A stored K x M: no ldmatrix.trans for bytes, so not the main loop."""
    m0, n0 = group_id(0) * 64, group_id(1) * 64
    acc = tile.zeros((64, 64), i32)
    for k0 in tile.range(0, K, 64):
        a = tile.load_block(A, (k0, m0), (64, 64))
        b = tile.load_block(B, (k0, n0), (64, 64))
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


@kernel(tile=(256,))
def gemm_tn_big(A: f16[K, M], B: f16[K, N], C: mut[f32[M, N]], BM: ts.constexpr, BN: ts.constexpr):
    m0, n0 = group_id(0) * BM, group_id(1) * BN
    acc = tile.zeros((BM, BN), f32)
    for k0 in tile.range(0, K, 32):
        a = tile.load_block(A, (k0, m0), (32, BM))
        b = tile.load_block(B, (k0, n0), (32, BN))
        acc = tile.dot(a.T, b, acc)
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


@pytest.mark.parametrize("kern, a_km, b_nk", [(gemm_tn, True, False), (gemm_tt, True, True)])
def test_a_loop_over_a_stored_k_by_m_is_a_gemm_loop(kern, a_km, b_nk):
    a = np.zeros((96, 128), np.float16)
    b = np.zeros((128, 96) if b_nk else (96, 128), np.float16)
    (g,) = _loops(kern, a, b, np.zeros((128, 128), np.float32))
    assert (g.a_km, g.b_nk, g.m, g.n, g.k) == (a_km, b_nk, 64, 64, 32)


@NO_PTX
def test_an_8_bit_a_stored_k_by_m_keeps_the_general_path():
    a = np.zeros((128, 128), np.int8)
    assert _loops(igemm_tn, a, a, np.zeros((128, 128), np.int32)) == []
    source = igemm_tn.inspect("cuda", a, a, np.zeros((128, 128), np.int32), grid=(2, 2))
    assert "register GEMM main loop" not in source


@graph.module("linear_nt")
def linear_nt(x, w):
    return op.matmul(x, w.T)  # w: out x in, as a linear layer keeps it


@graph.module("grad_weight")
def grad_weight(x, g):
    return op.matmul(x.T, g)  # a linear layer's weight gradient


@pytest.mark.parametrize(
    "module, shapes, load",
    [
        (linear_nt, ((512, 256), (1024, 256)), "yt = tile.load_block("),
        (grad_weight, ((256, 512), (256, 1024)), "xt = tile.load_block("),
    ],
)
def test_a_product_with_a_transposed_operand_reads_it_as_stored_in_128_by_256_blocks(
    module, shapes, load
):
    """The operator layer reads ``w.T``'s (or ``x.T``'s) blocks from the array as it is
    stored (``trans_b``, ``trans_a``), in the form the main loop takes, with the GPU's 128
    x 256 blocks."""
    x, w = (np.zeros(s, np.float16) for s in shapes)
    lowered = lower(module._trace(operands(module.name, (x, w))), True)
    (source,) = [s.text for s in lowered.sources if s is not None]
    assert "acc = tile.zeros((128, 256), f32)" in source
    assert load in source and "acc = tile.dot(x, y, acc)" in source


@pytest.mark.parametrize("which", ["a", "b", "both"])
def test_op_matmul_of_transposed_arrays_equals_numpy(which, rng):
    """``op.matmul(x, w.T)`` where ``w.T`` is an array (a NumPy or GPU view of a stored
    N x K ``w``), not a traced tensor; ``x.T`` likewise."""
    x = rng.standard_normal((96, 72)).astype(np.float32)  # K = 72
    w = rng.standard_normal((130, 72)).astype(np.float32)
    a = np.ascontiguousarray(x.T).T if which in ("a", "both") else x  # x, stored transposed
    b = w.T if which in ("b", "both") else np.ascontiguousarray(w.T)
    assert (not a.flags.c_contiguous) == (which != "b")
    want = x.astype(np.float64) @ w.T.astype(np.float64)
    np.testing.assert_allclose(op.matmul(a, b), want, rtol=1e-5, atol=1e-4)


def test_op_matmul_of_a_batch_by_a_transposed_array_equals_numpy(rng):
    x = rng.standard_normal((3, 40, 72)).astype(np.float32)
    w = rng.standard_normal((130, 72)).astype(np.float32)
    got = op.matmul(x, w.T)
    np.testing.assert_allclose(got, x.astype(np.float64) @ w.T, rtol=1e-5, atol=1e-4)


def test_op_matmul_reads_a_transposed_array_as_stored():
    """``w.T`` of a stored N x K ``w`` is read as ``w`` is stored (``trans_b``: the main
    loop's N x K form, 16-byte copies), not as a strided K x N array; before, on a GPU, it
    was copied element by element (a 4096³ f32 product 40 times slower)."""
    x, w = np.zeros((512, 256), np.float16), np.zeros((1024, 256), np.float16)
    product = op._transposed_product(False, True, ())
    lowered = lower(product._trace(operands(product.name, (x, w))), True)
    (source,) = [s.text for s in lowered.sources if s is not None]
    assert "yt = tile.load_block(" in source and "acc = tile.dot(x, y, acc)" in source
    assert op._stored_transposed(w.T) and not op._stored_transposed(w)
    assert not op._stored_transposed(w[:, ::2].T)  # strided: as it is


# ----------------------------------------------------------------------------- the emulator
NUMPY = {
    "f16": np.float16,
    "bf16": ml_dtypes.bfloat16,
    "f64": np.float64,
    "i8": np.int8,
    "f8e4m3": ml_dtypes.float8_e4m3fn,
}
BK = {"f16": 32, "bf16": 32, "f64": 16, "i8": 64, "f8e4m3": 64}


def _plan(dtype: str, bm=64, bn=64, bk=None, threads=128, stages=3, a_km=False, b_nk=True):
    d = getattr(D, dtype)
    wm, wn = warp_grid(bm, bn, threads // 32, SHAPES[d])
    bk = bk or BK[dtype]
    return Mainloop(
        None, "a", "b", "acc", "A", "B", None, None, bm, bn, bk, d, threads, wm, wn, stages,
        b_nk=b_nk, a_km=a_km,
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
    """Run the loop on ``A`` (M x K, or K x M) and ``B`` (N x K, or K x N); acc must be
    acc + the blocks' product."""
    step = plan.k
    acc_t = {D.f64: np.float64, D.i8: np.int32}.get(plan.dtype, np.float32)
    acc = (
        rng.integers(-9, 9, (plan.m, plan.n))
        if acc_t is np.int32
        else rng.standard_normal((plan.m, plan.n))
    ).astype(acc_t)
    want = acc.astype(np.float64)
    A64, B64 = A.astype(np.float64), B.astype(np.float64)
    A64, B64 = (A64.T if plan.a_km else A64), (B64 if plan.b_nk else B64.T)
    for k0 in range(start, stop, step):
        a = _block(A64, row0, k0, plan.m, plan.k)
        b = _block(B64, col0, k0, plan.n, plan.k)
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


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f64"])
@pytest.mark.parametrize("b_nk", [False, True])
@pytest.mark.parametrize("variant", [{}, {"chunks": True, "whole": True}, {"chunks": False}])
def test_the_loop_over_a_stored_k_by_m_gives_the_blocks_product(dtype, b_nk, variant, rng):
    """A's fragments by ``ldmatrix.trans`` (f64: 8-byte loads down its columns), with B
    stored either way, without bank conflicts."""
    plan = _plan(dtype, a_km=True, b_nk=b_nk)
    k = 3 * plan.k
    A = _values(rng, dtype, (k, 128))
    B = _values(rng, dtype, (128, k) if b_nk else (k, 128))
    emu = _check(plan, A, B, 64, 0, 0, k, rng, **variant)
    conflicts = ("ldmatrix_conflicts", "lds64_conflicts", "cp16_conflicts")
    assert all(emu.stats[c] == 0 for c in conflicts)


@pytest.mark.parametrize("row0, col0", [(80, 48), (-20, -8), (2**62, 0)])
def test_blocks_overhanging_a_k_by_m_a_read_zeros(row0, col0, rng):
    plan = _plan("f16", a_km=True, b_nk=False)
    A, B = _values(rng, "f16", (72, 100)), _values(rng, "f16", (72, 90))  # K = 72: overhangs
    _check(plan, A, B, row0, col0, 0, 72, rng)


def test_a_k_by_m_block_whose_columns_start_inside_a_chunk_is_copied_element_by_element(rng):
    plan = _plan("f16", a_km=True, b_nk=False)
    A, B = _values(rng, "f16", (96, 128)), _values(rng, "f16", (96, 64))
    emu = _check(plan, A, B, 4, 0, 0, 96, rng)  # A's block starts 8 bytes into a chunk
    assert emu.stats["st16"] > 0


def test_the_rotated_128_by_256_loop_takes_b_stored_n_by_k(rng):
    plan = _plan("f16", 128, 256, 32, 256, 4)
    assert mainloop.rotates(plan)
    A, B = _values(rng, "f16", (128, 128)), _values(rng, "f16", (256, 128))
    _check(plan, A, B, 0, 0, 0, 128, rng, chunks=True, whole=True)


# ----------------------------------------------------------------------------- whole kernels
@pytest.mark.parametrize(
    "kern, target",
    [(gemm_nt, "cpu"), (gemm_nt, "debug"), (gemm_nt_loaded_t, "debug"), (gemm_tt, "debug")],
)
def test_a_transposed_gemm_kernel_matches_numpy_on_the_cpu_targets(kern, target, rng):
    A, B = _operands(rng, 100, 90, 70)  # M x K, N x K
    a = np.ascontiguousarray(A.T) if kern is gemm_tt else A
    C = np.zeros((100, 90), np.float32)
    with ts.config(target=target):
        kern[2, 2](a, B, C)
    want = A.astype(np.float64) @ B.astype(np.float64).T
    np.testing.assert_allclose(C, want, rtol=1e-3, atol=1e-3)


@IN_SIMULATOR
@pytest.mark.parametrize(
    "kern, m, n, k", [(gemm_nt, 70, 40, 40), (gemm_tn, 64, 64, 64), (gemm_tt, 64, 64, 64)]
)
def test_a_transposed_gemm_kernel_runs_its_main_loop_under_the_warp_simulator(kern, m, n, k, rng):
    A, B = _operands(rng, m, n, k)  # M x K, N x K
    a = np.ascontiguousarray(A.T) if kern in (gemm_tn, gemm_tt) else A
    b = np.ascontiguousarray(B.T) if kern is gemm_tn else B
    C = np.zeros((m, n), np.float32)
    warp_sim.run(kern, a, b, C, grid=(-(-m // 64), -(-n // 64)))
    want = A.astype(np.float64) @ B.astype(np.float64).T
    np.testing.assert_allclose(C, want, rtol=1e-4, atol=1e-4)


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
    # the 128 x 256 block (one block an SM, fragments a step ahead); when measured, a
    # 128 x 128 block's k-tile was 117 instructions, 142 with k bounds (K x N: 122, 165)
    [(128, 256, 512, 64, 16, 6, 162)],
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
def test_a_k_by_m_gemm_k_tile_is_its_products_copies_and_one_barrier():
    """A by ``ldmatrix.x4.trans`` (the 128 x 256 block, a k-tile of 32; its K x N
    counterpart: 173 instructions)."""
    a, b = np.zeros((512, 512), np.float16), np.zeros((512, 512), np.float16)
    c = np.zeros((512, 512), np.float32)
    text = gemm_tn_big.inspect("sass", a, b, c, 128, 256, grid=(4, 2), arch="sm_90")
    (loop,) = [x for x in sass.loops(text) if sass.counts(x)["HMMA"]]
    ops = sass.counts(loop)
    assert (ops["HMMA"], ops["LDSM"], ops["LDGSTS"], ops["BAR"]) == (64, 16, 6, 1)
    assert len(loop.instructions) <= 171 and not sass.local_memory(text)


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
