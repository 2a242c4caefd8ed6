"""``tile.dot`` of unsigned and mixed 8-bit operands: u8 x u8, u8 x i8 and i8 x u8 into
exact i32 (quantized activations by weights), f8e4m3 x f8e5m2 either way into f32 (FP8
training's backward products). On every target against NumPy; on CUDA the
``mma.sync.m16n8k32`` forms with ``.u8``/``.s8`` and ``.e4m3``/``.e5m2`` operands: the
register main loop in the lockstep emulator, ``tile.dot`` outside a GEMM loop, which
loops take them, and each instruction text assembled by ptxas. No GPU needed."""

from __future__ import annotations

import functools
import importlib.util
import os

import ml_dtypes
import numpy as np
import pytest
from test_cuda_mma8 import _block, _Lines, _pack_bytes, _run, _warp_range

from tessera import KiB, f32, group_id, i32, kernel, mut, tile
from tessera import dtypes as D
from tessera.errors import TesseraError
from tessera.kernel.targets.cuda import emulator, mma
from tessera.kernel.targets.cuda.isa import mma_sync
from tessera.kernel.targets.cuda.passes.mainloop import SHAPES, Mainloop, warp_grid

NO_PTX = pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or importlib.util.find_spec("numba.cuda") is None,
    reason="generated CUDA source and PTX need numba-cuda without its simulator",
)
E4M3, E5M2 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2
INTS = {"i8": (np.int8, -128, 128), "u8": (np.uint8, 0, 256)}
PAIRS = [("u8", "u8"), ("u8", "i8"), ("i8", "u8")]


def _ints(rng, name, shape):
    dtype, low, high = INTS[name]
    return rng.integers(low, high, shape).astype(dtype)


# ----------------------------------------------------------------------------- every target
@functools.cache
def product(a_name: str, b_name: str, m: int, k: int, n: int):
    """A kernel storing one ``tile.dot`` of an (m, k) ``a_name`` tile by a (k, n)
    ``b_name`` one."""
    a_t, b_t = getattr(D, a_name), getattr(D, b_name)
    c_t = i32 if a_name in ("i8", "u8") else f32

    @kernel(tile=(16,), shared=16 * KiB)
    def dot(a: a_t[m, k], b: b_t[k, n], c: mut[c_t[m, n]]):
        x, y = tile.load_block(a, (0, 0), (m, k)), tile.load_block(b, (0, 0), (k, n))
        tile.store_block(c, (0, 0), tile.dot(x, y))

    return dot


@pytest.mark.parametrize("pair", PAIRS)
def test_8_bit_integers_of_either_sign_multiply_into_exact_i32(target, pair, rng):
    """Values of 128 and more in a u8 tile stay positive (zero-extended, not sign-)."""
    a, b = _ints(rng, pair[0], (19, 40)), _ints(rng, pair[1], (40, 37))
    c = np.zeros((19, 37), np.int32)
    product(*pair, 19, 40, 37)[1](a, b, c)
    assert np.array_equal(c, a.astype(np.int32) @ b.astype(np.int32))


def test_f8e4m3_by_f8e5m2_is_exact_in_f32(target, rng):
    """Quarters times halves, 32 products: every partial sum is exact in f32."""
    a = (rng.integers(-16, 17, (16, 32)) / 4).astype(E4M3)
    b = (rng.integers(-8, 9, (32, 24)) / 2).astype(E5M2)
    c = np.zeros((16, 24), np.float32)
    product("f8e4m3", "f8e5m2", 16, 32, 24)[1](a, b, c)
    assert np.array_equal(c, a.astype(np.float64) @ b.astype(np.float64))


@pytest.mark.parametrize("pair", [("i8", "f8e4m3"), ("u8", "f16"), ("f16", "bf16")])
def test_other_dtype_pairs_are_an_error_naming_the_pairs_tile_dot_takes(pair):
    a_t, b_t = (getattr(D, name) for name in pair)
    with pytest.raises(TesseraError) as caught:

        @kernel(tile=(16,), shared=16 * KiB)
        def mixed(a: a_t[16, 32], b: b_t[32, 16], c: mut[f32[16, 16]]):
            x = tile.load_block(a, (0, 0), (16, 32))
            tile.store_block(c, (0, 0), tile.dot(x, tile.load_block(b, (0, 0), (32, 16))))

    text = str(caught.value)
    assert f"not {pair[0]} and {pair[1]}" in text and "an i8 and a u8 tile" in text
    assert "test_mixed_dots.py:" in text  # the line of the product


# ----------------------------------------------------------------------------- emulator
def _plan(a, b, bm=64, bn=64, bk=64, threads=128, stages=3) -> Mainloop:
    dtype, b_dtype = getattr(D, a), getattr(D, b)
    wm, wn = warp_grid(bm, bn, threads // 32, SHAPES[dtype])
    mixed = b_dtype if b_dtype is not dtype else None
    return Mainloop(
        None, "a", "b", "acc", "A", "B", None, None, bm, bn, bk, dtype, threads, wm, wn, stages,
        b_dtype=mixed,
    )  # fmt: skip


@pytest.mark.parametrize("pair", PAIRS)
@pytest.mark.parametrize("bm, bn, bk, threads, stages", [(64, 64, 64, 128, 3), (32, 32, 32, 64, 2)])
def test_a_main_loop_of_unsigned_or_mixed_bytes_is_exact_in_int32(
    pair, bm, bn, bk, threads, stages, rng
):
    plan = _plan(*pair, bm, bn, bk, threads, stages)
    A, B = _ints(rng, pair[0], (bm, 3 * bk)), _ints(rng, pair[1], (3 * bk, bn))
    acc = rng.integers(-(2**20), 2**20, (bm, bn)).astype(np.int32)
    want = acc + A.astype(np.int64) @ B.astype(np.int64)
    emu = _run(plan, A, B, acc, 0, 0, 0, 3 * bk, bk)
    np.testing.assert_array_equal(acc, want)
    assert emu.stats["mma"] > 0 and emu.stats["ldmatrix_conflicts"] == 0


@pytest.mark.parametrize("pair", [("f8e4m3", "f8e5m2"), ("f8e5m2", "f8e4m3")])
def test_a_main_loop_of_the_two_8_bit_floats_gives_the_exact_sum(pair, rng):
    plan = _plan(*pair, 64, 64, 32)
    fp8 = {"f8e4m3": E4M3, "f8e5m2": E5M2}
    A = (rng.integers(-8, 9, (64, 96)) / 2).astype(fp8[pair[0]])
    B = (rng.integers(-8, 9, (96, 64)) / 2).astype(fp8[pair[1]])
    acc = np.full((64, 64), 0.25, np.float32)
    _run(plan, A, B, acc, 0, 0, 0, 96, 32)
    want = 0.25 + _block(A.astype(np.float64), 0, 0, 64, 96) @ B.astype(np.float64)
    np.testing.assert_array_equal(acc, want)


@pytest.mark.parametrize("pair", PAIRS)
def test_a_tile_dot_outside_a_gemm_loop_runs_the_pairs_m16n8k32(pair, rng):
    """``mma.emit_dot``'s code for tiles in shared memory, run warp by warp with the
    instruction's model (its operand types decoded as the ISA states them)."""
    a_t, b_t = getattr(D, pair[0]), getattr(D, pair[1])
    inst = mma.instruction_for(a_t, b_t, False, 32, 48, 64, 64)
    ptx_types = {"i8": "s8", "u8": "u8"}
    assert inst.ptx.endswith(f".s32.{ptx_types[pair[0]]}.{ptx_types[pair[1]]}.s32")
    x, y = _ints(rng, pair[0], (32, 64)), _ints(rng, pair[1], (64, 48))
    out = np.zeros((32, 48), np.int32)
    cg = _Lines(64)
    mma.emit_dot(cg, inst, "x", "y", None, "out", (32, 64, 48))
    code = compile("\n".join(cg.lines), "<emit_dot>", "exec")

    def model(*registers):
        regs = np.stack([np.asarray(r, np.uint32) for r in registers[:6]], 1)
        c = np.stack([np.broadcast_to(np.asarray(v, np.float64), (32,)) for v in registers[6:]], 1)
        d = emulator.warp_mma(inst.isa, regs, c)
        return tuple(d[:, i] for i in range(4))

    for warp in range(2):
        scope = {
            "np": np, "range": _warp_range, "x": x, "y": y, "out": out,
            "cuda": emulator.BlockEmulator(32, 0).namespace()["cuda"],
            "_lane": 32 * warp + np.arange(32), inst.pack: _pack_bytes, inst.name: model,
        }  # fmt: skip
        exec(code, scope)  # noqa: S102
    np.testing.assert_array_equal(out, x.astype(np.int64) @ y.astype(np.int64))


# ----------------------------------------------------------------------------- which loops
@functools.cache
def gemm(a_name: str, b_name: str):
    """A 64 x 64-block GEMM loop of an ``a_name`` A by a ``b_name`` B."""
    a_t, b_t = getattr(D, a_name), getattr(D, b_name)
    acc_t = i32 if a_name in ("i8", "u8") else f32

    @kernel(tile=(128,))
    def loop(A: a_t[M, K], B: b_t[K, N], C: mut[acc_t[M, N]]):
        m0, n0 = group_id(0) * 64, group_id(1) * 64
        acc = tile.zeros((64, 64), acc_t)
        for k0 in tile.range(0, K, 64):
            a = tile.load_block(A, (m0, k0), (64, 64))
            b = tile.load_block(B, (k0, n0), (64, 64))
            acc = tile.dot(a, b, acc)
        tile.store_block(C, (m0, n0), acc)

    return loop


def _args(a_dtype, b_dtype, acc_dtype):
    return (
        np.zeros((128, 128), a_dtype),
        np.zeros((128, 128), b_dtype),
        np.zeros((128, 128), acc_dtype),
    )


@NO_PTX
def test_a_u8_by_i8_gemm_loop_is_the_register_main_loop_on_m16n8k32():
    source = gemm("u8", "i8").inspect(
        "cuda", *_args(np.uint8, np.int8, np.int32), grid=(2, 2), arch="sm_80"
    )
    assert "# register GEMM main loop: 64x64 i32 accumulator in registers" in source
    assert "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32" in source


@NO_PTX
@pytest.mark.parametrize("arch, registers", [("sm_80", False), ("sm_89", True)])
def test_an_e4m3_by_e5m2_gemm_loop_takes_tensor_cores_from_sm_89_on(arch, registers):
    source = gemm("f8e4m3", "f8e5m2").inspect(
        "cuda", *_args(E4M3, E5M2, np.float32), grid=(2, 2), arch=arch
    )
    assert ("# register GEMM main loop: 64x64 f32 accumulator" in source) is registers
    assert ("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e5m2.f32" in source) is registers


@NO_PTX
def test_the_u8_by_i8_loop_assembles_without_spills_and_reports_its_operands():
    meta = gemm("u8", "i8").metadata(*_args(np.uint8, np.int8, np.int32), grid=(2, 2), arch="sm_80")
    assert meta["fragments"]["dtype_in"] == "u8 x i8" and meta["fragments"]["mma"] == "m16n8k32"
    assert meta["spill_bytes"] == 0


# ----------------------------------------------------------------------------- ptxas
MIXED_FORMS = [
    (isa, "sm_89" if isa.d_type == "f32" else "sm_80")
    for isa in mma_sync.EIGHT_BIT
    if isa.a_type != isa.b_type or isa.a_type == "u8"
]


@pytest.mark.parametrize("isa, arch", MIXED_FORMS, ids=[isa.ptx for isa, _ in MIXED_FORMS])
def test_each_unsigned_and_mixed_8_bit_form_assembles(isa, arch):
    toolchain = pytest.importorskip("tessera.kernel.targets.cuda.toolchain")
    pytest.importorskip("cuda.bindings.nvjitlink")
    kind, reg = ("r", ".b32") if isa.d_type == "s32" else ("f", ".f32")
    d = ", ".join(f"%{kind}{i}" for i in range(1, 5))
    c = ", ".join(f"%{kind}{i}" for i in range(5, 9))
    ptx = f""".version 8.4
.target {arch}
.address_size 64
.visible .entry probe(.param .u64 out) {{
  .reg .b32 %a<7>;
  .reg {reg} %{kind}<9>;
  .reg .b64 %rd<2>;
  {isa.ptx} {{{d}}}, {{%a1, %a2, %a3, %a4}}, {{%a5, %a6}}, {{{c}}};
  ld.param.u64 %rd1, [out];
  st.global{reg} [%rd1], %{kind}1;
  ret;
}}
"""
    cubin, _ = toolchain.link([ptx], arch)
    assert cubin[:4] == b"\x7fELF"
