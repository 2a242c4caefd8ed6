"""``@kernel(num_warps=W)``: the warps of a tile-only kernel's CUDA block (GPU.md §3,
"Launch shapes"): W x 32 threads share its tile statements, the register main loop runs
with W warps or the decorator's W is an error naming the loop and why; other targets
ignore it (a group runs on one core); autotuning may sweep it."""

from __future__ import annotations

import importlib.util
import os
import re

import numpy as np
import pytest

from tessera import KernelError, KiB, autotune, f16, f32, group_id, kernel, mut, tile

SIMULATOR = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
PTX = pytest.mark.skipif(
    SIMULATOR or importlib.util.find_spec("numba.cuda") is None,
    reason="PTX needs numba-cuda without its simulator",
)


def _gemm(warps, bm=64, bn=64, bk=32, dt=f32):
    @kernel(tile=(128,), shared=48 * KiB, num_warps=warps)
    def gemm(A: dt[M, K], B: dt[K, N], C: mut[f32[M, N]]):
        m0 = group_id(0) * bm
        n0 = group_id(1) * bn
        acc = tile.zeros((bm, bn), f32)
        for k0 in tile.range(0, K, bk):
            a = tile.load_block(A, (m0, k0), (bm, bk))
            b = tile.load_block(B, (k0, n0), (bk, bn))
            acc = tile.dot(a, b, acc)
        tile.store_block(C, (m0, n0), acc)

    return gemm


@pytest.mark.parametrize("warps", [1, 2, 8])
def test_a_tile_only_gemm_gives_the_product_with_any_number_of_warps(target, rng, warps):
    a = rng.standard_normal((100, 70)).astype(np.float32)
    b = rng.standard_normal((70, 90)).astype(np.float32)
    c = np.zeros((100, 90), np.float32)
    _gemm(warps)[2, 2](a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-4)


@PTX
@pytest.mark.parametrize("warps", [4, 8, 16])
def test_the_register_main_loop_runs_with_the_warps_asked_for(warps):
    a, c = np.zeros((256, 256), np.float16), np.zeros((256, 256), np.float32)
    ptx = _gemm(warps, 128, 128, 32, f16).inspect("ptx", a, a, c, grid=(2, 2), arch="sm_80")
    assert re.findall(r"\.maxntid (\d+)", ptx) == [str(32 * warps)]
    # per thread's k steps, in the branch-free loop alone (the arrays allow 16-byte chunks)
    assert ptx.count("mma.sync") == 128 * 128 // (16 * 8) // warps * 2


@PTX
def test_warps_the_register_loop_cannot_take_are_an_error_naming_the_loop():
    a, c = np.zeros((256, 256), np.float16), np.zeros((256, 256), np.float32)
    with pytest.raises(KernelError, match=r"num_warps=2 cannot run this GEMM loop in registers"):
        _gemm(2, 128, 128, 32, f16).inspect("ptx", a, a, c, grid=(2, 2), arch="sm_80")


@PTX
def test_num_warps_on_a_kernel_with_lane_code_is_an_error():
    @kernel(tile=(64,), num_warps=4)
    def lanes(x: f32[n], y: mut[f32[n]]):
        i = tile.linear_id()
        y[i] = x[i]

    x = np.zeros(64, np.float32)
    with pytest.raises(KernelError, match=r"num_warps=4 is for tile-only kernels"):
        lanes.inspect("ptx", x, x, grid=1, arch="sm_80")


@pytest.mark.parametrize("warps, message", [(3, "must be 1, 2, 4"), (64, "must be 1, 2, 4")])
def test_num_warps_must_be_a_power_of_two_up_to_32(warps, message):
    with pytest.raises(KernelError, match=message):

        @kernel(tile=(64,), num_warps=warps)
        def odd(x: f32[n]):
            pass


def test_num_warps_needs_a_grouped_kernel():
    with pytest.raises(KernelError, match=r"num_warps= is an option of grouped kernels"):

        @kernel(num_warps=4)
        def flat(x: f32[n]):
            pass


@autotune(space=dict(W=[1, 2]), tile=(128,), shared=16 * KiB, num_warps=lambda c: c.W)
def tuned_gemm(A: f32[M, K], B: f32[K, N], C: mut[f32[M, N]]):
    acc = tile.zeros((32, 32), f32)
    for k0 in tile.range(0, K, 16):
        a = tile.load_block(A, (group_id(0) * 32, k0), (32, 16))
        b = tile.load_block(B, (k0, group_id(1) * 32), (16, 32))
        acc = tile.dot(a, b, acc)
    tile.store_block(C, (group_id(0) * 32, group_id(1) * 32), acc)


def test_autotune_sweeps_num_warps(rng):
    a = rng.standard_normal((64, 32)).astype(np.float32)
    b = rng.standard_normal((32, 64)).astype(np.float32)
    c = np.zeros((64, 64), np.float32)
    tuned_gemm[2, 2](a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-4)
    assert {cfg["W"] for cfg in tuned_gemm.configs} == {1, 2}
