"""The CUDA target's plain ``tile.dot`` (FFMA, no tensor cores): each lane computes a
block of the result in registers. Its results are checked on every target by
test_tiles.py / test_tile_dot.py (the simulator runs them); here, the blocking itself."""

from __future__ import annotations

import importlib.util
import os
import re

import numpy as np
import pytest

from tessera import KiB, dtypes, f32, group_id, kernel, mut, tile
from tessera.kernel.ir import TileType
from tessera.kernel.targets.cuda.codegen import padded
from tessera.kernel.targets.cuda.lowerings import UNROLL_K, micro_tile


@pytest.mark.parametrize(
    ("m", "n", "lanes", "block"),
    [
        (128, 128, 256, (8, 8)),  # 64 results a lane
        (128, 128, 64, (8, 8)),  # more than 64 a lane: several blocks each
        (64, 64, 256, (4, 4)),
        (16, 16, 32, (2, 4)),
        (16, 16, 128, (1, 2)),
        (5, 7, 8, (1, 1)),  # odd sizes: one element at a time
    ],
)
def test_each_lane_takes_a_block_of_at_most_64_results_that_divides_the_tile(m, n, lanes, block):
    assert micro_tile(m, n, lanes) == block


@kernel(tile=(256,), shared=96 * KiB)
def product(a: f32[M, K], b: f32[K, N], c: mut[f32[M, N]]):
    m0 = group_id(0) * 128
    n0 = group_id(1) * 128
    acc = tile.zeros((128, 128), f32)
    for k0 in range(0, K, 32):  # (not tile.range: the f32 register main loop would take it)
        acc = tile.dot(
            tile.load_block(a, (m0, k0), (128, 32)), tile.load_block(b, (k0, n0), (32, 128)), acc
        )
    tile.store_block(c, (m0, n0), acc)


@pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or importlib.util.find_spec("numba.cuda") is None,
    reason="PTX needs numba-cuda without its simulator",
)
def test_a_128x128_product_keeps_each_lanes_64_accumulators_in_registers():
    """Each step of k: 64 fused multiply-adds from 16 shared-memory reads (UNROLL_K steps
    per loop iteration), nothing in local memory (a spill would show as ld.local)."""
    a, b, c = (np.zeros((256, 256), np.float32) for _ in range(3))
    ptx = product.inspect("ptx", a, b, c, grid=(2, 2), arch="sm_90")
    assert len(re.findall(r"\bfma\.rn\.f32\b", ptx)) == 64 * UNROLL_K
    assert "ld.local" not in ptx and "st.local" not in ptx


@pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or importlib.util.find_spec("numba.cuda") is None,
    reason="a cubin needs numba-cuda without its simulator",
)
def test_ptxas_keeps_the_register_block_without_spills():
    """The block is written as loops over local arrays; ptxas (through nvJitLink) must
    still hold it in registers: no spill bytes in the cubin."""
    a, b, c = (np.zeros((256, 256), np.float32) for _ in range(3))
    meta = product.metadata(a, b, c, grid=(2, 2), arch="sm_90")
    assert meta["registers_per_thread"] > 64 and meta["spill_bytes"] == 0


@pytest.mark.parametrize(
    ("shape", "dtype", "declared"),
    [
        ((128, 32), "f32", (128, 33)),  # a row of 32 words: one more
        ((32, 128), "f16", (32, 129)),  # f16 tiles are held as f32
        ((16, 8), "f32", (16, 8)),  # a row of 8 words: banks differ already
        ((128,), "f32", (128,)),  # one row
    ],
)
def test_a_tile_whose_rows_are_whole_bank_rows_is_declared_one_element_wider(
    shape, dtype, declared
):
    assert padded(TileType(dtypes.BY_NAME[dtype], shape)) == declared
