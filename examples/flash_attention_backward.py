"""Causal flash attention, forward and backward, several heads: the structure of Triton's
fused-attention tutorial, ported to Tessera.

The forward pass keeps each row's log-sum-exp; a small kernel computes ``delta = rowsum(o *
do)``; then one kernel computes every gradient. Each group owns one block of keys (for
``dk``, ``dv``) and one block of queries (for ``dq``) of one head, and calls two helpers
twice: first over the diagonal block in narrow masked steps, then over the blocks the
causal mask keeps whole. The helpers take and return tiles (``dk, dv = bwd_dkdv(dk, dv,
...)``), their block sizes are constexprs of the caller, and ``MASK`` is a constant flag:
each call compiles only the branch it takes.

    python examples/flash_attention_backward.py
"""

from __future__ import annotations

import math

import numpy as np

import tessera as ts
from tessera import KiB, f32, group_id, kernel, mut, tile


@kernel(tile=(64,), shared=64 * KiB)
def forward(
    q: f32[R, 64],
    k: f32[R, 64],
    v: f32[R, 64],
    o: mut[f32[R, 64]],
    lse: mut[f32[R]],
    N: ts.constexpr,
    scale: f32,
    BM: ts.constexpr,
    BN: ts.constexpr,
):
    base = group_id(1) * N  # the head's first row
    m0 = group_id(0) * BM
    qb = tile.load_block(q, (base + m0, 0), (BM, 64))
    rows = tile.arange(m0, m0 + BM)
    row_max = tile.full((BM,), -math.inf, f32)
    row_sum = tile.zeros((BM,), f32)
    acc = tile.zeros((BM, 64), f32)
    for n0 in tile.range(0, m0 + BM, BN):  # causal: keys up to the block's last row
        kb = tile.load_block(k, (base + n0, 0), (BN, 64))
        vb = tile.load_block(v, (base + n0, 0), (BN, 64))
        cols = tile.arange(n0, n0 + BN)
        s = tile.where(rows[:, None] >= cols[None, :], tile.dot(qb, kb.T) * scale, -math.inf)
        new_max = max(row_max, s.max(axis=1))
        p = math.exp(s - new_max[:, None])
        rescale = math.exp(row_max - new_max)
        row_sum = row_sum * rescale + p.sum(axis=1)
        acc = acc * rescale[:, None] + tile.dot(p, vb)
        row_max = new_max
    tile.store_block(o, (base + m0, 0), acc / row_sum[:, None])
    tile.store_block(lse, (base + m0,), row_max + math.log(row_sum))


@kernel(tile=(64,))
def row_dots(o: f32[R, 64], do: f32[R, 64], delta: mut[f32[R]], BM: ts.constexpr):
    m0 = group_id(0) * BM
    ob = tile.load_block(o, (m0, 0), (BM, 64))
    dob = tile.load_block(do, (m0, 0), (BM, 64))
    tile.store_block(delta, (m0,), (ob * dob).sum(axis=1))


@ts.func
def bwd_dkdv(dk, dv, q, k, v, do, lse, delta, base, start_n, start_m, steps, scale,
             BM: ts.constexpr, BN: ts.constexpr, MASK: ts.constexpr):  # fmt: skip
    cols = tile.arange(start_n, start_n + BN)
    m0 = start_m
    for _ in tile.range(0, steps):
        qb = tile.load_block(q, (base + m0, 0), (BM, 64))
        dob = tile.load_block(do, (base + m0, 0), (BM, 64))
        m = tile.load_block(lse, (base + m0,), (BM,))
        di = tile.load_block(delta, (base + m0,), (BM,))
        pT = math.exp(tile.dot(k, qb.T) * scale - m[None, :])  # (BN, BM): P transposed
        if MASK:
            rows = tile.arange(m0, m0 + BM)
            pT = tile.where(rows[None, :] >= cols[:, None], pT, 0.0)
        dv = dv + tile.dot(pT, dob)
        dsT = pT * (tile.dot(v, dob.T) - di[None, :])
        dk = dk + tile.dot(dsT, qb)
        m0 += BM
    return dk, dv


@ts.func
def bwd_dq(dq, q, k, v, do, m, di, base, start_m, start_n, steps, scale,
           BM: ts.constexpr, BN: ts.constexpr, MASK: ts.constexpr):  # fmt: skip
    rows = tile.arange(start_m, start_m + BM)
    n0 = start_n
    for _ in tile.range(0, steps):
        kb = tile.load_block(k, (base + n0, 0), (BN, 64))
        vb = tile.load_block(v, (base + n0, 0), (BN, 64))
        p = math.exp(tile.dot(q, kb.T) * scale - m[:, None])
        if MASK:
            cols = tile.arange(n0, n0 + BN)
            p = tile.where(rows[:, None] >= cols[None, :], p, 0.0)
        ds = p * (tile.dot(do, vb.T) - di[:, None])
        dq = dq + tile.dot(ds, kb)
        n0 += BN
    return dq


@kernel(tile=(64,), shared=128 * KiB)
def backward(
    q: f32[R, 64],
    k: f32[R, 64],
    v: f32[R, 64],
    do: f32[R, 64],
    lse: f32[R],
    delta: f32[R],
    dq: mut[f32[R, 64]],
    dk: mut[f32[R, 64]],
    dv: mut[f32[R, 64]],
    N: ts.constexpr,
    scale: f32,
    BLOCK_M: ts.constexpr,
    BLOCK_N: ts.constexpr,
    SLICE: ts.constexpr,
):
    base = group_id(1) * N
    # dk, dv of keys [start_n, start_n + BLOCK_N): the diagonal block in narrow masked
    # steps, then every query block below it whole
    start_n = group_id(0) * BLOCK_N
    MASK_M = BLOCK_M // SLICE
    kb = tile.load_block(k, (base + start_n, 0), (BLOCK_N, 64))
    vb = tile.load_block(v, (base + start_n, 0), (BLOCK_N, 64))
    dkb = tile.zeros((BLOCK_N, 64), f32)
    dvb = tile.zeros((BLOCK_N, 64), f32)
    steps = BLOCK_N // MASK_M
    dkb, dvb = bwd_dkdv(dkb, dvb, q, kb, vb, do, lse, delta, base, start_n, start_n, steps,
                        scale, MASK_M, BLOCK_N, True)  # fmt: skip
    start_m = start_n + steps * MASK_M
    dkb, dvb = bwd_dkdv(dkb, dvb, q, kb, vb, do, lse, delta, base, start_n, start_m,
                        (N - start_m) // BLOCK_M, scale, BLOCK_M, BLOCK_N, False)  # fmt: skip
    tile.store_block(dv, (base + start_n, 0), dvb)
    tile.store_block(dk, (base + start_n, 0), dkb * scale)

    # dq of queries [start_m, start_m + BLOCK_N): the diagonal block masked, then the
    # key blocks before it whole
    start_m = group_id(0) * BLOCK_N
    MASK_N = BLOCK_M // SLICE
    qb = tile.load_block(q, (base + start_m, 0), (BLOCK_N, 64))
    dob = tile.load_block(do, (base + start_m, 0), (BLOCK_N, 64))
    m = tile.load_block(lse, (base + start_m,), (BLOCK_N,))
    di = tile.load_block(delta, (base + start_m,), (BLOCK_N,))
    dqb = tile.zeros((BLOCK_N, 64), f32)
    steps = BLOCK_N // MASK_N
    dqb = bwd_dq(dqb, qb, k, v, dob, m, di, base, start_m, start_m, steps, scale,
                 BLOCK_N, MASK_N, True)  # fmt: skip
    dqb = bwd_dq(dqb, qb, k, v, dob, m, di, base, start_m, 0, start_m // BLOCK_M, scale,
                 BLOCK_N, BLOCK_M, False)  # fmt: skip
    tile.store_block(dq, (base + start_m, 0), dqb * scale)


def reference(q, k, v, do, scale):
    """Causal attention and its gradients in NumPy, per head: (o, dq, dk, dv)."""
    n = q.shape[1]
    s = np.where(np.tril(np.ones((n, n), bool)), q @ k.transpose(0, 2, 1) * scale, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    o = p @ v
    ds = p * (do @ v.transpose(0, 2, 1) - (do * o).sum(-1, keepdims=True))
    return o, ds @ k * scale, ds.transpose(0, 2, 1) @ q * scale, p.transpose(0, 2, 1) @ do


def main() -> None:
    heads, n, d, block = 2, 128, 64, 32
    rng = np.random.default_rng(0)
    q, k, v, do = (rng.standard_normal((heads, n, d)).astype(np.float32) for _ in range(4))
    scale = 1 / math.sqrt(d)
    rows = heads * n  # the heads' rows one after another: (heads * n, d)
    q2, k2, v2, do2 = (a.reshape(rows, d) for a in (q, k, v, do))
    o, lse, delta = (
        np.zeros((rows, d), np.float32),
        np.zeros(rows, np.float32),
        np.zeros(rows, np.float32),
    )
    dq, dk, dv = (np.zeros((rows, d), np.float32) for _ in range(3))
    forward[n // block, heads](q2, k2, v2, o, lse, n, scale, block, block)
    row_dots[rows // block](o, do2, delta, block)
    backward[n // block, heads](q2, k2, v2, do2, lse, delta, dq, dk, dv, n, scale, block, block, 2)
    want = reference(q, k, v, do, scale)
    for name, got, w in zip(("o", "dq", "dk", "dv"), (o, dq, dk, dv), want):
        error = np.abs(got.reshape(w.shape) - w).max()
        assert error < 1e-4, (name, error)
    print(f"causal flash attention backward, {heads} heads, N={n} d={d}: gradients match NumPy")


if __name__ == "__main__":
    main()
