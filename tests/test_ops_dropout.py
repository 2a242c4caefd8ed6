"""op.dropout: Philox 4×32-10 masks that depend only on (seed, element index)."""

from __future__ import annotations

import numpy as np
import pytest

from tessera import f32, graph, i64, kernel, mut, op, tile, u32
from tessera.kernel.philox import philox_word0

M = 0xFFFFFFFF


def philox_reference(counter, key):
    """Philox 4×32-10 in Python integers, from the paper's round function."""
    c, k = list(counter), list(key)
    for _ in range(10):
        p0, p1 = c[0] * 0xD2511F53, c[2] * 0xCD9E8D57
        c = [(p1 >> 32) ^ c[1] ^ k[0], p1 & M, (p0 >> 32) ^ c[3] ^ k[1], p0 & M]
        k = [(k[0] + 0x9E3779B9) & M, (k[1] + 0xBB67AE85) & M]
    return c


def test_the_reference_gives_random123s_known_answers():
    zeros = [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    ones = [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]
    assert philox_reference([0, 0, 0, 0], [0, 0]) == zeros
    assert philox_reference([M] * 4, [M, M]) == ones


@kernel
def words(out: mut[u32[n]], seed: i64, first: i64):
    i = tile.linear_id()
    if i < n:
        out[i] = philox_word0(first + i, seed)


@pytest.mark.parametrize("seed", [0, 1, 2**40 + 12345])
def test_the_kernel_generator_matches_the_reference(target, seed):
    first = 2**33 - 5  # counters whose high word is used
    out = np.zeros(16, np.uint32)
    words[16](out, seed, first)
    key = [seed & M, seed >> 32]
    want = [philox_reference([(first + i) & M, (first + i) >> 32, 0, 0], key)[0] for i in range(16)]
    assert out.tolist() == want


def expected_mask(n: int, p: float, seed: int) -> np.ndarray:
    key = [seed & M, seed >> 32]
    u = np.array([philox_reference([i & M, i >> 32, 0, 0], key)[0] >> 8 for i in range(n)])
    return u * 2.0**-24 >= p


def test_dropout_keeps_by_the_philox_mask_on_every_target(target):
    x = np.arange(1, 301, dtype=np.float32).reshape(20, 15)
    out = op.dropout(x, 0.3, 1234)
    keep = expected_mask(x.size, 0.3, 1234).reshape(x.shape)
    np.testing.assert_array_equal(out, np.where(keep, x * np.float32(1 / 0.7), 0))


def test_dropout_keeps_about_one_minus_p():
    out = op.dropout(np.ones(200_000, np.float32), 0.25, 99)
    assert abs(np.count_nonzero(out) / out.size - 0.75) < 0.005


def test_the_same_seed_gives_the_same_mask_and_another_seed_another():
    x = np.ones(1000, np.float32)
    assert np.array_equal(op.dropout(x, 0.5, 5), op.dropout(x, 0.5, 5))
    assert not np.array_equal(op.dropout(x, 0.5, 5), op.dropout(x, 0.5, 6))


def test_dropouts_gradient_is_the_same_mask():
    x = np.linspace(-1, 1, 64).astype(np.float32)
    probe = np.arange(64, dtype=np.float32)

    def loss(x):
        return op.sum(op.dropout(x, 0.5, 3) * probe)

    keep = expected_mask(64, 0.5, 3)
    np.testing.assert_array_equal(graph.grad(loss)(x), np.where(keep, probe * 2, 0))


@pytest.mark.parametrize("p", [-0.1, 1.0])
def test_a_probability_outside_0_1_is_an_error(p):
    with pytest.raises(ValueError, match="must be a number in"):
        op.dropout(np.ones(3, np.float32), p, 0)


def test_f32_stays_f32():
    assert op.dropout(np.ones(3, np.float32), 0.1, 0).dtype == f32.np_dtype
