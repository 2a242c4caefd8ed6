"""Shared arrays declared under a lane-dependent ``if`` (numba-cuda's shared-memory
reduction example declares ``cuda.shared.array`` inside ``if tid < size:``): CUDA
allocates shared memory statically wherever it is written, so the allocation is hoisted
to the kernel's top and every lane may use the array (tessera/kernel/passes/
hoist_shared.py). A name allocated twice, rebound, or sized by a variable is refused."""

from __future__ import annotations

import importlib.util
import inspect
import os

import numpy as np
import pytest
from error_helpers import assert_points_at, compile_error

from tessera import f32, i32, kernel, mut, tbarrier, tile, tshared

FILE = inspect.getsourcefile(inspect.currentframe())
GROUP = {"tile": (32,), "shared": 4096}


def points_at(msg: str, marker: str, token: str) -> None:
    assert_points_at(msg, FILE, marker, token)


@kernel(tile=(32,), shared=4096)
def array_sum(data: mut[i32[n]]):
    """numba-cuda's example: the array is declared by the lanes with data."""
    tid = tile.linear_id()
    if tid < n:
        shr = tshared.alloc[i32](32)
        shr[tid] = data[tid]
    tbarrier()
    if tid == 0:
        total = 0
        for j in range(n):
            total += shr[j]
        data[0] = total


def test_an_array_declared_under_a_lane_dependent_if_is_shared_by_the_group(target):
    data = np.arange(1, 21, dtype=np.int32)
    array_sum[1](data)
    assert data[0] == 210
    np.testing.assert_array_equal(data[1:], np.arange(2, 21))


@kernel(tile=(32,), shared=4096)
def reverse_inside(x: f32[n], y: mut[f32[n]]):
    lane = tile.linear_id()
    if lane < n:
        s = tshared.alloc[f32](32)
        s[lane] = x[lane] * 2.0
    tbarrier()
    if lane < n:
        y[lane] = s[n - 1 - lane]  # another lane's element, written in its branch


def test_the_array_is_read_after_the_if_by_other_lanes(target):
    x = np.arange(32, dtype=np.float32)
    y = np.zeros_like(x)
    reverse_inside[1](x, y)
    np.testing.assert_array_equal(y, x[::-1] * 2.0)


@kernel(tile=(32,), shared=4096)
def in_a_divergent_loop(x: f32[n], y: mut[f32[n]]):
    lane = tile.linear_id()
    k = lane
    while k < n:
        s = tshared.alloc[f32](64)
        s[k] = x[k] + 1.0
        k += 32
    tbarrier()
    k = lane
    while k < n:
        y[k] = s[k]
        k += 32


def test_an_array_declared_in_a_lane_dependent_loop(target):
    x = np.arange(50, dtype=np.float32)
    y = np.zeros_like(x)
    in_a_divergent_loop[1](x, y)
    np.testing.assert_array_equal(y, x + 1.0)


def k_twice(x: f32[n], y: mut[f32[n]]):
    lane = tile.linear_id()
    if lane < 16:
        s = tshared.alloc[f32](32)  # E:twice
        s[lane] = x[lane]
    else:
        s = tshared.alloc[f32](32)
        s[lane] = 0.0
    y[lane] = x[lane]


def test_a_name_allocated_twice_under_a_lane_dependent_if_is_refused():
    err = str(compile_error(k_twice, **GROUP))
    assert "shared array 's' is allocated here and at line" in err
    assert "allocate it once, before the if" in err
    points_at(err, "twice", "s =")


def k_rebound(x: f32[n], y: mut[f32[n]]):
    lane = tile.linear_id()
    t = tshared.alloc[f32](32)
    if lane < 16:
        s = tshared.alloc[f32](32)
        s[lane] = x[lane]
    s, t = t, s  # E:rebound
    y[lane] = x[lane]


def test_a_hoisted_array_rebound_is_refused():
    err = str(compile_error(k_rebound, **GROUP))
    assert "a hoisted allocation must be its name's only binding" in err
    points_at(err, "rebound", "s, t")


def k_sized_by_variable(x: f32[n], y: mut[f32[n]]):
    lane = tile.linear_id()
    m = 32
    if lane < 16:
        s = tshared.alloc[f32](m)  # E:sized
        s[lane] = x[lane]
    y[lane] = x[lane]


def test_a_hoisted_array_sized_by_a_variable_is_refused():
    err = str(compile_error(k_sized_by_variable, **GROUP))
    assert "the size of shared array 's' reads 'm', a variable" in err
    points_at(err, "sized", "m)")


def k_barrier_inside(x: f32[n], y: mut[f32[n]]):
    lane = tile.linear_id()
    if lane < 16:
        s = tshared.alloc[f32](32)
        s[lane] = x[lane]
        tbarrier()  # E:barrier_inside
    y[lane] = x[lane]


def test_a_barrier_under_the_same_if_is_still_an_error():
    err = str(compile_error(k_barrier_inside, **GROUP))
    assert "tbarrier() is a group collective but is reached under lane-dependent" in err
    points_at(err, "barrier_inside", "tbarrier")


@pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or importlib.util.find_spec("numba.cuda") is None,
    reason="PTX needs numba-cuda without its simulator",
)
def test_the_hoisted_array_compiles_to_cuda_shared_memory():
    ptx = array_sum.inspect("ptx", np.zeros(20, np.int32), grid=1, arch="sm_90")
    assert "st.shared" in ptx and "ld.shared" in ptx
