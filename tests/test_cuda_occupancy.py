"""Occupancy without a GPU (targets/cuda/occupancy.py): blocks per SM from the
architecture's limits, against the CUDA Occupancy Calculator's arithmetic worked by hand,
and as ``k.metadata()`` reports it."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

from tessera.kernel.targets.cuda.occupancy import limits_for, occupancy


def test_registers_bound_a_block_of_heavy_threads():
    # 128 registers x 32 threads = 4096 a warp: 16 warps of 65536, two blocks of 8 warps
    got = occupancy((9, 0), threads=256, registers=128, shared=0)
    assert got == {
        "blocks_per_sm": 2,
        "warps_per_sm": 16,
        "fraction": 0.25,
        "limited_by": "registers",
    }


def test_registers_are_allocated_per_warp_in_units_of_256():
    # 177 registers: 5664 a warp, rounded to 5888: 11 warps, one block of 8
    assert occupancy((9, 0), 256, 177, 0)["blocks_per_sm"] == 1
    # 168 registers: 5376 a warp (a whole unit): 12 warps, still one block of 8
    assert occupancy((9, 0), 256, 168, 0)["warps_per_sm"] == 8


def test_shared_memory_counts_the_reserved_kilobyte_per_block():
    # sm_80: 48 KiB + 1 KiB reserved = 50176 bytes a block; 164 KiB hold 3 of them
    got = occupancy((8, 0), threads=128, registers=32, shared=48 * 1024)
    assert got["blocks_per_sm"] == 3 and got["limited_by"] == "shared memory"
    assert got["fraction"] == round(12 / 64, 4)


def test_small_blocks_are_bound_by_the_blocks_an_sm_holds():
    got = occupancy((8, 6), threads=32, registers=16, shared=0)
    assert got == {
        "blocks_per_sm": 16,
        "warps_per_sm": 16,
        "fraction": 0.3333,
        "limited_by": "blocks",
    }


def test_threads_bound_large_blocks_of_light_threads():
    got = occupancy((7, 5), threads=1024, registers=32, shared=0)
    assert got["blocks_per_sm"] == 1 and got["limited_by"] == "threads"
    assert got["fraction"] == 1.0


def test_an_unlisted_architecture_takes_the_nearest_older_ones_limits():
    assert limits_for((8, 9)).threads == 1536
    assert limits_for((12, 0)) == limits_for((9, 0))
    assert limits_for((8, 1)) == limits_for((8, 0))


@pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or importlib.util.find_spec("numba.cuda") is None,
    reason="a cubin needs numba-cuda without its simulator",
)
def test_metadata_reports_the_occupancy_of_the_compiled_kernel():
    from test_cuda_mainloop import gemm

    a = np.zeros((128, 64), np.float16)
    meta = gemm.metadata(a, a.T.copy(), np.zeros((128, 128), np.float32), 64, 64, grid=(2, 2))
    want = occupancy((9, 0), 128, meta["registers_per_thread"], meta["shared_bytes"])
    assert meta["occupancy"] == want and meta["occupancy"]["blocks_per_sm"] >= 1
