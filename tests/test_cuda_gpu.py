"""Tests that need a real NVIDIA GPU: they run where one is present (never under the
simulator) and are skipped elsewhere. CI machines of this project have no GPU; they pass
on an H100 (docs/targets.md, "Tested here", says what ran and how to run them)."""

from __future__ import annotations

import logging
import re

import numpy as np
import pytest
from classic_kernels import axpy_tiled, block_reduce_tree, matmul

import tessera as ts
from tessera.kernel.targets.cuda.streams import gpu_usable

pytestmark = pytest.mark.skipif(not gpu_usable(), reason="needs an NVIDIA GPU")


def test_reduction_on_the_gpu_is_bitwise_equal_to_the_cpu():
    x = np.random.default_rng(0).standard_normal(1 << 16).astype(np.float32)
    cpu, gpu = np.zeros(256, np.float32), np.zeros(256, np.float32)
    with ts.config(target="cpu"):
        block_reduce_tree[256](x, cpu)
    with ts.config(target="cuda"):
        block_reduce_tree[256](x, gpu)
    assert cpu.tobytes() == gpu.tobytes()


def test_async_copies_double_buffer_on_the_gpu():
    from numba import cuda

    m = 1 << 14
    x = np.random.default_rng(1).random(m).astype(np.float16)
    y0 = np.random.default_rng(2).random(m).astype(np.float16)
    dy = cuda.to_device(y0)
    axpy_tiled[m // 512](cuda.to_device(x), dy, 0.5)
    expected = (np.float32(0.5) * x.astype(np.float32) + y0.astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(dy.copy_to_host(), expected)


def test_matmul_on_the_gpu_matches_numpy():
    from numba import cuda

    a = np.random.default_rng(3).random((256, 256), dtype=np.float32)
    b = np.random.default_rng(4).random((256, 256), dtype=np.float32)
    dc = cuda.device_array((256, 256), np.float32)
    matmul[(16, 16)](cuda.to_device(a), cuda.to_device(b), dc)
    ts.synchronize()
    np.testing.assert_allclose(dc.copy_to_host(), a @ b, rtol=1e-4)


def _tensor_cores() -> bool:
    from numba import cuda

    return cuda.get_current_device().compute_capability >= (8, 0)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_tile_gemm_on_tensor_cores_matches_numpy_and_repeats_its_bits(dtype):
    """256x256x256 (f16: 64x64 blocks, groups of 128 lanes; bf16: 32x32 blocks, groups of
    64): mma.sync m16n8k16 on sm_80+, the same bits on every run."""
    import ml_dtypes
    from numba import cuda
    from test_cuda_mma import gemm_bf16, gemm_f16

    np_type = np.float16 if dtype == "f16" else ml_dtypes.bfloat16
    rng = np.random.default_rng(5)
    a = rng.standard_normal((256, 256)).astype(np_type)
    b = rng.standard_normal((256, 256)).astype(np_type)
    # numba-cuda cannot copy ml_dtypes' bf16 (no buffer format): bf16 runs on host
    # arrays, which Tessera copies itself (as uint16 bits)
    on_gpu = dtype == "f16"
    da, db = (cuda.to_device(a), cuda.to_device(b)) if on_gpu else (a, b)
    results = []
    for _ in range(2):
        dc = (
            cuda.device_array((256, 256), np.float32)
            if on_gpu
            else np.zeros((256, 256), np.float32)
        )
        if dtype == "f16":
            gemm_f16[(4, 4)](da, db, dc, 64, 64)
            source = gemm_f16.inspect("cuda", da, db, dc, 64, 64, grid=(4, 4))
        else:
            gemm_bf16[(8, 8)](da, db, dc)
            source = gemm_bf16.inspect("cuda", da, db, dc, grid=(8, 8))
        ts.synchronize()
        results.append(dc.copy_to_host() if on_gpu else dc)
    assert ("_mma_" in source) == _tensor_cores()
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(results[0], want, rtol=1e-3, atol=1e-3)
    assert results[0].tobytes() == results[1].tobytes()  # deterministic


@pytest.mark.parametrize(
    "m, k, n, offset", [(256, 256, 256, 0), (200, 72, 136, 0), (129, 96, 130, 1)]
)
def test_the_register_main_loop_matches_float64_at_edges_and_on_misaligned_views(m, k, n, offset):
    """The register GEMM main loop (test_cuda_mainloop.py) and its register epilogue on
    ragged shapes (zero-filled copies, element copies where N % 8 != 0) and on views that
    start 2 bytes past 16-byte alignment (element copies for every block)."""
    from numba import cuda
    from test_cuda_mainloop import gemm, linear_relu

    rng = np.random.default_rng(7)
    a = rng.standard_normal((m, k + offset)).astype(np.float16)
    b = rng.standard_normal((k, n + offset)).astype(np.float16)
    bias = rng.standard_normal(n).astype(np.float32)
    da, db = cuda.to_device(a)[:, offset:], cuda.to_device(b)[:, offset:]
    a, b = a[:, offset:], b[:, offset:]
    want = a.astype(np.float64) @ b.astype(np.float64)
    dc = cuda.device_array((m, n), np.float32)
    gemm[(-(-m // 64), -(-n // 64))](da, db, dc, 64, 64)
    dy = cuda.device_array((m, n), np.float16)
    linear_relu[(-(-m // 128), -(-n // 128))](da, db, cuda.to_device(bias), dy, 128, 128)
    ts.synchronize()
    np.testing.assert_allclose(dc.copy_to_host(), want, rtol=1e-3, atol=1e-3)
    relu = np.maximum(want + bias, 0)
    np.testing.assert_allclose(dy.copy_to_host().astype(np.float64), relu, rtol=2e-3, atol=2e-2)


@pytest.mark.parametrize("m, k, n, offset", [(256, 256, 256, 0), (200, 72, 136, 1)])
def test_the_f64_main_loop_on_dmma_matches_numpy(m, k, n, offset):
    """f64 GEMM on DMMA (mma.sync.m8n8k4.f64, test_cuda_mainloop.py), edges and a
    misaligned view (8-byte element copies)."""
    from numba import cuda
    from test_cuda_mainloop import dgemm

    rng = np.random.default_rng(8)
    a = rng.standard_normal((m, k + offset))
    b = rng.standard_normal((k, n + offset))
    da, db = cuda.to_device(a)[:, offset:], cuda.to_device(b)[:, offset:]
    dc = cuda.device_array((m, n), np.float64)
    dgemm[(-(-m // 64), -(-n // 64))](da, db, dc)
    ts.synchronize()
    want = a[:, offset:] @ b[:, offset:]
    np.testing.assert_allclose(dc.copy_to_host(), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "n, keys, causal",
    # the last two are split along the keys (ops/attention_code.py split_plan): shares
    # with masked keys and a padded last group, then whole blocks
    [
        (256, 256, False),
        (192, 320, False),
        (256, 200, True),
        (250, 2000, False),
        (1024, 2048, False),
    ],
)
def test_the_register_row_loop_attention_matches_float64(n, keys, causal):
    """op.flash_attention on f16 (test_cuda_row_loop.py: both products on tensor cores,
    P rounded to f16) and the row loop's test kernel, on fresh data."""
    from numba import cuda
    from test_cuda_row_loop import attention

    rng = np.random.default_rng(9)
    q = rng.standard_normal((n, 64)).astype(np.float16)
    k, v = (rng.standard_normal((keys, 64)).astype(np.float16) for _ in range(2))
    q64, k64, v64 = (x.astype(np.float64) for x in (q, k, v))
    s = q64 @ k64.T / 8
    if causal:
        s = np.where(np.tril(np.ones(s.shape, bool)), s, -np.inf)
    p = np.exp(s - s.max(1, keepdims=True))
    want = (p / p.sum(1, keepdims=True)) @ v64
    dq, dk, dv = cuda.to_device(q), cuda.to_device(k), cuda.to_device(v)
    out = ts.op.flash_attention(dq, dk, dv, causal=causal)
    np.testing.assert_allclose(out.copy_to_host().astype(np.float64), want, rtol=2e-2, atol=5e-3)
    if keys % 64 or causal:  # the kernel has no mask: whole key blocks only
        return
    o = cuda.device_array((n, 64), np.float32)
    attention[n // 64](cuda.to_device(q), cuda.to_device(k), cuda.to_device(v), o, 0.125, 64, 64)
    ts.synchronize()
    np.testing.assert_allclose(o.copy_to_host(), want, rtol=2e-2, atol=5e-3)


def test_tf32_dot_is_allowed_on_request_and_f32_stays_exact_to_ffma():
    from numba import cuda
    from test_cuda_mma import gemm_f32

    rng = np.random.default_rng(6)
    a = rng.standard_normal((128, 64)).astype(np.float32)
    b = rng.standard_normal((64, 128)).astype(np.float32)
    dc, dd = (cuda.device_array((128, 128), np.float32) for _ in range(2))
    gemm_f32[(4, 4)](cuda.to_device(a), cuda.to_device(b), dc, dd)
    ts.synchronize()
    want = a.astype(np.float64) @ b
    np.testing.assert_allclose(dc.copy_to_host(), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dd.copy_to_host(), want, rtol=1e-2, atol=5e-2)  # tf32 inputs


def test_flash_attention_forward_on_the_gpu_matches_numpy():
    """examples/flash_attention.py's kernel (f32, plain path) and its f16 twin (tensor
    cores), 16x16 blocks so every tile fits a block's static shared memory."""
    import math
    import runpy
    from pathlib import Path

    from numba import cuda
    from test_cuda_mma import attention_f16

    example = runpy.run_path(str(Path(__file__).parent.parent / "examples" / "flash_attention.py"))
    rng = np.random.default_rng(7)
    n, d, bm, bn = 256, 64, 16, 16
    q, k, v = (rng.standard_normal((n, d)).astype(np.float32) for _ in range(3))
    scale = 1 / math.sqrt(d)
    do = cuda.device_array((n, d), np.float32)
    example["attention"][n // bm](*(cuda.to_device(x) for x in (q, k, v)), do, scale, bm, bn)
    ts.synchronize()
    want = example["reference"](q, k, v, scale)
    np.testing.assert_allclose(do.copy_to_host(), want, rtol=1e-4, atol=1e-5)

    q16, k16, v16 = (x.astype(np.float16) for x in (q, k, v))
    do16 = cuda.device_array((n, d), np.float32)
    attention_f16[n // bm](*(cuda.to_device(x) for x in (q16, k16, v16)), do16, scale, bm, bn)
    ts.synchronize()
    want16 = example["reference"](*(x.astype(np.float64) for x in (q16, k16, v16)), scale)
    np.testing.assert_allclose(do16.copy_to_host(), want16, rtol=1e-2, atol=5e-3)


def test_a_cuda_compile_says_how_many_seconds_it_took(caplog):
    @ts.kernel
    def add_two(x: ts.f32[n], y: ts.mut[ts.f32[n]]):
        i = ts.tile.linear_id()
        if i < n:
            y[i] = x[i] + 2.0

    x, y = np.ones(64, np.float32), np.zeros(64, np.float32)
    with caplog.at_level(logging.INFO, logger="tessera"), ts.config(target="cuda"):
        add_two[64](x, y)
    done = [r.getMessage() for r in caplog.records if "compiled kernel 'add_two'" in r.getMessage()]
    assert len(done) == 1 and re.search(r"for cuda \(sm_\d+a?\) in \d+\.\d\d s", done[0])
    assert np.all(y == 3.0)


def test_tiles_over_this_gpus_shared_memory_are_refused_at_launch_naming_it():
    from test_cuda_shared_limit import four_big_tiles

    a = np.zeros((128, 128), np.float32)
    with ts.config(target="cuda"), pytest.raises(ts.KernelError, match=r"this GPU \(.*\) allows"):
        four_big_tiles[1](a, a.copy())


def test_a_small_launch_shows_no_numba_performance_warning():
    import warnings

    @ts.kernel
    def bump_one(y: ts.mut[ts.f32[n]]):
        i = ts.tile.linear_id()
        if i < n:
            y[i] = y[i] + 1.0

    from numba import cuda

    y = cuda.to_device(np.zeros(4, np.float32))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the launch
        bump_one[4](y)
        bump_one[4](y)
    np.testing.assert_array_equal(y.copy_to_host(), 2.0)


def _gpu_kinds():
    """(label, to_gpu, to_host) for each GPU array library installed here."""
    import importlib.util

    from numba import cuda

    kinds = [("numba", cuda.to_device, lambda a: a.copy_to_host())]
    if importlib.util.find_spec("cupy"):
        import cupy

        kinds.append(("cupy", cupy.asarray, cupy.asnumpy))
    if importlib.util.find_spec("torch"):
        import torch

        kinds.append(("torch", lambda x: torch.from_numpy(x).cuda(), lambda t: t.cpu().numpy()))
    return kinds


@pytest.mark.parametrize("kind", [k[0] for k in _gpu_kinds()] if gpu_usable() else [])
def test_the_direct_launcher_reads_each_array_kind(kind):
    from classic_kernels import axpy

    _, to_gpu, to_host = next(k for k in _gpu_kinds() if k[0] == kind)
    x = np.arange(300, dtype=np.float32)
    dx, dy = to_gpu(x.copy()), to_gpu(np.ones(300, np.float32))
    for _ in range(3):  # the first launch compiles; the others take the lean path
        axpy[300](dx, dy, 2.0)
    ts.synchronize()
    np.testing.assert_array_equal(to_host(dy), 6 * x + 1)


def test_softmax_on_the_gpu_has_the_cpus_bits():
    from numba import cuda

    from tessera import op

    x = np.random.default_rng(1).standard_normal((300, 1000), dtype=np.float32) * 4
    on_gpu = op.softmax(cuda.to_device(x)).copy_to_host()
    with ts.config(target="cpu"):
        on_cpu = op.softmax(x)
    assert on_gpu.tobytes() == on_cpu.tobytes()


def test_tiles_in_registers_reduce_and_normalise_with_the_cpus_bits_on_the_gpu():
    """Element-wise tiles in registers (targets/cuda/blocked_tiles.py): whole-tile
    reductions run in-thread steps, then warp shuffles: the CPU's bits."""
    from test_cuda_blocked_tiles import _layernorm_args, layernorm_rows, tree_sums

    rng = np.random.default_rng(5)
    x = (rng.standard_normal((2, 384)) * 10.0 ** rng.integers(-3, 4, (2, 384))).astype(np.float32)
    cpu, gpu = np.zeros((2, 3), np.float32), np.zeros((2, 3), np.float32)
    with ts.config(target="cpu"):
        tree_sums[2](x, cpu)
    with ts.config(target="cuda"):
        tree_sums[2](x, gpu)
    assert cpu.tobytes() == gpu.tobytes()
    args = _layernorm_args(rng)
    want = args[3].copy()
    with ts.config(target="cpu"):
        layernorm_rows[3](*args[:3], want, args[4])
    with ts.config(target="cuda"):
        layernorm_rows[3](*args)
    np.testing.assert_allclose(args[3], want, rtol=0, atol=1e-6)
