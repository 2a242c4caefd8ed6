"""Tensor-core tile.dot on CUDA: the fragment layout of mma.py against a NumPy model of
``mma.sync`` written from the PTX ISA's description, the generated fragment code run
lane-parallel against that model, PTX and cubins for sm_80 and sm_90 (no GPU needed),
and the plain path that the simulator and the other targets run."""

from __future__ import annotations

import importlib.util
import math
import os
import types

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera import KiB, bf16, f16, f32, group_id, kernel, mut, tile
from tessera.kernel.targets.cuda import mma

NO_PTX = pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or importlib.util.find_spec("numba.cuda") is None,
    reason="PTX needs numba-cuda without its simulator",
)
ARCHS = ["sm_80", "sm_90"]
INSTRUCTIONS = {"f16": mma.M16N8K16_F16, "bf16": mma.M16N8K16_BF16, "tf32": mma.M16N8K8_TF32}


# ----------------------------------------------------------------------------- the model
# Who holds what, transcribed from the PTX ISA ("Matrix Fragments for mma.m16n8k16 with
# floating point type", and mma.m16n8k8 for .tf32) in its own case-by-case wording, not
# from mma.py's tables.
def doc_m16n8k16(operand: str, lane: int, i: int) -> tuple[int, int]:
    group, thread = lane >> 2, lane % 4
    if operand == "a":
        row = group if (0 <= i < 2 or 4 <= i < 6) else group + 8
        col = thread * 2 + (i & 0x1) if i < 4 else thread * 2 + (i & 0x1) + 8
    elif operand == "b":
        row = thread * 2 + (i & 0x1) if i < 2 else thread * 2 + (i & 0x1) + 8
        col = group
    else:
        row = group if i < 2 else group + 8
        col = thread * 2 + (i & 0x1)
    return row, col


def doc_m16n8k8_tf32(operand: str, lane: int, i: int) -> tuple[int, int]:
    group, thread = lane >> 2, lane % 4
    if operand == "a":
        row = group if i in (0, 2) else group + 8
        col = thread if i in (0, 1) else thread + 4
    elif operand == "b":
        row = thread if i == 0 else thread + 4
        col = group
    else:
        row = group if i < 2 else group + 8
        col = thread * 2 + (i & 0x1)
    return row, col


DOCS = {"f16": doc_m16n8k16, "bf16": doc_m16n8k16, "tf32": doc_m16n8k8_tf32}
SHAPES = {"f16": (16, 8, 16), "bf16": (16, 8, 16), "tf32": (16, 8, 8)}  # m, n, k


def mma_model(kind: str, a_frag, b_frag, c_frag) -> np.ndarray:
    """What one warp's ``mma.sync`` computes: each lane's D elements from the A, B and C
    elements the 32 lanes hold (fragments of shape (32, elements)), in float64."""
    doc, (m, n, k) = DOCS[kind], SHAPES[kind]
    mats = {
        "a": np.full((m, k), np.nan),
        "b": np.full((k, n), np.nan),
        "c": np.full((m, n), np.nan),
    }
    for name, frag in (("a", a_frag), ("b", b_frag), ("c", c_frag)):
        for lane in range(32):
            for i in range(frag.shape[1]):
                mats[name][doc(name, lane, i)] = frag[lane, i]
    d = mats["a"] @ mats["b"] + mats["c"]
    return np.array([[d[doc("c", lane, i)] for i in range(4)] for lane in range(32)])


def _fragments(fragment: mma.Fragment, matrix: np.ndarray) -> np.ndarray:
    return np.array(
        [
            [matrix[fragment.position(lane, i)] for i in range(fragment.elements)]
            for lane in range(32)
        ]
    )


def _halves(values: np.ndarray, kind: str) -> np.ndarray:
    """Values rounded to the instruction's input type (kept in float64)."""
    if kind == "f16":
        return values.astype(np.float16).astype(np.float64)
    if kind == "bf16":
        return values.astype(ml_dtypes.bfloat16).astype(np.float64)
    bits = values.astype(np.float32).view(np.uint32) & np.uint32(0xFFFFE000)  # tf32
    return bits.view(np.float32).astype(np.float64)


@pytest.mark.parametrize("kind", list(INSTRUCTIONS))
def test_fragments_gathered_by_the_layout_multiply_like_numpy_in_the_model(kind, rng):
    inst, (m, n, k) = INSTRUCTIONS[kind], SHAPES[kind]
    assert (inst.m, inst.n, inst.k) == (m, n, k)
    a = _halves(rng.standard_normal((m, k)), kind)
    b = _halves(rng.standard_normal((k, n)), kind)
    c = rng.standard_normal((m, n))
    d_frag = mma_model(kind, _fragments(inst.a, a), _fragments(inst.b, b), _fragments(inst.c, c))
    d = np.full((m, n), np.nan)
    for lane in range(32):
        for i in range(inst.c.elements):
            d[inst.c.position(lane, i)] = d_frag[lane, i]
    np.testing.assert_allclose(d, a @ b + c, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", list(INSTRUCTIONS))
@pytest.mark.parametrize("operand", ["a", "b", "c"])
def test_each_layout_is_a_bijection_from_lane_elements_onto_the_matrix(kind, operand):
    frag = getattr(INSTRUCTIONS[kind], operand)
    held = [frag.position(lane, i) for lane in range(32) for i in range(frag.elements)]
    rows, cols = frag.shape
    assert sorted(held) == [(r, c) for r in range(rows) for c in range(cols)]
    assert held == [
        DOCS[kind](operand, lane, i) for lane in range(32) for i in range(frag.elements)
    ]


def test_the_layout_agrees_with_the_isa_figures_at_a_few_lanes():
    a, b, c = mma.A_16x16, mma.B_16x8, mma.C_16x8
    lane0 = [a.position(0, i) for i in range(8)]
    assert lane0 == [(0, 0), (0, 1), (8, 0), (8, 1), (0, 8), (0, 9), (8, 8), (8, 9)]
    assert [a.position(31, i) for i in range(8)][-1] == (15, 15)
    assert [b.position(5, i) for i in range(4)] == [(2, 1), (3, 1), (10, 1), (11, 1)]
    assert [c.position(6, i) for i in range(4)] == [(1, 4), (1, 5), (9, 4), (9, 5)]


@pytest.mark.parametrize("kind", list(INSTRUCTIONS))
@pytest.mark.parametrize("operand", ["a", "b", "c"])
def test_generated_positions_are_the_layouts_positions(kind, operand):
    frag = getattr(INSTRUCTIONS[kind], operand)
    for lane in range(32):
        for i in range(frag.elements):
            row, col = frag.code(i, "g", "t")
            scope = {"g": lane >> 2, "t": lane % 4}
            assert (eval(row, scope), eval(col, scope)) == frag.position(lane, i)  # noqa: S307


# ----------------------------------------------------------------------------- generated code
# emit_dot's code run for a whole warp at once: ``_lane`` is the warp's 32 lane ids as a
# NumPy array, so every register is an array of 32 values, and ``mma.sync`` is the model.
class _Emitter:
    def __init__(self, lanes: int):
        self.lanes, self.lines, self.indent = lanes, [], 0

    def emit(self, line: str, loc=None) -> None:
        self.lines.append("    " * self.indent + line)


def _pack_16(kind: str):
    def bits(v):
        v = np.asarray(v, np.float32)
        if kind == "f16":
            return v.astype(np.float16).view(np.uint16).astype(np.uint32)
        return v.view(np.uint32) >> np.uint32(16)  # bf16: exact values are the upper half

    return lambda low, high: bits(low) | (bits(high) << np.uint32(16))


def _unpack(kind: str, registers: list, per_register: int) -> np.ndarray:
    """Registers (arrays over the 32 lanes) → the fragment's elements, low half first."""
    out = []
    for r in registers:
        r = np.asarray(r, np.uint32)
        if per_register == 1:
            out.append(r.view(np.float32).astype(np.float64))
            continue
        for half in (r & np.uint32(0xFFFF), r >> np.uint32(16)):
            if kind == "f16":
                out.append(half.astype(np.uint16).view(np.float16).astype(np.float64))
            else:
                out.append((half << np.uint32(16)).view(np.float32).astype(np.float64))
    return np.stack(out, axis=1)


def _warp_model(kind: str):
    inst = INSTRUCTIONS[kind]

    def issue(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        a = _unpack(kind, [a0, a1, a2, a3], inst.per_register)
        b = _unpack(kind, [b0, b1], inst.per_register)
        c = np.stack(
            [np.broadcast_to(np.asarray(x, np.float64), (32,)) for x in (c0, c1, c2, c3)], 1
        )
        d = mma_model(kind, a, b, c).astype(np.float32)
        return d[:, 0], d[:, 1], d[:, 2], d[:, 3]

    return issue


def _warp_range(start, stop, step):
    starts = np.unique(np.asarray(start))
    assert starts.size == 1, "a loop bound differs between the lanes of a warp"
    return range(int(starts[0]), stop, step)


def _run_generated(kind: str, x, y, init: str | None, out, lanes: int):
    inst = INSTRUCTIONS[kind]
    (m, k), n = x.shape, y.shape[1]
    cg = _Emitter(lanes)
    mma.emit_dot(cg, inst, "x", "y", init, "out", (m, k, n))
    code = compile("\n".join(cg.lines), "<emit_dot>", "exec")
    pack = (
        _pack_16(kind)
        if inst.per_register == 2
        else lambda v: np.asarray(v, np.float32).view(np.uint32)
    )
    for warp in range(lanes // 32):
        scope = {
            "np": np,
            "cuda": types.SimpleNamespace(syncthreads=lambda: None),
            "range": _warp_range,
            "x": x,
            "y": y,
            "out": out,
            "_lane": 32 * warp + np.arange(32),
            inst.pack: pack,
            inst.name: _warp_model(kind),
        }
        exec(code, scope)  # noqa: S102


@pytest.mark.parametrize("kind", list(INSTRUCTIONS))
@pytest.mark.parametrize(
    "m, k, n, lanes", [(16, 16, 8, 32), (32, 32, 48, 64), (64, 32, 64, 128), (16, 16, 24, 256)]
)
def test_generated_fragment_code_computes_acc_plus_a_at_b(kind, m, k, n, lanes, rng):
    x = _halves(rng.standard_normal((m, k)), kind).astype(np.float32)
    y = _halves(rng.standard_normal((k, n)), kind).astype(np.float32)
    acc = rng.standard_normal((m, n)).astype(np.float32)
    out = acc.copy()  # the result replaces the accumulator, as in acc = tile.dot(a, b, acc)
    _run_generated(kind, x, y, "out", out, lanes)
    want = x.astype(np.float64) @ y.astype(np.float64) + acc
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    fresh = np.full((m, n), np.nan, np.float32)
    _run_generated(kind, x, y, None, fresh, lanes)
    np.testing.assert_allclose(fresh, x.astype(np.float64) @ y, rtol=1e-5, atol=1e-5)


def test_which_dots_take_tensor_cores():
    from tessera import dtypes as D

    assert mma.instruction_for(D.f16, D.f16, False, 64, 64, 32, 128) is mma.M16N8K16_F16
    assert mma.instruction_for(D.bf16, D.bf16, False, 16, 8, 16, 32) is mma.M16N8K16_BF16
    assert mma.instruction_for(D.f32, D.f32, True, 16, 8, 8, 64) is mma.M16N8K8_TF32
    assert mma.instruction_for(D.f32, D.f32, False, 64, 64, 32, 128) is None  # FFMA
    assert mma.instruction_for(D.f16, D.f16, False, 16, 8, 8, 32) is None  # k not a multiple of 16
    assert mma.instruction_for(D.f16, D.f16, False, 24, 8, 16, 32) is None
    assert mma.instruction_for(D.f16, D.f16, False, 16, 12, 16, 32) is None
    assert mma.instruction_for(D.f16, D.f16, False, 16, 8, 16, 16) is None  # less than a warp
    assert mma.instruction_for(D.f16, D.f16, False, 16, 8, 16, 48) is None  # not whole warps


# ----------------------------------------------------------------------------- kernels
@kernel(tile=(128,), shared=48 * KiB)
def gemm_f16(A: f16[M, K], B: f16[K, N], C: mut[f32[M, N]], BM: ts.constexpr, BN: ts.constexpr):
    m0, n0 = group_id(0) * BM, group_id(1) * BN
    acc = tile.zeros((BM, BN), f32)
    for k0 in tile.range(0, K, 32):
        a = tile.load_block(A, (m0, k0), (BM, 32))
        b = tile.load_block(B, (k0, n0), (32, BN))
        acc = tile.dot(a, b, acc)
    tile.store_block(C, (m0, n0), acc)


@kernel(tile=(64,), shared=32 * KiB)
def gemm_bf16(A: bf16[M, K], B: bf16[K, N], C: mut[f32[M, N]]):
    m0, n0 = group_id(0) * 32, group_id(1) * 32
    acc = tile.zeros((32, 32), f32)
    for k0 in tile.range(0, K, 32):
        a = tile.load_block(A, (m0, k0), (32, 32))
        b = tile.load_block(B, (k0, n0), (32, 32))
        acc = tile.dot(a, b, acc)
    tile.store_block(C, (m0, n0), acc)


@kernel(tile=(64,), shared=32 * KiB)
def gemm_f32(A: f32[M, K], B: f32[K, N], C: mut[f32[M, N]], D: mut[f32[M, N]]):
    m0, n0 = group_id(0) * 32, group_id(1) * 32
    acc = tile.zeros((32, 32), f32)
    fast = tile.zeros((32, 32), f32)
    for k0 in tile.range(0, K, 16):
        a = tile.load_block(A, (m0, k0), (32, 16))
        b = tile.load_block(B, (k0, n0), (16, 32))
        acc = tile.dot(a, b, acc)
        fast = tile.dot(a, b, fast, allow_tf32=True)
    tile.store_block(C, (m0, n0), acc)
    tile.store_block(D, (m0, n0), fast)


@kernel(tile=(64,), shared=48 * KiB)
def attention_f16(
    q: f16[N, 64],
    k: f16[N, 64],
    v: f16[N, 64],
    o: mut[f32[N, 64]],
    scale: f32,
    BM: ts.constexpr,
    BN: ts.constexpr,
):
    """examples/flash_attention.py with f16 inputs: both products on tensor cores."""
    m0 = group_id(0) * BM
    qb = tile.load_block(q, (m0, 0), (BM, 64))
    row_max = tile.full((BM,), -math.inf, f32)
    row_sum = tile.zeros((BM,), f32)
    acc = tile.zeros((BM, 64), f32)
    for n0 in tile.range(0, N, BN):
        kb = tile.load_block(k, (n0, 0), (BN, 64))
        vb = tile.load_block(v, (n0, 0), (BN, 64))
        s = tile.dot(qb, kb.T) * scale
        new_max = max(row_max, s.max(axis=1))
        p = math.exp(s - new_max[:, None])
        rescale = math.exp(row_max - new_max)
        row_sum = row_sum * rescale + p.sum(axis=1)
        acc = acc * rescale[:, None] + tile.dot(p.astype(f16), vb)
        row_max = new_max
    tile.store_block(o, (m0, 0), acc / row_sum[:, None])


def _gemm_args(dtype, m=64, k=64, n=64):
    a, b = np.zeros((m, k), dtype), np.zeros((k, n), dtype)
    return a, b, np.zeros((m, n), np.float32)


# ----------------------------------------------------------------------------- PTX, cubin
@NO_PTX
@pytest.mark.parametrize("arch", ARCHS)
def test_f16_gemm_runs_mma_sync_in_ptx_and_assembles(arch):
    args = _gemm_args(np.float16, 128, 64, 128)
    ptx = gemm_f16.inspect("ptx", *args, 64, 64, grid=(2, 2), arch=arch)
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx
    assert ".maxntid 128, 1, 1" in ptx
    # the register main loop (test_cuda_mainloop.py): fragments straight from f16 stages
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in ptx
    assert "cvt.rn.f16x2.f32" not in ptx
    cubin = gemm_f16.inspect("cubin", *args, 64, 64, grid=(2, 2), arch=arch)
    assert cubin[:4] == b"\x7fELF"
    meta = gemm_f16.metadata(*args, 64, 64, grid=(2, 2), arch=arch)
    assert meta["registers_per_thread"] > 0
    # seed 004 §11.2's keys: the product's block, its ring, its tensor-core fragments
    stages = 4 if arch == "sm_90" else 3
    assert meta["tile"] == {"M": 64, "N": 64, "K": meta["tile"]["K"], "stages": stages}
    assert meta["fragments"] == {"mma": "m16n8k16", "dtype_in": "f16", "dtype_acc": "f32"}


@NO_PTX
@pytest.mark.parametrize("arch", ARCHS)
def test_bf16_gemm_runs_mma_sync_in_ptx_and_assembles(arch):
    args = _gemm_args(ml_dtypes.bfloat16)
    ptx = gemm_bf16.inspect("ptx", *args, grid=(2, 2), arch=arch)
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in ptx
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx
    assert gemm_bf16.inspect("cubin", *args, grid=(2, 2), arch=arch)[:4] == b"\x7fELF"


@NO_PTX
@pytest.mark.parametrize("arch", ARCHS)
def test_f32_dot_is_ffma_unless_tf32_is_allowed(arch):
    a, b, c = _gemm_args(np.float32)
    source = gemm_f32.inspect("cuda", a, b, c, c, grid=(2, 2), arch=arch)
    assert source.count("# on tensor cores: mma.sync.aligned.m16n8k8") == 1  # one of two dots
    assert "_mma_f16(" not in source
    ptx = gemm_f32.inspect("ptx", a, b, c, c, grid=(2, 2), arch=arch)
    assert "fma.rn.f32" in ptx
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in ptx
    assert "cvt.rna.tf32.f32" in ptx and "m16n8k16" not in ptx
    assert gemm_f32.inspect("cubin", a, b, c, c, grid=(2, 2), arch=arch)[:4] == b"\x7fELF"


@NO_PTX
def test_f32_gemm_without_tf32_has_no_mma():
    from test_tiles import gemm

    a = np.zeros((32, 32), np.float32)
    ptx = gemm.inspect("ptx", a, a, a, 16, 8, grid=(2, 2), arch="sm_90")
    assert "mma" not in ptx and "fma.rn.f32" in ptx


@NO_PTX
def test_before_sm_80_and_below_a_warp_f16_dot_takes_the_plain_path():
    from test_tiles import half_dot

    args = _gemm_args(np.float16)
    assert "mma" not in gemm_f16.inspect("ptx", *args, 64, 64, grid=(1, 1), arch="sm_75")
    a, b = np.zeros((16, 8), np.float16), np.zeros((8, 16), np.float16)
    source = half_dot.inspect("cuda", a, b, np.zeros((16, 16), np.float32), grid=1, arch="sm_90")
    assert "_mma_" not in source  # k = 8 is not a multiple of 16


@NO_PTX
@pytest.mark.parametrize("arch", ARCHS)
def test_f16_flash_attention_runs_both_products_on_tensor_cores(arch):
    x = np.zeros((128, 64), np.float16)
    args = (x, x, x, np.zeros((128, 64), np.float32), 0.125, 16, 16)
    source = attention_f16.inspect("cuda", *args, grid=8, arch=arch)
    assert "register row loop: 1 warps of 16 rows" in source  # test_cuda_row_loop.py
    ptx = attention_f16.inspect("ptx", *args, grid=8, arch=arch)
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx
    assert "cvt.rn.f16x2.f32" in ptx  # P packed from its registers into A fragments
    assert attention_f16.inspect("cubin", *args, grid=8, arch=arch)[:4] == b"\x7fELF"


# ----------------------------------------------------------------------------- plain path
def _in_order(a, b, acc):
    """acc + a @ b, each element summed over k in order in f32 (the plain path)."""
    out = acc.astype(np.float32).copy()
    for kk in range(a.shape[1]):
        out = (out + (a[:, kk : kk + 1] * b[kk : kk + 1, :]).astype(np.float32)).astype(np.float32)
    return out


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_tensor_core_shapes_take_the_plain_path_off_the_gpu(target, rng, dtype):
    """The simulator runs the plain path: each element sums k in order. A product of two
    f16 (or bf16) values is exact in f32, so the CPU's fused multiply-adds give the same
    bits, and so does the debug target."""
    a = rng.standard_normal((32, 64)).astype(dtype)
    b = rng.standard_normal((64, 32)).astype(dtype)
    c = np.zeros((32, 32), np.float32)
    if dtype is np.float16:
        gemm_f16[(1, 1)](a, b, c, 32, 32)
    else:
        gemm_bf16[(1, 1)](a, b, c)
    fa, fb = a.astype(np.float32), b.astype(np.float32)
    want = _in_order(fa[:, 32:], fb[32:], _in_order(fa[:, :32], fb[:32], np.zeros_like(c)))
    assert np.array_equal(c, want)
