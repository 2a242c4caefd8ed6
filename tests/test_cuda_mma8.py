"""``tile.dot`` of 8-bit operands on tensor cores in the register GEMM main loop
(mma.sync m16n8k32): i8 x i8 -> i32 on sm_80+, f8e4m3 / f8e5m2 -> f32 on sm_89+ (the
exact emulation, the plain path, below). The emitted loop run by the lockstep block
emulator against NumPy (i8 exact in int32; f8 within the bound of one f32 rounding a k32
step), which loops take the path on which architecture, and PTX checks; the SASS is
checked in tests/test_cuda_sass.py. No GPU needed."""

from __future__ import annotations

import importlib.util
import os

import ml_dtypes
import numpy as np
import pytest

from tessera import KiB, f8e4m3, f8e5m2, f32, group_id, i8, i32, kernel, mut, tile
from tessera import dtypes as D
from tessera.kernel.layout import swizzle_down_columns
from tessera.kernel.targets.cuda import emulator, mma
from tessera.kernel.targets.cuda.isa import banks
from tessera.kernel.targets.cuda.passes.mainloop import SHAPES, Mainloop, warp_grid

NO_PTX = pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or importlib.util.find_spec("numba.cuda") is None,
    reason="generated CUDA source and PTX need numba-cuda without its simulator",
)
E4M3, E5M2 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2
FP8 = {"f8e4m3": E4M3, "f8e5m2": E5M2}
S8_MMA = "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32"
E4M3_MMA = "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32"


@kernel(tile=(128,))
def igemm(A: i8[M, K], B: i8[K, N], C: mut[i32[M, N]]):
    m0, n0 = group_id(0) * 64, group_id(1) * 64
    acc = tile.zeros((64, 64), i32)
    for k0 in tile.range(0, K, 64):
        a = tile.load_block(A, (m0, k0), (64, 64))
        b = tile.load_block(B, (k0, n0), (64, 64))
        acc = tile.dot(a, b, acc)
    tile.store_block(C, (m0, n0), acc)


@kernel(tile=(128,))
def fgemm(A: f8e4m3[M, K], B: f8e4m3[K, N], C: mut[f32[M, N]]):
    m0, n0 = group_id(0) * 64, group_id(1) * 64
    acc = tile.zeros((64, 64), f32)
    for k0 in tile.range(0, K, 64):
        a = tile.load_block(A, (m0, k0), (64, 64))
        b = tile.load_block(B, (k0, n0), (64, 64))
        acc = tile.dot(a, b, acc)
    tile.store_block(C, (m0, n0), acc)


@kernel(tile=(128,))
def f5gemm(A: f8e5m2[M, K], B: f8e5m2[K, N], C: mut[f32[M, N]]):
    m0, n0 = group_id(0) * 64, group_id(1) * 64
    acc = tile.zeros((64, 64), f32)
    for k0 in tile.range(0, K, 32):
        a = tile.load_block(A, (m0, k0), (64, 32))
        b = tile.load_block(B, (k0, n0), (32, 64))
        acc = tile.dot(a, b, acc)
    tile.store_block(C, (m0, n0), acc)


def _i8_args(k=128):
    a, b = np.zeros((128, k), np.int8), np.zeros((k, 128), np.int8)
    return a, b, np.zeros((128, 128), np.int32)


def _f8_args(fp8=E4M3, k=128):
    a, b = np.zeros((128, k), fp8), np.zeros((k, 128), fp8)
    return a, b, np.zeros((128, 128), np.float32)


# ----------------------------------------------------------------------------- emulator
def _plan(dtype, bm=64, bn=64, bk=64, threads=128, stages=3) -> Mainloop:
    wm, wn = warp_grid(bm, bn, threads // 32, SHAPES[dtype])
    return Mainloop(
        None, "a", "b", "acc", "A", "B", None, None, bm, bn, bk, dtype, threads, wm, wn, stages
    )


def _block(X, r0, c0, rows, cols) -> np.ndarray:
    """The block of X (as float64) at (r0, c0), zeros outside X."""
    out = np.zeros((rows, cols))
    r_lo, r_hi = max(r0, 0), min(r0 + rows, X.shape[0])
    c_lo, c_hi = max(c0, 0), min(c0 + cols, X.shape[1])
    if r_lo < r_hi and c_lo < c_hi:
        out[r_lo - r0 : r_hi - r0, c_lo - c0 : c_hi - c0] = X[r_lo:r_hi, c_lo:c_hi]
    return out


def _products(plan, A, B, row0, col0, ks, magnitude=False) -> np.ndarray:
    """The blocks' product in float64 (``magnitude``: of |A| and |B|), zeros outside."""
    out = np.zeros((plan.m, plan.n))
    for k0 in ks:
        a, b = _block(A, row0, k0, plan.m, plan.k), _block(B, k0, col0, plan.k, plan.n)
        out += np.abs(a) @ np.abs(b) if magnitude else a @ b
    return out


def _bits(X: np.ndarray) -> np.ndarray:
    """What a kernel's f8 array holds on CUDA: its bits (the launch passes uint8)."""
    return X.view(np.uint8) if X.dtype in FP8.values() else X


def _run(plan, A, B, acc, row0, col0, start, stop, step, eager=False, chunks=None, whole=False):
    return emulator.run_mainloop(
        plan, _bits(A), _bits(B), acc, row0, col0, start, stop, step, eager=eager,
        chunks=chunks, whole=whole,
    )  # fmt: skip


# what a column's bank conflicts are, by B's row bytes: rows of 128 bytes or more none,
# 64 bytes 2-way (the four rows share 16 banks), 32 bytes 4-way (8 banks)
EXTRA = {32: 3, 64: 1, 128: 0, 256: 0, 512: 0}


@pytest.mark.parametrize("row_bytes", list(EXTRA))
def test_the_column_swizzle_spreads_a_k32_steps_words_and_keeps_copies_conflict_free(
    row_bytes,
):
    """A warp's 4-byte loads of B (cuda/mainloop.py ``_byte_fragments``): lane (g, t)
    reads the word of columns 4 (g % 4) .. + 3 of chunk ``2 s + g // 4`` in row ``4 t +
    j`` (plus a multiple of 16); and a warp's 16-byte copies of consecutive chunks."""
    sw, chunks = swizzle_down_columns(row_bytes), row_bytes // 16
    lanes = np.arange(32)
    group, thread = lanes // 4, lanes % 4
    for base in range(0, 64, 16):
        for j in range(4):
            for span in range(chunks // 2):
                row = base + 4 * thread + j
                chunk = np.array([sw.chunk(r, 2 * span + g // 4) for r, g in zip(row, group)])
                at = row * row_bytes + 16 * chunk + 4 * (group % 4)
                assert banks.extra_wavefronts(at, 4) == EXTRA[row_bytes]
    for first in range(0, 64 * chunks, 32):
        rows, cols = np.divmod(first + lanes, chunks)
        at = rows * row_bytes + 16 * np.array([sw.chunk(r, c) for r, c in zip(rows, cols)])
        assert banks.extra_wavefronts(at, 16) == 0


def test_prmt_picks_the_bytes_its_selector_names():
    a, b = 0x33221100, 0x77665544  # byte i of {b, a} holds 0x11 * i
    assert int(emulator.prmt(a, b, 0x3210)) == a and int(emulator.prmt(a, b, 0x7654)) == b
    assert int(emulator.prmt(a, b, 0x5140)) == 0x55114400
    assert int(emulator.prmt(a, b, 0x0123)) == 0x00112233
    assert int(emulator.prmt(0x80, 0, 0x8880)) == 0xFFFFFF80  # bit 3: the sign, replicated
    # the main loop's 4 x 4 byte transpose of four rows' words
    rows = [0x03020100 + 0x10101010 * j for j in range(4)]  # row j, column p: 0x10 j + p
    pairs = [emulator.prmt(rows[r], rows[r + 1], sel) for r in (0, 2) for sel in (0x5140, 0x7362)]
    cols = [
        emulator.prmt(pairs[lo], pairs[lo + 2], sel) for lo in (0, 1) for sel in (0x5410, 0x7632)
    ]
    assert [int(c) for c in cols] == [0x30201000 + 0x01010101 * p for p in range(4)]


# the steady loop: both in the kernel, the branch-free one alone, and that without k bounds
VARIANTS = {"both": (None, False), "chunked": (True, False), "whole": (True, True)}


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("eager", [False, True])
@pytest.mark.parametrize(
    "bm, bn, bk, threads, stages",
    [(64, 64, 64, 128, 3), (32, 32, 32, 64, 2), (128, 128, 64, 256, 4), (64, 128, 128, 128, 3)],
)
def test_an_i8_loop_is_exact_in_int32(bm, bn, bk, threads, stages, eager, variant, rng):
    plan = _plan(D.i8, bm, bn, bk, threads, stages)
    A = rng.integers(-128, 128, (bm, 3 * bk)).astype(np.int8)
    B = rng.integers(-128, 128, (3 * bk, bn)).astype(np.int8)
    acc = rng.integers(-(2**30), 2**30, (bm, bn)).astype(np.int32)
    want = (acc + _products(plan, A, B, 0, 0, range(0, 3 * bk, bk))).astype(np.int64)
    emu = _run(plan, A, B, acc, 0, 0, 0, 3 * bk, bk, eager, *VARIANTS[variant])
    np.testing.assert_array_equal(acc, want.astype(np.int32))  # (wraps as the hardware)
    assert emu.stats["mma"] > 0 and emu.stats["cp16"] > 0 and emu.stats["st16"] == 0
    assert emu.stats["ldmatrix_conflicts"] == 0 and emu.stats["cp16_conflicts"] == 0
    # B's words (layout.swizzle_down_columns): conflict-free from 128-byte rows on
    assert emu.stats["lds32_conflicts"] == EXTRA[bn] * emu.stats["lds32"] * threads // 32


def test_the_int32_accumulator_wraps_around_as_the_hardware_does():
    plan = _plan(D.i8, 32, 32, 32, 64, 2)
    A = np.full((32, 32), -128, np.int8)
    B = np.full((32, 32), -128, np.int8)
    acc = np.full((32, 32), 2**31 - 2**19, np.int32)  # + 32 * 2**14 = 2**31: wraps
    _run(plan, A, B, acc, 0, 0, 0, 32, 32)
    assert (acc == np.int32(-(2**31))).all()


@pytest.mark.parametrize("row0, col0", [(80, 48), (-20, -8), (2**62, 0)])
def test_i8_blocks_overhanging_the_arrays_read_zeros(row0, col0, rng):
    plan = _plan(D.i8)
    A = rng.integers(-128, 128, (100, 144)).astype(np.int8)  # K % 16 == 0: A by chunks
    B = rng.integers(-128, 128, (144, 90)).astype(np.int8)  # N % 16 != 0: B by elements
    acc = np.zeros((64, 64), np.int32)
    want = _products(plan, A, B, row0, col0, range(0, 144, 64))
    emu = _run(plan, A, B, acc, row0, col0, 0, 144, 64)
    np.testing.assert_array_equal(acc, want)
    assert emu.stats["cp16"] > 0


def test_misaligned_i8_views_are_copied_byte_by_byte(rng):
    plan = _plan(D.i8)
    A0 = rng.integers(-128, 128, (64, 129)).astype(np.int8)
    B0 = rng.integers(-128, 128, (129, 65)).astype(np.int8)
    A, B = A0[:, 1:], B0[:128, 1:]  # rows start a byte past 16-byte alignment
    acc = np.zeros((64, 64), np.int32)
    emu = _run(plan, A, B, acc, 0, 0, 0, 128, 64)
    np.testing.assert_array_equal(acc, _products(plan, A, B, 0, 0, range(0, 128, 64)))
    assert emu.stats["cp16"] == 0


@pytest.mark.parametrize("dtype", ["f8e4m3", "f8e5m2"])
def test_f8_products_that_f32_holds_exactly_give_the_exact_sum(dtype, rng):
    """Halves times halves, 192 of them: every partial sum is a multiple of 1/4 below
    2**20, so f32 holds it whatever the order of the additions: equal to the bit."""
    plan = _plan(getattr(D, dtype), 64, 64, 32)
    fp8 = FP8[dtype]
    A = (rng.integers(-8, 9, (64, 192)) / 2).astype(fp8)
    B = (rng.integers(-8, 9, (192, 64)) / 2).astype(fp8)
    acc = np.full((64, 64), 0.75, np.float32)
    want = 0.75 + _products(
        plan, A.astype(np.float64), B.astype(np.float64), 0, 0, range(0, 192, 32)
    )
    _run(plan, A, B, acc, 0, 0, 0, 192, 32)
    np.testing.assert_array_equal(acc, want)


@pytest.mark.parametrize("dtype", ["f8e4m3", "f8e5m2"])
def test_f8_loops_round_once_a_k32_step(dtype, rng):
    """Random f8 values (decoded by ml_dtypes): each k32 step's 32 products are exact and
    their sum is rounded once into the f32 accumulator, so the error against the float64
    sum is at most half an f32 ulp of the running sum a step: bounded by
    ``steps * 2**-24 * (|A| @ |B|)``."""
    plan = _plan(getattr(D, dtype), 64, 64, 64)
    fp8 = FP8[dtype]
    A = rng.standard_normal((64, 256)).astype(fp8)
    B = rng.standard_normal((256, 64)).astype(fp8)
    a, b = A.astype(np.float64), B.astype(np.float64)
    acc = np.zeros((64, 64), np.float32)
    _run(plan, A, B, acc, 0, 0, 0, 256, 64)
    want = _products(plan, a, b, 0, 0, range(0, 256, 64))
    bound = (256 // 32) * 2.0**-24 * _products(plan, a, b, 0, 0, range(0, 256, 64), True)
    assert np.all(np.abs(acc - want) <= bound)


# ----------------------------------------------------------------------------- which loops
@NO_PTX
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_an_i8_gemm_loop_runs_as_the_register_main_loop(arch):
    source = igemm.inspect("cuda", *_i8_args(), grid=(2, 2), arch=arch)
    assert "# register GEMM main loop: 64x64 i32 accumulator in registers" in source
    assert S8_MMA in source and "_prmt(" in source and "_ldsm4t" not in source


@NO_PTX
@pytest.mark.parametrize(
    "arch, mma", [("sm_80", False), ("sm_86", False), ("sm_89", True), ("sm_90", True)]
)
def test_an_f8_gemm_loop_takes_tensor_cores_from_sm_89_on(arch, mma):
    source = fgemm.inspect("cuda", *_f8_args(), grid=(2, 2), arch=arch)
    assert ("# register GEMM main loop: 64x64 f32 accumulator" in source) is mma
    assert (E4M3_MMA in source) is mma


# ----------------------------------------------------------------------------- PTX
@pytest.fixture(scope="module")
def i8_ptx():
    return igemm.inspect("ptx", *_i8_args(), grid=(2, 2), arch="sm_80")


@NO_PTX
def test_an_i8_k_tile_is_ldmatrix_for_a_word_loads_for_b_and_m16n8k32_in_ptx(i8_ptx):
    # per k-tile of 64 and warp tile 32x32: 2 k32 steps x (2 A ldmatrix, 8 words of B rows
    # transposed by 16 prmt into the 4 n8 tiles' registers, 8 mma), in one loop (the
    # arrays allow 16-byte chunks)
    assert i8_ptx.count(S8_MMA) == 16
    assert i8_ptx.count("ldmatrix.sync.aligned.m8n8.x4.shared.b16") == 4
    assert "ldmatrix.sync.aligned.m8n8.x4.trans" not in i8_ptx
    assert i8_ptx.count("ld.shared.b32") == 2 * 8 and i8_ptx.count("prmt.b32") == 2 * 16
    assert i8_ptx.count("cp.async.cg.shared.global [") == 2 * 4  # the prologue's, the loop's
    assert "ld.local" not in i8_ptx and "st.local" not in i8_ptx


@NO_PTX
@pytest.mark.parametrize("arch, mma", [("sm_80", False), ("sm_89", True), ("sm_90", True)])
def test_f8e5m2_mma_is_in_the_ptx_from_sm_89_on(arch, mma):
    a, b = np.zeros((128, 96), E5M2), np.zeros((96, 128), E5M2)
    ptx = f5gemm.inspect("ptx", a, b, np.zeros((128, 128), np.float32), grid=(2, 2), arch=arch)
    # a k-tile of 32: one k32 step x 8 mma (a 32x32 warp tile: 2 m16 x 4 n8 tiles; NVVM
    # may unroll the three tiles of K = 96); before sm_89 the exact emulation (the plain
    # path) and no mma
    count = ptx.count("mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32")
    assert count % 8 == 0 and (count > 0) == mma
    assert ("m16n8k32" in ptx) == mma
    assert "ld.local" not in ptx and "st.local" not in ptx
    # f8 mma.sync needs PTX ISA 8.4: NVVM's .version must be at least that
    (version,) = [line.split()[1] for line in ptx.splitlines() if line.startswith(".version")]
    assert tuple(map(int, version.split("."))) >= (8, 4)


@NO_PTX
def test_arrays_without_whole_chunks_are_copied_byte_by_byte_in_ptx():
    # 100 columns: no 16-byte chunks of B (nor of A's rows): predicated byte copies
    a, b = np.zeros((128, 100), np.int8), np.zeros((100, 100), np.int8)
    c = np.zeros((128, 100), np.int32)
    ptx = igemm.inspect("ptx", a, b, c, grid=(2, 2), arch="sm_80")
    assert ptx.count("ld.u8") > 0 and ptx.count("st.shared.u8") > 0
    assert S8_MMA in ptx and "ld.local" not in ptx


@NO_PTX
def test_metadata_reports_the_8_bit_fragments_and_no_spills():
    meta = igemm.metadata(*_i8_args(), grid=(2, 2), arch="sm_80")
    assert meta["fragments"] == {"mma": "m16n8k32", "dtype_in": "i8", "dtype_acc": "i32"}
    assert meta["spill_bytes"] == 0 and 0 < meta["registers_per_thread"] <= 255
    plain = fgemm.metadata(*_f8_args(), grid=(2, 2), arch="sm_80")  # the exact emulation
    assert "fragments" not in plain and plain["spill_bytes"] == 0


# ----------------------------------------------------------------------------- tile.dot
# outside a GEMM loop: i8 tiles in shared memory, fragments packed from their values
# (mma.emit_dot); f8 tiles hold f32 values (rounded where stored) and keep the plain path
class _Lines:
    def __init__(self, lanes: int):
        self.lanes, self.lines, self.indent = lanes, [], 0

    def emit(self, line: str, loc=None) -> None:
        self.lines.append("    " * self.indent + line)


def _warp_range(start, stop, step):
    (first,) = np.unique(np.asarray(start))  # a loop bound the same for the warp's lanes
    return range(int(first), stop, step)


def _pack_bytes(*values):
    return sum(
        (np.asarray(v, np.int64) & 0xFF).astype(np.uint32) << (8 * i) for i, v in enumerate(values)
    )


def _mma_s8(*registers):
    regs = np.stack([np.asarray(r, np.uint32) for r in registers[:6]], 1)
    c = np.stack([np.broadcast_to(np.asarray(x, np.float64), (32,)) for x in registers[6:]], 1)
    d = emulator.warp_mma(mma.M16N8K32_S8.isa, regs, c)
    return tuple(d[:, i] for i in range(4))


@pytest.mark.parametrize("m, k, n, lanes", [(16, 32, 8, 32), (32, 64, 48, 64), (64, 32, 64, 128)])
def test_emit_dot_multiplies_i8_tiles_on_m16n8k32_exactly(m, k, n, lanes, rng):
    inst = mma.instruction_for(D.i8, D.i8, False, m, n, k, lanes)
    assert inst is mma.M16N8K32_S8
    x = rng.integers(-128, 128, (m, k)).astype(np.int8)
    y = rng.integers(-128, 128, (k, n)).astype(np.int8)
    acc = rng.integers(-(2**20), 2**20, (m, n)).astype(np.int32)
    out = acc.copy()
    cg = _Lines(lanes)
    mma.emit_dot(cg, inst, "x", "y", "out", "out", (m, k, n))
    code = compile("\n".join(cg.lines), "<emit_dot>", "exec")
    for warp in range(lanes // 32):
        scope = {
            "np": np, "range": _warp_range, "x": x, "y": y, "out": out,
            "cuda": emulator.BlockEmulator(32, 0).namespace()["cuda"],
            "_lane": 32 * warp + np.arange(32), inst.pack: _pack_bytes, inst.name: _mma_s8,
        }  # fmt: skip
        exec(code, scope)  # noqa: S102
    np.testing.assert_array_equal(out, acc + x.astype(np.int64) @ y.astype(np.int64))


def test_f8_tiles_outside_a_gemm_loop_keep_the_plain_path():
    assert mma.instruction_for(D.f8e4m3, D.f8e4m3, False, 64, 64, 64, 128) is None
    assert mma.instruction_for(D.i8, D.i8, False, 16, 8, 16, 32) is None  # k not a multiple of 32


@kernel(tile=(128,), shared=48 * KiB)
def idot_twice(A: i8[M, K], B: i8[K, N], C: mut[i32[M, N]]):
    """A product the GEMM loop does not take (its blocks are used twice): tiles in shared
    memory, tile.dot on mma.emit_dot's fragments."""
    a = tile.load_block(A, (group_id(0) * 64, 0), (64, 64))
    b = tile.load_block(B, (0, group_id(1) * 64), (64, 64))
    acc = tile.dot(a, b)
    tile.store_block(C, (group_id(0) * 64, group_id(1) * 64), tile.dot(a, b, acc))


@NO_PTX
def test_an_i8_tile_dot_outside_a_gemm_loop_is_m16n8k32_in_ptx():
    a, c = np.zeros((128, 64), np.int8), np.zeros((128, 128), np.int32)
    ptx = idot_twice.inspect("ptx", a, a.T.copy(), c, grid=(2, 2), arch="sm_80")
    assert S8_MMA in ptx and "prmt.b32" in ptx
    assert "ld.local" not in ptx and "st.local" not in ptx
