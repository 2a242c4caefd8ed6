"""Launch errors (LANGUAGE.md §1, §5): tessera.LaunchError before anything runs, naming the
kernel and the culprit, and never leaving any argument modified.

Every kernel here would write its ``mut`` argument if it ran, so "unchanged afterwards"
really shows that nothing ran.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tessera
from tessera import bf16, constexpr, f32, i32, kernel, mut, tile


@kernel
def lk(x: f32[n], y: mut[f32[n]], alpha: f32):
    i = tile.linear_id()
    if i < n:
        y[i] = alpha * x[i] + 1.0


@kernel
def lk_lit(a: f32[m, 3], out: mut[f32[m]]):
    i = tile.linear_id()
    if i < m:
        out[i] = a[i, 0] + a[i, 1] + a[i, 2]


@kernel
def lk_int(x: f32[n], y: mut[f32[n]], k: i32):
    i = tile.linear_id()
    if i < n:
        y[i] = x[i] * k


@kernel
def lk_cx(y: mut[f32[n]], C: constexpr):
    i = tile.linear_id()
    if i < n:
        y[i] = C


@pytest.fixture(scope="module")
def warm():
    """Launch each kernel once for real, so errors are also checked on compiled kernels."""
    x = np.arange(8, dtype=np.float32)
    y = np.zeros(8, np.float32)
    lk[8](x, y, 2.0)
    np.testing.assert_array_equal(y, 2 * x + 1)


@pytest.fixture
def xy(rng, warm, target):
    return rng.standard_normal(12).astype(np.float32), rng.standard_normal(12).astype(np.float32)


def refused(launch, arrays, *needles, kernel_name="lk"):
    """Run ``launch``; it must raise LaunchError whose message names the kernel and holds
    every needle, and every array in ``arrays`` must be bitwise unchanged."""
    before = [(a.tobytes(), a.shape, a.dtype, a.flags.writeable) for a in arrays]
    with pytest.raises(tessera.LaunchError) as info:
        launch()
    msg = str(info.value)
    assert f"'{kernel_name}'" in msg, msg
    assert info.value.kernel == kernel_name
    for needle in needles:
        assert needle in msg, f"{needle!r} not in {msg!r}"
    for a, (data, shape, dtype, writeable) in zip(arrays, before):
        assert a.tobytes() == data and a.shape == shape and a.dtype == dtype
        assert a.flags.writeable == writeable
    return msg


def test_too_few_arguments(xy):
    x, y = xy
    refused(lambda: lk[12](x, y), [x, y], "3 arguments", "2 were given")


def test_too_many_arguments(xy):
    x, y = xy
    refused(lambda: lk[12](x, y, 1.0, 2.0), [x, y], "3 arguments", "4 were given")


def test_wrong_dtype_names_the_parameter(xy):
    x, y = xy
    x64 = x.astype(np.float64)
    msg = refused(lambda: lk[12](x64, y, 1.0), [x64, y], "'x'", "f32", "float64")
    assert "'y'" not in msg


def test_wrong_dtype_on_the_mut_parameter(xy):
    x, y = xy
    y16 = y.astype(np.float16)
    refused(lambda: lk[12](x, y16, 1.0), [x, y16], "'y'", "float16")


def test_wrong_ndim(xy):
    x, y = xy
    x2 = x.reshape(3, 4)
    refused(lambda: lk[12](x2, y, 1.0), [x2, y], "'x'", "(3, 4)")


def test_inconsistent_symbol_binding(rng, warm, target):
    x = rng.standard_normal(12).astype(np.float32)
    y = rng.standard_normal(10).astype(np.float32)
    refused(lambda: lk[12](x, y, 1.0), [x, y], "y has shape (10,) but n=12 was bound by x")


def test_literal_dim_mismatch(rng, target):
    a = rng.standard_normal((5, 4)).astype(np.float32)
    out = np.zeros(5, np.float32)
    refused(lambda: lk_lit[5](a, out), [a, out], "'a'", "(5, 4)", "3", kernel_name="lk_lit")


def test_literal_dim_match_runs(rng, target):
    a = rng.standard_normal((5, 3)).astype(np.float32)
    out = np.zeros(5, np.float32)
    lk_lit[5](a, out)
    np.testing.assert_array_equal(out, (a[:, 0] + a[:, 1]) + a[:, 2])


def test_read_only_array_for_mut_parameter(xy):
    x, y = xy
    y.setflags(write=False)
    refused(lambda: lk[12](x, y, 1.0), [x, y], "'y'", "read-only")


def test_read_only_array_for_input_parameter_is_fine(xy):
    x, y = xy
    x.setflags(write=False)
    lk[12](x, y, 3.0)
    np.testing.assert_array_equal(y, np.float32(3.0) * x + np.float32(1.0))


def test_list_instead_of_array(xy):
    x, y = xy
    refused(lambda: lk[12](list(x), y, 1.0), [x, y], "'x'", "list")


def test_scalar_instead_of_array(xy):
    x, y = xy
    refused(lambda: lk[12](x, 0.0, 1.0), [x], "'y'")


def test_array_instead_of_scalar(xy):
    x, y = xy
    a = np.ones(1, np.float32)
    refused(lambda: lk[12](x, y, a), [x, y, a], "'alpha'")


def test_string_instead_of_scalar(xy):
    x, y = xy
    refused(lambda: lk[12](x, y, "2.0"), [x, y], "'alpha'")


def test_non_integral_float_for_int_scalar(xy):
    x, y = xy
    refused(lambda: lk_int[12](x, y, 2.5), [x, y], "'k'", "2.5", kernel_name="lk_int")


def test_integral_float_for_int_scalar_is_converted(xy):
    x, y = xy
    lk_int[12](x, y, 3.0)
    np.testing.assert_array_equal(y, x * np.float32(3))


def test_out_of_range_int_scalar(xy):
    x, y = xy
    refused(lambda: lk_int[12](x, y, 2**40), [x, y], "'k'", "range", kernel_name="lk_int")


def test_non_number_for_constexpr(warm, target):
    y = np.zeros(4, np.float32)
    refused(lambda: lk_cx[4](y, [3]), [y], "'C'", kernel_name="lk_cx")


@pytest.mark.parametrize("grid", [-1, 2.0, 3.5, (1, 2, 3, 4), (), (4, -1), True, "4", None])
def test_bad_grid(xy, grid):
    x, y = xy
    refused(lambda: lk[grid](x, y, 1.0), [x, y], "grid")


def test_empty_grid_runs_nothing(xy):
    x, y = xy
    y0 = y.copy()
    lk[0](x, y, 1.0)
    np.testing.assert_array_equal(y, y0)


class FakeGpuArray:
    """Only carries the CUDA array interface, like a CuPy or PyTorch CUDA tensor would."""

    def __init__(self, n):
        self.__cuda_array_interface__ = {
            "shape": (n,),
            "typestr": "<f4",
            "data": (0, False),
            "version": 3,
        }
        self.shape = (n,)
        self.dtype = np.dtype(np.float32)
        self.ndim = 1


def test_gpu_array_on_cpu_launch_is_refused(xy):
    x, y = xy
    with tessera.config(target="cpu"):
        msg = refused(lambda: lk[12](FakeGpuArray(12), y, 1.0), [x, y], "'x'")
    assert "GPU" in msg


def test_gpu_array_as_mut_parameter_on_cpu_launch_is_refused(xy):
    x, y = xy
    with tessera.config(target="cpu"):
        msg = refused(lambda: lk[12](x, FakeGpuArray(12), 1.0), [x, y], "'y'")
    assert "GPU" in msg


def test_launch_error_is_a_tessera_error():
    assert issubclass(tessera.LaunchError, tessera.TesseraError)
    assert not issubclass(tessera.LaunchError, tessera.KernelError)


def test_calling_a_kernel_without_grid_is_an_error(xy):
    x, y = xy
    y0 = y.copy()
    with pytest.raises(tessera.TesseraError, match=r"lk\[grid\]"):
        lk(x, y, 1.0)
    np.testing.assert_array_equal(y, y0)


@kernel
def lk_bf16(x: bf16[n], y: mut[bf16[n]]):
    i = tile.linear_id()
    y[i] = x[i]


@pytest.mark.parametrize("dtype", [np.uint16, np.float16, np.float32])
def test_bf16_parameter_refuses_other_16_bit_storage(target, dtype):
    x = np.ones(4, dtype)
    y = np.zeros(4, ml_dtypes.bfloat16)
    refused(lambda: lk_bf16[4](x, y), [x, y], "'x'", "bf16", kernel_name="lk_bf16")


class _DLPackOnly:
    """A host tensor that offers only the DLPack protocol (like a CPU PyTorch tensor)."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


def test_dlpack_host_tensors_are_accepted_without_a_copy(target):
    from classic_kernels import axpy

    x = np.arange(10, dtype=np.float32)
    y = np.ones(10, np.float32)
    axpy[10](_DLPackOnly(x), _DLPackOnly(y), 2.0)
    np.testing.assert_array_equal(y, 2 * x + 1)


class _GpuArrayLike:
    """What a CuPy array offers: ``__cuda_array_interface__``, and DLPack on a CUDA device."""

    __cuda_array_interface__ = {"typestr": "<f4", "shape": (4,), "data": (0, False), "version": 2}

    def __dlpack__(self, **kwargs):
        raise AssertionError("a GPU array with the CUDA interface is not read through DLPack")

    def __dlpack_device__(self):
        return (2, 0)  # kDLCUDA


def test_gpu_arrays_with_the_cuda_interface_pass_through_as_they_are():
    from tessera.arrays import host_arrays, transportable

    a = _GpuArrayLike()
    assert host_arrays("lk", lk.params, (a, a, 1.0))[:2] == (a, a)
    assert transportable(a) == (a, None)
