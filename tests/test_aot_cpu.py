"""Ahead-of-time CPU modules launched from C: the same bits as a Python launch (ABI.md §6).

The C programs in tests/c/ are compiled with the system C compiler against the module the
tests build once (tests/aot_build.py) and the runtime's sources; they skip, saying so,
where there is no C compiler.
"""

from __future__ import annotations

import subprocess

import aot_kernels as K
import ml_dtypes
import numpy as np
import pytest
from aot_build import GEMM_BLOCKS, launch, need_cc, program

BF16 = np.dtype(ml_dtypes.bfloat16)


@pytest.fixture(autouse=True)
def _cc():
    need_cc()


def test_block_sum_from_c_equals_the_python_launch_bitwise(rng):
    x = rng.random(100_003).astype(np.float32)
    groups = -(-x.size // 256)
    want = np.zeros(groups, np.float32)
    K.block_sum[groups](x, want)
    run = launch("block_sum", [x, np.zeros(groups, np.float32)], grid=(groups, 1, 1), threads=4)
    assert run.status == 0, run.message
    assert np.array_equal(run.arrays[1], want)


def test_one_and_many_runtime_threads_give_the_same_bits(rng):
    x = rng.standard_normal(50_000).astype(np.float32)
    groups = -(-x.size // 256)
    one = launch("block_sum", [x, np.zeros(groups, np.float32)], grid=(groups, 1, 1), threads=1)
    many = launch("block_sum", [x, np.zeros(groups, np.float32)], grid=(groups, 1, 1), threads=7)
    assert one.status == many.status == 0
    assert np.array_equal(one.arrays[1], many.arrays[1])


def test_tile_gemm_from_c_equals_the_python_launch_bitwise(rng):
    m, k, n = 100, 72, 90
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    grid = (-(-m // GEMM_BLOCKS["BM"]), -(-n // GEMM_BLOCKS["BN"]))
    want = np.zeros((m, n), np.float32)
    K.linear_relu[grid](a, b, bias, want, *GEMM_BLOCKS.values())
    run = launch("linear_relu", [a, b, bias, np.zeros((m, n), np.float32)], grid=(*grid, 1))
    assert run.status == 0, run.message
    assert np.array_equal(run.arrays[3], want)
    assert np.allclose(want, np.maximum(a @ b + bias, 0), rtol=1e-4, atol=1e-4)


def test_flat_kernel_with_a_scalar_from_c_equals_python(rng):
    x = rng.standard_normal(1001).astype(np.float32)
    y = rng.standard_normal(1001).astype(np.float32)
    want = y.copy()
    K.axpy[x.size](np.float32(1.5), x, want)
    run = launch("axpy", [("f32", 1.5), x, y.copy()], grid=(x.size, 1, 1))
    assert run.status == 0, run.message
    assert np.array_equal(run.arrays[1], want)


def test_an_all_zero_launch_runs_a_flat_kernel_over_its_first_mut_array(rng):
    x = rng.standard_normal(777).astype(np.float32)
    y = rng.standard_normal(777).astype(np.float32)
    want = y.copy()
    K.axpy[x.size](np.float32(-2.0), x, want)
    run = launch("axpy", [("f32", -2.0), x, y.copy()], grid=(0, 0, 0))
    assert run.status == 0, run.message
    assert np.array_equal(run.arrays[1], want)


def test_strided_arrays_take_the_strided_code(rng):
    base_x = rng.standard_normal(2000).astype(np.float32)
    base_y = rng.standard_normal(2000).astype(np.float32)
    x, y = base_x[::2], base_y[::2]
    want = y.copy()
    K.axpy[x.size](np.float32(3.0), x, want)
    run = launch("axpy", [("f32", 3.0), x, y], grid=(x.size, 1, 1))
    assert run.status == 0, run.message
    got = run.arrays[1]
    assert np.array_equal(got[::2], want)
    assert np.array_equal(got[1::2], base_y[1::2])  # the elements between are untouched


def test_half_arrays_and_a_half_scalar_passed_as_bits(rng):
    x = rng.standard_normal(300).astype(np.float16)
    want = x.copy()
    K.scale_half[x.size](want, np.float16(0.375), 2)
    bits = int(np.float16(0.375).view(np.uint16))
    run = launch("scale_half", [x.copy(), ("h", bits), ("i32", 2)], grid=(x.size, 1, 1))
    assert run.status == 0, run.message
    assert np.array_equal(run.arrays[0].view(np.uint16), want.view(np.uint16))


def test_zero_grid_y_and_z_mean_one(rng):
    x = rng.random(1000).astype(np.float32)
    groups = -(-x.size // 256)
    want = np.zeros(groups, np.float32)
    K.block_sum[groups](x, want)
    run = launch("block_sum", [x, np.zeros(groups, np.float32)], grid=(groups, 0, 0))
    assert run.status == 0, run.message
    assert np.array_equal(run.arrays[1], want)


def test_zero_groups_run_nothing(rng):
    x = rng.random(10).astype(np.float32)
    run = launch("block_sum", [x, np.zeros(0, np.float32)], grid=(0, 1, 1))
    assert run.status == 0, run.message


def test_the_seed_host_flow_compiles_and_runs_as_written(rng):
    exe = program("host_flow.c")
    done = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    m, n, k = 19, 13, 11
    a = ((np.arange(m * k) % 7) - 3).astype(BF16).reshape(m, k)
    b = ((np.arange(k * n) % 5) - 2).astype(BF16).reshape(k, n)
    want = np.zeros((m, n), np.float32)
    K.tile_linear_bf16[(-(-m // 8), -(-n // 8))](a, b, want, m, n, k)
    got = np.array([float(v) for v in done.stdout.split()], np.float32).reshape(m, n)
    assert np.array_equal(got, want)
    assert np.array_equal(want, a.astype(np.float32) @ b.astype(np.float32))


def test_launches_from_several_host_threads_at_once_are_each_right():
    exe = program("threads.c")
    done = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "ok 8 threads x 50 launches"
