"""Element-wise tiles in registers on the CUDA target (targets/cuda/blocked_tiles.py): a
tile written and read only at the element being computed lives in each thread's local
array, not in shared memory; whole-tile reductions of it keep the fixed tree's bits; a
tile read anywhere else stays in shared memory."""

from __future__ import annotations

import importlib.util
import math
import os
import re

import numpy as np
import pytest

from tessera import KiB, f32, group_id, kernel, mut, tile
from tessera.kernel.targets.cuda import blocked_tiles

ROW = 1024
NO_PTX = pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or importlib.util.find_spec("numba.cuda") is None,
    reason="PTX needs numba-cuda without its simulator",
)


@kernel(tile=(128,), shared=64 * KiB)
def layernorm_rows(x: f32[M, N], w: f32[N], b: f32[N], y: mut[f32[M, N]], eps: f32):
    row = group_id(0)
    xs = tile.load_block(x, (row, 0), (1, ROW))
    mean = xs.sum() / N
    d = xs - mean
    var = (d * d).sum() / N
    ws = tile.load_block(w, (0,), (ROW,))
    bs = tile.load_block(b, (0,), (ROW,))
    tile.store_block(y, (row, 0), d / math.sqrt(var + eps) * ws[None, :] + bs[None, :])


@kernel(tile=(128,))
def tree_sums(x: f32[G, n], out: mut[f32[G, 3]]):
    g = group_id(0)
    a = tile.load_block(x, (g, 0), (384,))  # 3 values a thread: an uneven first step
    out[g, 0] = a.sum()
    out[g, 1] = a.max()
    out[g, 2] = (a * a).sum()


@kernel(tile=(128,))
def transposed_sum(x: f32[m, n], y: mut[f32[m, n]]):
    a = tile.load_block(x, (0, 0), (16, 16))  # read transposed below: in shared memory
    b = a * 2.0
    tile.store_block(y, (0, 0), a.T + b)


def _layernorm_args(rng):
    x = rng.standard_normal((3, ROW)).astype(np.float32)
    w, b = (rng.standard_normal(ROW).astype(np.float32) for _ in range(2))
    return x, w, b, np.zeros_like(x), 1e-5


def tree(values: np.ndarray, fn) -> np.float32:
    """The fixed tree of docs/language.md over ``values``, in f32."""
    s = list(values.astype(np.float32))
    m = len(s)
    p = 1 << (m.bit_length() - 1)
    for i in range(m - p):
        s[i] = fn(s[i], s[i + p])
    h = p // 2
    while h:
        for i in range(h):
            s[i] = fn(s[i], s[i + h])
        h //= 2
    return s[0]


def test_whole_tile_reductions_of_register_tiles_keep_the_trees_bits(target, rng):
    x = (rng.standard_normal((2, 384)) * 10.0 ** rng.integers(-3, 4, (2, 384))).astype(np.float32)
    out = np.zeros((2, 3), np.float32)
    tree_sums[2](x, out)
    for g in range(2):
        want = [
            tree(x[g], lambda a, b: np.float32(a + b)),
            tree(x[g], max),
            tree(x[g] * x[g], lambda a, b: np.float32(a + b)),
        ]
        assert out[g].tobytes() == np.array(want, np.float32).tobytes()


def test_a_layer_norm_of_register_tiles_matches_numpy(target, rng):
    x, w, b, y, eps = args = _layernorm_args(rng)
    layernorm_rows[3](*args)
    want = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + eps) * w + b
    np.testing.assert_allclose(y, want, atol=2e-6)


def test_a_tile_read_transposed_stays_in_shared_memory_and_is_right(target):
    x = np.arange(256, dtype=np.float32).reshape(16, 16)
    y = np.zeros_like(x)
    transposed_sum[1](x, y)
    np.testing.assert_array_equal(y, x.T + x * 2)


@NO_PTX
def test_element_wise_tiles_are_local_arrays_with_no_barrier_between_their_statements(rng):
    source = layernorm_rows.inspect("cuda", *_layernorm_args(rng), grid=3)
    for tile_name in ("xs", "d", "ws", "bs"):
        assert f"rv_{tile_name} = cuda.local.array(8, np.float32)" in source
    assert "cuda.shared.array(128, np.float32)" in source  # only the reductions' scratch
    assert len(re.findall(r"cuda\.shared\.array\(", source)) == 1
    between = source.split("v_mean = ", 1)[1].split("_rw", 1)[0]  # d = xs - mean; d * d
    assert "rv_d[_kk] = " in between and "syncthreads" not in between


@NO_PTX
def test_register_tiles_compile_to_registers_without_local_memory(rng):
    args = _layernorm_args(rng)
    ptx = layernorm_rows.inspect("ptx", *args, grid=3, arch="sm_90")
    assert ".local" not in ptx
    meta = layernorm_rows.metadata(*args, grid=3, arch="sm_90")
    assert meta["shared_bytes"] == 512 and meta["spill_bytes"] == 0


@NO_PTX
def test_a_tile_read_transposed_is_declared_in_shared_memory():
    x = np.zeros((16, 16), np.float32)
    source = transposed_sum.inspect("cuda", x, x.copy(), grid=1)
    assert "v_a = cuda.shared.array(" in source
    assert "rv_b = cuda.local.array(2, np.float32)" in source


def test_a_register_tile_read_elsewhere_anywhere_on_a_line_is_found():
    line = "_tt0[_e0, _e1] = (rv_t[_kk] + rv_t[_e1, _e0])"
    assert blocked_tiles.misplaced(line, {"rv_t": (8, 8)}) == {"rv_t": line}
    assert blocked_tiles.misplaced("rv_t[_kk] = rv_t[_kk] * 2", {"rv_t": (8, 8)}) == {}


@pytest.mark.parametrize(
    ("index", "shape", "aligned"),
    [
        ("_e0, _e1", (1, 1024), True),  # a write at the loop's element
        ("0, _e1", (1, 1024), True),  # a read with the dim of 1 fixed
        ("_e1", (1024,), True),  # a row broadcast into the (1, 1024) loop
        ("_e1, 0", (1024, 1), True),  # a transpose of a row is the same element
        ("_e0, _e1", (1024, 1), False),
        ("_e1 + 1", (1024,), False),
    ],
)
def test_an_index_is_the_loops_element_only_where_its_moving_dims_are_the_loops(
    index, shape, aligned
):
    assert blocked_tiles.aligned(index, shape, (1, 1024), ["_e0", "_e1"]) is aligned
