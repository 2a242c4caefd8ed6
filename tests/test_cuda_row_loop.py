"""The register row loop on CUDA (passes/row_loop.py, cuda/row_loop.py): flash
attention's loop with every tile in registers. Which loops take it, the fixed-tree row
reduction it emits against the language's tree bit for bit, PTX counts and ptxas
reports (no GPU needed); tests/test_cuda_warp_sim.py runs whole kernels of it."""

from __future__ import annotations

import importlib.util
import math
import os
import types

import numpy as np
import pytest

import tessera as ts
from tessera import f16, f32, graph, group_id, kernel, mut, op, tile
from tessera.kernel import ir
from tessera.kernel.pipeline import specialise
from tessera.kernel.targets import TARGETS, semantics
from tessera.kernel.targets.cuda import mma, row_loop
from tessera.kernel.targets.cuda.acc_layout import AccLayout
from tessera.kernel.targets.cuda.passes.row_loop import plan_row_loop
from tessera.ops.passes import lower
from tessera.ops.plan import operands

NO_PTX = pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or importlib.util.find_spec("numba.cuda") is None,
    reason="generated CUDA source and PTX need numba-cuda without its simulator",
)


@kernel(tile=(64,))
def attention(
    q: f16[M, 64], k: f16[N, 64], v: f16[N, 64], o: mut[f32[M, 64]], scale: f32,
    BM: ts.constexpr, BN: ts.constexpr,
):  # fmt: skip
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


@kernel(tile=(64,))
def masked_attention(q: f16[M, 64], k: f16[N, 64], v: f16[N, 64], o: mut[f32[M, 64]]):
    m0 = group_id(0) * 64
    qb = tile.load_block(q, (m0, 0), (64, 64))
    row_max = tile.full((64,), -math.inf, f32)
    row_sum = tile.zeros((64,), f32)
    acc = tile.zeros((64, 64), f32)
    for n0 in tile.range(0, N, 64):
        kb = tile.load_block(k, (n0, 0), (64, 64))
        vb = tile.load_block(v, (n0, 0), (64, 64))
        s = tile.where((tile.arange(64) + n0 < N)[None, :], tile.dot(qb, kb.T), -math.inf)
        new_max = max(row_max, s.max(axis=1))
        p = math.exp(s - new_max[:, None])
        rescale = math.exp(row_max - new_max)
        row_sum = row_sum * rescale + p.sum(axis=1)
        acc = acc * rescale[:, None] + tile.dot(p.astype(f16), vb)
        row_max = new_max
    tile.store_block(o, (m0, 0), acc / row_sum[:, None])


def _args(m=128, n=128):
    q = np.zeros((m, 64), np.float16)
    k = np.zeros((n, 64), np.float16)
    return q, k, k.copy(), np.zeros((m, 64), np.float32)


# ----------------------------------------------------------------------------- which loops
@NO_PTX
def test_flash_attention_runs_as_a_register_row_loop_with_a_warp_per_16_rows():
    source = attention.inspect("cuda", *_args(), 0.125, 64, 64, grid=2, arch="sm_90")
    assert "# register row loop: 4 warps of 16 rows" in source
    # no tile of the loop, nor the output's, is in shared memory
    for name in ("qb", "kb", "vb", "s", "p", "acc", "row_max", "row_sum", "new_max"):
        assert f"v_{name} =" not in source and f"v_{name}[" not in source
    meta = attention.metadata(*_args(), 0.125, 64, 64, grid=2, arch="sm_90")
    assert meta["launch"]["block"] == [128, 1, 1] and meta["group"] == [64]


@NO_PTX
def test_before_sm_80_flash_attention_keeps_the_general_path():
    source = attention.inspect("cuda", *_args(), 0.125, 64, 64, grid=2, arch="sm_75")
    assert "register row loop" not in source and "_mma_" not in source


@NO_PTX
def test_masks_from_element_indices_are_computed_in_the_registers_loop():
    """``tile.arange`` and arithmetic on it are index tiles: computed at each element
    (``_e1``, the column), never stored."""
    source = masked_attention.inspect("cuda", *_args(), grid=2, arch="sm_90")
    assert "register row loop" in source and "np.int64(_e1)" in source
    assert "v__coll" not in source.split("register row loop")[1].split("_cp_wait_all()")[0]


@NO_PTX
def test_causal_op_flash_attention_takes_the_row_loop():
    @graph.module("fa_causal")
    def fa(q, k, v):
        return op.flash_attention(q, k, v, causal=True)

    q, k = np.zeros((256, 64), np.float16), np.zeros((200, 64), np.float16)
    (kern,) = fa.kernels(q, k, k)
    source = kern.inspect("cuda", q, k, k, q.copy(), grid=(4,), arch="sm_90")
    assert "register row loop: 4 warps of 16 rows" in source
    ptx = kern.inspect("ptx", q, k, k, q.copy(), grid=(4,), arch="sm_90")
    assert "ld.local" not in ptx and "st.local" not in ptx


@NO_PTX
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_op_flash_attention_on_half_inputs_takes_the_row_loop(dtype):
    import ml_dtypes

    @graph.module(f"fa_{dtype}")
    def fa(q, k, v):
        return op.flash_attention(q, k, v)

    q = np.zeros((256, 64), {"f16": np.float16, "bf16": ml_dtypes.bfloat16}[dtype])
    (k,) = fa.kernels(q, q, q)
    source = k.inspect("cuda", q, q, q, q.copy(), grid=(4,), arch="sm_80")
    assert "register row loop: 4 warps of 16 rows" in source
    ptx = k.inspect("ptx", q, q, q, q.copy(), grid=(4,), arch="sm_80")
    assert f"mma.sync.aligned.m16n8k16.row.col.f32.{dtype}.{dtype}.f32" in ptx
    assert "ld.local" not in ptx and "st.local" not in ptx


# ----------------------------------------------------------------------------- the tree
class _Lines:
    def __init__(self):
        self.lines, self.indent, self.reg_tiles, self.reg_kinds = [], 1, {}, {}

    def emit(self, line, loc=None):
        self.lines.append("    " * self.indent + line)


@pytest.mark.parametrize("op_name", ["sum", "max"])
@pytest.mark.parametrize("width", [8, 32, 64])
def test_the_row_reduction_is_the_languages_tree_bit_for_bit(op_name, width, rng):
    """The emitted reduction of a 16 x width acc tile (one warp), run with NumPy vectors
    for the 32 threads, against semantics.tree_reduce of every row."""
    layout = AccLayout(mma.M16N8K16_F16, 16, width)
    tile_values = (rng.standard_normal((16, width)) * 10).astype(np.float32)
    tile_values[3, :4] = 0.0  # ties of the max between zeros
    tile_values[5, 1] = -0.0
    lane = np.arange(32)
    g, t = lane // 4, lane % 4
    regs = np.zeros((layout.registers, 32), np.float32)
    for j in range(layout.jobs):
        for i in range(4):
            row, col = mma.M16N8K16_F16.c.position(0, i)
            regs[4 * j + i] = tile_values[g + row, 8 * j + 2 * t + col]

    class Plan:
        widths = {"x": width}

    cg = _Lines()
    cg.reg_tiles["x"] = "_src"

    class Call:
        args = [type("N", (), {"name": "x"})()]

    class Site:
        target = "y"

    row_loop._reduce(cg, Plan, Site, Call, op_name, 1)
    fmax = semantics.fmax

    def max32(a, b):  # semantics.fmax on the 32 threads' values
        a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
        return np.where((a > b) | (a != a), a, b)

    local = types.SimpleNamespace(array=lambda n, dtype: np.zeros((n, 32), dtype))
    scope = {
        "np": np,
        "cuda": types.SimpleNamespace(local=local),
        "_src": regs,
        "_mq": t,
        "_shfl_xor": lambda v, m: np.asarray(v)[lane ^ m],
        "_select": lambda c, a, b: np.where(c, a, b).astype(np.float32),
        "_max32": max32,
    }
    exec("def _run():\n" + "\n".join(cg.lines) + f"\n    return {cg.reg_tiles['y']}", scope)  # noqa: S102
    got = scope["_run"]()  # (2 rows a thread, 32 threads)
    for lane_ in range(32):
        for h in range(2):
            row = tile_values[lane_ // 4 + 8 * h].copy()
            combine = (lambda a, b: np.float32(a + b)) if op_name == "sum" else fmax
            want = semantics.tree_reduce(row, width, combine)
            assert np.float32(got[h, lane_]).tobytes() == np.float32(want).tobytes()


# ----------------------------------------------------------------------------- PTX, cubin
@NO_PTX
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_the_row_loop_is_tensor_cores_ldmatrix_and_butterflies_in_ptx(arch):
    ptx = attention.inspect("ptx", *_args(), 0.125, 64, 64, grid=2, arch=arch)
    # per key block: Q K^T and P V, each 4 k16 steps x 8 n8 pieces of a warp's 16 rows
    assert ptx.count("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32") == 64
    assert ptx.count("ldmatrix.sync.aligned.m8n8.x4.shared.b16") == 4 + 16  # Q once, K^T
    assert ptx.count("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16") == 16  # V
    assert ptx.count("shfl.sync.bfly.b32") == 16  # max and sum: 2 rows x 2 halves x 2
    assert "ld.local" not in ptx and "st.local" not in ptx
    meta = attention.metadata(*_args(), 0.125, 64, 64, grid=2, arch=arch)
    assert meta["spill_bytes"] == 0


@kernel(tile=(128,))
def tiny_blocks(q: f16[M, 16], k: f16[N, 16], v: f16[N, 16], o: mut[f32[M, 16]], flag: mut[f32[1]]):
    m0 = group_id(0) * 16
    qb = tile.load_block(q, (m0, 0), (16, 16))
    acc = tile.zeros((16, 16), f32)
    for n0 in tile.range(0, N, 16):
        kb = tile.load_block(k, (n0, 0), (16, 16))
        vb = tile.load_block(v, (n0, 0), (16, 16))
        s = tile.dot(qb, kb.T)
        acc = acc + tile.dot(s.astype(f16), vb)
    tile.store_block(o, (m0, 0), acc)
    if tile.linear_id() == 0:  # lane code: the block keeps its 128 threads
        flag[0] = 1.0


@NO_PTX
def test_blocks_too_small_for_a_chunk_per_thread_keep_the_general_path():
    """16 x 16 blocks are 32 chunks of 16 bytes: 128 threads cannot copy whole chunks
    each, so no row loop; the same loop on one warp would be one."""
    q = np.zeros((32, 16), np.float16)
    args = (q, q, q, np.zeros((32, 16), np.float32), np.zeros(1, np.float32))
    source = tiny_blocks.inspect("cuda", *args, grid=2)
    assert "register row loop" not in source
    bound = tiny_blocks.bind(TARGETS["cuda"], args, (2,))
    kir = specialise(tiny_blocks.ir, bound.constexprs, TARGETS["cuda"].passes).kir
    loop = next(s for s in kir.body if isinstance(s, ir.For))
    assert plan_row_loop(kir, loop, 128) is None and plan_row_loop(kir, loop, 32) is not None


@graph.module("fa_rows")
def fa_rows(q, k, v):
    return op.flash_attention(q, k, v)


@pytest.mark.parametrize(
    "n, device, rows", [(4096, False, 64), (4096, True, 32), (16384, True, 64)]
)
def test_attention_rows_per_group_follow_where_the_arrays_live(n, device, rows):
    """On a GPU, 64-row blocks of a 4096-row attention would give 64 groups (fewer than
    its SMs): 32-row blocks give 128. A long sequence and the CPU keep 64."""
    q = np.zeros((n, 64), np.float16)
    lowered = lower(fa_rows._trace(operands("fa_rows", (q, q, q))), device)
    source = lowered.sources[0].text  # (on a GPU, 4096 rows are split along the keys too)
    assert f"m0 = group_id(0) * {rows}" in source


@graph.module("mm_blocks")
def mm_blocks(a, b):
    return op.matmul(a, b)


@pytest.mark.parametrize(
    "dtype, device, block",
    [
        (np.float16, True, (128, 256)),
        (np.float16, False, (128, 128)),
        (np.float32, True, (128, 128)),
    ],
)
def test_a_half_product_of_gpu_arrays_takes_128_by_256_blocks(dtype, device, block):
    a = np.zeros((512, 512), dtype)
    lowered = lower(mm_blocks._trace(operands("mm_blocks", (a, a))), device)
    (source,) = [s.text for s in lowered.sources if s is not None]
    assert f"acc = tile.zeros({block}, f32)" in source
