"""The language's own f32 exp (targets/own_math.py): within 1 ulp of the exact value, and
the same bits on every target."""

from __future__ import annotations

import math

import numpy as np

from tessera import f16, f32, kernel, mut, tile
from tessera.kernel.targets.own_math import make_exp_f32, numpy_bits_f32

REFERENCE = make_exp_f32(numpy_bits_f32)


@kernel
def exp_kernel(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    if i < n:
        y[i] = math.exp(x[i])


@kernel
def exp_half(x: f16[n], y: mut[f16[n]]):
    i = tile.linear_id()
    if i < n:
        y[i] = math.exp(x[i])


def _inputs() -> np.ndarray:
    rng = np.random.default_rng(7)
    return np.concatenate(
        [
            rng.uniform(-104, 89, 20000).astype(np.float32),
            rng.uniform(-1, 1, 2000).astype(np.float32),
            np.linspace(-104, -85, 500, dtype=np.float32),  # subnormal results
            np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 88.7, 88.73, 89.5, -104.5], np.float32),
        ]
    )


def _ulps(got: np.ndarray, x: np.ndarray) -> np.ndarray:
    exact = np.exp(x.astype(np.float64))
    finite = np.isfinite(exact) & (exact <= np.finfo(np.float32).max)
    spacing = np.spacing(exact[finite].astype(np.float32)).astype(np.float64)
    spacing[spacing == 0] = np.finfo(np.float32).smallest_subnormal
    return np.abs(got[finite].astype(np.float64) - exact[finite]) / spacing


def test_exp_is_within_one_ulp_on_every_target(target):
    x = _inputs()
    y = np.zeros_like(x)
    exp_kernel[x.size](x, y)
    assert _ulps(y, x).max() <= 1.0


def test_exp_gives_the_same_bits_on_every_target(target):
    x = _inputs()
    y = np.zeros_like(x)
    exp_kernel[x.size](x, y)
    with np.errstate(all="ignore"):
        want = np.array([REFERENCE(v) for v in x], np.float32)
    assert np.array_equal(y.view(np.uint32), want.view(np.uint32))


def test_exp_special_values(target):
    x = np.array([np.nan, np.inf, -np.inf, 100.0, -200.0, 0.0], np.float32)
    y = np.zeros_like(x)
    exp_kernel[x.size](x, y)
    assert np.isnan(y[0]) and y[1] == np.inf and y[2] == 0 and y[3] == np.inf
    assert y[4] == 0 and y[5] == 1


def test_exp_of_halves_rounds_the_f32_result_once(target):
    x = np.linspace(-8, 8, 257).astype(np.float16)
    y = np.zeros_like(x)
    exp_half[x.size](x, y)
    with np.errstate(all="ignore"):
        want = np.array([REFERENCE(np.float32(v)) for v in x]).astype(np.float16)
    assert np.array_equal(y, want)
