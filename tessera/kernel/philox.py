"""Philox 4×32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", 2011),
the counter-based generator behind ``tile.rand`` and ``op.dropout``.

A counter-based generator is a pure function of (counter, key): element ``i`` of a
dropout mask is decided by ``philox(i, seed)`` alone, so the mask is the same on every
target, every run, any thread count and every rank, and the backward pass recomputes it
instead of storing it. Written once, in the kernel language (``@tessera.func`` helpers,
inlined where they are called), so every target runs the same arithmetic: the frontend
expands ``tile.rand(seed, offset)`` into :func:`rand`, and the operator layer's generated
kernels call :func:`philox_uniform`. 64-bit products do the 32×32 → 64-bit multiplies.
"""

from __future__ import annotations

from ..dtypes import f32, i64, u32, u64
from .func import func

MULTIPLIERS = (0xD2511F53, 0xCD9E8D57)
WEYL = (0x9E3779B9, 0xBB67AE85)  # the key's increments between rounds


@func
def philox_word0(index, seed):
    """Word 0 of Philox 4×32-10 of counter ``(index lo, index hi, 0, 0)``, key ``(seed
    lo, seed hi)``."""
    c0 = u32(index & 0xFFFFFFFF)
    c1 = u32(index >> 32)
    c2 = u32(0)
    c3 = u32(0)
    k0 = u32(seed & 0xFFFFFFFF)
    k1 = u32(seed >> 32)
    for _ in range(10):
        p0 = u64(c0) * u64(0xD2511F53)
        p1 = u64(c2) * u64(0xCD9E8D57)
        n0 = u32(p1 >> 32) ^ c1 ^ k0
        n2 = u32(p0 >> 32) ^ c3 ^ k1
        c1 = u32(p1 & 0xFFFFFFFF)
        c3 = u32(p0 & 0xFFFFFFFF)
        c0 = n0
        c2 = n2
        k0 = k0 + u32(0x9E3779B9)
        k1 = k1 + u32(0xBB67AE85)
    return c0


@func
def philox_uniform(index, seed):
    """A uniform f32 in [0, 1): the top 24 bits of word 0, times 2**-24."""
    return f32(philox_word0(index, seed) >> 8) * f32(5.9604644775390625e-08)


@func
def rand(seed, offset):
    """``tile.rand(seed, offset)``: the uniform f32 of stream ``seed`` at ``offset``, the
    same number ``op.dropout`` draws for element ``offset``. Both are taken as i64 first,
    so an i32 offset has a high word of its own (its sign), as in Python."""
    return philox_uniform(i64(offset), i64(seed))
