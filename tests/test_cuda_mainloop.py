"""The register GEMM main loop on CUDA (passes/mainloop.py, cuda/mainloop.py): which loops
take it, the emitted loop run by the lockstep block emulator against NumPy (edges,
misaligned arrays, stages, tile shapes, f16 and bf16), the emulator catching broken
variants of the loop, and PTX/cubin checks for sm_80 and sm_90 (no GPU needed)."""

from __future__ import annotations

import importlib.util
import os

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera import bf16, f16, f32, f64, group_id, kernel, mut, tile
from tessera import dtypes as D
from tessera.kernel.targets.cuda import emulator, mainloop
from tessera.kernel.targets.cuda.acc_layout import register_loops
from tessera.kernel.targets.cuda.passes.mainloop import SHAPES, Mainloop, warp_grid

NO_PTX = pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or importlib.util.find_spec("numba.cuda") is None,
    reason="generated CUDA source and PTX need numba-cuda without its simulator",
)
ARCHS = ["sm_80", "sm_90"]
DTYPES = {"f16": D.f16, "bf16": D.bf16, "f64": D.f64}
NP_DTYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f64": np.float64}


# ----------------------------------------------------------------------------- kernels
@kernel(tile=(128,))
def gemm(A: f16[M, K], B: f16[K, N], C: mut[f32[M, N]], BM: ts.constexpr, BN: ts.constexpr):
    m0, n0 = group_id(0) * BM, group_id(1) * BN
    acc = tile.zeros((BM, BN), f32)
    for k0 in tile.range(0, K, 32):
        a = tile.load_block(A, (m0, k0), (BM, 32))
        b = tile.load_block(B, (k0, n0), (32, BN))
        acc = tile.dot(a, b, acc)
    tile.store_block(C, (m0, n0), acc)


@kernel(tile=(64,))
def gemm_deep(A: bf16[M, K], B: bf16[K, N], C: mut[f32[M, N]]):
    m0, n0 = group_id(0) * 32, group_id(1) * 64
    acc = tile.zeros((32, 64), f32)
    for k0 in tile.range(0, K, 32, prefetch=3):
        b = tile.load_block(B, (k0, n0), (32, 64))
        a = tile.load_block(A, (m0, k0), (32, 32))
        acc = tile.dot(a, b, acc)
    tile.store_block(C, (m0, n0), acc)


@kernel(tile=(128,))
def gemm_reads_a_after(A: f16[M, K], B: f16[K, N], C: mut[f32[M, N]]):
    m0, n0 = group_id(0) * 64, group_id(1) * 64
    acc = tile.zeros((64, 64), f32)
    a = tile.zeros((64, 32), f16)
    for k0 in tile.range(0, K, 32):
        a = tile.load_block(A, (m0, k0), (64, 32))
        b = tile.load_block(B, (k0, n0), (32, 64))
        acc = tile.dot(a, b, acc)
    tile.store_block(C, (m0, n0), acc + a.astype(f32).sum())


@kernel(tile=(256,))
def linear_relu(
    A: f16[M, K], B: f16[K, N], bias: f32[N], C: mut[f16[M, N]], BM: ts.constexpr, BN: ts.constexpr
):
    """examples/gemm_tiles.py with f16 operands and an f16 result. Its 128 x 128 f32
    accumulator (64 KiB) needs no ``shared=``: a target may keep it in registers."""
    m0, n0 = group_id(0) * BM, group_id(1) * BN
    acc = tile.zeros((BM, BN), f32)
    for k0 in tile.range(0, K, 32):
        a = tile.load_block(A, (m0, k0), (BM, 32))
        b = tile.load_block(B, (k0, n0), (32, BN))
        acc = tile.dot(a, b, acc)
    y = acc + tile.load_block(bias, (n0,), (BN,))[None, :]
    tile.store_block(C, (m0, n0), max(y, 0.0).astype(f16))


@kernel(tile=(128,))
def gemm_then_reduce(A: f16[M, K], B: f16[K, N], C: mut[f32[M, N]], s: mut[f32[M]]):
    m0, n0 = group_id(0) * 64, group_id(1) * 64
    acc = tile.full((64, 64), 1.0, f32)
    for k0 in tile.range(0, K, 32):
        a = tile.load_block(A, (m0, k0), (64, 32))
        b = tile.load_block(B, (k0, n0), (32, 64))
        acc = tile.dot(a, b, acc)
    acc = acc * 2.0
    tile.store_block(C, (m0, n0), acc)
    tile.store_block(s, (m0,), acc.sum(axis=1))


@kernel(tile=(128,))
def dgemm(A: f64[M, K], B: f64[K, N], C: mut[f64[M, N]]):
    m0, n0 = group_id(0) * 64, group_id(1) * 64
    acc = tile.zeros((64, 64), f64)
    for k0 in tile.range(0, K, 16):
        a = tile.load_block(A, (m0, k0), (64, 16))
        b = tile.load_block(B, (k0, n0), (16, 64))
        acc = tile.dot(a, b, acc)
    tile.store_block(C, (m0, n0), acc)


@kernel(tile=(64,))
def gemm_lanes(A: f16[M, K], B: f16[K, N], C: mut[f32[M, N]], out: mut[f32[L]]):
    """A GEMM whose lanes also do lane code: its block keeps 64 threads (2 warps)."""
    m0, n0 = group_id(0) * 64, group_id(1) * 64
    acc = tile.zeros((64, 64), f32)
    for k0 in tile.range(0, K, 32):
        a = tile.load_block(A, (m0, k0), (64, 32))
        b = tile.load_block(B, (k0, n0), (32, 64))
        acc = tile.dot(a, b, acc)
    tile.store_block(C, (m0, n0), acc)
    i = tile.linear_id()
    if i < L:
        out[i] = 1.0


def _args(dtype=np.float16, m=128, k=64, n=128):
    return np.zeros((m, k), dtype), np.zeros((k, n), dtype), np.zeros((m, n), np.float32)


# ----------------------------------------------------------------------------- which loops
@NO_PTX
def test_an_f16_gemm_loop_runs_as_the_register_main_loop():
    source = gemm.inspect("cuda", *_args(), 64, 64, grid=(2, 2), arch="sm_80")
    assert "# register GEMM main loop: 64x64 f32 accumulator in registers" in source
    assert "(2x2 warps of 32x32)" in source and "3 swizzled shared stages" in source
    # the operand blocks are never tiles: no shared arrays for a and b
    assert "v_a = " not in source and "v_b = " not in source
    assert "_cp_wait1()" in source  # S - 2 groups stay in flight


@NO_PTX
def test_the_ring_is_4_deep_on_sm_90_and_3_before():
    for arch, stages in (("sm_80", 3), ("sm_86", 3), ("sm_90", 4)):
        source = gemm.inspect("cuda", *_args(), 64, 64, grid=(2, 2), arch=arch)
        assert f"through {stages} swizzled shared stages" in source


@NO_PTX
def test_prefetch_sets_the_stages_and_the_load_order_does_not_matter():
    a, b, c = _args(ml_dtypes.bfloat16, 64, 64, 128)
    source = gemm_deep.inspect("cuda", a, b, c, grid=(2, 2), arch="sm_80")
    assert "(1x4 warps of 32x16), mma.sync.aligned.m16n8k16.row.col.f32.bf16" in source
    assert "through 4 swizzled shared stages" in source and "_cp_wait2()" in source


@NO_PTX
def test_a_loop_whose_block_is_read_after_it_keeps_the_general_path():
    args = _args(np.float16, 64, 64, 64)
    source = gemm_reads_a_after.inspect("cuda", *args, grid=(1, 1), arch="sm_90")
    assert "register GEMM main loop" not in source


@NO_PTX
def test_before_sm_80_the_gemm_loop_keeps_the_general_path():
    source = gemm.inspect("cuda", *_args(), 64, 64, grid=(2, 2), arch="sm_75")
    assert "register GEMM main loop" not in source and "_mma_" not in source


@NO_PTX
def test_the_epilogue_runs_on_the_accumulators_registers():
    a, b, c = _args(np.float16, 256, 64, 256)
    args = (a, b, np.zeros(256, np.float32), c.astype(np.float16), 128, 128)
    source = linear_relu.inspect("cuda", *args, grid=(2, 2), arch="sm_90")
    assert "v_acc =" not in source and "v_y =" not in source  # no shared tiles for them
    assert "v_acc[" not in source and "v_y[" not in source
    assert "cuda.syncthreads()" not in source.split("# tile.store_block(C")[1]  # no barrier
    ptx = linear_relu.inspect("ptx", *args, grid=(2, 2), arch="sm_90")
    assert "ld.local" not in ptx and "st.local" not in ptx
    meta = linear_relu.metadata(*args, grid=(2, 2), arch="sm_90")
    assert meta["spill_bytes"] == 0
    assert meta["shared_bytes"] == 4 * (128 * 32 + 32 * 128) * 2 + 128 + 128 * 4  # ring, bias


@NO_PTX
def test_a_statement_that_needs_the_tile_in_shared_memory_gets_it_there_once():
    a, b, c = _args(np.float16, 64, 64, 64)
    source = gemm_then_reduce.inspect("cuda", a, b, c, np.zeros(64, np.float32), grid=(1, 1))
    assert "np.float32(1.0)" in source.split("register GEMM main loop")[1]  # tile.full
    epilogue = source.split("_cp_wait_all()")[1]
    # acc * 2 and its store in registers, then acc written once (one loop) to its
    # shared tile for the row sums
    assert epilogue.count("v_acc[_mr0 + _mg") == 1 and "cuda.syncthreads()" in epilogue


def test_a_large_accumulator_needs_no_shared_budget_and_runs_on_the_cpu(rng):
    a = rng.standard_normal((200, 96)).astype(np.float16)
    b = rng.standard_normal((96, 130)).astype(np.float16)
    bias = rng.standard_normal(130).astype(np.float32)
    y = np.zeros((200, 130), np.float16)
    with ts.config(target="cpu"):
        linear_relu[(2, 2)](a, b, bias, y, 128, 128)
    want = np.maximum(a.astype(np.float64) @ b.astype(np.float64) + bias, 0)
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=2e-3, atol=2e-2)


@NO_PTX
def test_where_the_accumulator_stays_in_shared_memory_the_budget_counts_it():
    a, b, c = _args(np.float16, 256, 64, 256)
    args = (a, b, np.zeros(256, np.float32), c.astype(np.float16), 128, 128)
    with pytest.raises(ts.KernelError, match=r"tile 'acc' .* needs 65536 bytes .* 49152"):
        linear_relu.inspect("cuda", *args, grid=(2, 2), arch="sm_75")  # no mma.sync there


@NO_PTX
def test_a_tile_only_gemm_kernel_gets_the_warps_its_block_needs():
    """tile=(64,) declares 2 warps; the block of a tile-only GEMM kernel gets 4 (warp
    tiles of 32 x 16), while group_tile_count() and the metadata's tile stay 64."""
    a, b, c = _args(ml_dtypes.bfloat16, 64, 64, 128)
    meta = gemm_deep.metadata(a, b, c.astype(np.float32), grid=(2, 2), arch="sm_80")
    assert meta["group"] == [64] and meta["launch"]["block"] == [128, 1, 1]
    ptx = gemm_deep.inspect("ptx", a, b, c.astype(np.float32), grid=(2, 2), arch="sm_80")
    assert ".maxntid 128, 1, 1" in ptx


@NO_PTX
def test_a_kernel_with_lane_code_keeps_one_thread_per_lane():
    a, b, c = _args(np.float16, 64, 64, 64)
    source = gemm_lanes.inspect("cuda", a, b, c, np.zeros(64, np.float32), grid=(1, 1))
    assert "register GEMM main loop: 64x64 f32 accumulator in registers (1x2 warps" in source


def test_warp_grids_give_whole_fragment_tiles_to_every_warp():
    assert warp_grid(64, 64, 4) == (2, 2)
    assert warp_grid(128, 256, 8) == (2, 4)
    assert warp_grid(32, 64, 2) == (1, 2)
    assert warp_grid(16, 16, 2) is None  # 16 columns: one n16 pair for two warps


# ----------------------------------------------------------------------------- emulator
def _plan(dtype="f16", bm=64, bn=64, bk=32, threads=128, stages=3) -> Mainloop:
    wm, wn = warp_grid(bm, bn, threads // 32, SHAPES[getattr(D, dtype)])
    return Mainloop(
        None, "a", "b", "acc", "A", "B", None, None, bm, bn, bk, getattr(D, dtype), threads,
        wm, wn, stages,
    )  # fmt: skip


def _reference(A, B, acc, row0, col0, bk, ks) -> np.ndarray:
    """acc + the blocks' product in f64, elements outside A and B reading 0."""
    bm, bn = acc.shape
    out = acc.astype(np.float64)
    for k0 in ks:
        out += _block(A, row0, k0, bm, bk) @ _block(B, k0, col0, bk, bn)
    return out


def _block(X, r0, c0, rows, cols) -> np.ndarray:
    """The block of X at (r0, c0), zeros outside X."""
    out = np.zeros((rows, cols))
    r_lo, r_hi = max(r0, 0), min(r0 + rows, X.shape[0])
    c_lo, c_hi = max(c0, 0), min(c0 + cols, X.shape[1])
    if r_lo < r_hi and c_lo < c_hi:
        out[r_lo - r0 : r_hi - r0, c_lo - c0 : c_hi - c0] = X[r_lo:r_hi, c_lo:c_hi]
    return out


def _check(plan, A, B, row0, col0, start, stop, step, rng, eager=False):
    acc = rng.standard_normal((plan.m, plan.n)).astype(
        np.float32 if plan.dtype != D.f64 else np.float64
    )
    want = _reference(A, B, acc, row0, col0, plan.k, range(start, stop, step))
    emu = emulator.run_mainloop(plan, A, B, acc, row0, col0, start, stop, step, eager=eager)
    np.testing.assert_allclose(acc, want, rtol=1e-5, atol=1e-4)
    return emu


def _operands(rng, dtype, m, k, n):
    t = NP_DTYPES[dtype]
    return rng.standard_normal((m, k)).astype(t), rng.standard_normal((k, n)).astype(t)


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f64"])
@pytest.mark.parametrize("eager", [False, True])
def test_the_emitted_loop_computes_acc_plus_the_blocks_product(dtype, eager, rng):
    plan = _plan(dtype)
    A, B = _operands(rng, dtype, 128, 96, 128)
    emu = _check(plan, A, B, 64, 0, 0, 96, 32, rng, eager)
    assert emu.stats["cp16"] > 0 and emu.stats["st16"] + emu.stats["st64"] == 0  # 16-byte only
    conflicts = ("ldmatrix_conflicts", "lds64_conflicts", "cp16_conflicts")
    assert all(emu.stats[c] == 0 for c in conflicts)


@pytest.mark.parametrize(
    "bm, bn, bk, threads, stages",
    [(32, 32, 32, 64, 2), (64, 128, 64, 128, 3), (128, 128, 32, 256, 4), (64, 64, 16, 128, 3)],
)
def test_every_tile_shape_and_depth_gives_the_product_without_bank_conflicts(
    bm, bn, bk, threads, stages, rng
):
    plan = _plan("f16", bm, bn, bk, threads, stages)
    A, B = _operands(rng, "f16", bm, 3 * bk, bn)
    emu = _check(plan, A, B, 0, 0, 0, 3 * bk, bk, rng)
    assert emu.stats["ldmatrix_conflicts"] == 0 and emu.stats["cp16_conflicts"] == 0


def test_f64_blocks_of_every_shape_multiply_on_dmma_without_bank_conflicts(rng):
    for bm, bn, bk, threads in ((64, 64, 16, 128), (32, 32, 16, 64), (64, 128, 32, 256)):
        plan = _plan("f64", bm, bn, bk, threads)
        A, B = _operands(rng, "f64", bm + 7, 2 * bk + 6, bn + 2)  # edges on every side
        emu = _check(plan, A, B, 0, 0, 0, 2 * bk + 6, bk, rng)
        assert emu.stats["lds64"] > 0 and emu.stats["lds64_conflicts"] == 0
        assert emu.stats["cp16_conflicts"] == 0


def test_misaligned_f64_views_are_copied_element_by_element(rng):
    plan = _plan("f64", 64, 64, 16)
    A0, B0 = _operands(rng, "f64", 64, 49, 65)
    emu = _check(plan, A0[:, 1:], B0[:48, 1:], 0, 0, 0, 48, 16, rng)
    assert emu.stats["cp16"] == 0 and emu.stats["st64"] > 0


@pytest.mark.parametrize("row0, col0", [(80, 48), (-20, -8), (2**62, 0), (0, -(2**62))])
def test_blocks_overhanging_the_arrays_read_zeros(row0, col0, rng):
    plan = _plan("f16")
    A, B = _operands(rng, "f16", 100, 72, 90)  # K % 8 == 0, N % 8 != 0: B by elements
    emu = _check(plan, A, B, row0, col0, 0, 72, 32, rng)
    assert emu.stats["st16"] > 0


def test_misaligned_views_are_copied_element_by_element(rng):
    plan = _plan("bf16")
    A0, B0 = _operands(rng, "bf16", 64, 97, 129)
    A, B = A0[:, 1:], B0[:96, 1:]  # rows start 2 bytes past 16-byte alignment
    emu = _check(plan, A, B, 0, 0, 0, 96, 32, rng)
    assert emu.stats["cp16"] == 0 and emu.stats["st16"] > 0


@pytest.mark.parametrize("start, stop, step", [(4, 70, 32), (8, 72, 32), (0, 0, 32), (64, 0, -32)])
def test_any_range_of_k_blocks_is_summed(start, stop, step, rng):
    plan = _plan("f16")
    A, B = _operands(rng, "f16", 64, 96, 64)
    _check(plan, A, B, 0, 0, start, stop, step, rng)


def test_registers_can_start_from_a_constant_instead_of_the_tile(rng):
    plan = _plan("f16")
    A, B = _operands(rng, "f16", 64, 64, 64)
    acc = np.full((64, 64), np.nan, np.float32)  # never read
    emulator.run_mainloop(plan, A, B, acc, 0, 0, 0, 64, 32, init="np.float32(1.5)")
    want = A.astype(np.float64) @ B.astype(np.float64) + 1.5
    np.testing.assert_allclose(acc, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", ["f16", "i8"])  # i8: columns interleaved by four n8 tiles
@pytest.mark.parametrize("bm, bn, threads", [(64, 64, 128), (128, 128, 256), (32, 64, 64)])
def test_the_epilogue_visits_each_element_once_at_its_accumulator_register(bm, bn, threads, dtype):
    """register_loops (the epilogue's element loops) against the loop's own write-back."""
    plan = _plan(dtype, bm, bn, 32, threads)
    element = {"f16": np.float16, "i8": np.int8}[dtype]
    hits = np.zeros((bm, bn), np.int64)
    where = np.full((bm, bn), -1, np.int64)
    out = emulator._Lines()
    for line in emulator.mainloop_source(plan).splitlines()[1:]:
        if line.strip().startswith("_mra"):
            break
        out.lines.append(line)  # the thread's coordinates (_mg, _mq, _mwm, _mwn)
    register_loops(
        out, mainloop.layout(plan), lambda r, c, reg, _: out.emit(f"_hit({r}, {c}, {reg})")
    )

    def hit(row, col, reg):
        np.add.at(hits, (row, col), 1)
        where[row, col] = np.arange(threads) * plan.accumulators + reg

    scope = emulator.BlockEmulator(threads, 0).namespace() | {"_hit": hit}
    exec("def _run(_lane):\n" + "\n".join(out.lines), scope)  # noqa: S102
    scope["_run"](np.arange(threads))
    assert (hits == 1).all()
    # the same (thread, register) the loop writes back at each element
    acc = np.zeros((bm, bn), np.float32)
    regs = np.arange(threads * plan.accumulators, dtype=np.float32)
    source = emulator.mainloop_source(plan, init=f"_seq[_lane * {plan.accumulators} + _mj]")
    emu = emulator.BlockEmulator(threads, plan.ring_bytes)
    names = emu.namespace() | {"_seq": regs}
    exec(compile(source, "<loop>", "exec"), names)  # noqa: S102
    names["_run"](
        np.zeros((bm, 32), element), np.zeros((32, bn), element), acc,
        np.zeros(plan.ring_bytes, np.uint8), 0, 0, 0, 0, 32, np.arange(threads),
    )  # fmt: skip
    np.testing.assert_array_equal(acc, where.astype(np.float32))


@pytest.mark.parametrize("n0, n1", [(1, 1), (8, 8), (13, 5), (32, 32), (3, 40), (17, 1)])
def test_grouped_raster_order_visits_every_group_once(n0, n1):
    out = emulator._Lines()
    mainloop.grouped_raster(out, 8)
    scope = {"min": np.minimum}
    exec("def _ids(_g, _N0, _N1):\n" + "\n".join(out.lines) + "\n    return _g0, _g1, _g", scope)  # noqa: S102
    blocks = np.arange(n0 * n1)
    g0, g1, linear = scope["_ids"](blocks, n0, n1)
    assert sorted(zip(g0.tolist(), g1.tolist())) == [(i, j) for i in range(n0) for j in range(n1)]
    np.testing.assert_array_equal(linear, g0 * n1 + g1)  # group_linear_id agrees
    if n0 >= 8:  # the first blocks cover a band of 8 group rows, column by column
        assert set(g0[:8].tolist()) == set(range(8)) and set(g1[:8].tolist()) == {0}


@NO_PTX
def test_gemm_kernels_number_their_groups_in_bands():
    source = gemm.inspect("cuda", *_args(), 64, 64, grid=(2, 2), arch="sm_90")
    assert "_gw = 8 * _N1" in source


# ----------------------------------------------------------------------------- mutants
def _mutant(plan, old: str, new: str) -> str:
    source = emulator.mainloop_source(plan)
    assert old in source
    return source.replace(old, new, 1)


@pytest.mark.parametrize(
    "old, new",
    [
        ("    cuda.syncthreads()\n", "    pass\n"),  # no barrier before reading a stage
        ("_cp_wait1()", "_cp_wait2()"),  # one group too many in flight
        ("_mwo = np.uint32(16384)", "_mwo = np.uint32(0)"),  # copies into the stage read
    ],
)
def test_the_emulator_catches_a_race_in_a_broken_loop(old, new, rng):
    plan = _plan("f16")
    A, B = _operands(rng, "f16", 64, 128, 64)
    acc = np.zeros((64, 64), np.float32)
    source = _mutant(plan, old, new)
    with pytest.raises(emulator.EmulatorError):
        emulator.run_mainloop(plan, A, B, acc, 0, 0, 0, 128, 32, source=source)


@pytest.mark.parametrize(
    "old, new",
    [
        ("_ldsm4t(", "_ldsm4("),  # B fragments without .trans
        ("^ _mswa)", "^ 0)"),  # the reader forgets A's swizzle
        ("_mgb[2 * _mnt], _mgb[2 * _mnt + 1]", "_mgb[2 * _mnt + 1], _mgb[2 * _mnt]"),  # B swapped
    ],
)
def test_the_emulator_catches_a_wrong_layout_in_a_broken_loop(old, new, rng):
    plan = _plan("f16")
    A, B = _operands(rng, "f16", 64, 64, 64)
    acc = np.zeros((64, 64), np.float32)
    want = A.astype(np.float64) @ B.astype(np.float64)
    emulator.run_mainloop(plan, A, B, acc, 0, 0, 0, 64, 32, source=_mutant(plan, old, new))
    assert np.abs(acc - want).max() > 1e-2


# ----------------------------------------------------------------------------- PTX, cubin
@NO_PTX
@pytest.mark.parametrize("arch", ARCHS)
def test_the_main_loop_is_ldmatrix_mma_and_16_byte_copies_in_ptx(arch):
    ptx = gemm.inspect("ptx", *_args(), 64, 64, grid=(2, 2), arch=arch)
    # per k-tile of 32 and warp tile 32x32: 2 k16 steps x (2 A + 2 B ldmatrix, 8 mma), in
    # one loop: the arrays allow 16-byte chunks, so the kernel holds the branch-free loop
    # alone (tests/test_cuda_chunk_variants.py)
    assert ptx.count("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32") == 16
    assert ptx.count("ldmatrix.sync.aligned.m8n8.x4.shared.b16") == 4
    assert ptx.count("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16") == 4
    # 64x32 A and 32x64 B blocks: two 16-byte chunks of each per thread (the prologue's,
    # the branch-free loop's)
    assert ptx.count("cp.async.cg.shared.global [") == 2 * 4
    assert f"cp.async.wait_group {1 if arch == 'sm_80' else 2};" in ptx  # S - 2
    assert "ld.local" not in ptx and "st.local" not in ptx
    assert "cvt.rn.f16x2.f32" not in ptx  # f16 bits go to the stages as they are


@NO_PTX
@pytest.mark.parametrize("arch", ARCHS)
def test_an_f64_gemm_loop_is_dmma_from_8_byte_shared_loads_in_ptx(arch):
    a = np.zeros((128, 64))
    source = dgemm.inspect("cuda", a, a.T.copy(), np.zeros((128, 128)), grid=(2, 2), arch=arch)
    assert "# register GEMM main loop: 64x64 f64 accumulator" in source
    ptx = dgemm.inspect("ptx", a, a.T.copy(), np.zeros((128, 128)), grid=(2, 2), arch=arch)
    # a k-tile of 16: 4 k4 steps x 4 x 4 m8n8 tiles of a 32x32 warp tile (one loop: the
    # arrays allow chunks)
    assert ptx.count("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64") == 64
    assert ptx.count("ld.shared.f64") == 4 * (4 + 4)
    assert "ld.local" not in ptx and "st.local" not in ptx
    meta = dgemm.metadata(a, a.T.copy(), np.zeros((128, 128)), grid=(2, 2), arch=arch)
    assert meta["spill_bytes"] == 0


@NO_PTX
@pytest.mark.parametrize("arch", ARCHS)
def test_the_main_loop_assembles_without_spills(arch):
    meta = gemm.metadata(*_args(), 64, 64, grid=(2, 2), arch=arch)
    assert meta["spill_bytes"] == 0 and 0 < meta["registers_per_thread"] <= 255
    ring = (3 if arch == "sm_80" else 4) * (64 * 32 + 32 * 64) * 2 + 128
    assert meta["shared_bytes"] == ring  # acc never leaves the registers


# ----------------------------------------------------------------------------- sweep
def _sweep_cases(count: int, seed: int):
    """Random plans the pass accepts (shapes, warps, stages, dtypes) with random arrays
    (edges, views that start off 16-byte alignment, transposed strides) and ranges."""
    gen = np.random.default_rng(seed)
    cases = []
    while len(cases) < count:
        dtype = str(gen.choice(["f16", "bf16", "f64"]))
        bm, bn = (int(x) for x in gen.choice([16, 32, 64, 128], 2))
        bk = int(gen.choice([16, 32, 64]))
        threads = int(gen.choice([32, 64, 128, 256]))
        shape = SHAPES[DTYPES[dtype]]
        grid = warp_grid(bm, bn, threads // 32, shape)
        per_chunk = 16 // shape.element
        if (
            grid is None
            or (bm * bk // per_chunk) % threads
            or (bk * bn // per_chunk) % threads
            or (shape.element == 8 and min(bk, bn) < 16)
            or bm * bn // threads * (2 if dtype == "f64" else 1) > 128
        ):
            continue
        cases.append(
            (dtype, bm, bn, bk, threads, int(gen.integers(2, 5)), int(gen.integers(1 << 30)))
        )
    return cases


@pytest.mark.parametrize("case", _sweep_cases(60, 2026), ids=lambda c: "-".join(map(str, c[:6])))
def test_random_plans_and_arrays_give_the_blocks_product(case):
    dtype, bm, bn, bk, threads, stages, seed = case
    gen = np.random.default_rng(seed)
    plan = _plan(dtype, bm, bn, bk, threads, stages)
    m, n = int(gen.integers(1, 2 * bm)), int(gen.integers(1, 2 * bn))
    k = int(gen.integers(1, 4 * bk))
    A, B = _operands(gen, dtype, m + 1, k + 1, n + 1)
    if gen.random() < 0.3:  # a view off 16-byte alignment
        A, B = A[1:, 1:], B[1:, 1:]
    else:
        A, B = A[:m, :k], B[:k, :n]
    if gen.random() < 0.3:  # A read through transposed strides
        A = np.ascontiguousarray(A.T).T
    row0 = int(gen.integers(-bm, A.shape[0] + 1))
    col0 = int(gen.integers(-bn, B.shape[1] + 1))
    start = int(gen.integers(-bk, 2))
    _check(plan, A, B, row0, col0, start, A.shape[1], bk, gen, eager=bool(gen.random() < 0.5))


# ----------------------------------------------------------------------------- schedule
def test_a_chunked_copy_adds_constants_to_offsets_computed_before_the_loop():
    source = emulator.mainloop_source(_plan("f16", 64, 64, 32, threads=128))
    before, loop = source.split("for _mi in range(", 1)
    for block in ("a", "b"):  # each thread's chunk: its row, column, shared and array offsets
        assert f"_mx{block}o = " in before and f"_mx{block}g = " in before
        assert f"_mb{block} + _mx{block}g + _my{block} + _mj * _mx{block}p, _mok * 16" in loop
    fast = loop.split("else:", 1)[0]  # the chunked copies, not the element-wise fallback
    assert "_msa0" not in fast and "_msb0 *" not in fast.replace("_mkb * _msb0", "")


def test_an_iteration_starts_its_products_before_it_issues_its_copies():
    source = emulator.mainloop_source(_plan("f16", 64, 64, 32, threads=128))
    loop = source.split("for _mi in range(_mkt):", 1)[1]
    barrier, first_mma, copy = (
        loop.index("cuda.syncthreads()"),
        loop.index("_mma_f16("),
        loop.index("_cp16("),
    )
    assert barrier < first_mma < copy
    assert "for _mkk in range(1, 2):" in loop[copy:]  # the second k16 step after the copies


def test_where_every_tile_copies_by_chunks_an_iteration_has_no_branch():
    source = emulator.mainloop_source(_plan("f16", 64, 64, 32, threads=128))
    fast = source.split("for _mi in range(_mkt):", 2)[1]
    branch_free = fast.split("\n    else:", 1)[0]  # up to the general loop
    assert not [ln for ln in branch_free.splitlines() if ln.strip().startswith("if ")]
    assert "& (_mi < _mkl)" in fast  # a tile past the last fills zeros, unread


@NO_PTX
def test_a_128x128_gemm_block_asks_for_two_blocks_an_sm_and_spills_nothing():
    args = (np.zeros((256, 256), np.float16),) * 2 + (np.zeros((256, 256), np.float32),)
    ptx = gemm.inspect("ptx", *args, 128, 128, grid=(2, 2), arch="sm_90")
    assert ".minnctapersm 2" in ptx
    meta = gemm.metadata(*args, 128, 128, grid=(2, 2), arch="sm_90")
    assert meta["spill_bytes"] == 0 and meta["registers_per_thread"] <= 128
    assert meta["occupancy"]["blocks_per_sm"] == 2


@NO_PTX
def test_a_128x256_gemm_block_keeps_one_block_an_sm_for_its_accumulators():
    args = (np.zeros((256, 256), np.float16),) * 2 + (np.zeros((256, 256), np.float32),)
    ptx = gemm.inspect("ptx", *args, 128, 256, grid=(2, 1), arch="sm_90")
    assert ".minnctapersm" not in ptx


@NO_PTX
def test_where_two_blocks_an_sm_would_spill_the_kernel_is_compiled_for_one(monkeypatch):
    from tessera.kernel.targets.cuda.passes import launch_shape

    monkeypatch.setattr(launch_shape, "TWO_BLOCKS_ACCUMULATORS", 128)  # ask for too much
    args = (np.zeros((256, 256), np.float16),) * 2 + (np.zeros((256, 256), np.float32),)
    ptx = gemm.inspect("ptx", *args, 128, 256, grid=(2, 1), arch="sm_90")
    assert ".minnctapersm" not in ptx  # 128 accumulators do not fit 128 registers
    meta = gemm.metadata(*args, 128, 256, grid=(2, 1), arch="sm_90")
    assert meta["spill_bytes"] == 0
