"""Launch limits and settings: grids a target cannot index, NaN constexprs, the bound on
compiled specialisations, and settings with values they cannot take."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import tessera as ts
from tessera import f32, kernel, mut, tile


@kernel
def guarded(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    if i < n:
        y[i] = x[i] + 1.0


@kernel
def scaled(y: mut[f32[n]], c: ts.constexpr):
    i = tile.linear_id()
    if i < n:
        y[i] = c


@pytest.mark.parametrize("grid", [2**63, (2**32, 2**32), (2**62, 4)])
def test_a_grid_beyond_i64_lanes_is_a_launch_error_before_anything_runs(target, grid):
    x, y = np.ones(4, np.float32), np.zeros(4, np.float32)
    with pytest.raises(ts.LaunchError, match="guarded"):
        guarded[grid](x, y)
    assert not y.any()


def test_an_extent_of_2_to_the_64_is_a_launch_error():
    with pytest.raises(ts.LaunchError, match="below 2\\*\\*63"):
        guarded[(2**64, 0)]


def test_a_nan_constexpr_compiles_once():
    y = np.zeros(4, np.float32)
    before = ts.stats()["compiles"]
    for _ in range(5):
        scaled[4](y, float("nan"))
    assert ts.stats()["compiles"] - before <= 2  # a serial and a parallel variant at most
    assert np.isnan(y).all()


def test_the_specialisation_cache_keeps_at_most_its_bound():
    @kernel
    def fill(y: mut[f32[n]], c: ts.constexpr):
        i = tile.linear_id()
        if i < n:
            y[i] = c

    y = np.zeros(2, np.float32)
    with ts.config(kernel_cache_size="3", target="debug"):
        for c in range(6):
            fill[2](y, c)
    assert len(fill._cache) == 3
    assert y[0] == 5


def test_a_setting_with_a_bad_value_warns_and_keeps_its_default():
    code = (
        "import numpy as np, tessera as ts\n"
        "from tessera.kernel import disk_cache\n"
        "print('enabled:', disk_cache.enabled())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**__import__("os").environ, "TESSERA_CACHE": "maybe"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "enabled: True" in out.stdout, out.stderr
    assert "TESSERA_CACHE='maybe' is not a valid value; it takes 1/0, true/false" in out.stderr


def test_an_unknown_target_setting_is_a_launch_error():
    x, y = np.ones(4, np.float32), np.zeros(4, np.float32)
    with ts.config(target="tpu"), pytest.raises(ts.LaunchError, match="unknown target 'tpu'"):
        guarded[4](x, y)
