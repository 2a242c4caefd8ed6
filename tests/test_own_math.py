"""The language's own f32 exp, log, tanh and erf (targets/own_math.py): within the error
bounds docs/language.md states, the same bits on every target, in lane and tile code."""

from __future__ import annotations

import math

import numba
import numpy as np
import pytest
from sampling import for_target

import tessera as ts
from tessera import f16, f32, group_id, kernel, mut, tile
from tessera.kernel.targets.cpu import runtime
from tessera.kernel.targets.own_math import (
    functions,
    numpy_bits_f32,
    numpy_f32_bits,
    numpy_fma_f32,
)

OWN = functions(numpy_bits_f32, numpy_f32_bits, numpy_fma_f32, lambda f: f)  # the debug target's
REFERENCE = OWN["_exp_f32"]
NAMES = ("exp", "log", "tanh", "erf")
# the largest error over every finite f32 input, measured against f64 (docs/language.md)
BOUND = {"exp": 0.90, "log": 1.16, "tanh": 1.37, "erf": 1.11}
EXACT = {
    "exp": np.exp,
    "log": np.log,
    "tanh": np.tanh,
    "erf": lambda x: np.frompyfunc(math.erf, 1, 1)(x).astype(np.float64),
}


@kernel
def exp_kernel(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    if i < n:
        y[i] = math.exp(x[i])


@kernel
def log_kernel(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    if i < n:
        y[i] = math.log(x[i])


@kernel
def tanh_kernel(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    if i < n:
        y[i] = math.tanh(x[i])


@kernel
def erf_kernel(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    if i < n:
        y[i] = math.erf(x[i])


KERNELS = {"exp": exp_kernel, "log": log_kernel, "tanh": tanh_kernel, "erf": erf_kernel}


@kernel
def exp_half(x: f16[n], y: mut[f16[n]]):
    i = tile.linear_id()
    if i < n:
        y[i] = math.exp(x[i])


@kernel(tile=(16,))
def tile_math(
    x: f32[R, 64], e: mut[f32[R, 64]], lg: mut[f32[R, 64]], th: mut[f32[R, 64]], er: mut[f32[R, 64]]
):
    r0 = group_id(0) * 4
    t = tile.load_block(x, (r0, 0), (4, 64))
    tile.store_block(e, (r0, 0), math.exp(t))
    tile.store_block(lg, (r0, 0), math.log(t))
    tile.store_block(th, (r0, 0), math.tanh(t))
    tile.store_block(er, (r0, 0), math.erf(t))


def _inputs(name: str) -> np.ndarray:
    """Where each function works hardest: its whole range, the switches between its
    pieces, tiny and subnormal inputs, and the special values."""
    rng = np.random.default_rng(7)
    specials = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.1754944e-38, 3.4028235e38]
    if name == "exp":
        parts = [
            rng.uniform(-104, 89, 20000),
            rng.uniform(-1, 1, 2000),
            np.linspace(-104, -85, 500),  # subnormal results
            [88.7, 88.73, 89.5, -104.5],
        ]
    elif name == "log":
        parts = [
            np.exp(rng.uniform(-103, 88, 10000)),  # every binade, subnormals included
            rng.uniform(0.5, 2.0, 10000),  # around 1, where log is small
            [-1.0, -1e-30, 1.0, 0.70710677, 0.7071068, 1.4142135, 1.4142137],
        ]
    else:  # tanh, erf: odd, saturating
        edges = [0.625, 9.1] if name == "tanh" else [0.9, 4.0]
        parts = [
            rng.uniform(-10, 10, 10000),
            rng.uniform(-1.5, 1.5, 8000),
            np.exp(rng.uniform(-100, 0, 2000)) * rng.choice([-1, 1], 2000),
            *(np.linspace(e - 1e-3, e + 1e-3, 257) for e in edges),
            [30.0, -30.0, 1e30, -1e30],
        ]
    return np.concatenate([np.asarray(p, np.float64) for p in [*parts, specials]]).astype(
        np.float32
    )


def _ulps(got: np.ndarray, x: np.ndarray, name: str) -> np.ndarray:
    """The error of each finite result in units of the last place of the exact value."""
    with np.errstate(all="ignore"):
        exact = EXACT[name](x.astype(np.float64))
    finite = np.isfinite(exact) & (np.abs(exact) <= np.finfo(np.float32).max)
    spacing = np.abs(np.spacing(exact[finite].astype(np.float32))).astype(np.float64)
    spacing[spacing == 0] = np.finfo(np.float32).smallest_subnormal
    return np.abs(got[finite].astype(np.float64) - exact[finite]) / spacing


def _run(name: str, x: np.ndarray) -> np.ndarray:
    y = np.zeros_like(x)
    KERNELS[name][x.size](x, y)
    return y


@pytest.mark.parametrize("name", NAMES)
def test_within_the_stated_bound_on_every_target(target, name):
    x = for_target(_inputs(name))
    assert _ulps(_run(name, x), x, name).max() <= BOUND[name]


@pytest.mark.parametrize("name", NAMES)
def test_a_dense_sweep_of_every_binade_is_within_the_bound(name):
    # every 1021st f32 bit pattern of both signs (4 million inputs), on the CPU target
    bits = np.arange(0, 0xFF800000, 1021, dtype=np.int64).astype(np.uint32)
    x = bits.view(np.float32)
    x = x[np.isfinite(x) & ((x > 0) if name == "log" else True)]
    with ts.config(target="cpu"):
        y = _run(name, x)
    assert _ulps(y, x, name).max() <= BOUND[name]


@pytest.mark.parametrize("name", NAMES)
def test_the_same_bits_on_every_target(target, name):
    bits = np.random.default_rng(3).integers(0, 2**32, 3000, dtype=np.uint64).astype(np.uint32)
    x = for_target(np.concatenate([_inputs(name), bits.view(np.float32)]))
    y = _run(name, x)
    with np.errstate(all="ignore"):
        want = np.array([OWN[f"_{name}_f32"](v) for v in x], np.float32)
    assert np.array_equal(y.view(np.uint32), want.view(np.uint32))


def test_exp_special_values(target):
    x = np.array([np.nan, np.inf, -np.inf, 100.0, -200.0, 0.0], np.float32)
    y = _run("exp", x)
    assert np.isnan(y[0]) and y[1] == np.inf and y[2] == 0 and y[3] == np.inf
    assert y[4] == 0 and y[5] == 1


def test_log_special_values(target):
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, -1.0, 1.0], np.float32)
    y = _run("log", x)
    assert np.isnan(y[0]) and y[1] == np.inf and np.isnan(y[2])
    assert y[3] == -np.inf and y[4] == -np.inf and np.isnan(y[5]) and y[6] == 0


@pytest.mark.parametrize("name", ["tanh", "erf"])
def test_tanh_and_erf_saturate_and_keep_the_sign_of_zero(target, name):
    x = np.array([np.nan, np.inf, -np.inf, 20.0, -20.0, 0.0, -0.0], np.float32)
    y = _run(name, x)
    assert np.isnan(y[0]) and list(y[1:5]) == [1, -1, 1, -1]
    assert np.signbit(y[5:7]).tolist() == [False, True] and y[5] == 0 and y[6] == 0


def test_exp_of_halves_rounds_the_f32_result_once(target):
    x = np.linspace(-8, 8, 257).astype(np.float16)
    y = np.zeros_like(x)
    exp_half[x.size](x, y)
    with np.errstate(all="ignore"):
        want = np.array([REFERENCE(np.float32(v)) for v in x]).astype(np.float16)
    assert np.array_equal(y, want)


def test_tile_code_gives_the_lane_codes_bits(target, rng):
    x = np.concatenate([rng.uniform(-12, 12, 482), [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40] * 5])
    x = rng.permutation(x).astype(np.float32).reshape(8, 64)
    outs = [np.zeros_like(x) for _ in NAMES]
    tile_math[2](x, *outs)
    for name, got in zip(NAMES, outs):
        with np.errstate(all="ignore"):
            want = np.array([OWN[f"_{name}_f32"](v) for v in x.ravel()], np.float32)
        assert np.array_equal(got.ravel().view(np.uint32), want.view(np.uint32)), name


def _fma_triples(rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Inputs where rounding ``a * b + c`` twice would go wrong: products at an f32
    midpoint with a tiny ``c`` either side, exact cancellation, results in the subnormals
    and past the largest f32, and random values of every size."""
    n = 20000
    a = (rng.uniform(1, 2, n) * 2.0 ** rng.integers(-70, 70, n)).astype(np.float32)
    b = (rng.uniform(1, 2, n) * 2.0 ** rng.integers(-70, 70, n)).astype(np.float32)
    c = (rng.uniform(-2, 2, n) * 2.0 ** rng.integers(-140, 127, n)).astype(np.float32)
    midpoint_a = np.float32(1 + 2**-23)  # (1 + 2**-23) * 1.5 lies halfway between two f32
    tiny = np.array([2.0**-60, -(2.0**-60), 2.0**-140, -(2.0**-140), 0.0])
    scale = np.repeat(2.0 ** np.arange(-20, 21, 5), tiny.size)
    parts_a = [a, np.full(scale.size, midpoint_a), a[:2000], np.float32([2.0**-70] * 3 + [2.0**64])]
    parts_b = [b, np.float32(1.5 * scale), b[:2000], np.float32([2.0**-70, 3.0, 2.0**-80, 2.0**64])]
    with np.errstate(over="ignore"):  # some products are past the largest f32: c = -inf
        cancel = -(a[:2000].astype(np.float64) * b[:2000]).astype(np.float32)
    parts_c = [
        c,
        np.tile(tiny, scale.size // tiny.size) * scale,
        cancel,
        np.float32([0, 2e-45, 1e-45, 1]),
    ]
    return tuple(np.concatenate(p).astype(np.float32) for p in (parts_a, parts_b, parts_c))


def test_the_fma_emulated_for_the_debug_target_rounds_as_the_cpus(rng):
    fma = runtime._definitions()["fma_f32"]  # LLVM's llvm.fma: the CPU's instruction

    @numba.njit
    def cpu_fma(a, b, c, out):
        for i in range(a.size):
            out[i] = fma(a[i], b[i], c[i])

    a, b, c = _fma_triples(rng)
    want = np.zeros_like(a)
    cpu_fma(a, b, c, want)
    with np.errstate(all="ignore"):
        got = np.array([numpy_fma_f32(*t) for t in zip(a, b, c)], np.float32)
        rounded_twice = (a.astype(np.float64) * b + c).astype(np.float32)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    assert not np.array_equal(rounded_twice, want)  # the inputs tell the two apart
