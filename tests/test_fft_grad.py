"""Gradients through ``op.fft``, ``op.ifft``, ``op.rfft`` and ``op.irfft`` (docs/ops.md,
"FFT"): each transform's adjoint (its conjugate transpose; rfft's and irfft's with the
half spectrum's bins) against central finite differences of ``numpy.fft`` in f64, for
power-of-two and Bluestein lengths, ``n=`` padding and cropping, ``axis`` and every
``norm``; complex gradients follow PyTorch's convention, ``dL/d re z + i dL/d im z``."""

from __future__ import annotations

import numpy as np
import pytest

from tessera import graph, op
from tessera.errors import TesseraError

NUMPY = {"fft": np.fft.fft, "ifft": np.fft.ifft, "rfft": np.fft.rfft, "irfft": np.fft.irfft}
OPS = {"fft": op.fft, "ifft": op.ifft, "rfft": op.rfft, "irfft": op.irfft}


def _input(rng, name, shape, dtype=np.complex128):
    """rfft takes real signals; the others complex ones (irfft: a half spectrum)."""
    re = rng.standard_normal(shape)
    if name == "rfft":
        return re.astype(np.float32 if dtype == np.complex64 else np.float64)
    if np.dtype(dtype).kind == "f":
        return re.astype(dtype)
    return (re + 1j * rng.standard_normal(shape)).astype(dtype)


def _weights(rng, y):
    """A probe for a real loss of ``y``: ``sum(re(y) wr + im(y) wi)``."""
    parts = y.real.dtype
    return rng.standard_normal(y.shape).astype(parts), rng.standard_normal(y.shape).astype(parts)


def _numpy_loss(fn, wr, wi):
    def loss(x):
        y = fn(x)
        return float(np.sum(y.real * wr + (y.imag * wi if np.iscomplexobj(y) else 0.0)))

    return loss


def _traced_loss(fn, wr, wi):
    def loss(x):
        y = fn(x)
        if y.dtype.kind == "c":
            return op.sum(op.real(y) * wr + op.imag(y) * wi)
        return op.sum(y * wr)

    return loss


def finite_difference(loss, x, eps=1e-4):
    """Central differences of real ``loss`` at ``x``; of a complex ``x``, the real
    part's plus ``1j`` times the imaginary part's (PyTorch's convention)."""
    out = np.zeros(x.shape, x.dtype)
    parts = (1.0, 1j) if np.iscomplexobj(x) else (1.0,)
    for i in np.ndindex(x.shape):
        for unit in parts:
            saved = x[i]
            x[i] = saved + eps * unit
            up = loss(x)
            x[i] = saved - eps * unit
            down = loss(x)
            x[i] = saved
            out[i] += unit * (up - down) / (2 * eps)
    return out


def check(name, x, rtol=1e-9, **kwargs):
    rng = np.random.default_rng(7)
    y = NUMPY[name](x, **kwargs)
    wr, wi = _weights(rng, y)
    got = graph.grad(_traced_loss(lambda t: OPS[name](t, **kwargs), wr, wi))(x)
    want = finite_difference(_numpy_loss(lambda a: NUMPY[name](a, **kwargs), wr, wi), x.copy())
    assert got.dtype == x.dtype and got.shape == x.shape
    scale = float(np.abs(want).max())
    np.testing.assert_allclose(got, want, rtol=0, atol=rtol * scale)


@pytest.mark.parametrize("name", sorted(NUMPY))
@pytest.mark.parametrize("length", [8, 6, 5], ids=["pow2", "bluestein-even", "bluestein-odd"])
def test_a_transforms_gradient_matches_finite_differences(name, length):
    x = _input(np.random.default_rng(length), name, (3, length))
    check(name, x)


@pytest.mark.parametrize("name", sorted(NUMPY))
@pytest.mark.parametrize("n", [8, 3], ids=["padded", "cropped"])
def test_a_gradient_through_n_crops_or_pads_back_to_the_input(name, n):
    x = _input(np.random.default_rng(n), name, (2, 5))
    check(name, x, n=n)


@pytest.mark.parametrize("name", sorted(NUMPY))
@pytest.mark.parametrize("norm", ["backward", "ortho", "forward"])
def test_a_gradient_follows_each_norm(name, norm):
    x = _input(np.random.default_rng(1), name, (2, 6))
    check(name, x, norm=norm)


@pytest.mark.parametrize("name", sorted(NUMPY))
def test_a_gradient_along_axis_0(name):
    x = _input(np.random.default_rng(2), name, (6, 3))
    check(name, x, axis=0)


@pytest.mark.parametrize("name", ["fft", "ifft", "irfft"])
def test_the_gradient_of_a_real_input_is_real(name):
    x = np.random.default_rng(3).standard_normal((2, 6))
    check(name, x)


def test_complex64_gradients_match_to_f32_precision():
    x = _input(np.random.default_rng(4), "fft", (2, 12), np.complex64)
    rng = np.random.default_rng(7)
    wr, wi = _weights(rng, np.fft.fft(x))
    got = graph.grad(_traced_loss(op.fft, wr, wi))(x)
    want = finite_difference(_numpy_loss(np.fft.fft, wr, wi), x.astype(np.complex128))
    assert got.dtype == np.complex64
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * float(np.abs(want).max()))


def test_ffts_adjoint_is_the_dft_matrixs_conjugate_transpose():
    # y = F x, F[k, t] = exp(-2πi kt/n): the gradient of sum(re(conj(w) y)) is F^H w
    n = 7
    x = _input(np.random.default_rng(5), "fft", (n,))
    w = _input(np.random.default_rng(6), "fft", (n,))
    dft = np.exp(-2j * np.pi * np.outer(np.arange(n), np.arange(n)) / n)
    got = graph.grad(lambda t: op.sum(op.real(op.fft(t) * op.conj(w))))(x)
    np.testing.assert_allclose(got, dft.conj().T @ w, rtol=1e-12, atol=1e-12)


def test_an_fft_convolution_differentiates_in_signal_and_filter():
    # real in, real out: irfft(rfft(x) * rfft(h)), h broadcast over x's rows
    rng = np.random.default_rng(8)
    x, h, probe = (
        rng.standard_normal((3, 10)),
        rng.standard_normal(10),
        rng.standard_normal((3, 10)),
    )

    def loss(x, h):
        return op.sum(op.irfft(op.rfft(x) * op.rfft(h), n=10) * probe)

    def numpy_loss(x, h):
        return float(np.sum(np.fft.irfft(np.fft.rfft(x) * np.fft.rfft(h), n=10) * probe))

    gx, gh = graph.grad(loss, argnums=(0, 1))(x, h)
    np.testing.assert_allclose(
        gx, finite_difference(lambda a: numpy_loss(a, h), x.copy()), atol=1e-8
    )
    np.testing.assert_allclose(
        gh, finite_difference(lambda a: numpy_loss(x, a), h.copy()), atol=1e-8
    )


@pytest.mark.parametrize("name", ["fft", "irfft"])
def test_a_transforms_gradient_matches_on_every_target(target, name):
    x = _input(np.random.default_rng(9), name, (2, 6), np.complex64)
    rng = np.random.default_rng(7)
    wr, wi = _weights(rng, NUMPY[name](x))
    got = graph.grad(_traced_loss(OPS[name], wr, wi))(x)
    want = finite_difference(_numpy_loss(NUMPY[name], wr, wi), x.astype(np.complex128))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * float(np.abs(want).max()))


def test_a_transform_in_a_traced_module_matches_numpy():
    spectrum = graph.module("spectrum")(lambda x: op.fft(x, n=12, axis=0, norm="ortho"))
    x = np.random.default_rng(10).standard_normal((9, 4)).astype(np.float32)
    want = np.fft.fft(x, n=12, axis=0, norm="ortho")
    got = spectrum(x)
    assert got.dtype == np.complex64 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * float(np.abs(want).max()))


def test_a_reduction_of_a_complex_tensor_is_an_error_naming_the_op():
    total = graph.module("total")(lambda x: op.sum(op.fft(x)))
    with pytest.raises(TesseraError, match=r"op\.sum: takes real tensors, not complex128"):
        total(np.ones((2, 4)))


def test_the_real_part_of_a_real_tensor_is_an_error_naming_the_op():
    with pytest.raises(TesseraError, match=r"op\.real: takes a complex tensor, not f32"):
        op.real(np.ones(3, np.float32))


def test_a_traced_rfft_of_a_complex_tensor_is_an_error_naming_the_op():
    spectrum = graph.module("rspectrum")(lambda x: op.rfft(x))
    with pytest.raises(TesseraError, match=r"op\.rfft: takes a real array, not complex64"):
        spectrum(np.ones(4, np.complex64))


def test_the_convolutions_gradient_is_docs_ops_closed_form():
    # docs/ops.md, "FFT": y = irfft(rfft(x) rfft(h)), L = sum(y²); dL/dy = 2y, and the
    # transpose of a circular convolution by h is the correlation by h
    rng = np.random.default_rng(0)
    x, h = rng.standard_normal((4, 64)), rng.standard_normal(64)

    def loss(x, h):
        y = op.irfft(op.rfft(x) * op.rfft(h), n=64)
        return op.sum(y * y)

    gx, gh = graph.grad(loss, argnums=(0, 1))(x, h)
    dy = 2 * np.fft.irfft(np.fft.rfft(x) * np.fft.rfft(h), n=64)
    want_x = np.fft.irfft(np.fft.rfft(dy) * np.conj(np.fft.rfft(h)), n=64)
    want_h = np.fft.irfft(np.fft.rfft(dy) * np.conj(np.fft.rfft(x)), n=64).sum(axis=0)
    assert gx.shape == (4, 64) and gh.shape == (64,) and gx.dtype == np.float64
    np.testing.assert_allclose(gx, want_x, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(gh, want_h, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda t: op.fft(t, norm="unitary"), r"op\.fft: norm='unitary' is not one of"),
        (lambda t: op.ifft(t, n=0), r"op\.ifft: invalid number of data points \(0\)"),
        (lambda t: op.irfft(t, axis=2), r"op\.irfft: axis 2 is out of range"),
        (lambda t: op.rfft(t, n=1.5), r"op\.rfft: n must be an int, not float"),
    ],
    ids=["norm", "n", "axis", "n-type"],
)
def test_a_traced_transforms_bad_argument_is_an_error_naming_the_op_and_argument(call, message):
    module = graph.module("bad_transform")(call)
    with pytest.raises(TesseraError, match=message):
        module(np.ones((2, 4)))


def test_a_traced_transform_of_an_integer_tensor_is_an_error_naming_the_op():
    module = graph.module("int_transform")(lambda t: op.fft(t))
    with pytest.raises(TesseraError, match=r"op\.fft: a traced transform takes f16, f32, f64"):
        module(np.ones(4, np.int32))
