"""op.cross_entropy: one generated kernel, one group of lanes per row, for the row
losses (then op.mean / op.sum); its adjoint a second row kernel; against NumPy and
finite differences on every target; out-of-range host targets refused before launch."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from test_ops_grad import finite_difference

import tessera
from tessera import graph, op
from tessera.errors import TesseraError


def launches() -> int:
    return tessera.stats()["launches"]


def reference(x, t, reduction):
    x = x.astype(np.float64)
    m = x.max(axis=1)
    rows = m + np.log(np.exp(x - m[:, None]).sum(axis=1)) - x[np.arange(len(t)), t]
    return {"none": rows, "sum": rows.sum(), "mean": rows.mean()}[reduction]


def not_on_the_simulator(target):
    """Gradients (finite differences: dozens of launches) and the dtype matrix run on the
    host targets; under numba-cuda's simulator, which runs every thread as Python, the
    values are checked once (test_cross_entropy_matches_numpy, f32, 'none')."""
    if target == "cuda":
        pytest.skip("minutes under the simulator; the kernel's values are checked there once")


def case(rng, rows=7, classes=300, dtype=np.float32):
    x = (rng.standard_normal((rows, classes)) * 3.0).astype(dtype)
    t = rng.integers(0, classes, rows)
    t[0], t[-1] = 0, classes - 1
    return x, t


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype, rtol", [(np.float32, 1e-5), (np.float64, 1e-12)])
def test_cross_entropy_matches_numpy(target, rng, reduction, dtype, rtol):
    if (reduction, dtype) != ("none", np.float32):
        not_on_the_simulator(target)
    x, t = case(rng, dtype=dtype)
    got = op.cross_entropy(x, t, reduction=reduction)
    assert got.dtype == dtype and got.shape == (() if reduction != "none" else (7,))
    np.testing.assert_allclose(got, reference(x, t, reduction), rtol=rtol, atol=0)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_half_logits_compute_in_f32_and_round_once(target, rng, dtype):
    not_on_the_simulator(target)
    x, t = case(rng, rows=5, classes=40, dtype=dtype)
    want = reference(x.astype(np.float32), t, "none")
    got = op.cross_entropy(x, t.astype(np.int32), reduction="none")
    assert got.dtype == dtype
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-2)


def test_the_row_losses_are_one_kernel_and_one_launch(target, rng):
    x, t = case(rng)
    before = launches()
    op.cross_entropy(x, t, reduction="none")
    assert launches() - before == 1

    @graph.module("ce_mean")
    def ce_mean(x, t):
        return op.cross_entropy(x, t)

    kernels = ce_mean.kernels(x, t)
    assert len(kernels) == 2  # the row losses, then op.mean's reduction of them
    text = ce_mean.graph(x, t)
    assert "cross_entropy" in text and "tile.max(" in text and "tile.sum(" in text
    assert text.count("_cross_entropy(") == 1  # (one generated kernel reads the logits)
    before = launches()
    np.testing.assert_allclose(ce_mean(x, t), reference(x, t, "mean"), rtol=1e-5)
    assert launches() - before == 2


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_gradient_matches_finite_differences(target, rng, reduction):
    not_on_the_simulator(target)
    x, t = case(rng, rows=4, classes=11, dtype=np.float64)
    probe = rng.standard_normal(4)

    def loss(x, t):
        y = op.cross_entropy(x, t, reduction=reduction)
        return op.sum(y * probe) if reduction == "none" else y * 1.5

    got = graph.grad(loss, argnums=0)(x, t)
    want = finite_difference(graph.module("fd_ce")(loss), [x, t], 0, 1e-6)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    # and the closed form: (softmax - onehot) * upstream
    p = np.exp(x - x.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p[np.arange(4), t] -= 1.0
    scale = {"none": probe[:, None], "sum": 1.5, "mean": 1.5 / 4}[reduction]
    np.testing.assert_allclose(got, p * scale, rtol=1e-12, atol=1e-15)


def test_f32_gradient_and_value(target, rng):
    not_on_the_simulator(target)
    x, t = case(rng, rows=6, classes=70)
    value, g = graph.value_and_grad(lambda x, t: op.cross_entropy(x, t), argnums=0)(x, t)
    np.testing.assert_allclose(value, reference(x, t, "mean"), rtol=1e-5)
    x64 = x.astype(np.float64)
    p = np.exp(x64 - x64.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p[np.arange(6), t] -= 1.0
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, p / 6, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("bad", [-1, 300, 10**6])
def test_targets_out_of_range_are_refused_before_launch(target, rng, bad):
    x, t = case(rng)
    t[3] = bad
    before = launches()
    for reduction in ("mean", "sum", "none"):
        with pytest.raises(TesseraError, match=f"target {bad} .*0..299"):
            op.cross_entropy(x, t, reduction=reduction)
    assert launches() == before


def test_targets_not_checked_in_a_traced_graph_give_a_nan_row(target, rng):
    x, t = case(rng)
    t[2] = 300  # (a traced graph's targets are not read before the launch)
    got = graph.module("ce_rows")(lambda x, t: op.cross_entropy(x, t, reduction="none"))(x, t)
    assert np.isnan(got[2]) and not np.isnan(np.delete(got, 2)).any()


def test_bad_arguments_are_refused(rng):
    x, t = case(rng)
    with pytest.raises(TesseraError, match="reduction='avg'"):
        op.cross_entropy(x, t, reduction="avg")
    with pytest.raises(TesseraError, match="integer dtype"):
        op.cross_entropy(x, t.astype(np.float32))
    with pytest.raises(TesseraError, match=r"shape \(7,\)"):
        op.cross_entropy(x, t[:5])
    with pytest.raises(TesseraError, match=r"logits of shape \(N, C\)"):
        op.cross_entropy(x.reshape(7, 3, 100), t)
    with pytest.raises(TesseraError, match="f16, bf16, f32 or f64"):
        op.cross_entropy(x.astype(np.int32), t)
