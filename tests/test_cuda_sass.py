"""SASS checks of the CUDA target's hot loops, without a GPU: the cubin ptxas makes for
sm_90 (sm_89 for f8's own tensor-core instruction), disassembled by nvdisasm
(``k.inspect("sass")``, targets/cuda/sass.py). They hold what the loops' speed was
measured with (bench/README.md, "Sixteenth session"): a GEMM k-tile's tensor-core
instructions, its copies and barrier, a ceiling on the instructions beside them, nothing
in local memory."""

from __future__ import annotations

import importlib.util
import os

import ml_dtypes
import numpy as np
import pytest
from gpu_arrays import made_up_gpu_array

import tessera as ts
from tessera import f8e4m3, f16, f32, f64, graph, group_id, i8, i32, kernel, mut, op, tile
from tessera.kernel.targets.cuda import sass

NO_SASS = pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
    or importlib.util.find_spec("numba.cuda") is None
    or sass.nvdisasm() is None,
    reason="needs numba-cuda without its simulator and nvdisasm (the test extras install it)",
)


@kernel(tile=(256,))
def gemm(A: f16[M, K], B: f16[K, N], C: mut[f32[M, N]], BM: ts.constexpr, BN: ts.constexpr):
    m0, n0 = group_id(0) * BM, group_id(1) * BN
    acc = tile.zeros((BM, BN), f32)
    for k0 in tile.range(0, K, 32):
        a = tile.load_block(A, (m0, k0), (BM, 32))
        b = tile.load_block(B, (k0, n0), (32, BN))
        acc = tile.dot(a, b, acc)
    tile.store_block(C, (m0, n0), acc)


def _steady_loop(bm: int, bn: int, k: int = 512) -> tuple[sass.Block, str]:
    a, b = np.zeros((512, k), np.float16), np.zeros((k, 512), np.float16)
    c = np.zeros((512, 512), np.float32)
    text = gemm.inspect("sass", a, b, c, bm, bn, grid=(512 // bm, 512 // bn), arch="sm_90")
    (loop,) = [b for b in sass.loops(text) if sass.counts(b)["HMMA"]]
    return loop, text


@NO_SASS
@pytest.mark.parametrize(
    "bm, bn, k, hmma, ldsm, copies, ceiling",
    [
        # K a multiple of the block's 32: the copies check no k bound (mainloop.whole_tiles)
        (128, 128, 512, 32, 12, 4, 122),
        (128, 256, 512, 64, 16, 6, 173),  # (fragments a k16 step ahead: mainloop.rotates)
        # a last tile past K: each copy checks its k bounds too
        (128, 128, 520, 32, 12, 4, 165),
        (128, 256, 520, 64, 16, 6, 216),
    ],
)
def test_a_gemm_k_tile_is_its_products_copies_one_barrier_and_little_else(
    bm, bn, k, hmma, ldsm, copies, ceiling
):
    loop, text = _steady_loop(bm, bn, k)
    ops = sass.counts(loop)
    assert (ops["HMMA"], ops["LDSM"], ops["LDGSTS"], ops["BAR"]) == (hmma, ldsm, copies, 1)
    assert len(loop.instructions) <= ceiling  # the integer work a k-tile spends beside
    assert not sass.local_memory(text)


def test_an_instructions_opcode_drops_its_guard_and_modifiers():
    assert sass.opcode("@!P0 HMMA.16816.F32 R4, R8, R12, R4") == "HMMA"
    assert sass.opcode("LDGSTS.E.BYPASS.128 [R75], desc[UR8][R72.64], P5") == "LDGSTS"


def test_a_block_that_branches_back_to_its_label_is_a_loop():
    text = """
    .L_x_7:
        /*0100*/                   IADD3 R1, R1, 0x1, RZ ;
        /*0110*/              @P0 BRA `(.L_x_7) ;
    .L_x_8:
        /*0120*/                   EXIT ;
    """
    (loop,) = sass.loops(text)
    assert loop.label == ".L_x_7" and len(loop.instructions) == 2


@NO_SASS
def test_without_nvdisasm_the_sass_stage_says_what_to_install(monkeypatch):
    monkeypatch.setattr(sass, "nvdisasm", lambda: None)
    a, c = np.zeros((256, 256), np.float16), np.zeros((256, 256), np.float32)
    with pytest.raises(ts.TesseraError, match="pip install nvidia-cuda-nvdisasm"):
        gemm.inspect("sass", a, a, c, 128, 128, grid=(2, 2), arch="sm_90")


@kernel(tile=(128,))
def dgemm(A: f64[M, K], B: f64[K, N], C: mut[f64[M, N]]):
    m0, n0 = group_id(0) * 64, group_id(1) * 64
    acc = tile.zeros((64, 64), f64)
    for k0 in tile.range(0, K, 16):
        a = tile.load_block(A, (m0, k0), (64, 16))
        b = tile.load_block(B, (k0, n0), (16, 64))
        acc = tile.dot(a, b, acc)
    tile.store_block(C, (m0, n0), acc)


@NO_SASS
def test_an_f64_gemm_k_tile_is_its_dmma_products_and_shared_loads():
    a = np.zeros((128, 64))
    text = dgemm.inspect("sass", a, a.T.copy(), np.zeros((128, 128)), grid=(2, 2), arch="sm_90")
    (loop,) = [b for b in sass.loops(text) if sass.counts(b)["DMMA"]]
    ops = sass.counts(loop)
    assert (ops["DMMA"], ops["LDGSTS"], ops["BAR"]) == (64, 8, 1)
    assert len(loop.instructions) <= 319 and not sass.local_memory(text)


@NO_SASS
def test_flash_attention_on_gpu_arrays_keeps_its_rows_out_of_local_memory():
    attention = graph.module("attention")(lambda q, k, v: op.flash_attention(q, k, v))
    args = (made_up_gpu_array((4096, 64), np.float16),) * 3
    text = attention.inspect("sass", *args)
    assert sum(sass.counts(b)["HMMA"] for b in sass.blocks(text)) == 64
    assert not sass.local_memory(text)


@kernel(tile=(256,))
def igemm(A: i8[M, K], B: i8[K, N], C: mut[i32[M, N]]):
    m0, n0 = group_id(0) * 128, group_id(1) * 128
    acc = tile.zeros((128, 128), i32)
    for k0 in tile.range(0, K, 64):
        a = tile.load_block(A, (m0, k0), (128, 64))
        b = tile.load_block(B, (k0, n0), (64, 128))
        acc = tile.dot(a, b, acc)
    tile.store_block(C, (m0, n0), acc)


@kernel(tile=(256,))
def f8gemm(A: f8e4m3[M, K], B: f8e4m3[K, N], C: mut[f32[M, N]]):
    m0, n0 = group_id(0) * 128, group_id(1) * 128
    acc = tile.zeros((128, 128), f32)
    for k0 in tile.range(0, K, 64):
        a = tile.load_block(A, (m0, k0), (128, 64))
        b = tile.load_block(B, (k0, n0), (64, 128))
        acc = tile.dot(a, b, acc)
    tile.store_block(C, (m0, n0), acc)


def _eight_bit_loop(kern, dtype, out, arch) -> tuple[dict, int, str]:
    a = np.zeros((512, 512), dtype)
    text = kern.inspect("sass", a, a, np.zeros((512, 512), out), grid=(4, 4), arch=arch)
    (loop,) = [b for b in sass.loops(text) if sass.counts(b)["LDGSTS"]]
    return sass.counts(loop), len(loop.instructions), text


@NO_SASS
def test_an_i8_gemm_k_tile_is_imma_from_ldmatrix_a_and_transposed_words_of_b():
    """A 64-deep k-tile of the 128 x 128 block, warp tiles 64 x 32: 2 k32 steps x (4
    ldmatrix.x4 of A, 8 words of B's rows transposed by 16 PRMT into 4 n8 tiles, 16
    IMMA)."""
    ops, size, text = _eight_bit_loop(igemm, np.int8, np.int32, "sm_90")
    assert (ops["IMMA"], ops["LDSM"], ops["LDGSTS"], ops["BAR"]) == (32, 8, 4, 1)
    loads = [i for i in _loop_lines(text, "IMMA") if sass.opcode(i) == "LDS" and "RZ" not in i]
    assert len(loads) == 16 and ops["PRMT"] == 32 and size <= 171
    assert not sass.local_memory(text)


@NO_SASS
@pytest.mark.parametrize(
    "arch, tensor, count, ceiling",
    [
        # sm_89 (Ada) has the f8 tensor-core instruction
        ("sm_89", "QMMA", 32, 176),
        # sm_90's mma.sync on f8 is ptxas's: each m16n8k32 as two f16 HMMA.16816 from
        # zero, their f8 operands converted by F2FP, the sums added by FADD (H100's own f8
        # tensor-core path is wgmma)
        ("sm_90", "HMMA", 64, 427),
    ],
)
def test_an_f8_gemm_k_tile_is_on_tensor_cores_from_sm_89_on(arch, tensor, count, ceiling):
    ops, size, text = _eight_bit_loop(f8gemm, ml_dtypes.float8_e4m3fn, np.float32, arch)
    assert (ops[tensor], ops["LDSM"], ops["LDGSTS"], ops["BAR"]) == (count, 8, 4, 1)
    if arch == "sm_90":
        assert (ops["QMMA"], ops["F2FP"], ops["FADD"]) == (0, 96, 128)
    assert size <= ceiling and not sass.local_memory(text)


def _loop_lines(text: str, opcode: str) -> list[str]:
    (loop,) = [b for b in sass.loops(text) if sass.counts(b)[opcode]]
    return loop.instructions
