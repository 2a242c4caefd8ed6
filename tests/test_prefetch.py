"""``tile.range(..., prefetch=k)``: which waits and barriers may leave the iteration's own
copies in flight (analysis/prefetch.py), and the CUDA lowering of those that may."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest
from classic_kernels import axpy_tiled

from tessera import KiB, cp_async, f32, group_linear_id, kernel, mut, tbarrier, tile, tshared

ptx_only = pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or importlib.util.find_spec("numba.cuda") is None,
    reason="PTX needs numba-cuda without its simulator",
)


@kernel(tile=(64,), shared=1 * KiB)
def reads_the_copy_too_early(X: f32[m], Y: mut[f32[m]]):
    s0 = tshared.alloc[f32](64)
    s1 = tshared.alloc[f32](64)
    base = group_linear_id() * 256
    lane = tile.linear_id()
    cp_async.shared.global_(s0, X[base : base + 64])
    for t in tile.range(base, base + 256, 64, prefetch=2):
        if t + 64 < base + 256:
            cp_async.shared.global_(s1, X[t + 64 : t + 128])
        cp_async.wait()  # complete and visible: the next line may read s1
        if t + lane < m:
            Y[t + lane] = s0[lane] + s1[lane]  # s1 is the copy just started
        tbarrier()
        s0, s1 = s1, s0


@kernel(tile=(64,), shared=1 * KiB)
def no_prefetch_hint(X: f32[m], Y: mut[f32[m]]):
    s0 = tshared.alloc[f32](64)
    s1 = tshared.alloc[f32](64)
    base = group_linear_id() * 256
    lane = tile.linear_id()
    cp_async.shared.global_(s0, X[base : base + 64])
    for t in tile.range(base, base + 256, 64):
        if t + 64 < base + 256:
            cp_async.shared.global_(s1, X[t + 64 : t + 128])
        cp_async.wait()
        tbarrier()
        if t + lane < m:
            Y[t + lane] = s0[lane]
        tbarrier()
        s0, s1 = s1, s0


@kernel(tile=(64,), shared=1 * KiB)
def no_barrier_after_the_compute(X: f32[m], Y: mut[f32[m]]):
    s0 = tshared.alloc[f32](64)
    s1 = tshared.alloc[f32](64)
    base = group_linear_id() * 256
    lane = tile.linear_id()
    cp_async.shared.global_(s0, X[base : base + 64])
    for t in tile.range(base, base + 256, 64, prefetch=3):
        if t + 64 < base + 256:
            cp_async.shared.global_(s1, X[t + 64 : t + 128])
        cp_async.wait()
        if t + lane < m:
            Y[t + lane] = s0[lane]


def _marks(k, *args) -> list[str]:
    text = k.inspect("ir", *args, grid=2)
    return [line.split("#")[0].strip() for line in text.splitlines() if "keep_in_flight" in line]


def _f32_args():
    return np.arange(512, dtype=np.float32), np.zeros(512, np.float32)


def test_double_buffered_loop_keeps_the_next_chunk_in_flight_while_computing():
    x = np.zeros(1024, np.float16)
    assert _marks(axpy_tiled, x, x, 0.5) == [
        "cp_async.wait(keep_in_flight=1)",
        "tbarrier(keep_in_flight=1)",
    ]


def test_the_barrier_before_the_buffer_swap_completes_every_copy():
    x = np.zeros(1024, np.float16)
    text = axpy_tiled.inspect("ir", x, x, 0.5, grid=2)
    lines = [line.strip() for line in text.splitlines()]
    swap = next(i for i, line in enumerate(lines) if line.startswith("_t0 ="))
    assert lines[swap - 1].startswith("tbarrier()")


def test_a_read_of_the_copy_in_flight_keeps_the_wait_complete():
    assert _marks(reads_the_copy_too_early, *_f32_args()) == []


def test_without_a_prefetch_hint_waits_complete_every_copy():
    assert _marks(no_prefetch_hint, *_f32_args()) == []


def test_without_a_completing_barrier_in_the_iteration_nothing_stays_in_flight():
    assert _marks(no_barrier_after_the_compute, *_f32_args()) == []


@pytest.mark.parametrize("target", ["cpu", "debug"])
def test_marked_kernels_compute_the_same_on_synchronous_targets(target):
    import tessera

    x = (np.arange(1024) % 7).astype(np.float16)
    y = np.ones(1024, np.float16)
    with tessera.config(target=target):
        axpy_tiled[2](x, y, 0.5)
    expected = (0.5 * (np.arange(1024) % 7) + 1).astype(np.float16)
    assert np.array_equal(y, expected)


@ptx_only
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ptx_waits_for_all_but_the_newest_group(arch):
    x = np.zeros(1024, np.float16)
    ptx = axpy_tiled.inspect("ptx", x, x, 0.5, grid=2, arch=arch)
    assert "cp.async.wait_group 1;" in ptx and "cp.async.wait_group 0;" in ptx


@ptx_only
def test_ptx_of_an_unprovable_loop_only_waits_for_everything():
    ptx = reads_the_copy_too_early.inspect("ptx", *_f32_args(), grid=2, arch="sm_80")
    assert "cp.async.wait_group 0;" in ptx and "cp.async.wait_group 1;" not in ptx
