"""Branchy rules the CPU target calls as functions (compiled once per process, inlined by
LLVM) instead of writing them out in a kernel's function: a range loop's trip count and
a block's origin. Written out, each added blocks that Numba's passes over the kernel pay
for (the flash-attention backward kernel compiled in 18 s with them, 11.6 s without)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import tessera as ts
from tessera import f32, group_id, i64, kernel, mut, tile
from tessera.kernel.targets import integers, pysource

I64_MAX, I64_MIN = 2**63 - 1, -(2**63)
EDGES = (I64_MIN, I64_MIN + 1, -7, -1, 0, 1, 3, 7, I64_MAX - 1, I64_MAX)


def _written_out(code: str, **values) -> object:
    return eval(code, {"np": np}, {k: np.int64(v) for k, v in values.items()})  # noqa: S307


def _count(start: int, stop: int, step: int) -> int:
    """``len(range(start, stop, step))`` (which overflows past 2**63 - 1), 0 for step 0."""
    if step > 0:
        return max(0, (stop - start + step - 1) // step)
    if step < 0:
        return max(0, (start - stop - step - 1) // -step)
    return 0


@pytest.mark.parametrize("step", (I64_MIN, -3, -1, 0, 1, 2, I64_MAX))
def test_the_trip_count_function_counts_what_range_counts(step):
    with np.errstate(over="ignore"):  # (the rule wraps on purpose, as compiled code does)
        for start, stop in itertools.product(EDGES, EDGES):
            got = integers.trip_count(np.int64(start), np.int64(stop), np.int64(step))
            assert got == np.uint64(_count(start, stop, step)), (start, stop, step)


def test_the_trip_count_function_equals_the_written_out_rule():
    code = pysource.trip_count("a", "b", "c")
    with np.errstate(over="ignore"):
        for a, b, c in itertools.product(EDGES, EDGES, (I64_MIN, -2, 0, 5, I64_MAX)):
            written = _written_out(code, a=a, b=b, c=c)
            assert integers.trip_count(np.int64(a), np.int64(b), np.int64(c)) == written


@pytest.mark.parametrize("size", (1, 16, 64))
def test_the_block_origin_function_equals_the_written_out_rule(size):
    code = pysource.SourceEmitter.block_origin(None, "o", size, "e")
    for origin, extent in itertools.product(EDGES, (0, 1, 16, 100, I64_MAX)):
        written = _written_out(code, o=origin, e=extent)
        got = integers.block_origin(np.int64(origin), np.int64(size), np.int64(extent))
        assert got == written, (origin, size, extent)
        inside = -size < origin < extent
        assert got == (origin if inside else -size)


@kernel(tile=(4,))
def blocks_in_a_loop(x: f32[n], y: mut[f32[n]], start: i64, stop: i64, step: i64):
    acc = tile.zeros((4,), f32)
    for k in range(start, stop, step):
        acc = acc + tile.load_block(x, (k,), (4,))
    tile.store_block(y, (group_id(0) * 4,), acc)


def _blocks_reference(x: np.ndarray, start: int, stop: int, step: int) -> np.ndarray:
    acc = np.zeros(4, np.float32)
    for k in range(start, stop, step):
        block = np.zeros(4, np.float32)
        for e in range(4):
            if 0 <= k + e < x.size:
                block[e] = x[k + e]
        acc += block
    return acc


@pytest.mark.parametrize(
    "start, stop, step",
    [(0, 8, 4), (-6, 9, 5), (9, -6, -5), (3, 3, 1), (5, 0, 2), (-(2**62), -(2**62) + 3, 1)],
)
def test_a_kernel_looping_over_blocks_at_any_bounds_matches_numpy(target, start, stop, step):
    x = np.arange(1, 9, dtype=np.float32)
    y = np.zeros(8, np.float32)
    blocks_in_a_loop[2](x, y, start, stop, step)
    want = _blocks_reference(x, start, stop, step)
    np.testing.assert_array_equal(y[:4], want)
    np.testing.assert_array_equal(y[4:], want)


def test_the_cpu_kernels_source_calls_the_rules_instead_of_writing_them_out():
    x, y = np.zeros(8, np.float32), np.zeros(8, np.float32)
    with ts.config(target="cpu"):
        source = blocks_in_a_loop.inspect("cpu", x, y, 0, 8, 4, grid=(2,))
    assert "_trip_count(" in source and "_block_origin(" in source
    assert " if " not in source
