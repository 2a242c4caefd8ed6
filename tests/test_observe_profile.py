"""tessera.profile(): per kernel and collective calls, times, GB/s, GFLOP/s, compile time
and cache hits; and the @kernel(flops=...) option."""

from __future__ import annotations

import numpy as np
import pytest
from observe_kernels import make_axpy

import tessera as ts
from tessera import dist
from tessera.observe.observers import OBSERVERS


def _row(p, name):
    return next(r for r in p.rows() if r.name == name)


def test_a_profile_counts_each_kernels_launches(target):
    axpy = make_axpy()
    x, y = np.ones(64, np.float32), np.zeros(64, np.float32)
    with ts.profile() as p:
        for _ in range(3):
            axpy[64](x, y, 1.0)
    row = _row(p, "axpy")
    assert row.calls == 3 and row.kind == "kernel"
    assert 0 < row.median_s <= row.p95_s <= row.total_s


def test_a_profile_counts_the_bytes_the_arrays_move():
    axpy = make_axpy()
    x, y = np.ones(1000, np.float32), np.zeros(1000, np.float32)
    with ts.profile() as p:
        axpy[1000](x, y, 1.0)
        axpy[1000](x, y, 1.0)
    row = _row(p, "axpy")
    assert row.bytes == 2 * 8000
    assert row.gbps == pytest.approx(16000 / row.total_s / 1e9)


def test_declared_flops_give_gflops():
    axpy = make_axpy(flops=lambda n, alpha, x, grid: 2 * n + 0 * alpha + 0 * x[0] + 0 * grid[0])
    x, y = np.ones(500, np.float32), np.zeros(500, np.float32)
    with ts.profile() as p:
        axpy[500](x, y, 3.0)
    row = _row(p, "axpy")
    assert row.flops == 1000
    assert row.gflops == pytest.approx(1000 / row.total_s / 1e9)


def test_a_kernel_without_flops_has_no_gflops():
    axpy = make_axpy()
    with ts.profile() as p:
        axpy[4](np.ones(4, np.float32), np.zeros(4, np.float32), 1.0)
    assert _row(p, "axpy").gflops is None and "-" in p.table()


def test_the_first_launch_compiles_and_later_ones_hit_the_cache():
    axpy = make_axpy()
    x, y = np.ones(16, np.float32), np.zeros(16, np.float32)
    with ts.profile() as p:
        for _ in range(4):
            axpy[16](x, y, 1.0)
    row = _row(p, "axpy")
    assert row.compile_s > 0
    assert row.cache_hits == 3


def test_compilation_is_left_out_of_the_launch_time():
    axpy = make_axpy()
    with ts.config(cache="off"), ts.profile() as p:
        axpy[16](np.ones(16, np.float32), np.zeros(16, np.float32), 1.0)
    row = _row(p, "axpy")
    assert row.total_s < row.compile_s


def test_a_load_from_the_disk_cache_is_counted(cache_dir):
    x = np.ones(16, np.float32)
    make_axpy()[16](x, np.zeros(16, np.float32), 1.0)  # compiles and stores
    with ts.profile() as p:
        make_axpy()[16](x, np.zeros(16, np.float32), 1.0)
    assert _row(p, "axpy").disk_loads == 1


def test_collectives_are_profiled_with_their_bytes():
    dist.Mesh(axes=("dp",), shape=(1,))
    with ts.profile() as p:
        dist.all_reduce(np.ones(100), axis="dp")
        dist.all_gather(np.ones(10), axis="dp")
    assert _row(p, "all_reduce").bytes == 800 and _row(p, "all_reduce").kind == "collective"
    assert _row(p, "all_gather").calls == 1


def test_the_table_names_every_kernel_with_its_columns():
    axpy = make_axpy()
    with ts.profile() as p:
        axpy[4](np.ones(4, np.float32), np.zeros(4, np.float32), 1.0)
    table = p.table()
    for word in ("calls", "median ms", "p95 ms", "GB/s", "GFLOP/s", "compile s", "cache hits"):
        assert word in table
    assert "axpy" in table.splitlines()[2]


def test_nothing_observes_after_the_block():
    with ts.profile():
        assert OBSERVERS
    assert not OBSERVERS


def test_flops_naming_an_unknown_value_points_at_the_decorator():
    with pytest.raises(ts.KernelError, match="flops= takes 'm'.*any of.*alpha.*grid.*n") as info:
        make_axpy(flops=lambda m: m)
    assert "observe_kernels.py" in str(info.value)


def test_flops_must_be_a_function():
    with pytest.raises(ts.KernelError, match="flops=3 must be a function"):
        make_axpy(flops=3)
