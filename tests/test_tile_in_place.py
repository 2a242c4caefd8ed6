"""An elementwise tile statement that replaces a tile it reads: computed in place when it
reads that tile only at the element it writes, aside (then copied) when it reads other
elements of it (a transpose, a broadcast). The same results on every target."""

from __future__ import annotations

import numpy as np

from tessera import f32, kernel, mut, tile


@kernel(tile=(16,))
def epilogue(x: f32[8, 8], bias: f32[8], out: mut[f32[8, 8]]):
    t = tile.load_block(x, (0, 0), (8, 8))
    t = max(t * 2.0 + tile.load_block(bias, (0,), (8,))[None, :], 0.0)
    tile.store_block(out, (0, 0), t)


@kernel(tile=(16,))
def reads_transposed(x: f32[8, 8], out: mut[f32[8, 8]]):
    t = tile.load_block(x, (0, 0), (8, 8))
    t = t + t.T
    tile.store_block(out, (0, 0), t)


def test_an_epilogue_replacing_its_input_matches_numpy(target, rng):
    x = rng.standard_normal((8, 8)).astype(np.float32)
    bias = rng.standard_normal(8).astype(np.float32)
    out = np.zeros((8, 8), np.float32)
    epilogue[1](x, bias, out)
    np.testing.assert_array_equal(out, np.maximum(x * np.float32(2) + bias, 0))


def test_a_statement_reading_its_target_transposed_sees_the_old_values(target, rng):
    x = rng.standard_normal((8, 8)).astype(np.float32)
    out = np.zeros((8, 8), np.float32)
    reads_transposed[1](x, out)
    np.testing.assert_array_equal(out, x + x.T)


def _cuda_source(k, *args) -> str:
    return k.inspect("cuda", *args, grid=1)


def test_only_the_statement_reading_other_elements_gets_a_scratch_tile():
    x, bias, out = (
        np.zeros((8, 8), np.float32),
        np.zeros(8, np.float32),
        np.zeros((8, 8), np.float32),
    )
    assert "_tt0" not in _cuda_source(epilogue, x, bias, out)
    assert "_tt0" in _cuda_source(reads_transposed, x, out)
