"""The CUDA target runs the fixed reduction tree with all lanes, a step at a time: the
steps it emits must pair the same values in the same order as the tree every target runs
(semantics.tree_reduce), for every size."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.kernel.targets import semantics
from tessera.kernel.targets.cuda.lowerings import tree_steps


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
