"""``op.fft``, ``op.ifft``, ``op.rfft`` and ``op.irfft``: numpy.fft's functions computed by
kernels of the language (Stockham radix-2 passes, Bluestein for other lengths), within
1e-5 relative of NumPy in f32 and 1e-12 in f64 on every target."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

from tessera import complex64, graph, op
from tessera.ops.fft import kernels
from tessera.ops.tensor import GraphError


def _close(got, want, rtol):
    assert got.dtype == want.dtype and got.shape == want.shape
    scale = max(float(np.abs(want).max()), 1e-30)
    assert float(np.abs(got - want).max()) <= rtol * scale


def _complex(rng, shape, dtype=np.complex64):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


@pytest.mark.parametrize("n", [1, 2, 16, 12, 17])
def test_fft_and_ifft_match_numpy_for_powers_of_two_and_other_lengths(target, rng, n):
    x = _complex(rng, (3, n))
    _close(op.fft(x), np.fft.fft(x), 1e-5)
    _close(op.ifft(x), np.fft.ifft(x), 1e-5)


@pytest.mark.parametrize("n", [8, 10])
def test_rfft_and_irfft_match_numpy(target, rng, n):
    r = rng.standard_normal((2, n)).astype(np.float32)
    spectrum = np.fft.rfft(r)
    _close(op.rfft(r), spectrum, 1e-5)
    _close(op.irfft(spectrum), np.fft.irfft(spectrum), 1e-5)
    _close(op.irfft(spectrum, n=n - 1), np.fft.irfft(spectrum, n=n - 1), 1e-5)


def test_f64_transforms_are_accurate_to_f64(target, rng):
    x = rng.standard_normal((2, 24))  # 24: Bluestein's path
    _close(op.fft(x), np.fft.fft(x), 1e-12)
    _close(op.ifft(x, norm="ortho"), np.fft.ifft(x, norm="ortho"), 1e-12)
    _close(op.fft(x[:, :16], norm="forward"), np.fft.fft(x[:, :16], norm="forward"), 1e-12)


def test_axis_and_n_crop_or_pad_as_numpy(rng):
    x = rng.standard_normal((4, 5, 6))
    _close(op.fft(x, n=7, axis=1), np.fft.fft(x, n=7, axis=1), 1e-12)
    _close(op.fft(x, n=4, axis=0), np.fft.fft(x, n=4, axis=0), 1e-12)
    _close(op.rfft(x, axis=-2), np.fft.rfft(x, axis=-2), 1e-12)


@pytest.mark.parametrize(
    "dtype", [np.float16, np.float32, np.float64, np.int32, np.bool_, np.complex128]
)
def test_result_dtypes_are_numpys(dtype):
    x = np.ones(8, dtype)
    assert op.fft(x).dtype == np.fft.fft(x).dtype
    assert op.irfft(x).dtype == np.fft.irfft(x).dtype
    if dtype is not np.complex128:
        assert op.rfft(x).dtype == np.fft.rfft(x).dtype


def test_empty_leading_dims_give_empty_results():
    assert op.fft(np.ones((0, 4))).shape == (0, 4)
    assert op.irfft(np.ones((0, 4))).shape == (0, 6)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: op.fft(np.ones(0)), r"invalid number of data points \(0\)"),
        (lambda: op.fft(np.ones(4), n=0), r"n must be at least 1"),
        (lambda: op.fft(np.ones(4), axis=1), r"axis 1 is out of range"),
        (lambda: op.fft(np.ones(4), norm="unitary"), r"norm='unitary' is not one of"),
        (lambda: op.fft(np.ones(4), n=2.5), r"n must be an int, not float"),
        (lambda: op.fft(np.array(2.0)), r"takes an array of at least one dim"),
        (lambda: op.rfft(np.ones(4, np.complex64)), r"takes a real array, not complex64"),
    ],
)
def test_bad_arguments_are_errors_naming_the_op(call, message):
    with pytest.raises(GraphError, match=r"op\.(r|i)?fft: .*" + message):
        call()


@pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or importlib.util.find_spec("numba.cuda") is None,
    reason="PTX needs numba-cuda without its simulator",
)
@pytest.mark.parametrize("name, lanes", [("radix2", 16), ("radix4", 8)])
def test_the_stockham_passes_compile_to_ptx(name, lanes):
    x, w = np.zeros((2, 16), np.complex64), np.zeros(8, np.complex64)
    ptx = kernels(complex64)[name].inspect("ptx", x, x, w, 0, 4, 1.0, grid=lanes, arch="sm_80")
    assert ".target sm_80" in ptx and "st.global.f32" in ptx
    assert "sin.approx" not in ptx and "cos.approx" not in ptx  # twiddles from the table


@pytest.mark.parametrize("n", [2, 4, 8, 32, 64, 1024])
def test_passes_two_at_a_time_give_the_bits_of_radix2_passes_alone(n):
    # the transform of every length 2^e: radix4 pairs, and a last radix2 for odd e
    rng = np.random.default_rng(n)
    x = (rng.standard_normal((3, n)) + 1j * rng.standard_normal((3, n))).astype(np.complex64)
    k = kernels(complex64)
    w = np.empty(n // 2, np.complex64)
    k["twiddles"][n // 2](w, -1.0)
    a, b, lp, ln = x.copy(), np.empty_like(x), 0, n.bit_length() - 1
    while lp < ln:  # the passes one at a time, the last one scaled
        scale = np.float32(0.5) if lp + 1 == ln else np.float32(1.0)
        k["radix2"][3 * (n // 2)](a, b, w, lp, ln, scale)
        a, b, lp = b, a, lp + 1
    # (a scale of 0.5 is exact: the transform's own result, halved, has the same bits)
    np.testing.assert_array_equal(op.fft(x) * np.complex64(0.5), a)


def test_rfft_then_irfft_gives_the_signal_back_as_docs_ops_shows():
    x = np.random.default_rng(0).standard_normal((8, 1000)).astype(np.float32)
    spectrum = op.rfft(x)  # (8, 501) complex64, Bluestein's path
    assert spectrum.shape == (8, 501) and spectrum.dtype == np.complex64
    np.testing.assert_allclose(op.irfft(spectrum, n=1000), x, atol=1e-5)


def test_a_transform_inside_a_traced_module_is_a_node_of_its_graph():
    @graph.module
    def spectrum(x):
        return op.fft(x)

    x = np.arange(8, dtype=np.float32)
    assert "= fft(x" in spectrum.graph(x)
    _close(spectrum(x), np.fft.fft(x), 1e-5)
