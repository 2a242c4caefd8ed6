"""The CUDA lowering compiled to PTX (NVVM) and to a cubin (nvJitLink) for sm_80 and sm_90
without a GPU, and the kernel metadata read from the cubin."""

from __future__ import annotations

import importlib.util
import inspect
import math
import os

import ml_dtypes
import numpy as np
import pytest
from classic_kernels import axpy_tiled, block_reduce_tree, histogram, matmul, softmax_rows
from test_smaller_gaps import grid_sizes, reverse_chunks, uniforms
from test_views import staged_rows

from tessera import (
    KiB,
    LaunchError,
    bf16,
    complex64,
    cp_async,
    f16,
    f32,
    group_id,
    group_linear_id,
    i8,
    i32,
    kernel,
    mut,
    tbarrier,
    tile,
    tshared,
    u16,
)
from tessera.kernel.targets import own_math

pytestmark = pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or importlib.util.find_spec("numba.cuda") is None,
    reason="PTX needs numba-cuda without its simulator",
)
ARCHS = ["sm_80", "sm_90"]


def _reduce_args():
    return np.zeros(1000, np.float32), np.zeros(4, np.float32)


@pytest.mark.parametrize("arch", ARCHS)
def test_ptx_targets_the_architecture_and_has_barriers_and_shared_memory(arch):
    ptx = block_reduce_tree.inspect("ptx", *_reduce_args(), grid=4, arch=arch)
    assert f".target {arch}" in ptx
    assert "bar.sync" in ptx
    assert "st.shared" in ptx and "ld.shared" in ptx


@pytest.mark.parametrize("arch", ARCHS)
def test_ptx_of_a_histogram_has_global_atomics(arch):
    values, hist = np.zeros(100, np.int32), np.zeros(8, np.int32)
    ptx = histogram.inspect("ptx", values, hist, grid=100, arch=arch)
    assert "atom.global.add" in ptx or "red.global.add" in ptx


@pytest.mark.parametrize("arch", ARCHS)
def test_cubin_is_an_elf_for_the_architecture(arch):
    a = np.zeros((32, 32), np.float32)
    cubin = matmul.inspect("cubin", a, a, a, grid=(2, 2), arch=arch)
    assert cubin[:4] == b"\x7fELF"


def test_group_reductions_compile_with_their_shared_scratch():
    x = np.zeros((4, 300), np.float32)
    ptx = softmax_rows.inspect("ptx", x, x, grid=4, arch="sm_90")
    assert ptx.count("bar.sync") >= 4


@pytest.mark.parametrize("arch", ARCHS)
def test_metadata_reads_registers_and_shared_bytes_from_the_cubin(arch):
    meta = block_reduce_tree.metadata(*_reduce_args(), grid=4, arch=arch)
    assert meta["name"] == "block_reduce_tree" and meta["arch"] == arch
    assert meta["group"] == [256] and meta["grid"] == [4]
    assert meta["shared_bytes"] == 256 * 4
    assert meta["registers_per_thread"] > 0 and meta["spill_bytes"] == 0
    assert meta["launch"] == {"grid": [4, 1, 1], "block": [256, 1, 1], "smem_bytes": 1024}


def test_half_precision_kernel_compiles():
    x = np.zeros(1024, np.float16)
    ptx = axpy_tiled.inspect("ptx", x, x, 0.5, grid=2, arch="sm_80")
    assert "cvt.f32.f16" in ptx and "cvt.rn.f16.f32" in ptx


def test_generated_cuda_source_maps_back_to_kernel_lines():
    source = block_reduce_tree.inspect("cuda", *_reduce_args(), grid=4)
    assert "cuda.syncthreads()  # line" in source
    assert "cuda.shared.array((256,), np.float32)" in source


@kernel(tile=(64,), shared=1024)
def stage_rows(a: f32[n], out: mut[f32[n]]):
    s = tshared.alloc[f32](64)
    base = group_linear_id() * 64
    cp_async.shared.global_(s, a[base : base + 64])
    cp_async.wait()
    k = base + tile.linear_id()
    if k < n:
        out[k] = s[tile.linear_id()] * 2.0


@pytest.mark.parametrize("arch", ARCHS)
def test_double_buffered_axpy_tiled_uses_hardware_async_copies(arch):
    x = np.zeros(1024, np.float16)
    ptx = axpy_tiled.inspect("ptx", x, x, 0.5, grid=2, arch=arch)
    assert "cp.async.ca.shared.global" in ptx
    assert "cp.async.commit_group" in ptx and "cp.async.wait_group" in ptx


def test_four_byte_elements_are_copied_one_cp_async_each():
    a = np.zeros(200, np.float32)
    ptx = stage_rows.inspect("ptx", a, a, grid=4, arch="sm_80")
    assert "cp.async.ca.shared.global" in ptx and ", 4, " in ptx


def test_metadata_dump_is_yaml_with_the_launch_spec(tmp_path):
    import tessera as ts
    from tessera import kernel

    k = kernel(tile=(256,), shared=1024)(block_reduce_tree.fn)
    x, p = _reduce_args()
    with ts.config(dump="meta", dump_dir=str(tmp_path)):
        assert "def _kernel" in k.inspect("cuda", x, p, grid=4, arch="sm_90")
    text = (tmp_path / "block_reduce_tree.1.meta.yaml").read_text()
    assert "name: block_reduce_tree" in text and "group: [256]" in text
    assert "launch:\n  grid: [4, 1, 1]\n  block: [256, 1, 1]" in text


def test_bf16_kernels_compile_with_the_languages_rounding():
    import ml_dtypes
    from test_language_numerics import HALF_KERNELS

    k, _ = HALF_KERNELS["bf16"]
    x = np.zeros(64, ml_dtypes.bfloat16)
    ptx = k.inspect("ptx", x, x, x, grid=64, arch="sm_90")
    assert "ld.global.u16" in ptx and "st.global.u16" in ptx


@kernel(tile=(128,), shared=96 * KiB)
def big_tiles(x: f32[n], y: mut[f32[n]]):
    a = tshared.alloc[f32](16384)  # 64 KiB: more than a block's static shared memory
    b = tshared.alloc[f32]((64, 64))
    for j in range(tile.linear_id(), 16384, 128):
        a[j] = x[j % n]
    for j in range(tile.linear_id(), 4096, 128):
        b[j // 64, j % 64] = x[j % n]
    tbarrier()
    i = tile.linear_id()
    if i < n:
        y[i] = a[i] + b[i % 64, 0]


def test_shared_memory_above_48_kib_is_dynamic():
    x = np.zeros(128, np.float32)
    source = big_tiles.inspect("cuda", x, x, grid=1)
    assert "cuda.shared.array(0, _dt_float32)[0:16384]" in source
    assert "_shaped(cuda.shared.array(0, _dt_float32)[16384:20480], (64, 64))" in source
    ptx = big_tiles.inspect("ptx", x, x, grid=1, arch="sm_90")
    assert ".extern .shared" in ptx
    assert "ld.local" not in ptx and "st.local" not in ptx  # the 2-d view is built in place
    assert big_tiles.inspect("cubin", x, x, grid=1, arch="sm_90").startswith(b"\x7fELF")


@kernel(tile=(128,), shared=160 * KiB)
def doubled_block(a: f32[m, n], b: mut[f32[m, n]]):
    t = tile.load_block(a, (0, 0), (128, 128))  # 64 KiB: tiles past static shared memory
    tile.store_block(b, (0, 0), t * 2.0)


def test_tiles_past_48_kib_are_carved_from_dynamic_shared_memory():
    a = np.zeros((128, 128), np.float32)
    source = doubled_block.inspect("cuda", a, a, grid=1)
    assert "_shaped(cuda.shared.array(0, _dt_float32)" in source
    assert doubled_block.inspect("cubin", a, a, grid=1, arch="sm_90").startswith(b"\x7fELF")


@kernel
def narrow_atomics(idx: i32[n], a: mut[i8[b]], h: mut[bf16[b]], u: mut[u16[b]]):
    i = tile.linear_id()
    tile.atomic_add(a, idx[i], 1)
    tile.atomic_add(h, idx[i], 0.5)
    tile.atomic_add(u, idx[i], 2)


@pytest.mark.parametrize("arch", ARCHS)
def test_narrow_atomics_compile_to_word_compare_and_swap_loops(arch):
    import ml_dtypes

    args = (
        np.zeros(64, np.int32),
        np.zeros(4, np.int8),
        np.zeros(4, ml_dtypes.bfloat16),
        np.zeros(4, np.uint16),
    )
    ptx = narrow_atomics.inspect("ptx", *args, grid=64, arch=arch)
    assert "atom.cas.b32" in ptx or "atom.global.cas.b32" in ptx


def test_gpus_before_sm_80_copy_with_loads_and_stores():
    x = np.zeros(1024, np.float16)
    ptx = axpy_tiled.inspect("ptx", x, x, 0.5, grid=2, arch="sm_75")
    assert ".target sm_75" in ptx and "cp.async" not in ptx and "bar.sync" in ptx


@pytest.mark.parametrize("arch", ARCHS)
def test_shuffles_compile_to_shfl_sync(arch):
    from test_scans_shuffles import shuffles

    x = np.zeros(128, np.int32)
    ptx = shuffles.inspect("ptx", x, np.zeros((4, 128), np.int32), 1, grid=2, arch=arch)
    assert ptx.count("shfl.sync.idx") >= 4


def test_f64_and_small_types_shuffle_as_words():
    @kernel(tile=(32,))
    def mixed(a: f32[n], b: u16[n], out: mut[f32[n]], out16: mut[u16[n]]):
        k = tile.linear_id()
        out[k] = tile.shuffle_down(a[k], 1)
        out16[k] = tile.shuffle_xor(b[k], 3)

    x, y = np.zeros(32, np.float32), np.zeros(32, np.uint16)
    ptx = mixed.inspect("ptx", x, y, x, y, grid=1, arch="sm_90")
    assert ptx.count("shfl.sync") >= 2


def test_prefix_sum_compiles_for_the_gpu():
    from test_scans_shuffles import scans

    x = np.zeros(256, np.float32)
    ptx = scans.inspect("ptx", x, x, x, grid=4, arch="sm_90")
    assert "bar.sync" in ptx


@pytest.mark.parametrize("arch", ARCHS)
def test_tile_gemm_compiles_for_the_gpu(arch):
    from test_tiles import gemm

    a = np.zeros((32, 32), np.float32)
    ptx = gemm.inspect("ptx", a, a, a, 16, 8, grid=(2, 2), arch=arch)
    assert "fma.rn.f32" in ptx and "bar.sync" in ptx


def test_a_group_larger_than_a_cuda_block_is_a_launch_error_on_cuda():
    @kernel(tile=(2048,))
    def wide(y: mut[f32[n]]):
        y[tile.linear_id()] = 1.0

    with pytest.raises(LaunchError, match="at most 1024 threads"):
        wide.inspect("ptx", np.zeros(2048, np.float32), arch="sm_90")


@kernel
def axpy_plus(a: f32, x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    if i < n:
        y[i] = a * x[i] + y[i]


@kernel
def own_exp(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    if i < n:
        y[i] = math.exp(x[i])


@pytest.mark.parametrize("arch", ARCHS)
def test_products_are_rounded_on_their_own_as_on_every_target(arch):
    """NVVM would contract ``a * x + y`` into an FMA (one rounding, not the language's
    two): kernel code keeps ``mul.rn.f32``, and the own math functions have the fused
    multiply-adds their source asks for (rounded once on every target), no more."""
    x = np.ones(64, np.float32)
    ptx = axpy_plus.inspect("ptx", np.float32(2), x, x, grid=1, arch=arch)
    assert "fma.rn.f32" not in ptx and "mul.rn.f32" in ptx
    ptx = own_exp.inspect("ptx", x, x, grid=1, arch=arch)
    written = inspect.getsource(own_math.make_exp_f32).count("fma(")
    assert written > 0 and ptx.count("fma.rn.f32") == written and "mul.rn.f32" in ptx


@kernel
def half_axpy(x: f16[n], y: mut[f16[n]], z: bf16[n], w: mut[bf16[n]]):
    i = tile.linear_id()
    if i < n:
        y[i] = x[i] * x[i] + y[i]
        w[i] = z[i] * z[i] + w[i]


def test_f16_and_bf16_products_are_rounded_on_their_own_too():
    """f16/bf16 arithmetic is f32 arithmetic rounded at the end: its products must not be
    contracted either (the CPU rounds the f32 product, then adds)."""
    h = np.ones(64, np.float16)
    b = np.ones(64, ml_dtypes.bfloat16)
    ptx = half_axpy.inspect("ptx", h, h.copy(), b, b.copy(), grid=1, arch="sm_80")
    assert "fma.rn.f32" not in ptx and ptx.count("mul.rn.f32") >= 2


@kernel
def _mandelbrot_rows(a: complex64[n], out: mut[i32[n]], max_iter: i32):
    i = tile.linear_id()
    if i < n:
        c = a[i]
        z = complex(0.0, 0.0)
        k = 0
        while k < max_iter and abs(z) <= 2.0:
            z = z * z + c
            k += 1
        out[i] = k


@pytest.mark.parametrize("arch", ARCHS)
def test_complex_arithmetic_and_complex_arrays_compile_to_ptx(arch):
    a, out = np.zeros(64, np.complex64), np.zeros(64, np.int32)
    ptx = _mandelbrot_rows.inspect("ptx", a, out, 10, grid=64, arch=arch)
    assert f".target {arch}" in ptx
    assert "ld.global.f32" in ptx or "ld.global.nc.f32" in ptx


@kernel(tile=(32,))
def prints_a_lane(x: f32[n]):
    i = tile.linear_id()
    print("x =", x[i], i, i > 0, "100%")


def test_print_compiles_to_one_vprintf_with_the_whole_line_as_its_format():
    ptx = prints_a_lane.inspect("ptx", np.zeros(32, np.float32), grid=2, arch="sm_90")
    assert "vprintf" in ptx
    strings = [
        bytes(int(b) for b in text.split("{")[1].split("}")[0].split(",")).rstrip(b"\0")
        for text in ptx.splitlines()
        if text.startswith(".const") and "__conststring__" in text
    ]
    assert b"[group (%lld,) lane (%lld,)] x = %f %lld %s 100%%\n" in strings


def test_group_count_compiles_for_the_gpu():
    ptx = grid_sizes.inspect("ptx", np.zeros((6, 3), np.int64), grid=(2, 3), arch="sm_90")
    assert ".target sm_90" in ptx


def test_rand_compiles_for_the_gpu():
    ptx = uniforms.inspect("ptx", np.zeros(16, np.float32), 1, 0, grid=16, arch="sm_80")
    assert "mul.wide.u32" in ptx or "mul.lo.s64" in ptx or "mul.hi" in ptx


def test_dynamic_shared_memory_is_an_extern_array_sized_at_launch():
    x = np.zeros(400, np.float32)
    source = reverse_chunks.inspect("cuda", x, x, 100, grid=4)
    assert "cuda.shared.array(0, _dt_float32)[32:32 + p_chunk]" in source
    ptx = reverse_chunks.inspect("ptx", x, x, 100, grid=4, arch="sm_90")
    assert ".extern .shared" in ptx


@pytest.mark.parametrize("arch", ARCHS)
def test_copies_into_a_shared_sub_array_compile_to_cp_async(arch):
    A, out = np.zeros((8, 16), np.float32), np.zeros(8, np.float32)
    ptx = staged_rows.inspect("ptx", A, out, grid=2, arch=arch)
    assert "cp.async" in ptx


@kernel(tile=(128,), shared=160 * KiB)
def wide_tiles(x: f32[M, N], y: mut[f32[M, N]]):
    # 64 KiB, 128 values a thread: more than a tile keeps in registers (blocked_tiles.py)
    a = tile.load_block(x, (group_id(0) * 128, 0), (128, 128))
    tile.store_block(y, (group_id(0) * 128, 0), a * 2.0)


def test_tiles_past_48_kib_build_in_dynamic_shared_memory_for_sm_90():
    x = np.zeros((256, 128), np.float32)
    ptx = wide_tiles.inspect("ptx", x, x, grid=2, arch="sm_90")
    assert ".extern .shared" in ptx
    assert wide_tiles.metadata(x, x, grid=2, arch="sm_90")["shared_bytes"] > 64 * 1024
