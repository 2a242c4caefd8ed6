"""A kernel whose tiles need more shared memory than the GPU architecture allows a block
is refused before ptxas sees it, with the sizes and the largest tiles named."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

from tessera import KernelError, KiB, f32, group_id, kernel, mut, tile
from tessera.kernel.targets.cuda.shared_memory import limit_for


@pytest.mark.parametrize(
    ("cc", "kib"), [((9, 0), 227), ((8, 0), 163), ((8, 6), 99), ((9, 9), 227), ((6, 1), 48)]
)
def test_each_architecture_has_its_opt_in_limit_and_unknown_ones_a_safe_one(cc, kib):
    assert limit_for(cc) == kib * KiB


@kernel(tile=(256,), shared=260 * KiB)
def four_big_tiles(a: f32[M, N], out: mut[f32[M, N]]):
    m0 = group_id(0) * 128
    x = tile.load_block(a, (m0, 0), (128, 128))
    y = x.T * 2.0  # each tile read transposed: in shared memory, not registers
    z = y.T + x
    w = z.T - y
    tile.store_block(out, (m0, 0), w.T)


@pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or importlib.util.find_spec("numba.cuda") is None,
    reason="PTX needs numba-cuda without its simulator",
)
def test_tiles_over_the_architectures_limit_are_an_error_naming_sizes_and_tiles():
    a = np.zeros((128, 128), np.float32)
    with pytest.raises(KernelError) as info:
        four_big_tiles.inspect("ptx", a, a.copy(), grid=1, arch="sm_90")
    message = str(info.value)
    assert "four_big_tiles" in message
    # four 128 x 128 f32 tiles, each row padded by one element (codegen.padded)
    assert "258 KiB in shared memory" in message and "sm_90 allows at most 227 KiB" in message
    assert "tile x 64.5 KiB" in message
