"""Seven ports from the second porting round (issue 30) whose tiles hold more than 48 KiB:
Triton's layer norm (tutorial 05), fused attention (06) and grouped GEMM (08), Liger's
cross-entropy, vLLM's fused add + RMSNorm, Unsloth's GEGLU and bitsandbytes' int8 matmul,
at their own block sizes. Each gives NumPy's result on the CPU targets and builds for
sm_90 without a GPU: element-wise tiles in registers (targets/cuda/blocked_tiles.py:
the four row and element kernels keep at most 1 KiB of shared memory), products on the
register path, what stays in shared memory under the architecture's limit (dynamic
shared memory past 48 KiB)."""

from __future__ import annotations

import importlib.util
import math
import os

import numpy as np
import pytest
from scipy.special import erf

from tessera import KiB, f16, f32, group_id, i8, i32, i64, kernel, mut, tile

ROW = 8192  # the norms: one 8192-wide hidden state a group
VB = 8192  # cross-entropy: a block of the vocabulary
HD = 64  # attention: the head dim
BM, BN, BK = 128, 128, 32  # the GEMMs' blocks
GELU = 0.7071067811865476  # 1 / sqrt(2)

NO_PTX = pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or importlib.util.find_spec("numba.cuda") is None,
    reason="building for sm_90 needs numba-cuda without its simulator",
)


@kernel(tile=(256,), shared=200 * KiB)
def layernorm_rows(x: f32[M, N], w: f32[N], b: f32[N], y: mut[f32[M, N]], eps: f32):
    row = group_id(0)
    xs = tile.load_block(x, (row, 0), (1, ROW))
    mean = xs.sum() / N
    d = xs - mean
    var = (d * d).sum() / N
    ws = tile.load_block(w, (0,), (ROW,))
    bs = tile.load_block(b, (0,), (ROW,))
    tile.store_block(y, (row, 0), d / math.sqrt(var + eps) * ws[None, :] + bs[None, :])


@kernel(tile=(256,), shared=200 * KiB)
def add_rmsnorm(x: mut[f16[M, N]], residual: mut[f16[M, N]], w: f16[N], eps: f32):
    row = group_id(0)
    h = tile.load_block(x, (row, 0), (1, ROW)) + tile.load_block(residual, (row, 0), (1, ROW))
    tile.store_block(residual, (row, 0), h)
    rms = math.sqrt((h * h).sum() / N + eps)
    ws = tile.load_block(w, (0,), (ROW,))
    tile.store_block(x, (row, 0), h / rms * ws[None, :])


@kernel(tile=(256,), shared=200 * KiB)
def geglu(gate: f32[n], up: f32[n], out: mut[f32[n]]):
    i0 = group_id(0) * 16384
    g = tile.load_block(gate, (i0,), (16384,))
    u = tile.load_block(up, (i0,), (16384,))
    tile.store_block(out, (i0,), 0.5 * g * (1.0 + math.erf(g * GELU)) * u)


@kernel(tile=(256,), shared=200 * KiB)
def cross_entropy_rows(logits: f32[M, V], target: i64[M], loss: mut[f32[M]], grad: mut[f32[M, V]]):
    row = group_id(0)
    m = -math.inf
    s = 0.0
    for v0 in tile.range(0, V, VB):  # the online log-sum-exp
        blk = tile.load_block(logits, (row, v0), (1, VB), other=-math.inf)
        new_m = max(m, blk.max())
        s = s * math.exp(m - new_m) + math.exp(blk - new_m).sum()
        m = new_m
    lse = m + math.log(s)
    t = target[row]
    loss[row] = lse - logits[row, t]
    for v0 in tile.range(0, V, VB):
        blk = tile.load_block(logits, (row, v0), (1, VB))
        cols = tile.arange(VB) + v0
        tile.store_block(grad, (row, v0), math.exp(blk - lse) - tile.where(cols == t, 1.0, 0.0))


@kernel(tile=(128,), shared=200 * KiB)
def attention_fwd(q: f16[N, HD], k: f16[N, HD], v: f16[N, HD], o: mut[f16[N, HD]], scale: f32):
    m0 = group_id(0) * 128
    qb = tile.load_block(q, (m0, 0), (128, HD))
    row_max = tile.full((128,), -math.inf, f32)
    row_sum = tile.zeros((128,), f32)
    acc = tile.zeros((128, HD), f32)
    for n0 in tile.range(0, N, 64):
        kb = tile.load_block(k, (n0, 0), (64, HD))
        vb = tile.load_block(v, (n0, 0), (64, HD))
        s = tile.dot(qb, kb.T) * scale
        new_max = max(row_max, s.max(axis=1))
        p = math.exp(s - new_max[:, None])
        rescale = math.exp(row_max - new_max)
        row_sum = row_sum * rescale + p.sum(axis=1)
        acc = acc * rescale[:, None] + tile.dot(p.astype(f16), vb)
        row_max = new_max
    tile.store_block(o, (m0, 0), acc / row_sum[:, None])


@kernel(tile=(256,), shared=200 * KiB)
def grouped_gemm(A: f16[rows, K], B: f16[G, K, N], starts: i64[G1], C: mut[f32[rows, N]]):
    p = group_id(0)
    row0 = starts[p] + group_id(1) * BM
    end = starts[p + 1]
    n0 = group_id(2) * BN
    if row0 < end:
        acc = tile.zeros((BM, BN), f32)
        for k0 in tile.range(0, K, BK):
            a = tile.load_block(A, (row0, k0), (BM, BK))
            b = tile.load_block(B, (p, k0, n0), (BK, BN))
            acc = tile.dot(a, b, acc)
        r = tile.arange(BM) + row0
        tile.store_block(C, (row0, n0), acc, mask=(r < end)[:, None])


@kernel(tile=(256,), shared=200 * KiB)
def int8_matmul(A: i8[M, K], B: i8[K, N], rows: f32[M], cols: f32[N], C: mut[f16[M, N]]):
    m0, n0 = group_id(0) * BM, group_id(1) * BN
    acc = tile.zeros((BM, BN), i32)
    for k0 in tile.range(0, K, 64):
        a = tile.load_block(A, (m0, k0), (BM, 64))
        acc = tile.dot(a, tile.load_block(B, (k0, n0), (64, BN)), acc)
    scale = tile.load_block(rows, (m0,), (BM,))[:, None] * tile.load_block(cols, (n0,), (BN,))
    tile.store_block(C, (m0, n0), acc.astype(f32) * scale)


def _layernorm(rng):
    x = rng.standard_normal((2, ROW)).astype(np.float32)
    w, b = (rng.standard_normal(ROW).astype(np.float32) for _ in range(2))
    y = np.zeros_like(x)
    want = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5) * w + b
    return (x, w, b, y, 1e-5), 2, lambda: np.testing.assert_allclose(y, want, atol=2e-5)


def _add_rmsnorm(rng):
    x, residual = (rng.standard_normal((2, ROW)).astype(np.float16) for _ in range(2))
    w = rng.standard_normal(ROW).astype(np.float16)
    h = (x.astype(np.float32) + residual.astype(np.float32)).astype(np.float16)
    h32 = h.astype(np.float32)
    want = h32 / np.sqrt((h32 * h32).mean(1, keepdims=True) + 1e-5) * w.astype(np.float32)

    def check():
        np.testing.assert_array_equal(residual, h)
        np.testing.assert_allclose(x.astype(np.float32), want, rtol=2e-3, atol=2e-3)

    return (x, residual, w, 1e-5), 2, check


def _geglu(rng):
    gate, up = (rng.standard_normal(2 * 16384).astype(np.float32) for _ in range(2))
    out = np.zeros_like(gate)
    want = 0.5 * gate * (1 + erf(gate.astype(np.float64) * GELU)) * up
    return (gate, up, out), 2, lambda: np.testing.assert_allclose(out, want, atol=1e-5)


def _cross_entropy(rng):
    v = 2 * VB - 100  # the last block of the vocabulary overhangs
    logits = rng.standard_normal((2, v)).astype(np.float32)
    target = np.array([5, v - 1], np.int64)
    loss, grad = np.zeros(2, np.float32), np.zeros_like(logits)
    lse = np.log(np.exp(logits.astype(np.float64)).sum(1))
    want_grad = np.exp(logits - lse[:, None])
    want_grad[[0, 1], target] -= 1

    def check():
        np.testing.assert_allclose(loss, lse - logits[[0, 1], target], rtol=1e-5)
        np.testing.assert_allclose(grad, want_grad, atol=1e-6)

    return (logits, target, loss, grad), 2, check


def _attention(rng):
    n = 256
    q, k, v = (rng.standard_normal((n, HD)).astype(np.float16) for _ in range(3))
    o = np.zeros_like(q)
    s = (q.astype(np.float32) @ k.astype(np.float32).T) / math.sqrt(HD)
    p = np.exp(s - s.max(1, keepdims=True))
    want = p / p.sum(1, keepdims=True) @ v.astype(np.float32)
    check = lambda: np.testing.assert_allclose(o.astype(np.float32), want, atol=2e-3)  # noqa: E731
    return (q, k, v, o, 1 / math.sqrt(HD)), n // 128, check


def _grouped_gemm(rng):
    ms, k, n = [100, 0, 300], 64, 256
    starts = np.concatenate([[0], np.cumsum(ms)]).astype(np.int64)
    a = rng.standard_normal((starts[-1], k)).astype(np.float16)
    b = rng.standard_normal((len(ms), k, n)).astype(np.float16)
    c = np.zeros((starts[-1], n), np.float32)
    parts = [a[starts[i] : starts[i + 1]].astype(np.float32) @ b[i] for i in range(len(ms))]
    want = np.concatenate(parts)
    grid = (len(ms), -(-max(ms) // BM), n // BN)
    return (
        (a, b, starts, c),
        grid,
        lambda: np.testing.assert_allclose(c, want, rtol=1e-3, atol=1e-3),
    )


def _int8_matmul(rng):
    m, k, n = 256, 128, 256
    a, b = (rng.integers(-128, 128, shape).astype(np.int8) for shape in ((m, k), (k, n)))
    rows, cols = (rng.random(size).astype(np.float32) / 100 for size in (m, n))
    c = np.zeros((m, n), np.float16)
    exact = a.astype(np.int64) @ b.astype(np.int64)
    want = exact.astype(np.float32) * rows[:, None] * cols[None, :]
    check = lambda: np.testing.assert_allclose(c.astype(np.float32), want, rtol=1e-3, atol=1e-3)  # noqa: E731
    return (a, b, rows, cols, c), (m // BM, n // BN), check


PORTS = {
    "layernorm_rows": (layernorm_rows, _layernorm),
    "add_rmsnorm": (add_rmsnorm, _add_rmsnorm),
    "geglu": (geglu, _geglu),
    "cross_entropy_rows": (cross_entropy_rows, _cross_entropy),
    "attention_fwd": (attention_fwd, _attention),
    "grouped_gemm": (grouped_gemm, _grouped_gemm),
    "int8_matmul": (int8_matmul, _int8_matmul),
}


@pytest.mark.parametrize("port", list(PORTS))
def test_a_port_with_tiles_over_48_kib_gives_numpys_result(port, target, rng):
    if target == "cuda":
        pytest.skip(
            "blocks of 8192 values a group take minutes in the simulator (the "
            "register tiles' own simulator tests: test_cuda_blocked_tiles.py)"
        )
    kern, case = PORTS[port]
    args, grid, check = case(rng)
    kern[grid](*args)
    check()


# ptxas's spills of the two ports whose rows hold the most live values (255 registers a
# thread): a few bytes, measured; every other port spills nothing
SPILLS = {"add_rmsnorm": 64, "cross_entropy_rows": 32}
ELEMENT_WISE = ("layernorm_rows", "add_rmsnorm", "geglu", "cross_entropy_rows")


@NO_PTX
@pytest.mark.parametrize("port", list(PORTS))
def test_a_port_with_tiles_over_48_kib_builds_for_sm_90(port, rng):
    kern, case = PORTS[port]
    args, grid, _ = case(rng)
    meta = kern.metadata(*args, grid=grid, arch="sm_90")
    assert meta["shared_bytes"] <= (1 * KiB if port in ELEMENT_WISE else 227 * KiB)
    assert meta["spill_bytes"] <= SPILLS.get(port, 0)
