"""The register GEMM main loop's two steady loops chosen by the launch (docs/targets.md,
"Register GEMM main loop"): where every copy's offset is a multiple of a 16-byte chunk
for every launch (passes/divisibility.py), a kernel holds only the loop its arrays allow,
the chunked one or the general one, so NVVM compiles one of them; the launch's test of
the arrays agrees with the kernel's own condition, and each variant computes the
product (the lockstep emulator; whole kernels under the warp simulator)."""

from __future__ import annotations

import importlib.util
import os

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera import dtypes as D
from tessera import f16, f32, group_id, kernel, mut, tile
from tessera.kernel import ir
from tessera.kernel.passes.divisibility import multiple_of
from tessera.kernel.targets.cuda import emulator, mainloop, stage_copy, warp_sim
from tessera.kernel.targets.cuda.passes.mainloop import SHAPES, Mainloop, warp_grid

NO_PTX = pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or importlib.util.find_spec("numba.cuda") is None,
    reason="generated CUDA source needs numba-cuda without its simulator",
)
IN_SIMULATOR = pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") != "1",
    reason="runs in the simulator process (test_cuda_simulator.py starts it)",
)
LOC = ts.errors.SourceLoc("k.py", 1, 0)


@kernel(tile=(128,))
def gemm(A: f16[M, K], B: f16[K, N], C: mut[f32[M, N]], BM: ts.constexpr, BN: ts.constexpr):
    m0, n0 = group_id(0) * BM, group_id(1) * BN
    acc = tile.zeros((BM, BN), f32)
    for k0 in tile.range(0, K, 32):
        a = tile.load_block(A, (m0, k0), (BM, 32))
        b = tile.load_block(B, (k0, n0), (32, BN))
        acc = tile.dot(a, b, acc)
    tile.store_block(C, (m0, n0), acc)


@kernel(tile=(128,))
def gemm_from(A: f16[M, K], B: f16[K, N], C: mut[f32[M, N]], k_first: ts.i64):
    m0, n0 = group_id(0) * 64, group_id(1) * 64
    acc = tile.zeros((64, 64), f32)
    for k0 in tile.range(k_first, K, 32):  # a start no launch can vouch for
        a = tile.load_block(A, (m0, k0), (64, 32))
        b = tile.load_block(B, (k0, n0), (32, 64))
        acc = tile.dot(a, b, acc)
    tile.store_block(C, (m0, n0), acc)


@kernel(tile=(128,))
def gemm_to(A: f16[M, K], B: f16[K, N], C: mut[f32[M, N]], k_last: ts.i64):
    m0, n0 = group_id(0) * 64, group_id(1) * 64
    acc = tile.zeros((64, 64), f32)
    for k0 in tile.range(0, k_last, 32):  # a stop the launch reads from its scalar
        a = tile.load_block(A, (m0, k0), (64, 32))
        b = tile.load_block(B, (k0, n0), (32, 64))
        acc = tile.dot(a, b, acc)
    tile.store_block(C, (m0, n0), acc)


# ----------------------------------------------------------------------------- multiples
def _c(v):
    return ir.Const(LOC, v)


def _n(name):
    return ir.Name(LOC, name)


def _b(op, a, b):
    return ir.BinOp(LOC, op, a, b)


def test_a_constant_is_a_multiple_when_it_divides():
    assert multiple_of(_c(64), 8, {}) and not multiple_of(_c(12), 8, {})


def test_a_product_with_a_multiple_is_one_whatever_the_other_factor():
    assert multiple_of(_b("*", _n("pid"), _c(128)), 8, {})
    assert not multiple_of(_b("*", _n("pid"), _c(4)), 8, {})


def test_a_sum_is_a_multiple_only_when_both_terms_are():
    assert multiple_of(_b("+", _c(16), _b("*", _n("pid"), _c(32))), 8, {})
    assert not multiple_of(_b("+", _c(1), _b("*", _n("pid"), _c(32))), 8, {})


def test_a_name_assigned_once_is_its_value_and_anything_else_is_unknown():
    defs = {"n0": _b("*", _n("pid"), _c(64))}
    assert multiple_of(_n("n0"), 8, defs)
    assert not multiple_of(_n("k_first"), 8, defs)  # a parameter: no definition


def test_a_left_shift_by_enough_bits_is_a_multiple():
    assert multiple_of(_b("<<", _n("pid"), _c(3)), 8, {})
    assert not multiple_of(_b("<<", _n("pid"), _c(2)), 8, {})


# ----------------------------------------------------------------------------- the launch's test
def _kernel_condition(block: stage_copy.Block, address: int, arr: np.ndarray) -> bool:
    """The kernel's own condition (``chunks_possible`` and ``narrow``) evaluated."""
    scope = {
        f"_mb{block.name}": address,
        f"_ms{block.name}0": arr.strides[0],
        f"_ms{block.name}1": arr.strides[1],
        block.array: arr,
    }
    code = f"({stage_copy.chunks_possible(block)}) and ({stage_copy.narrow(block)})"
    return bool(eval(code, {}, scope))  # noqa: S307 - generated condition under test


def test_the_launchs_test_of_an_array_agrees_with_the_kernels_condition():
    gen = np.random.default_rng(7)
    agreed = {True: 0, False: 0}
    for _ in range(400):
        element = int(gen.choice([2, 8]))
        dtype = np.float16 if element == 2 else np.float64
        ce = 16 // element
        rows, cols = (int(x) for x in gen.integers(1, 70, 2))
        if gen.random() < 0.6:  # whole chunks a row, mostly
            cols = ce * (cols // ce + 1)
        width = cols + int(gen.choice([0, ce, 1]))  # the rows' distance
        base = np.zeros((rows + 2, width + ce), dtype)
        first = int(gen.choice([0, 0, ce, 1]))  # the view's first column
        arr = base[int(gen.integers(0, 2)) :, first:][:rows, :cols]
        if gen.random() < 0.2:
            arr = arr.T
        block = stage_copy.Block("a", "X", 64, 32, element)
        address = int(arr.ctypes.data)
        got = stage_copy.launch_chunkable(block, address, arr.shape, arr.strides)
        assert got == _kernel_condition(block, address, arr)
        agreed[got] += 1
    assert agreed[True] > 20 and agreed[False] > 20  # both answers were tried


# ----------------------------------------------------------------------------- the variants
def _plan(dtype, bm=64, bn=64, bk=32, threads=128, stages=3):
    shape = SHAPES[dtype]
    wm, wn = warp_grid(bm, bn, threads // 32, shape)
    return Mainloop(
        None, "a", "b", "acc", "A", "B", None, None, bm, bn, bk, dtype, threads, wm, wn, stages
    )  # fmt: skip


def _reference(A, B, acc, row0, col0, bk, ks):
    out = acc.astype(np.float64)
    bm, bn = acc.shape
    for k0 in ks:
        out += _block(A, row0, k0, bm, bk) @ _block(B, k0, col0, bk, bn)
    return out


def _block(X, r0, c0, rows, cols):
    out = np.zeros((rows, cols))
    r_lo, r_hi = max(r0, 0), min(r0 + rows, X.shape[0])
    c_lo, c_hi = max(c0, 0), min(c0 + cols, X.shape[1])
    if r_lo < r_hi and c_lo < c_hi:
        out[r_lo - r0 : r_hi - r0, c_lo - c0 : c_hi - c0] = X[r_lo:r_hi, c_lo:c_hi]
    return out


def _variant_cases(count: int, seed: int):
    gen = np.random.default_rng(seed)
    cases = []
    for _ in range(count):
        dtype = str(gen.choice(["f16", "bf16", "f64"]))
        cases.append((dtype, int(gen.integers(1 << 30))))
    return cases


@pytest.mark.parametrize("case", _variant_cases(16, 2027), ids=lambda c: f"{c[0]}-{c[1]}")
def test_each_steady_loop_the_launch_may_choose_gives_the_blocks_product(case):
    dtype_name, seed = case
    gen = np.random.default_rng(seed)
    dtype = {"f16": D.f16, "bf16": D.bf16, "f64": D.f64}[dtype_name]
    np_dtype = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f64": np.float64}[dtype_name]
    plan = _plan(dtype)
    ce = plan.chunk_elements
    m, n, k = (int(x) for x in gen.integers(1, 3 * 64, 3))
    A0 = gen.standard_normal((m + 1, k + 1)).astype(np_dtype)
    B0 = gen.standard_normal((k + 1, n + 1)).astype(np_dtype)
    A, B = (A0[1:, 1:], B0[1:, 1:]) if gen.random() < 0.3 else (A0[:m, :k], B0[:k, :n])
    row0 = int(gen.integers(-64, m + 1))
    col0 = ce * int(gen.integers(-64 // ce, n // ce + 1))  # multiples, as the pass proves
    a_block, b_block = mainloop.blocks(plan, "A", "B")
    allowed = [False]
    if stage_copy.launch_chunkable(a_block, A.ctypes.data, A.shape, A.strides) and (
        stage_copy.launch_chunkable(b_block, B.ctypes.data, B.shape, B.strides)
    ):
        allowed.append(True)
    for chunks in allowed:
        acc = gen.standard_normal((64, 64)).astype(np.float32 if dtype != D.f64 else np.float64)
        want = _reference(A, B, acc, row0, col0, 32, range(0, k, 32))
        emulator.run_mainloop(plan, A, B, acc, row0, col0, 0, k, 32, chunks=chunks)
        np.testing.assert_allclose(acc, want, rtol=1e-5, atol=1e-4)
    # the chunked loop without k bounds, where its tiles all lie inside A and B
    stop = 32 * int(gen.integers(0, min(A.shape[1], B.shape[0]) // 32 + 1))
    start = 32 * int(gen.integers(0, stop // 32 + 1))
    if True in allowed:
        assert mainloop.whole_tiles(plan, start, stop, 32, A.shape[1], B.shape[0])
        acc = gen.standard_normal((64, 64)).astype(np.float32 if dtype != D.f64 else np.float64)
        want = _reference(A, B, acc, row0, col0, 32, range(start, stop, 32))
        emulator.run_mainloop(plan, A, B, acc, row0, col0, start, stop, 32, chunks=True, whole=True)
        np.testing.assert_allclose(acc, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(
    "start, stop, step, whole",
    [
        (0, 96, 32, True),
        (32, 96, 32, True),  # from a later tile
        (0, 0, 32, True),  # no tile
        (0, 80, 32, False),  # a last tile past K
        (0, 128, 32, False),  # past B's rows
        (-32, 96, 32, False),  # before the first column
        (0, 96, 16, False),  # steps that are not the block's k
    ],
)
def test_a_k_loop_is_whole_tiles_only_when_each_lies_inside_both_arrays(start, stop, step, whole):
    assert mainloop.whole_tiles(_plan(D.f16), start, stop, step, 128, 96) == whole


def test_the_whole_chunked_loop_checks_no_k_bound():
    source = emulator.mainloop_source(_plan(D.f16), chunks=True, whole=True)
    steady = source.split("for _mi in range(_mkt):", 1)[1]
    assert "_mka = _mkb = _mk" in steady and "_myla" not in steady and "_mylb" not in steady


def test_the_chunked_variant_has_one_branch_free_steady_loop():
    source = emulator.mainloop_source(_plan(D.f16), chunks=True)
    assert source.count("for _mi in range(_mkt):") == 1
    steady = source.split("for _mi in range(_mkt):", 1)[1]
    assert not [ln for ln in steady.splitlines() if ln.strip().startswith("if ")]


def test_the_general_variant_has_only_the_general_loop():
    source = emulator.mainloop_source(_plan(D.f16), chunks=False)
    assert source.count("for _mi in range(_mkt):") == 1
    assert "if _mfa and _mfb" not in source and "if _mi < _mkl:" in source


# ----------------------------------------------------------------------------- kernels
def _gemm_args(k: int):
    return (
        np.zeros((128, k), np.float16),
        np.zeros((k, 128), np.float16),
        np.zeros((128, 128), np.float32),
    )


@NO_PTX
def test_a_kernel_for_aligned_arrays_holds_only_the_chunked_loop():
    source = gemm.inspect("cuda", *_gemm_args(64), 64, 64, grid=(2, 2), arch="sm_90")
    assert source.count("for _mi in range(_mkt):") == 1
    assert "if _mfa and _mfb" not in source


@NO_PTX
def test_a_kernel_for_arrays_without_chunks_holds_only_the_general_loop():
    source = gemm.inspect("cuda", *_gemm_args(60), 64, 64, grid=(2, 2), arch="sm_90")
    assert source.count("for _mi in range(_mkt):") == 1
    assert "if _mi < _mkl:" in source.split("for _mi in range(_mkt):", 1)[1]


@pytest.mark.parametrize(
    "dtype, stages, k, whole",
    [
        (D.f16, 4, 160, True),
        (D.f16, 3, 96, True),
        (D.bf16, 2, 96, True),  # two stages: each tile waited for as soon as it is copied
        (D.f16, 4, 32, True),  # one tile: the prologue's zero fills are read ahead
        (D.f16, 4, 0, True),  # no tile at all
    ],
)
def test_the_rotated_loop_loads_fragments_a_step_ahead_and_gives_the_blocks_product(
    dtype, stages, k, whole
):
    """A 128 x 256 block (one an SM): each k16 step's fragments come from the other of two
    buffers, the last step's products after the barrier for the next tile. The lockstep
    emulator checks every shared read against the copies and barriers."""
    plan = _plan(dtype, bm=128, bn=256, threads=256, stages=stages)
    assert mainloop.rotates(plan)
    np_dtype = np.float16 if dtype == D.f16 else ml_dtypes.bfloat16
    gen = np.random.default_rng(k + stages)
    A = gen.standard_normal((100, max(k, 8))).astype(np_dtype)
    B = gen.standard_normal((max(k, 8), 200)).astype(np_dtype)
    acc = gen.standard_normal((128, 256)).astype(np.float32)
    want = _reference(A, B, acc, 0, 0, 32, range(0, k, 32))
    emulator.run_mainloop(plan, A, B, acc, 0, 0, 0, k, 32, chunks=True, whole=whole)
    np.testing.assert_allclose(acc, want, rtol=1e-4, atol=1e-3)


def test_a_two_blocks_an_sm_block_and_odd_k_steps_do_not_rotate():
    assert mainloop.rotates(_plan(D.f16, bm=128, bn=256, threads=256))
    assert not mainloop.rotates(_plan(D.f16, bm=128, bn=128, threads=256))  # 64 registers
    assert not mainloop.rotates(_plan(D.f16, bm=128, bn=256, bk=16, threads=256))  # one step
    assert not mainloop.rotates(_plan(D.f64, bm=64, bn=64, bk=16, threads=64))  # DMMA


def test_the_rotated_loop_waits_for_the_next_tile_before_its_last_products():
    plan = _plan(D.f16, bm=128, bn=256, threads=256)
    source = emulator.mainloop_source(plan, chunks=True, whole=True)
    steady = source.split("for _mi in range(_mkt):", 1)[1]
    step1, last = steady.index("(step 1)"), steady.rindex("_mma_f16")
    assert step1 < steady.index("cuda.syncthreads()") < steady.index("(step 0)") < last
    # with k bounds to check, the loop keeps one buffer (two would spill)
    bounded = emulator.mainloop_source(plan, chunks=True, whole=False)
    assert "(step 1)" not in bounded


@NO_PTX
@pytest.mark.parametrize("k, whole", [(64, True), (48, False)])
def test_the_chunked_kernel_copies_without_k_bounds_when_k_is_whole_blocks(k, whole):
    source = gemm.inspect("cuda", *_gemm_args(k), 64, 64, grid=(2, 2), arch="sm_90")
    assert ("_mka = _mkb = _mk" in source) == whole


@NO_PTX
@pytest.mark.parametrize("k, last, whole", [(64, 64, True), (96, 64, True), (64, 96, False)])
def test_a_k_loop_ending_at_a_scalar_is_whole_when_that_scalar_fits_the_arrays(k, last, whole):
    source = gemm_to.inspect("cuda", *_gemm_args(k), last, grid=(2, 2), arch="sm_90")
    assert ("_mka = _mkb = _mk" in source) == whole


@NO_PTX
def test_offsets_no_launch_can_vouch_for_keep_both_loops_in_one_kernel():
    source = gemm_from.inspect("cuda", *_gemm_args(64), 0, grid=(2, 2), arch="sm_90")
    assert source.count("for _mi in range(_mkt):") == 2 and "if _mfa and _mfb" in source


@IN_SIMULATOR
@pytest.mark.parametrize("view", ["aligned", "misaligned"])
def test_the_launch_runs_the_variant_its_arrays_allow_cuda(view):
    gen = np.random.default_rng(3)
    A0 = gen.standard_normal((97, 104)).astype(np.float16)
    B0 = gen.standard_normal((97, 136)).astype(np.float16)
    if view == "aligned":  # (one block: the variants do not depend on where it is)
        A, B = A0[:64, :96], B0[:96, :64]
    else:  # rows start 2 bytes past 16-byte alignment: no chunks
        A, B = A0[1:65, 1:97], B0[1:, 1:65]
    C = np.zeros((A.shape[0], B.shape[1]), np.float32)
    program = warp_sim.run(gemm, A, B, C, 64, 64, grid=(1, 1))
    aligned = view == "aligned"  # (K = 96: whole blocks of 32, so no k bounds either)
    assert set(program._variants) == {(aligned, aligned)}
    want = A.astype(np.float64) @ B.astype(np.float64)
    np.testing.assert_allclose(C, want, rtol=1e-3, atol=1e-2)
