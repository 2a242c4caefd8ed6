"""The operator layer and the caller's arrays: outputs that overlap inputs (or each other)
give NumPy's result, modules write only into arguments declared ``mut``, results never
are the caller's arrays, and a failed operation leaves every argument untouched."""

from __future__ import annotations

import os

import numpy as np
import pytest

import tessera
from tessera import graph, mut, op
from tessera.errors import TesseraError
from tessera.kernel.targets.cuda.streams import gpu_usable

ON_SIMULATOR = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
device = pytest.mark.skipif(
    not ON_SIMULATOR and not gpu_usable(), reason="needs a GPU or numba-cuda's simulator"
)


@graph.kernel
def doubled(x, out):
    out[:] = x * 2


# ------------------------------------------------------------------ overlapping outputs
def test_an_output_overlapping_its_input_reads_the_input_first():
    buf = np.arange(8, dtype=np.float32)
    expected = buf.copy()
    expected[1:] = expected[:-1] * 2
    doubled(buf[:-1], buf[1:])
    np.testing.assert_array_equal(buf, expected)


def test_an_output_overlapping_its_input_the_other_way_reads_the_input_first():
    buf = np.arange(8, dtype=np.float32)
    expected = buf.copy()
    expected[:-1] = expected[1:] * 2
    doubled(buf[1:], buf[:-1])
    np.testing.assert_array_equal(buf, expected)


def test_the_same_array_as_input_and_output_is_updated_in_place_elementwise():
    buf = np.arange(8, dtype=np.float32)
    doubled(buf, buf)
    np.testing.assert_array_equal(buf, np.arange(8, dtype=np.float32) * 2)


def test_an_output_overlapping_a_broadcast_operand_reads_the_operand_first():
    @graph.kernel
    def add_row(x, row, out):
        out[:] = x + row

    buf = np.arange(16, dtype=np.float32).reshape(4, 4)
    expected = buf + buf[1]
    add_row(buf, buf[1], buf)
    np.testing.assert_array_equal(buf, expected)


def test_a_matmul_into_one_of_its_operands_reads_the_operand_first(rng):
    @graph.kernel
    def product(a, b, c):
        c[:] = op.matmul(a, b, tile_shape=(8, 8, 8))

    a = rng.standard_normal((16, 16)).astype(np.float32)
    b = rng.standard_normal((16, 16)).astype(np.float32)
    expected = a @ b
    product(a, b, a)
    np.testing.assert_allclose(a, expected, rtol=1e-4, atol=1e-4)


def test_an_output_overlapping_an_array_the_kernel_captured_reads_it_first():
    buf = np.arange(8, dtype=np.float32)

    @graph.kernel
    def shifted(x, out):
        out[:] = x + buf[:-1]  # buf[:-1] is captured: a view made at trace time

    expected = buf.copy()
    expected[1:] = 2 * expected[:-1]
    shifted(buf[:-1].copy(), buf[1:])
    np.testing.assert_array_equal(buf, expected)


def test_outputs_that_overlap_each_other_land_in_program_order():
    @graph.kernel
    def two(x, first, second):
        first[:] = x + 1
        second[:] = x * 10

    x = np.arange(4, dtype=np.float32)
    buf = np.zeros(6, np.float32)
    expected = buf.copy()
    expected[:4] = x + 1
    expected[2:] = x * 10
    two(x, buf[:4], buf[2:])
    np.testing.assert_array_equal(buf, expected)


def test_an_input_overlapping_an_earlier_output_is_read_as_passed():
    @graph.kernel
    def copies(x, y, first, second):
        first[:] = x
        second[:] = y

    @graph.kernel
    def computed(x, y, first, second):
        first[:] = x * 1
        second[:] = y * 1

    results = []
    for kernel in (copies, computed):
        buf = np.arange(8, dtype=np.float32)
        kernel(np.full(3, 9, np.float32), buf[0:3], buf[1:4], buf[4:7])
        results.append(buf)
    np.testing.assert_array_equal(results[0], [0, 9, 9, 9, 0, 1, 2, 7])
    np.testing.assert_array_equal(results[1], results[0])


def test_an_argument_read_after_it_is_assigned_gives_the_assigned_value():
    @graph.kernel
    def chain(a, b):
        a[:] = b
        b[:] = a * 2

    a, b = np.arange(3, dtype=np.float32), np.arange(3, 6, dtype=np.float32)
    expected_a, expected_b = a.copy(), b.copy()
    expected_a[:] = expected_b
    expected_b[:] = expected_a * 2
    chain(a, b)
    np.testing.assert_array_equal(a, expected_a)
    np.testing.assert_array_equal(b, expected_b)


# ------------------------------------------------------------------ modules and arguments
def test_a_module_assigning_into_an_argument_is_an_error_naming_it():
    @graph.module("scaled")
    def scaled(x, y):
        x[:] = y * 2
        return y + 1

    x, y = np.zeros(4, np.float32), np.ones(4, np.float32)
    with pytest.raises(TesseraError, match=r"'scaled'.*\bx\b.*mut"):
        scaled(x, y)
    np.testing.assert_array_equal(x, 0)


def test_a_module_writes_into_an_argument_declared_mut():
    @graph.module("step")
    def step(w: mut, g):
        w[:] = w - g * 0.5
        return op.sum(g)

    w, g = np.ones(4, np.float32), np.full(4, 2.0, np.float32)
    total = step(w, g)
    np.testing.assert_array_equal(w, 0)
    assert float(total) == 8.0
    assert not np.shares_memory(total, w)


def test_a_module_result_is_never_the_callers_array():
    @graph.module("same")
    def same(x):
        return x, op.reshape(x, (2, 2))

    x = np.arange(4, dtype=np.float32)
    whole, reshaped = same(x)
    assert not np.shares_memory(whole, x) and not np.shares_memory(reshaped, x)
    whole[0] = reshaped[0, 1] = 99
    np.testing.assert_array_equal(x, np.arange(4))


def test_a_gradient_of_a_function_assigning_into_an_argument_is_an_error():
    def loss(x: mut, y):
        x[:] = y
        return op.sum(y * y)

    x, y = np.zeros(3, np.float32), np.ones(3, np.float32)
    with pytest.raises(TesseraError, match=r"'grad_loss'.*\bx\b"):
        graph.grad(loss, argnums=1)(x, y)
    np.testing.assert_array_equal(x, 0)


# ------------------------------------------------------------------ failed operations
@graph.kernel
def matmul_and_softmax(a, b, first, second):
    first[:] = op.matmul(a, b)
    second[:] = op.softmax(a)


def test_a_read_only_output_is_an_error_before_anything_is_written():
    a = np.ones((4, 4), np.float32)
    first, second = np.zeros((4, 4), np.float32), np.zeros((4, 4), np.float32)
    second.flags.writeable = False
    with pytest.raises(TesseraError, match=r"'matmul_and_softmax'.*\bsecond\b.*read-only"):
        matmul_and_softmax(a, a, first, second)
    np.testing.assert_array_equal(first, 0)


def test_a_read_only_strided_output_is_a_tessera_error_naming_it():
    a = np.ones((4, 4), np.float32)
    first = np.zeros((4, 4), np.float32)
    second = np.zeros((4, 8), np.float32)[:, ::2]
    second.flags.writeable = False
    with pytest.raises(TesseraError, match=r"'matmul_and_softmax'.*\bsecond\b.*read-only"):
        matmul_and_softmax(a, a, first, second)
    np.testing.assert_array_equal(first, 0)


class _FailingLaunch:
    def __getitem__(self, grid):
        def launch(*args):
            raise tessera.errors.LaunchError("kernel", "this launch fails")

        return launch


def test_a_failure_in_a_later_launch_leaves_every_output_untouched():
    a = np.ones((4, 4), np.float32)
    first, second = np.zeros((4, 4), np.float32), np.zeros((4, 4), np.float32)
    lowered, _ = matmul_and_softmax.lowered((a, a, first, second))
    assert len(lowered.kernels) == 2
    saved = lowered.kernels[1]
    lowered.kernels[1] = _FailingLaunch()
    try:
        with pytest.raises(TesseraError, match="this launch fails"):
            matmul_and_softmax(a, a, first, second)
    finally:
        lowered.kernels[1] = saved
    np.testing.assert_array_equal(first, 0)
    np.testing.assert_array_equal(second, 0)
    matmul_and_softmax(a, a, first, second)
    np.testing.assert_array_equal(first, 4)


# ------------------------------------------------------------------ device arrays
@device
def test_an_overlapping_device_output_reads_the_input_first_on_cuda():
    from numba import cuda

    host = np.arange(8, dtype=np.float32)
    expected = host.copy()
    expected[1:] = expected[:-1] * 2
    buf = cuda.to_device(host)
    doubled(buf[:-1], buf[1:])
    np.testing.assert_array_equal(buf.copy_to_host(), expected)


def test_only_a_same_view_elementwise_update_is_written_in_place(rng):
    from tessera.ops import aliasing

    @graph.kernel
    def product(a, b, c):
        c[:] = op.matmul(a, b)

    buf = np.arange(8, dtype=np.float32)
    square = rng.standard_normal((4, 4)).astype(np.float32)
    for kernel, args, in_place in (
        (doubled, (buf, buf), True),
        (doubled, (buf[:-1], buf[1:]), False),
        (product, (square, square, square), False),
    ):
        lowered, arrays = kernel.lowered(args)
        env = {id(i): a for i, a in zip(lowered.graph.inputs, arrays)}
        direct = aliasing.direct_outputs(lowered, arrays, env)
        assert bool(direct) == in_place, kernel


@device
def test_an_overlapping_device_input_is_read_as_passed_on_cuda():
    from numba import cuda

    @graph.kernel
    def copies(x, y, first, second):
        first[:] = x
        second[:] = y

    buf = cuda.to_device(np.arange(8, dtype=np.float32))
    copies(cuda.to_device(np.full(3, 9, np.float32)), buf[0:3], buf[1:4], buf[4:7])
    np.testing.assert_array_equal(buf.copy_to_host(), [0, 9, 9, 9, 0, 1, 2, 7])
