"""op.log_softmax along the last axis: one generated row kernel (as op.softmax: one group
of lanes per row, the row's max and sum met in the fixed tree), its adjoint
``g - exp(y) · sum(g)``; against NumPy and finite differences, the same bits on every
target; other axes keep the fused ops that define it."""

from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import pytest
from gpu_arrays import made_up_gpu_array
from test_ops_grad import finite_difference

import tessera
from tessera import graph, op
from tessera.errors import TesseraError

TARGETS = ("cpu", "debug") if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1" else ("cuda",)


def launches() -> int:
    return tessera.stats()["launches"]


def reference(x, axis=-1):
    x = x.astype(np.float64)
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


@graph.module("row_log_softmax")
def row_log_softmax(x):
    return op.log_softmax(x)


@pytest.mark.parametrize("dtype, rtol", [(np.float32, 1e-5), (np.float64, 1e-12)])
def test_log_softmax_matches_numpy(target, rng, dtype, rtol):
    x = (rng.standard_normal((5, 300)) * 4.0).astype(dtype)
    got = op.log_softmax(x)
    assert got.dtype == dtype and got.shape == x.shape
    np.testing.assert_allclose(got, reference(x), rtol=rtol, atol=rtol)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_half_log_softmax_computes_in_f32_and_rounds_once(rng, dtype):
    x = rng.standard_normal((3, 40)).astype(dtype)
    got = op.log_softmax(x)
    assert got.dtype == dtype
    want = reference(x.astype(np.float32)).astype(np.float32).astype(dtype)
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))


def test_log_softmax_of_a_batch_runs_along_the_last_axis(rng):
    x = rng.standard_normal((2, 3, 17)).astype(np.float32)
    np.testing.assert_allclose(op.log_softmax(x, axis=2), reference(x), rtol=1e-5, atol=1e-6)


def test_log_softmax_is_one_kernel_and_one_launch(target, rng):
    x = rng.standard_normal((4, 100)).astype(np.float32)
    before = launches()
    op.log_softmax(x)
    assert launches() - before == 1
    assert len(row_log_softmax.kernels(x)) == 1
    text = row_log_softmax.graph(x)
    assert "tile.max(" in text and "tile.sum(" in text and text.count("math.log(") == 1


def test_log_softmax_along_another_axis_keeps_the_fused_ops(rng):
    x = rng.standard_normal((4, 6)).astype(np.float32)
    module = graph.module("ls0")(lambda t: op.log_softmax(t, axis=0))
    assert not any("softmax" in k.name for k in module.kernels(x))  # reductions, elementwise
    np.testing.assert_allclose(module(x), reference(x, axis=0), rtol=1e-5, atol=1e-6)


def test_log_softmax_has_the_same_bits_on_every_target(rng):
    x = (rng.standard_normal((3, 1000)) * 3.0).astype(np.float32)
    results = []
    for name in TARGETS:
        with tessera.config(target=name):
            results.append(op.log_softmax(x))
    for r in results[1:]:
        assert r.tobytes() == results[0].tobytes()


def test_log_softmax_adjoint_matches_finite_differences(rng):
    x = rng.standard_normal((3, 37))
    probe = rng.standard_normal((3, 37))

    def loss(t):
        return op.sum(op.log_softmax(t) * probe)

    got = graph.grad(loss)(x)
    want = finite_difference(graph.module("fd_log_softmax")(loss), [x], 0, 1e-6)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)


def test_log_softmax_adjoint_is_g_minus_softmax_times_the_row_sum(rng):
    x = rng.standard_normal((4, 9)).astype(np.float32)
    probe = rng.standard_normal((4, 9)).astype(np.float32)
    got = graph.grad(lambda t: op.sum(op.log_softmax(t) * probe))(x)
    p = np.exp(reference(x))
    want = probe - p * probe.sum(axis=-1, keepdims=True)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1", reason="numba-cuda's driver classes"
)
def test_a_gpu_log_softmax_row_reads_each_element_once_into_registers():
    text = row_log_softmax.graph(made_up_gpu_array((4, 4096)))  # 256 lanes, 16 each
    assert "v15 = f32(p0[base + lane + 3840])" in text and "for jt in range" not in text
    assert text.count("p0[") == 16 and text.count("p1[") == 16
    host = row_log_softmax.graph(np.ones((4, 4096), np.float32))  # the CPU keeps its loops
    assert "for jt in range(16):" in host
    ptx = row_log_softmax.inspect("ptx", made_up_gpu_array((4, 4096)))  # no GPU needed
    assert ptx.count("ld.global") == 16 and ptx.count("st.global") == 16
    assert "ld.local" not in ptx and "st.local" not in ptx


def test_log_softmax_of_an_integer_array_is_an_error_naming_the_op():
    with pytest.raises(TesseraError, match=r"op\.log_softmax: takes float arrays"):
        op.log_softmax(np.ones((2, 3), np.int32))


def test_log_softmax_along_an_axis_out_of_range_is_an_error_naming_the_op():
    with pytest.raises(TesseraError, match=r"op\.log_softmax: axis=2 is not an axis"):
        op.log_softmax(np.ones((2, 3), np.float32), axis=2)


def test_log_softmax_of_a_0d_array_is_an_error_naming_the_op():
    with pytest.raises(TesseraError, match=r"op\.log_softmax: runs along the last axis"):
        op.log_softmax(np.array(1.0, np.float32))
