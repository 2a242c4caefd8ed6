"""Swapping shared arrays (``s0, s1 = s1, s0``, the double-buffer idiom) rebinds names:
the same results on every target, and on the CPU a swap of references, no data moved."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tessera import f32, group_linear_id, i64, kernel, mut, tbarrier, tile, tshared


@kernel(tile=(4, 8), shared=1024)
def relax(x: f32[n], out: mut[f32[n]], steps: i64):
    """Smooth each 4x8 block ``steps`` times, double-buffered in 2-D shared arrays."""
    a = tshared.alloc[f32]((4, 8))
    b = tshared.alloc[f32]((4, 8))
    r = tile.id(0)
    c = tile.id(1)
    k = group_linear_id() * 32 + r * 8 + c
    a[r, c] = x[k]
    tbarrier()
    for _ in range(steps):
        v = a[r, c] * 0.5
        if c > 0:
            v += 0.25 * a[r, c - 1]
        if r > 0:
            v += 0.25 * a[r - 1, c]
        b[r, c] = v
        tbarrier()
        a, b = b, a
    out[k] = a[r, c]


def relax_reference(x: np.ndarray, steps: int) -> np.ndarray:
    a = x.reshape(-1, 4, 8).astype(np.float32)
    for _ in range(steps):
        b = a * np.float32(0.5)
        b[:, :, 1:] += np.float32(0.25) * a[:, :, :-1]
        b[:, 1:, :] += np.float32(0.25) * a[:, :-1, :]
        a = b
    return a.ravel()


@pytest.mark.parametrize("steps", [0, 1, 4, 7])
def test_double_buffered_2d_arrays_end_in_the_right_buffer(target, rng, steps):
    x = rng.random(3 * 32, dtype=np.float32)
    out = np.zeros_like(x)
    relax[3](x, out, steps)
    np.testing.assert_allclose(out, relax_reference(x, steps), rtol=1e-6)


@kernel(tile=(8,), shared=256)
def rotate(out: mut[f32[grid_groups, 8]], turns: i64):
    """Three buffers rotated ``turns`` times, each holding its own number."""
    p = tshared.alloc[f32](8)
    q = tshared.alloc[f32](8)
    s = tshared.alloc[f32](8)
    lane = tile.linear_id()
    p[lane] = 1.0
    q[lane] = 2.0
    s[lane] = 3.0
    tbarrier()
    for _ in range(turns):
        p, q, s = q, s, p
    if turns % 2 == 1:
        p, q = q, p
    out[group_linear_id(), lane] = p[lane] + 10.0 * q[lane] + 100.0 * s[lane]


@pytest.mark.parametrize(("turns", "want"), [(0, 321.0), (1, 123.0), (2, 213.0), (4, 132.0)])
def test_rotating_three_buffers_and_a_uniform_conditional_swap(target, turns, want):
    out = np.zeros((2, 8), np.float32)
    rotate[2](out, turns)
    assert np.all(out == want)


def test_the_cpu_swaps_references_and_moves_no_data():
    x = np.zeros(32, np.float32)
    source = relax.inspect("cpu", x, np.zeros_like(x), 2, grid=1)
    line = Path(__file__).read_text().splitlines().index("        a, b = b, a") + 1
    swap = [s for s in source.splitlines() if s.endswith(f"# line {line}")]
    assert len(swap) == 4  # two temporaries, two rebindings
    assert all(re.fullmatch(r"\s*v_\w+ = v_\w+  # line \d+", s) for s in swap)
