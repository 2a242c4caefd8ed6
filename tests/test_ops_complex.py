"""Complex tensors in the operator layer (docs/ops.md, "FFT"): ``+``, ``-``, ``*``, unary
``-``, ``op.real``, ``op.imag`` and ``op.conj`` against NumPy, their gradients against
finite differences (PyTorch's convention, ``dL/d re z + i dL/d im z``), and the other
ops' refusals naming themselves."""

from __future__ import annotations

import numpy as np
import pytest
from test_fft_grad import finite_difference

from tessera import graph, op
from tessera.errors import TesseraError


def _complex(rng, shape, dtype=np.complex128):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


@pytest.fixture
def z():
    return _complex(np.random.default_rng(0), (3, 4), np.complex64)


def test_real_imag_and_conj_of_a_complex_array_are_numpys(target, z):
    assert op.real(z).dtype == np.float32 and op.real(z).tobytes() == z.real.tobytes()
    assert op.imag(z).tobytes() == z.imag.tobytes()
    assert op.conj(z).dtype == np.complex64 and op.conj(z).tobytes() == z.conj().tobytes()


def test_arithmetic_of_complex_arrays_matches_numpy(target, z):
    w = z[::-1].copy()
    np.testing.assert_allclose(op.mul(z, w), z * w, rtol=1e-6)
    np.testing.assert_array_equal(op.add(z, w), z + w)
    np.testing.assert_array_equal(op.sub(z, 2.0), z - np.float32(2.0))
    np.testing.assert_array_equal(op.neg(z), -z)


def test_traced_tensors_spell_the_parts_as_numpy_does(z):
    parts = graph.module("parts")(lambda t: (t.real, t.imag, t.conj()))
    re, im, conj = parts(z)
    assert re.tobytes() == z.real.tobytes() and im.tobytes() == z.imag.tobytes()
    assert conj.tobytes() == z.conj().tobytes()


def test_a_complex_products_gradient_is_g_times_the_others_conjugate():
    rng = np.random.default_rng(1)
    a, b = _complex(rng, (2, 3)), _complex(rng, (2, 3))
    wr, wi = rng.standard_normal((2, 3)), rng.standard_normal((2, 3))

    def loss(a, b):
        y = a * b
        return op.sum(op.real(y) * wr + op.imag(y) * wi)

    ga, gb = graph.grad(loss, argnums=(0, 1))(a, b)
    g = wr + 1j * wi  # the upstream gradient of y
    np.testing.assert_allclose(ga, g * b.conj(), rtol=1e-12)
    np.testing.assert_allclose(gb, g * a.conj(), rtol=1e-12)


def test_the_parts_and_conjugate_gradients_match_finite_differences():
    rng = np.random.default_rng(2)
    z = _complex(rng, (2, 3))
    p, q = rng.standard_normal((2, 3)), rng.standard_normal((2, 3))

    def loss(t):
        return op.sum(op.real(t) * p + op.imag(op.conj(t) * t + op.conj(t)) * q)

    def numpy_loss(t):
        return float(np.sum(t.real * p + (t.conj() * t + t.conj()).imag * q))

    got = graph.grad(loss)(z)
    np.testing.assert_allclose(got, finite_difference(numpy_loss, z.copy()), atol=1e-8)


def test_a_broadcast_complex_operands_gradient_is_summed_over_the_broadcast_axes():
    rng = np.random.default_rng(3)
    a, b = _complex(rng, (4, 3)), _complex(rng, (3,))
    w = rng.standard_normal((4, 3))

    def loss(a, b):
        return op.sum(op.real(a * b) * w)

    gb = graph.grad(loss, argnums=1)(a, b)
    np.testing.assert_allclose(gb, (w * a.conj()).sum(axis=0), rtol=1e-12)


def test_the_gradient_of_an_unused_complex_argument_is_complex_zero():
    z = _complex(np.random.default_rng(4), (2, 2))
    g = graph.grad(lambda a, b: op.sum(op.real(a)), argnums=1)(z, z)
    assert g.dtype == np.complex128 and not g.any()


@pytest.mark.parametrize(
    "call, name",
    [(op.exp, "exp"), (lambda t: op.div(t, t), "div"), (op.sum, "sum"), (abs, "abs")],
    ids=["exp", "div", "sum", "abs"],
)
def test_an_op_that_takes_no_complex_tensor_is_an_error_naming_it(z, call, name):
    module = graph.module(f"complex_{name}")(lambda t: call(t))
    with pytest.raises(TesseraError, match=rf"op\.{name}: takes real tensors, not complex64"):
        module(z)


def test_a_real_array_beside_a_complex_one_of_its_parts_dtype_is_made_complex(z):
    r = np.random.default_rng(5).standard_normal((3, 4)).astype(np.float32)
    product = op.mul(z, r)
    assert product.dtype == np.complex64
    np.testing.assert_allclose(product, z * r, rtol=1e-6)


def test_a_real_operands_gradient_beside_a_complex_one_is_the_real_part():
    rng = np.random.default_rng(6)
    z, r, w = _complex(rng, (2, 3)), rng.standard_normal(3), rng.standard_normal((2, 3))
    gr = graph.grad(lambda z, r: op.sum(op.imag(z * r) * w), argnums=1)(z, r)
    assert gr.dtype == np.float64
    np.testing.assert_allclose(gr, (w * z.imag).sum(axis=0), rtol=1e-12)


def test_a_complex_and_a_real_array_of_other_precisions_are_an_error_naming_the_op(z):
    with pytest.raises(TesseraError, match=r"op\.mul: mixes dtypes complex64 and f64"):
        op.mul(z, np.ones((3, 4)))
