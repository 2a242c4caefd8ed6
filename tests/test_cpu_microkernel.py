"""The CPU target's tile.dot micro-kernel: its register block follows the host's vector
registers, its loop nests cover a result once, and either block gives the same bits."""

from __future__ import annotations

import numpy as np
import pytest

import tessera as ts
from tessera import f32, f64, group_id, kernel, mut, tile
from tessera.kernel.targets.cpu import microkernel, vector_width

BLOCKS = {"avx512": microkernel.AVX512_BLOCK, "avx2": microkernel.AVX2_BLOCK}


def test_the_register_block_follows_the_hosts_vector_registers():
    want = microkernel.AVX512_BLOCK if vector_width.host_has_avx512() else microkernel.AVX2_BLOCK
    assert microkernel.block() == want


@pytest.mark.parametrize("name", BLOCKS)
@pytest.mark.parametrize("itemsize", [4, 8])
@pytest.mark.parametrize("m, n", [(64, 64), (36, 40), (7, 70), (1, 3), (33, 9)])
def test_the_loop_nests_cover_each_result_element_once(name, itemsize, m, n):
    rows, vectors, vector_bytes = BLOCKS[name]
    width = microkernel.width_of(itemsize, vector_bytes)
    covered = np.zeros((m, n), np.int64)
    for row0, row_blocks, r, col0, col_blocks, v, w in microkernel.regions(
        m, n, width, (rows, vectors)
    ):
        assert r in (rows, 1) and v in (vectors, 1) and w in (width, 1)
        for i in range(row_blocks):
            for j in range(col_blocks):
                top, left = row0 + i * r, col0 + j * v * w
                covered[top : top + r, left : left + v * w] += 1
    assert (covered == 1).all()


def _dot_kernel(dtype):
    @kernel(tile=(64,))
    def dot(a: dtype[M, K], b: dtype[K, N], c: mut[dtype[M, N]]):
        acc = tile.zeros((36, 40), dtype)
        acc = tile.dot(tile.load_block(a, (group_id(0) * 36, 0), (36, 24)),
                       tile.load_block(b, (0, 0), (24, 40)), acc)  # fmt: skip
        tile.store_block(c, (group_id(0) * 36, 0), acc)

    return dot


@pytest.mark.parametrize("dtype", [f32, f64], ids=["f32", "f64"])
def test_either_register_block_gives_the_same_bits(dtype, monkeypatch, rng):
    np_type = np.float32 if dtype is f32 else np.float64
    a = rng.standard_normal((72, 24)).astype(np_type)
    b = rng.standard_normal((24, 40)).astype(np_type)
    results = {}
    for name, shape in BLOCKS.items():
        monkeypatch.setattr(microkernel, "block", lambda shape=shape: shape)
        c = np.zeros((72, 40), np_type)
        with ts.config(target="cpu", cache="off"):
            _dot_kernel(dtype)[2](a, b, c)
        results[name] = c
    assert np.array_equal(results["avx512"], results["avx2"])
    np.testing.assert_allclose(results["avx2"], a @ b, rtol=1e-5, atol=1e-5)
