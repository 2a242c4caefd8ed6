"""The f32 register GEMM main loop (no tensor cores): a ``tile.range`` GEMM loop of f32
blocks keeps its accumulator in registers laid as ``mma.sync``'s m16n8 accumulator and
multiplies on ``fma.rn.f32`` from swizzled shared stages — each lane's A values by 16-byte
shared loads (four k of a row), B's by 8-byte loads (16-byte ones where B is stored N x
K). Checked without a GPU: which loops take it, the emitted loop in the lockstep block
emulator against NumPy (edges, misaligned views, each steady loop, no bank conflicts), the
fused multiply-add's rounding, whole kernels under the warp simulator, SASS."""

from __future__ import annotations

import importlib.util
import os
import re

import numpy as np
import pytest
from test_cuda_gemm_transposed import _block

from tessera import KiB, f32, group_id, kernel, mut, tile
from tessera import dtypes as D
from tessera.kernel.targets.cuda import emulator, sass, warp_sim
from tessera.kernel.targets.cuda.passes.mainloop import SHAPES, Mainloop, warp_grid
from tessera.kernel.targets.cuda.streams import gpu_usable
from tessera.kernel.targets.own_math import numpy_fma_f32

REGISTER_PATHS = pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or importlib.util.find_spec("numba.cuda") is None,
    reason="the register paths are generated for sm_80+ without numba-cuda's simulator",
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


@kernel(tile=(256,), shared=200 * KiB)
def sgemm(A: f32[M, K], B: f32[K, N], C: mut[f32[M, N]]):
    m0, n0 = group_id(0) * 128, group_id(1) * 128
    acc = tile.zeros((128, 128), f32)
    for k0 in tile.range(0, K, 32):
        a = tile.load_block(A, (m0, k0), (128, 32))
        b = tile.load_block(B, (k0, n0), (32, 128))
        acc = tile.dot(a, b, acc)
    tile.store_block(C, (m0, n0), acc)


@kernel(tile=(128,), shared=64 * KiB)
def sgemm_nt(A: f32[M, K], W: f32[N, K], bias: f32[N], C: mut[f32[M, N]]):
    """A linear layer: ``x @ w.T + b`` with ReLU, W stored N x K."""
    m0, n0 = group_id(0) * 64, group_id(1) * 64
    acc = tile.zeros((64, 64), f32)
    for k0 in tile.range(0, K, 16):
        a = tile.load_block(A, (m0, k0), (64, 16))
        w = tile.load_block(W, (n0, k0), (64, 16))
        acc = tile.dot(a, w.T, acc)
    y = max(acc + tile.load_block(bias, (n0,), (64,))[None, :], 0.0)
    tile.store_block(C, (m0, n0), y)


@kernel(tile=(128,), shared=64 * KiB)
def sgemm_small(A: f32[M, K], B: f32[K, N], C: mut[f32[M, N]]):
    m0, n0 = group_id(0) * 64, group_id(1) * 64
    acc = tile.zeros((64, 64), f32)
    for k0 in tile.range(0, K, 16):
        a = tile.load_block(A, (m0, k0), (64, 16))
        b = tile.load_block(B, (k0, n0), (16, 64))
        acc = tile.dot(a, b, acc)
    tile.store_block(C, (m0, n0), acc)


@kernel(tile=(128,), shared=64 * KiB)
def sgemm_tf32(A: f32[M, K], B: f32[K, N], C: mut[f32[M, N]]):
    m0, n0 = group_id(0) * 64, group_id(1) * 64
    acc = tile.zeros((64, 64), f32)
    for k0 in tile.range(0, K, 16):
        a = tile.load_block(A, (m0, k0), (64, 16))
        b = tile.load_block(B, (k0, n0), (16, 64))
        acc = tile.dot(a, b, acc, allow_tf32=True)
    tile.store_block(C, (m0, n0), acc)


@kernel(tile=(128,), shared=64 * KiB)
def sgemm_tn(A: f32[K, M], B: f32[K, N], C: mut[f32[M, N]]):
    m0, n0 = group_id(0) * 64, group_id(1) * 64
    acc = tile.zeros((64, 64), f32)
    for k0 in tile.range(0, K, 16):
        a = tile.load_block(A, (k0, m0), (16, 64))
        b = tile.load_block(B, (k0, n0), (16, 64))
        acc = tile.dot(a.T, b, acc)
    tile.store_block(C, (m0, n0), acc)


def _args(rng, m=256, n=256, k=96, nt=False):
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if nt else (k, n)).astype(np.float32)
    return a, b


# ----------------------------------------------------------------------------- which loops
@REGISTER_PATHS
def test_an_f32_gemm_loop_is_a_register_main_loop_on_ffma(rng):
    a, b = _args(rng)
    c = np.zeros((256, 256), np.float32)
    source = sgemm.inspect("cuda", a, b, c, grid=(2, 2), arch="sm_90")
    assert "register GEMM main loop: 128x128 f32 accumulator in registers" in source
    assert "_lds128f(" in source and "_lds64f(" in source and "_ffma(" in source
    assert "_ldsm4" not in source and "_mma_" not in source
    text = sgemm.inspect("layouts", a, b, c, grid=(2, 2), arch="sm_90")
    assert re.search(r"^  acc: f32\[128, 128\] in registers, mma_acc, 64 registers", text, re.M)
    assert re.search(r"^  b: f32\[32, 128\] staged, .* by 8-byte shared loads$", text, re.M)
    assert re.search(r"^  b: .*rows as they are \(no swizzle", text, re.M)  # a warp reads 32 bytes
    assert re.search(r"^  a: .*16-byte chunk c of a row stored at c \^", text, re.M)


@REGISTER_PATHS
def test_the_f32_loops_four_k_of_a_step_are_a_loop_in_the_source(rng):
    """Less source for Numba's frontend to type (the k written out took 40 % more compile
    time); NVVM unrolls the loop into the same registers (the SASS test below)."""
    a, b = _args(rng)
    c = np.zeros((256, 256), np.float32)
    source = sgemm.inspect("cuda", a, b, c, grid=(2, 2), arch="sm_90")
    assert source.count("for _mkq in range(4):") == 2  # the step before the copies, the rest
    assert source.count("_ffma(") == 2 * 4  # each: one line per element of an m16n8 piece


@REGISTER_PATHS
def test_tf32_on_request_and_a_stored_k_by_m_keep_their_paths(rng):
    a, b = _args(rng, 128, 128, 64)
    c = np.zeros((128, 128), np.float32)
    tf32 = sgemm_tf32.inspect("cuda", a, b, c, grid=(2, 2), arch="sm_90")
    assert "register GEMM main loop" not in tf32 and "m16n8k8" in tf32  # the plain mma path
    tn = sgemm_tn.inspect("cuda", a.T.copy(), b, c, grid=(2, 2), arch="sm_90")
    assert "register GEMM main loop" not in tn


# ----------------------------------------------------------------------------- the emulator
def _plan(bm=64, bn=64, bk=16, threads=128, stages=3, b_nk=False):
    wm, wn = warp_grid(bm, bn, threads // 32, SHAPES[D.f32])
    return Mainloop(
        None, "a", "b", "acc", "A", "B", None, None, bm, bn, bk, D.f32, threads, wm, wn, stages,
        b_nk=b_nk,
    )  # fmt: skip


def _check(plan, A, B, row0, col0, start, stop, rng, **variant):
    """Run the loop; acc must be acc + the blocks' product (B stored N x K or K x N)."""
    acc = rng.standard_normal((plan.m, plan.n)).astype(np.float32)
    want = acc.astype(np.float64)
    Bt = B.astype(np.float64) if plan.b_nk else B.astype(np.float64).T
    for k0 in range(start, stop, plan.k):
        want = want + _block(A.astype(np.float64), row0, k0, plan.m, plan.k) @ (
            _block(Bt, col0, k0, plan.n, plan.k).T
        )
    emu = emulator.run_mainloop(plan, A, B, acc, row0, col0, start, stop, plan.k, **variant)
    np.testing.assert_allclose(acc, want, rtol=1e-5, atol=1e-4)
    return emu


CONFLICTS = ("lds128_conflicts", "lds64_conflicts", "cp16_conflicts")


@pytest.mark.parametrize("b_nk", [False, True])
@pytest.mark.parametrize("variant", [{}, {"chunks": True, "whole": True}, {"chunks": False}])
def test_the_f32_loop_gives_the_blocks_product_without_bank_conflicts(b_nk, variant, rng):
    plan = _plan(b_nk=b_nk)
    A, B = _args(rng, 128, 128, 3 * plan.k, nt=b_nk)
    emu = _check(plan, A, B, 64, 0, 0, 3 * plan.k, rng, **variant)
    assert all(emu.stats[c] == 0 for c in CONFLICTS)
    assert emu.stats["lds128"] > 0 and emu.stats["ldmatrix"] == 0 and emu.stats["mma"] == 0


@pytest.mark.parametrize("eager, b_nk", [(False, False), (True, False), (False, True)])
def test_the_128_by_128_block_of_eight_warps_in_both_copy_orders(eager, b_nk, rng):
    plan = _plan(128, 128, 32, threads=256, stages=4, b_nk=b_nk)
    A, B = _args(rng, 128, 128, 96, nt=b_nk)
    emu = _check(plan, A, B, 0, 0, 0, 96, rng, eager=eager)
    assert all(emu.stats[c] == 0 for c in CONFLICTS)


@pytest.mark.parametrize("b_nk", [False, True])
@pytest.mark.parametrize("row0, col0", [(80, 48), (-20, -8)])
def test_blocks_overhanging_the_arrays_read_zeros(b_nk, row0, col0, rng):
    plan = _plan(b_nk=b_nk)
    A, B = _args(rng, 100, 90, 2 * plan.k + 4, nt=b_nk)  # the last k tile overhangs K
    _check(plan, A, B, row0, col0, 0, 2 * plan.k + 4, rng)


def test_a_misaligned_view_is_copied_element_by_element(rng):
    plan = _plan()
    A0, B0 = _args(rng, 64, 65, 49)
    B0 = rng.standard_normal((48, 65)).astype(np.float32)
    emu = _check(plan, A0[:, 1:], B0[:, 1:], 0, 0, 0, 48, rng)  # rows 4 bytes past alignment
    assert emu.stats["st32"] > 0


def test_the_emulators_fused_multiply_add_rounds_once(rng):
    a, b, c = (
        (rng.standard_normal(4000) * 10.0 ** rng.integers(-6, 6, 4000)).astype(np.float32)
        for _ in range(3)
    )
    c[:100] = -(a[:100].astype(np.float64) * b[:100]).astype(np.float32)  # cancellations
    want = np.array([numpy_fma_f32(x, y, z) for x, y, z in zip(a, b, c)], np.float32)
    assert np.array_equal(emulator._ffma(a, b, c).view(np.uint32), want.view(np.uint32))


# ----------------------------------------------------------------------------- kernels
@IN_SIMULATOR
@pytest.mark.parametrize("nt", [False, True])
def test_whole_f32_gemm_kernels_under_the_warp_simulator(nt, rng):
    """The main loop with its grouped raster, epilogue (a bias and ReLU) and stores; one
    64 x 64 block of 4 warps over two k tiles (the 8-warp block: the emulator's test)."""
    a, b = _args(rng, 64, 64, 32, nt=nt)
    c = np.zeros((64, 64), np.float32)
    if nt:
        bias = rng.standard_normal(64).astype(np.float32)
        warp_sim.run(sgemm_nt, a, b, bias, c, grid=(1, 1))
        want = np.maximum(a.astype(np.float64) @ b.T + bias, 0)
    else:
        warp_sim.run(sgemm_small, a, b, c, grid=(1, 1))
        want = a.astype(np.float64) @ b
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-4)


@NO_SASS
def test_the_f32_main_loop_is_ffma_from_vector_shared_loads_in_sass(rng):
    a, b = _args(rng)
    c = np.zeros((256, 256), np.float32)
    text = sgemm.inspect("sass", a, b, c, grid=(2, 2), arch="sm_90")
    ops = re.findall(r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", text, re.M)
    assert ops.count("FFMA") >= 256 and "HMMA" not in " ".join(ops)
    assert any(op.startswith("LDS.128") for op in ops)
    assert any(op.startswith("LDS.64") for op in ops)
    assert not any(op.startswith(("LDL", "STL")) for op in ops)  # no local memory
    meta = sgemm.metadata(a, b, c, grid=(2, 2), arch="sm_90")
    assert meta["spill_bytes"] == 0
    assert meta["fragments"] == {"fma": "m16n8k4", "dtype_in": "f32", "dtype_acc": "f32"}


@NO_SASS
def test_a_k4_step_of_the_f32_loop_spends_few_integer_instructions_on_addresses(rng):
    """B stored K x N is staged unswizzled (a warp reads 32 bytes of one row), so a k4
    step's shared offsets are a running base plus constants: the step's loop body is its
    256 FFMA and 24 LDS and a few dozen others (an XOR an access made it ~108)."""
    a, b = _args(rng)
    c = np.zeros((256, 256), np.float32)
    text = sgemm.inspect("sass", a, b, c, grid=(2, 2), arch="sm_90")
    (step,) = [
        x for x in sass.loops(text) if sass.counts(x)["FFMA"] and not sass.counts(x)["LDGSTS"]
    ]
    ops = sass.counts(step)
    assert ops["FFMA"] == 256 and ops["LDS"] == 24
    assert sum(ops.values()) - 256 - 24 <= 48, ops


# ----------------------------------------------------------------------------- on a GPU
ON_GPU = pytest.mark.skipif(not gpu_usable(), reason="needs an NVIDIA GPU")


@ON_GPU
def test_f32_gemms_on_the_gpu_match_float64_at_ragged_sizes(rng):
    """Edges in every dimension (the last k tile overhangs K), a view 4 bytes off its
    alignment (element copies), and the linear layer's N x K weights with its epilogue."""
    from numba import cuda

    a, b = _args(rng, 300, 260, 100)
    big = rng.standard_normal((300, 101)).astype(np.float32)
    db = cuda.to_device(b)
    for dx, x in ((cuda.to_device(a), a), (cuda.to_device(big)[:, 1:], big[:, 1:])):
        c = cuda.device_array((300, 260), np.float32)
        sgemm[(3, 3)](dx, db, c)
        np.testing.assert_allclose(c.copy_to_host(), x.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    x, w = _args(rng, 200, 130, 70, nt=True)
    bias = rng.standard_normal(130).astype(np.float32)
    out = np.zeros((200, 130), np.float32)
    sgemm_nt[(4, 3)](x, w, bias, out)
    want = np.maximum(x.astype(np.float64) @ w.T + bias, 0)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-3)
