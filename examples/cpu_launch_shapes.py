"""Launch shapes for the CPU: the same sum of squares launched GPU-style (one group of
512 lanes that grid-strides over the whole input) and CPU-style (one group per block of
4096 elements, so there are many more groups than cores). docs/targets.md explains why
the second is several times faster on a multi-core CPU and equally right everywhere.

Run: python examples/cpu_launch_shapes.py
"""

from __future__ import annotations

import time

import numpy as np

from tessera import f32, group_linear_id, i64, kernel, mut, tbarrier, tile, tshared

BLOCK = 4096  # elements per group in the CPU-friendly launch


@kernel(tile=(512,), shared=2048)
def sum_squares(x: f32[n], per_group: mut[f32[grid_groups]], chunk: i64):
    s = tshared.alloc[f32](512)
    lane = tile.linear_id()
    acc = f32(0.0)
    start = group_linear_id() * chunk
    for i in range(start + lane, min(start + chunk, n), 512):
        acc += x[i] * x[i]
    s[lane] = acc
    tbarrier()
    width = 256
    while width > 0:
        if lane < width:
            s[lane] += s[lane + width]
        tbarrier()
        width //= 2
    if lane == 0:
        per_group[group_linear_id()] = s[0]


def sum_of_squares(x: np.ndarray, groups: int) -> float:
    """Launch ``groups`` groups, each summing one contiguous chunk of ``x``."""
    chunk = -(-x.size // groups)
    partial = np.zeros(groups, np.float32)
    sum_squares[groups](x, partial, chunk)
    return float(partial.sum(dtype=np.float64))


def main() -> None:
    x = np.random.default_rng(0).random(1 << 22, dtype=np.float32)
    want = float(np.dot(x.astype(np.float64), x))
    for label, groups in (("one group of 512 lanes", 1), ("one group per 4096", x.size // BLOCK)):
        got = sum_of_squares(x, groups)  # the first launch compiles
        start = time.perf_counter()
        got = sum_of_squares(x, groups)
        seconds = time.perf_counter() - start
        assert abs(got - want) <= 1e-4 * want, (label, got, want)
        print(f"{label:>24}: {groups:5d} groups, {seconds * 1e3:7.2f} ms")


if __name__ == "__main__":
    main()
