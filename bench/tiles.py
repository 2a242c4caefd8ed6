"""Tile values: f32 and f64 GEMM through ``tile.dot`` and row softmax with tiles, against
NumPy (BLAS ``a @ b``; the unfused ``exp(x - max) / sum``) and a Numba ``prange`` loop; the
language's own exp, log, tanh and erf in a flat kernel against Numba's scalar libm loop and
NumPy."""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

import tessera as ts
from tessera import KiB, f16, f32, f64, group_id, kernel, mut, tile

from .common import Case, Record, measure, standalone
from .flash import attention, reference

NAME = "tiles"


# 128x128 blocks of C (op.matmul's default): a 64 KiB accumulator in L2, each loaded
# block of A and B used for 128 columns or rows of products (64x64 blocks measured 1.2x
# slower: twice the loads of A and B per product, four times the groups)
@kernel(tile=(64,), shared=96 * KiB)
def gemm_tiles(A: f32[M, K], B: f32[K, N], C: mut[f32[M, N]]):
    m0 = group_id(0) * 128
    n0 = group_id(1) * 128
    acc = tile.zeros((128, 128), f32)
    for k0 in tile.range(0, K, 32):
        a = tile.load_block(A, (m0, k0), (128, 32))
        b = tile.load_block(B, (k0, n0), (32, 128))
        acc = tile.dot(a, b, acc)
    tile.store_block(C, (m0, n0), acc)


@kernel(tile=(64,), shared=96 * KiB)
def gemm_tiles_f16(A: f16[M, K], B: f16[K, N], C: mut[f32[M, N]]):
    m0 = group_id(0) * 128
    n0 = group_id(1) * 128
    acc = tile.zeros((128, 128), f32)
    for k0 in tile.range(0, K, 32):
        a = tile.load_block(A, (m0, k0), (128, 32))
        b = tile.load_block(B, (k0, n0), (32, 128))
        acc = tile.dot(a, b, acc)
    tile.store_block(C, (m0, n0), acc)


# f64 in the same 128x128x32 blocks (measured beside 128x64, 64x128 and 64x64 at 1024^3:
# the fastest, by 5-10 %); the micro-kernel's vectors hold 8 f64 instead of 16 f32
@kernel(tile=(64,), shared=192 * KiB)
def gemm_tiles_f64(A: f64[M, K], B: f64[K, N], C: mut[f64[M, N]]):
    m0 = group_id(0) * 128
    n0 = group_id(1) * 128
    acc = tile.zeros((128, 128), f64)
    for k0 in tile.range(0, K, 32):
        a = tile.load_block(A, (m0, k0), (128, 32))
        b = tile.load_block(B, (k0, n0), (32, 128))
        acc = tile.dot(a, b, acc)
    tile.store_block(C, (m0, n0), acc)


@kernel(tile=(64,))
def softmax_tiles(x: f32[R, 1024], y: mut[f32[R, 1024]]):
    r0 = group_id(0) * 4
    t = tile.load_block(x, (r0, 0), (4, 1024))
    e = math.exp(t - t.max(axis=1)[:, None])
    tile.store_block(y, (r0, 0), e / e.sum(axis=1)[:, None])


@kernel
def exp_flat(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    if i < n:
        y[i] = math.exp(x[i])


@kernel
def log_flat(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    if i < n:
        y[i] = math.log(x[i])


@kernel
def tanh_flat(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    if i < n:
        y[i] = math.tanh(x[i])


@kernel
def erf_flat(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    if i < n:
        y[i] = math.erf(x[i])


# the scalar libm loops (Numba's, without SVML: one call per element)
def scalar_loop(fn, parallel: bool):
    """``y[i] = fn(x[i])``, one libm call per element: over all cores, or on one."""

    @njit(parallel=parallel)
    def loop(x, y):
        for i in prange(x.size):
            y[i] = fn(x[i])

    return loop


@njit(parallel=True)
def scale_all_cores(x, y):
    """The memory's bound for a large flat kernel: as many bytes read and written, with
    the stores of a computed result. (A copy is no bound: LLVM makes the loop a
    ``memcpy``, whose stores of whole lines skip reading the destination first, a third
    of the bytes a computed result moves.)"""
    for i in prange(x.size):
        y[i] = x[i] * np.float32(2)


# name: (flat kernel, libm function, NumPy's ufunc or None, inputs from a generator, f64 exact)
FLAT_MATH = {
    "exp": (exp_flat, math.exp, np.exp, lambda rng, n: rng.uniform(-80, 80, n), np.exp),
    "log": (log_flat, math.log, np.log, lambda rng, n: np.exp(rng.uniform(-80, 80, n)), np.log),
    "tanh": (tanh_flat, math.tanh, np.tanh, lambda rng, n: rng.uniform(-5, 5, n), np.tanh),
    "erf": (
        erf_flat,
        math.erf,
        None,  # NumPy has no erf
        lambda rng, n: rng.uniform(-3, 3, n),
        lambda x: np.frompyfunc(math.erf, 1, 1)(x).astype(np.float64),
    ),
}
SCALAR = {(name, p): scalar_loop(v[1], p) for name, v in FLAT_MATH.items() for p in (True, False)}


def checked(tool: str, run, outs: dict, want: np.ndarray, rtol: float, atol: float = 0.0) -> Case:
    """A case whose result is ``outs[tool]``, checked against ``want``."""
    return Case(tool, run, lambda: outs[tool], want, rtol=rtol, atol=atol)


@njit(parallel=True)
def gemm_numba(a, b, c):
    for i in prange(a.shape[0]):
        for j in range(b.shape[1]):
            c[i, j] = 0.0
        for k in range(a.shape[1]):
            aik = a[i, k]
            for j in range(b.shape[1]):
                c[i, j] += aik * b[k, j]


def run(quick: bool) -> list[Record]:
    s = 256 if quick else 1024
    rng = np.random.default_rng(0)
    a = rng.random((s, s), dtype=np.float32)
    b = rng.random((s, s), dtype=np.float32)
    outs = {tool: np.zeros((s, s), np.float32) for tool in ("tessera", "numba", "numpy")}
    want = a.astype(np.float64) @ b.astype(np.float64)

    def gemm_case(tool, fn):
        return checked(tool, fn, outs, want, rtol=1e-4)

    records = measure(
        NAME,
        "f32 GEMM, tile.dot 128x128x32",
        f"{s}^3",
        [
            gemm_case("tessera", lambda: gemm_tiles[(s // 128, s // 128)](a, b, outs["tessera"])),
            gemm_case("numba", lambda: gemm_numba(a, b, outs["numba"])),
            gemm_case("numpy", lambda: np.matmul(a, b, out=outs["numpy"])),
        ],
        quick,
        flops=2.0 * s**3,
    )
    if not quick:  # the larger size against BLAS only (the plain loop would take minutes)
        s2 = 2048
        a2 = rng.random((s2, s2), dtype=np.float32)
        b2 = rng.random((s2, s2), dtype=np.float32)
        c2 = {tool: np.zeros((s2, s2), np.float32) for tool in ("tessera", "numpy")}
        want2 = a2.astype(np.float64) @ b2.astype(np.float64)
        records += measure(
            NAME,
            "f32 GEMM, tile.dot 128x128x32",
            f"{s2}^3",
            [
                checked(
                    "tessera",
                    lambda: gemm_tiles[(s2 // 128, s2 // 128)](a2, b2, c2["tessera"]),
                    c2,
                    want2,
                    1e-4,
                ),
                checked("numpy", lambda: np.matmul(a2, b2, out=c2["numpy"]), c2, want2, 1e-4),
            ],
            quick,
            flops=2.0 * s2**3,
        )
        a16, b16 = a2.astype(np.float16), b2.astype(np.float16)
        c2["f16"] = np.zeros((s2, s2), np.float32)
        want16 = a16.astype(np.float64) @ b16.astype(np.float64)
        records += measure(
            NAME,
            "f16 in, f32 acc GEMM, tile.dot",
            f"{s2}^3",
            [
                Case(
                    "tessera",
                    lambda: gemm_tiles_f16[(s2 // 128, s2 // 128)](a16, b16, c2["f16"]),
                    lambda: c2["f16"],
                    want16,
                    rtol=1e-3,
                ),
                checked("numpy", lambda: np.matmul(a2, b2, out=c2["numpy"]), c2, want2, 1e-4),
            ],
            quick,
            flops=2.0 * s2**3,
        )
    for size in (s,) if quick else (s, 2048):
        records += gemm_f64(rng, size, quick)
    rows = 1024 if quick else 4096
    x = rng.standard_normal((rows, 1024)).astype(np.float32)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    soft = e / e.sum(axis=1, keepdims=True)
    y = np.zeros_like(x)

    def numpy_softmax():
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    records += measure(
        NAME,
        "row softmax, tiles of 4 rows",
        f"{rows}x1024",
        [
            Case("tessera", lambda: softmax_tiles[rows // 4](x, y), lambda: y, soft, rtol=1e-5),
            Case("numpy", numpy_softmax, numpy_softmax, soft, rtol=1e-5),
        ],
        quick,
        nbytes=2 * x.nbytes,
    )
    seq = 512 if quick else 4096
    q, k_, v_ = (rng.standard_normal((seq, 64)).astype(np.float32) for _ in range(3))
    scale = 1 / math.sqrt(64)
    att = reference(q, k_, v_, scale)
    o = np.zeros_like(q)
    records += measure(
        NAME,
        "attention forward, d=64, BM=BN=64",
        f"N={seq}",
        [
            Case(
                "tessera",
                lambda: attention[seq // 64](q, k_, v_, o, scale, 64, 64),
                lambda: o,
                att,
                rtol=1e-4,
                atol=1e-5,
            ),
            Case(
                "numpy",
                lambda: reference(q, k_, v_, scale),
                lambda: reference(q, k_, v_, scale),
                att,
                rtol=1e-4,
                atol=1e-5,
            ),
        ],
        quick,
        flops=4.0 * seq * seq * 64,
    )
    records += flat_math(quick, rng)
    return records


def gemm_f64(rng: np.random.Generator, s: int, quick: bool) -> list[Record]:
    """f64 GEMM through ``tile.dot`` beside NumPy's f64 ``a @ b`` (OpenBLAS's DGEMM)."""
    a, b = rng.random((s, s)), rng.random((s, s))
    outs = {tool: np.zeros((s, s)) for tool in ("tessera", "numpy")}
    want = a @ b
    return measure(
        NAME,
        "f64 GEMM, tile.dot 128x128x32",
        f"{s}^3",
        [
            checked(
                "tessera",
                lambda: gemm_tiles_f64[(s // 128, s // 128)](a, b, outs["tessera"]),
                outs,
                want,
                1e-12,
            ),
            checked("numpy", lambda: np.matmul(a, b, out=outs["numpy"]), outs, want, 1e-12),
        ],
        quick,
        flops=2.0 * s**3,
    )


def math_cases(name: str, x: np.ndarray, parallel: bool) -> list[Case]:
    """The checked cases of one math function on ``x``: Tessera, the scalar loop (over all
    cores, or on one core where Tessera runs the launch on one), NumPy."""
    flat, _, ufunc, _, exact = FLAT_MATH[name]
    scalar = SCALAR[name, parallel]
    want = exact(x.astype(np.float64))
    outs = {tool: np.zeros_like(x) for tool in ("tessera", "numba", "numpy")}
    cases = [
        checked("tessera", lambda: flat[x.size](x, outs["tessera"]), outs, want, 1e-6),
        checked("numba", lambda: scalar(x, outs["numba"]), outs, want, 1e-6),
    ]
    if ufunc is not None:
        cases.append(checked("numpy", lambda: ufunc(x, out=outs["numpy"]), outs, want, 1e-6))
    if parallel:  # the memory's bound: y = 2x over all cores moves as many bytes
        scaled = np.zeros_like(x)
        cases.append(
            Case("scale", lambda: scale_all_cores(x, scaled), lambda: scaled, 2 * x, rtol=0.0)
        )
    return cases


def flat_math(quick: bool, rng: np.random.Generator) -> list[Record]:
    """Each own math function in a flat kernel beside the scalar libm loop and NumPy: in
    cache on one core each (2^16 elements, 256 KiB in and out, in L2: the arithmetic's
    speed per element, with Tessera's launch a few per cent of it; Tessera would spread a
    launch this large over the cores, the scalar loop runs on one here too, since waking
    the thread pool would cost more than either loop) and a large array on all cores,
    where ``y = 2x`` over all cores shows what the memory allows."""
    records = []
    for name, (*_, inputs, _exact) in FLAT_MATH.items():
        for size, where in ((2**16, ", in cache, one core"), (2**20 if quick else 2**24, "")):
            x = inputs(rng, size).astype(np.float32)
            one_core = size == 2**16
            with ts.config(parallel_threshold=size + 1 if one_core else 32768):
                records += measure(
                    NAME,
                    f"{name} f32, flat kernel{where}",
                    f"2^{size.bit_length() - 1}",
                    math_cases(name, x, parallel=not one_core),
                    quick,
                    nbytes=2 * x.nbytes,
                )
    return records


def targets(records: list[dict]) -> list[tuple[str, float, float, bool]]:
    """(what, speedup, limit, met) for the vector math target: each function in a flat
    kernel at least 4x faster than the scalar libm loop."""
    med = {(r["tool"], r["kernel"], r["size"]): r["median_s"] for r in records}
    found = []
    for (tool, what, size), seconds in med.items():
        if tool == "tessera" and what.split()[0] in FLAT_MATH and "flat kernel" in what:
            speedup = med["numba", what, size] / seconds
            found.append((f"{what} {size}", speedup, 4.0, speedup >= 4.0))
    return found


if __name__ == "__main__":
    standalone(NAME, run)
