"""Ahead-of-time CUDA modules on a real GPU (ABI.md §6, "On a GPU"): the C programs with
cubins equal the Python CUDA launch; a kernel over 48 KiB of dynamic shared memory; a
PTX-only image. Skipped without an NVIDIA GPU (the CI machines have none); the project's
GPU script (bench/gpu_check.sh) runs them, and prints the C launch cost."""

from __future__ import annotations

import dataclasses
import functools
import tempfile
from pathlib import Path

import aot_kernels as K
import numpy as np
import pytest
from aot_build import launch, module_program, need_cc

import tessera as ts
from tessera import aot
from tessera.kernel.targets.cuda.program import CudaProgram
from tessera.kernel.targets.cuda.streams import gpu_usable

pytestmark = pytest.mark.skipif(not gpu_usable(), reason="needs an NVIDIA GPU")
GEMM = dict(BM=128, BN=128, BK=32)


@functools.cache
def built() -> dict[str, Path]:
    """The launch driver linked with a cubin module and with a PTX-only one."""
    from bench.kernels import gemm_f16

    need_cc()
    arch = CudaProgram.device_arch()
    images = [
        aot.compile(K.block_sum, target="cuda", arch=arch),
        aot.compile(gemm_f16, target="cuda", arch=arch, constexprs=GEMM),
        aot.compile(K.linear_relu, target="cuda", arch=arch, constexprs=dict(BM=64, BN=64, BK=32)),
    ]
    out = Path(tempfile.mkdtemp(prefix="tessera-aot-gpu-"))
    aot.write_c(images, out, name="gpumod")
    ptx = aot.compile(K.block_sum, target="cuda", arch=arch, ptx=True)
    keep = [s for s in ptx.specs if ptx.blobs[s.blob].kind == "ptx"]
    ptx_only = dataclasses.replace(ptx, specs=keep)
    aot.write_c([ptx_only], out, name="ptxmod")
    return {
        "gpumod": module_program("launch.c", out, "gpumod"),
        "ptxmod": module_program("launch.c", out, "ptxmod"),
    }


def test_block_sum_from_c_on_the_gpu_equals_the_python_cuda_launch(rng):
    x = rng.random(1_000_003).astype(np.float32)
    groups = -(-x.size // 256)
    want = np.zeros(groups, np.float32)
    with ts.config(target="cuda"):
        K.block_sum[groups](x, want)
    run = launch(
        "block_sum",
        [x, np.zeros(groups, np.float32)],
        grid=(groups, 1, 1),
        options=("--cuda", "--time", "2000"),
        exe=built()["gpumod"],
    )
    assert run.status == 0, run.message
    assert np.array_equal(run.arrays[1], want)
    print(f"tsrLaunch of block_sum over {groups} groups: {run.us_per_launch:.2f} us per launch")


def test_the_f16_gemm_from_c_on_the_gpu_equals_the_python_cuda_launch(rng):
    from bench.kernels import gemm_f16

    m = n = k = 512
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    grid = (m // 128, n // 128)
    want = np.zeros((m, n), np.float32)
    with ts.config(target="cuda"):
        gemm_f16[grid](a, b, want, *GEMM.values())
    run = launch(
        "gemm_f16",
        [a, b, np.zeros((m, n), np.float32)],
        grid=(*grid, 1),
        options=("--cuda",),
        exe=built()["gpumod"],
    )
    assert run.status == 0, run.message
    assert np.array_equal(run.arrays[2], want)


def test_over_48_kib_of_shared_memory_from_c(rng):
    m, k, n = 100, 72, 150
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    grid = (-(-m // 64), -(-n // 64))
    want = np.zeros((m, n), np.float32)
    with ts.config(target="cuda"):
        K.linear_relu[grid](a, b, bias, want, 64, 64, 32)
    run = launch(
        "linear_relu",
        [a, b, bias, np.zeros((m, n), np.float32)],
        grid=(*grid, 1),
        options=("--cuda",),
        exe=built()["gpumod"],
    )
    assert run.status == 0, run.message
    assert np.array_equal(run.arrays[3], want)


def test_a_ptx_only_image_runs_through_the_drivers_jit(rng):
    x = rng.random(4096).astype(np.float32)
    want = np.zeros(16, np.float32)
    with ts.config(target="cuda"):
        K.block_sum[16](x, want)
    run = launch(
        "block_sum",
        [x, np.zeros(16, np.float32)],
        grid=(16, 1, 1),
        options=("--cuda",),
        exe=built()["ptxmod"],
    )
    assert run.status == 0, run.message
    assert np.array_equal(run.arrays[1], want)
