"""The CUDA target runs the fixed reduction tree with all lanes, a step at a time: the
steps it emits must pair the same values in the same order as the tree every target runs
(semantics.tree_reduce), for every size."""

from __future__ import annotations

import os

import numpy as np
import pytest

import tessera
from tessera.kernel.targets import semantics
from tessera.kernel.targets.cuda.lowerings import tree_steps, warp_tree


def run_steps(values: np.ndarray) -> np.float32:
    s = values.copy()
    for count, offset in tree_steps(len(s)):
        assert offset >= count  # a step reads only what no lane of it writes
        s[:count] = s[:count] + s[offset : offset + count]  # one lane per combine
    return s[0]


@pytest.mark.parametrize("size", [1, 2, 3, 5, 31, 32, 33, 100, 128, 255, 256, 257, 1000])
def test_the_steps_give_the_bits_of_the_fixed_tree(size):
    rng = np.random.default_rng(size)
    values = (rng.standard_normal(size) * 10.0 ** rng.integers(-3, 4, size)).astype(np.float32)
    want = semantics.tree_reduce(values.copy(), size, lambda a, b: np.float32(a + b))
    assert run_steps(values).tobytes() == np.float32(want).tobytes()


def test_a_power_of_two_takes_log2_steps():
    assert tree_steps(256) == [
        (128, 128),
        (64, 64),
        (32, 32),
        (16, 16),
        (8, 8),
        (4, 4),
        (2, 2),
        (1, 1),
    ]
    assert tree_steps(5) == [(1, 4), (2, 2), (1, 1)]


def run_warp_tree(values: np.ndarray) -> np.float32:
    """Warp 0's lanes evaluating warp_tree: the cross-warp fold, then the shuffles."""
    cross, shuffles = warp_tree(len(values))

    def fold(tree, lane):
        if isinstance(tree, int):
            return values[lane + tree]
        return np.float32(fold(tree[0], lane) + fold(tree[1], lane))

    v = np.array([fold(cross, lane) for lane in range(32)], np.float32)
    for h in shuffles:
        v = (v + v[np.arange(32) ^ h]).astype(np.float32)  # shfl.sync.bfly by h
    return v[0]


@pytest.mark.parametrize("lanes", [32, 64, 128, 256, 512, 1024])
def test_the_warp_shuffle_tree_gives_the_bits_of_the_fixed_tree(lanes):
    rng = np.random.default_rng(lanes)
    values = (rng.standard_normal(lanes) * 10.0 ** rng.integers(-3, 4, lanes)).astype(np.float32)
    want = semantics.tree_reduce(values.copy(), lanes, lambda a, b: np.float32(a + b))
    assert run_warp_tree(values).tobytes() == np.float32(want).tobytes()


@tessera.kernel(tile=(256,))
def row_sums(x: tessera.f32[n], out: tessera.mut[tessera.f32[m]]):
    s = x[tessera.group_id(0) * 256 + tessera.tile.linear_id()]
    total = tessera.tile.sum(s)
    if tessera.tile.linear_id() == 0:
        out[tessera.group_id(0)] = total


@pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1", reason="compiles PTX: not in the simulator"
)
def test_a_lane_sum_on_a_gpu_takes_two_barriers_and_five_shuffles():
    x = np.zeros(512, np.float32)
    with tessera.config(target="cuda"):
        ptx = row_sums.inspect("ptx", x, np.zeros(2, np.float32), grid=(2,), arch="sm_90")
    assert ptx.count("bar.sync") == 3  # posted; the result posted; the scratch free again
    assert ptx.count("shfl.sync.idx.b32") == 5
