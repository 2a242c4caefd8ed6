"""``tessera demo``: the seed kernels and a tiled matmul, checked against NumPy and timed.

Each kernel runs on the default target; its result is compared with NumPy and the demo
prints the first-call time (which includes compiling), the median of later calls and the
median of NumPy doing the same. Where a GPU is usable the kernels run again on device
arrays, timed to the GPU's completion, beside PyTorch where it is installed with CUDA.
"""

from __future__ import annotations

import time

import numpy as np

from .. import (
    KiB,
    cp_async,
    f16,
    f32,
    group_id,
    group_linear_id,
    group_tile_count,
    kernel,
    mut,
    reduce_sum,
    synchronize,
    tbarrier,
    tile,
    tshared,
)
from ..kernel.targets.cuda.streams import gpu_usable


@kernel
def scale(x: f32[n], y: mut[f32[n]], alpha: f32):
    i = tile.linear_id()
    if i < n:
        y[i] = alpha * x[i]


@kernel(tile=(128,), shared=8 * KiB)
def group_sum(x: f32[n], out: mut[f32[grid_groups]]):
    smem = tshared.alloc[f32](128)
    i = tile.linear_id()
    acc = 0.0
    for k in range(group_linear_id() * group_tile_count() + i, n, group_tile_count() * grid_groups):
        acc += x[k]
    smem[i] = acc
    tbarrier()
    total = reduce_sum(smem)  # collective: every lane calls it, outside the `if`
    if i == 0:
        out[group_linear_id()] = total


@kernel(tile=(128,), shared=1 * KiB)
def axpy_tiled(X: f16[m], Y: mut[f16[m]], alpha: f16):
    """Each group streams 4 chunks of 128, copying chunk t+1 while it computes chunk t."""
    s0 = tshared.alloc[f16](128)
    s1 = tshared.alloc[f16](128)
    base = group_linear_id() * 512
    lane = tile.linear_id()
    cp_async.shared.global_(s0, X[base : base + 128])
    for t in tile.range(base, base + 512, 128, prefetch=2):
        if t + 128 < base + 512:
            cp_async.shared.global_(s1, X[t + 128 : t + 256])  # prefetch the next chunk
        cp_async.wait()
        tbarrier()
        if t + lane < m:
            Y[t + lane] = alpha * s0[lane] + Y[t + lane]
        tbarrier()  # everyone is done with s0 before it is refilled
        s0, s1 = s1, s0


@kernel(tile=(16, 16), shared=2 * KiB)
def matmul(a: f32[M, K], b: f32[K, N], c: mut[f32[M, N]]):
    sa = tshared.alloc[f32]((16, 16))
    sb = tshared.alloc[f32]((16, 16))
    r, cc = tile.id(0), tile.id(1)
    row = group_id(0) * 16 + r
    col = group_id(1) * 16 + cc
    acc = 0.0
    for k0 in range(0, K, 16):
        sa[r, cc] = a[row, k0 + cc] if row < M and k0 + cc < K else 0.0
        sb[r, cc] = b[k0 + r, col] if k0 + r < K and col < N else 0.0
        tbarrier()
        for kk in range(16):
            acc += sa[r, kk] * sb[kk, cc]
        tbarrier()
    if row < M and col < N:
        c[row, col] = acc


def _timed(fn, reps: int = 5, sync=None) -> tuple[float, float]:
    """(first call, median of ``reps`` later calls) in seconds; ``sync`` waits for a
    GPU's work after each call."""
    sync = sync or (lambda: None)
    start = time.perf_counter()
    fn()
    sync()
    first = time.perf_counter() - start
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return first, float(np.median(times))


def _cases(rng: np.random.Generator) -> list[dict]:
    """The demo's kernels: how to run each with given arrays, what NumPy computes, and
    the check. ``arrays`` are NumPy inputs (moved to the GPU for the GPU table)."""
    n, groups, m, size = 1 << 20, 64, 1 << 16, 256
    x = rng.random(n, dtype=np.float32)
    X = rng.random(m).astype(np.float16)
    Y0 = rng.random(m).astype(np.float16)
    A = rng.random((size, size), dtype=np.float32)
    B = rng.random((size, size), dtype=np.float32)
    axpy_want = (np.float32(0.5) * X.astype(np.float32) + Y0.astype(np.float32)).astype(np.float16)
    return [
        dict(
            name="scale",
            desc=f"n={n}",
            inputs=(x, np.empty_like(x)),
            run=lambda a, out: scale[n](a, out, 2.0),
            numpy=lambda a, out: np.multiply(a, np.float32(2.0), out=out),
            check=lambda out: np.array_equal(out, np.float32(2.0) * x),
        ),
        dict(
            name="group_sum",
            desc=f"n={n}, {groups} groups",
            inputs=(x, np.zeros(groups, np.float32)),
            run=lambda a, out: group_sum[groups](a, out),
            numpy=lambda a, out: a.sum(),
            check=lambda out: np.isclose(
                out.sum(dtype=np.float64), x.sum(dtype=np.float64), rtol=1e-5
            ),
        ),
        dict(
            name="axpy_tiled",
            desc=f"m={m} f16",
            inputs=(X, Y0.copy()),
            run=lambda a, out: axpy_tiled[m // 512](a, out, 0.5),
            numpy=lambda a, out: np.float16(0.5) * a + out,
            check=lambda out: np.array_equal(out, axpy_want),
            once=True,  # it updates its output: checked after the first call only
        ),
        dict(
            name="matmul",
            desc=f"{size}^3",
            inputs=(A, B, np.zeros((size, size), np.float32)),
            run=lambda a, b, out: matmul[(size // 16, size // 16)](a, b, out),
            numpy=lambda a, b, out: np.matmul(a, b, out=out),
            check=lambda out: np.allclose(out, A @ B, rtol=1e-4),
        ),
    ]


def run(out=print) -> bool:
    """Run every demo kernel on the host (and, where a GPU is usable, on it too, beside
    PyTorch where that is installed); returns True when all results are right."""
    ok = _table(out, _host_rows(_cases(np.random.default_rng(0))), "NumPy")
    gpu = _gpu()
    if gpu is not None:
        out("")
        out(f"on the GPU ({gpu.name}), device arrays:")
        ok &= _table(out, gpu.rows(_cases(np.random.default_rng(0))), gpu.baseline)
    out("first call includes compiling; median is of 5 later calls")
    return ok


def _host_rows(cases: list[dict]) -> list[tuple]:
    rows = []
    for c in cases:
        arrays = [a.copy() for a in c["inputs"]]
        first, med = _timed(lambda c=c, arrays=arrays: c["run"](*arrays))
        if c.get("once"):  # check a fresh run
            arrays = [a.copy() for a in c["inputs"]]
            c["run"](*arrays)
        good = bool(c["check"](arrays[-1]))
        base = [a.copy() for a in c["inputs"]]
        _, numpy_med = _timed(lambda c=c, base=base: c["numpy"](*base))
        rows.append((c["name"], c["desc"], good, first, med, numpy_med))
    return rows


def _table(out, rows: list[tuple], baseline: str) -> bool:
    ok = True
    out(
        f"{'kernel':<12} {'size':<22} {'check':<6} {'first call':>12} {'median':>10} {baseline:>10}"
    )
    for name, desc, good, first, med, base in rows:
        ok &= good
        shown = f"{base * 1e3:>8.2f}ms" if base is not None else f"{'-':>10}"
        out(
            f"{name:<12} {desc:<22} {'ok' if good else 'WRONG':<6} "
            f"{first * 1e3:>10.1f}ms {med * 1e3:>8.2f}ms {shown}"
        )
    return ok


def _gpu():
    """The GPU side of the demo, when a GPU is usable (never the simulator)."""
    return _Gpu() if gpu_usable() else None


class _Gpu:
    """The demo's kernels on numba-cuda device arrays, timed to the GPU's completion,
    beside the same computations in PyTorch where it is installed with CUDA."""

    def __init__(self):
        from numba import cuda

        self.cuda, self.sync = cuda, synchronize
        self.name = str(cuda.get_current_device().name)
        try:
            import torch

            self.torch = torch if torch.cuda.is_available() else None
        except ImportError:
            self.torch = None
        self.baseline = "PyTorch" if self.torch is not None else "(no torch)"

    def rows(self, cases: list[dict]) -> list[tuple]:
        rows = []
        for c in cases:
            arrays = [self.cuda.to_device(a) for a in c["inputs"]]
            first, med = _timed(lambda c=c, arrays=arrays: c["run"](*arrays), sync=self.sync)
            if c.get("once"):
                arrays = [self.cuda.to_device(a) for a in c["inputs"]]
                c["run"](*arrays)
                self.sync()
            good = bool(c["check"](arrays[-1].copy_to_host()))
            rows.append((c["name"], c["desc"], good, first, med, self._torch(c)))
        return rows

    def _torch(self, c: dict) -> float | None:
        torch = self.torch
        if torch is None:
            return None
        tensors = [torch.from_numpy(a.copy()).cuda() for a in c["inputs"]]
        calls = {
            "scale": lambda a, out: torch.mul(a, 2.0, out=out),
            "group_sum": lambda a, out: a.sum(),
            "axpy_tiled": lambda a, out: out.add_(a, alpha=0.5),
            "matmul": lambda a, b, out: torch.matmul(a, b, out=out),
        }
        _, med = _timed(lambda: calls[c["name"]](*tensors), sync=torch.cuda.synchronize)
        return med
