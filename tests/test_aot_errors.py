"""What the C runtime refuses, and how it says so (ABI.md §3, §4, §6.2-3).

A refused launch returns TSR_EINVAL with a Python launch's message and runs nothing: the
output arrays come back exactly as they went in.
"""

from __future__ import annotations

import aot_kernels as K
import numpy as np
import pytest
from aot_build import GEMM_BLOCKS, build_dir, launch, need_cc

from tessera.errors import LaunchError

TSR_EINVAL, TSR_EVERSION, TSR_ENOTFOUND, TSR_EUNSUPPORTED = 2, 4, 5, 7


@pytest.fixture(autouse=True)
def _cc():
    need_cc()


def python_message(kernel, grid, *args) -> str:
    with pytest.raises(LaunchError) as info:
        kernel[grid](*args)
    return str(info.value)


def test_a_module_of_another_abi_major_is_eversion_with_a_message():
    x = np.zeros(4, np.float32)
    run = launch(
        "axpy", [("f32", 1.0), x, x.copy()], grid=(4, 1, 1), options=("--patch-major", "2")
    )
    assert run.status == TSR_EVERSION
    assert run.message == "module testmod built for TSR ABI 2.0; this runtime is 1.0"


def test_a_truncated_image_is_einval():
    x = np.zeros(4, np.float32)
    run = launch("axpy", [("f32", 1.0), x, x.copy()], grid=(4, 1, 1), options=("--truncate", "200"))
    assert run.status == TSR_EINVAL
    assert "truncated" in run.message


def test_an_unknown_kernel_is_enotfound_listing_the_modules_kernels():
    run = launch("no_such_kernel", [], grid=(1, 1, 1))
    assert run.status == TSR_ENOTFOUND
    assert run.message.startswith("module testmod has no kernel 'no_such_kernel'; it has: ")
    assert "block_sum" in run.message and "linear_relu" in run.message


def test_a_serialized_image_on_a_cpu_context_says_to_link_the_object():
    run = launch("axpy", [], options=("--serialized",))
    assert run.status == TSR_EUNSUPPORTED
    assert "link testmod_cpu.o" in run.message and "testmod_image" in run.message


def test_a_dtype_mismatch_is_einval_with_the_python_message_and_changes_nothing():
    x = np.arange(8, dtype=np.float64)
    y = np.arange(8, dtype=np.float32)
    want = python_message(K.axpy, 8, np.float32(1), x, y.copy())
    run = launch("axpy", [("f32", 1.0), x, y], grid=(8, 1, 1))
    assert run.status == TSR_EINVAL
    assert run.message == want
    assert np.array_equal(run.arrays[1], y)


def test_an_ndim_mismatch_is_einval_with_the_python_message():
    x = np.zeros((2, 4), np.float32)
    y = np.zeros(8, np.float32)
    want = python_message(K.axpy, 8, np.float32(1), x, y)
    run = launch("axpy", [("f32", 1.0), x, y], grid=(8, 1, 1))
    assert (run.status, run.message) == (TSR_EINVAL, want)


def test_a_symbol_mismatch_is_einval_with_the_python_message_and_changes_nothing(rng):
    a = rng.standard_normal((40, 24)).astype(np.float32)
    b = rng.standard_normal((20, 16)).astype(np.float32)  # K=24 from A, 20 here
    bias = np.zeros(16, np.float32)
    c = rng.standard_normal((40, 16)).astype(np.float32)
    want = python_message(K.linear_relu, (2, 1), a, b, bias, c.copy(), *GEMM_BLOCKS.values())
    run = launch("linear_relu", [a, b, bias, c], grid=(2, 1, 1))
    assert (run.status, run.message) == (TSR_EINVAL, want)
    assert run.message.endswith("B has shape (20, 16) but K=24 was bound by A")
    assert np.array_equal(run.arrays[3], c)


def test_grid_groups_disagreeing_with_the_grid_is_the_python_message():
    x = np.ones(600, np.float32)
    partial = np.full(2, 7.0, np.float32)
    want = python_message(K.block_sum, 3, x, partial)
    run = launch("block_sum", [x, partial], grid=(3, 1, 1))
    assert (run.status, run.message) == (TSR_EINVAL, want)
    assert np.array_equal(run.arrays[1], partial)


def test_a_wrong_argument_count_is_einval_naming_the_parameters():
    x = np.zeros(4, np.float32)
    run = launch("axpy", [("f32", 1.0), x, x.copy()], grid=(4, 1, 1), options=("--nargs", "2"))
    assert run.status == TSR_EINVAL
    assert run.message == "launch of kernel 'axpy': takes 3 arguments (a, x, y) but 2 were given"


def test_a_null_tensor_is_einval_naming_the_parameter():
    x = np.zeros(4, np.float32)
    run = launch("axpy", [("f32", 1.0), None, x], grid=(4, 1, 1))
    assert run.status == TSR_EINVAL
    assert run.message == "launch of kernel 'axpy': parameter 'x' expects a tensor f32[n], got NULL"


def test_a_block_other_than_the_tile_is_einval_naming_both():
    x = np.ones(512, np.float32)
    partial = np.zeros(2, np.float32)
    run = launch("block_sum", [x, partial], grid=(2, 1, 1), block=(128, 1, 1))
    assert run.status == TSR_EINVAL
    assert "block (128, 1, 1) is not the kernel's tile=(256, 1, 1)" in run.message
    assert np.array_equal(run.arrays[1], partial)


def test_the_tile_as_block_is_accepted():
    x = np.ones(512, np.float32)
    run = launch("block_sum", [x, np.zeros(2, np.float32)], grid=(2, 1, 1), block=(256, 1, 1))
    assert run.status == 0, run.message
    assert np.array_equal(run.arrays[1], [256.0, 256.0])


def test_a_grouped_kernel_has_no_default_grid():
    x = np.ones(512, np.float32)
    run = launch("block_sum", [x, np.zeros(2, np.float32)], grid=(0, 0, 0))
    assert run.status == TSR_EINVAL
    assert "has no default grid" in run.message


def test_a_second_grid_axis_for_a_one_dimensional_flat_kernel_is_einval():
    x = np.zeros(4, np.float32)
    run = launch("axpy", [("f32", 1.0), x, x.copy()], grid=(2, 2, 1))
    assert run.status == TSR_EINVAL
    assert "grid (2, 2, 1) has more axes than its 1-d grid" in run.message


def test_the_module_files_are_all_written():
    names = sorted(p.name for p in build_dir().iterdir() if p.is_file())
    for expected in (
        "testmod.h",
        "testmod.c",
        "testmod_cpu.o",
        "tessera_rt.h",
        "tessera_rt.c",
        "dlpack.h",
        "CMakeLists.txt",
    ):
        assert expected in names
