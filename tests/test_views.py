"""Views of arrays (issue 18, item 5; docs/language.md, "Views"): a sub-array of a shared
array (``As[j]``) as a cp_async destination and as an operand, and a global array seen
from an offset (``inp[R:]``) indexed with negative reach inside its base, on every
target; bounds are those of the base array."""

from __future__ import annotations

import numpy as np
import pytest

import tessera as ts
from tessera import (
    KernelError,
    KiB,
    OutOfBoundsError,
    constexpr,
    cp_async,
    f32,
    group_id,
    i32,
    kernel,
    mut,
    tbarrier,
    tile,
    tshared,
)

RADIUS = 2


@kernel
def stencil(inp: f32[n], out: mut[f32[m]]):
    """out[i] = sum of inp[i .. i + 2R]: the centre moved to the view's origin."""
    i = tile.linear_id()
    v = inp[RADIUS:]
    if i < m:
        total = f32(0.0)
        for k in range(-RADIUS, RADIUS + 1):
            total += v[i + k]
        out[i] = total


def test_an_offset_view_reaches_back_inside_its_base(target):
    x = np.arange(20, dtype=np.float32) ** 2
    out = np.zeros(16, np.float32)
    stencil[16](x, out)
    want = np.array([x[i : i + 5].sum() for i in range(16)], np.float32)
    np.testing.assert_array_equal(out, want)


def test_debug_checks_a_views_index_against_its_base():
    x, out = np.ones(20, np.float32), np.zeros(17, np.float32)  # i = 16 reads inp[20]
    with (
        ts.config(target="debug"),
        pytest.raises(OutOfBoundsError, match=r"index 20 .*'inp' of shape \(20,\)"),
    ):
        stencil[17](x, out)
    assert not out.any()


def test_cpu_bounds_check_of_a_view_is_against_its_base():
    x = np.ones(20, np.float32)
    with ts.config(target="cpu", boundscheck=1):
        stencil[16](x, np.zeros(16, np.float32))  # negative reach, inside: no error
        with pytest.raises(OutOfBoundsError, match="'inp'"):
            stencil[17](x, np.zeros(17, np.float32))


@kernel(tile=(16,), shared=8 * KiB)
def staged_rows(
    A: f32[M, K], out: mut[f32[M]], STAGES: constexpr = 3, BM: constexpr = 4, BK: constexpr = 8
):
    """Row sums of a BM-row block, K in chunks of BK through a ring of STAGES shared
    buffers: each chunk copied into ``As[s]``, read as a block and element by element."""
    As = tshared.alloc[f32]((STAGES, BM, BK))
    m0 = group_id(0) * BM
    lane = tile.linear_id()
    acc = tile.zeros((BM,), f32)
    own = f32(0.0)
    for k0 in tile.range(0, K, BK, prefetch=STAGES - 1):
        s = (k0 // BK) % STAGES
        cp_async.shared.global_(As[s], A[m0 : m0 + BM, k0 : k0 + BK])
        tbarrier()
        block = tile.load_block(As[s], (0, 0), (BM, BK))
        acc = acc + block.sum(axis=1)
        buf = As[s]
        if lane < BM:
            for c in range(BK):
                own += buf[lane, c]
        tbarrier()
    tile.store_block(out, (m0,), acc)
    if lane < BM and m0 + lane < M:
        out[m0 + lane] = out[m0 + lane] - own + own  # the element path agrees: no change
        if own != acc[lane]:
            out[m0 + lane] = -1.0


def test_shared_sub_arrays_take_copies_and_serve_as_operands(target):
    A = np.arange(10 * 28, dtype=np.float32).reshape(10, 28) % 7
    out = np.zeros(10, np.float32)
    staged_rows[3](A, out)
    np.testing.assert_array_equal(out, A.sum(axis=1))


@kernel(tile=(8,), shared=1 * KiB)
def shifted_copy(x: f32[n], y: mut[f32[n]]):
    v = x[3:]
    s = tshared.alloc[f32](8)
    base = group_id(0) * 8
    cp_async.shared.global_(s, v[base : base + 8])
    tbarrier()
    if base + tile.linear_id() + 3 < n:
        y[base + tile.linear_id()] = s[tile.linear_id()]


def test_a_view_is_a_cp_async_source_from_its_origin(target):
    x, y = np.arange(30, dtype=np.float32), np.zeros(30, np.float32)
    shifted_copy[4](x, y)
    np.testing.assert_array_equal(y[:27], x[3:])


def test_a_view_is_indexed_in_the_base_in_the_ir():
    text = stencil.inspect("ir", np.ones(20, np.float32), np.zeros(16, np.float32))
    assert "inp[" in text and "v[" not in text


def mixes_axes(a: f32[n, m], out: mut[f32[n]]):
    v = a[1:, 2]
    out[0] = v[0]


def test_a_view_fixes_leading_axes_only():
    with pytest.raises(KernelError, match="fixes leading axes only"):
        kernel(mixes_axes)


def has_an_end(a: f32[n], out: mut[f32[n]]):
    v = a[1:4]
    out[0] = v[0]


def test_a_view_takes_a_start_only():
    with pytest.raises(KernelError, match="a start only"):
        kernel(has_an_end)


@ts.func
def smooth_at(v, i):
    """A helper given a view indexes it as the caller does."""
    return (v[i - 1] + v[i] + v[i + 1]) / 3.0


@kernel
def writes_through_views(x: f32[n], y: mut[f32[n]], hits: mut[i32[k]]):
    i = tile.linear_id()
    src = x[1:]
    dst = y[1:]
    counts = hits[2:]
    if i < n - 2:
        dst[i] = smooth_at(src, i)
        tile.atomic_add(counts, i % 2 - 2, 1)  # hits[0] and hits[1]: reach back
    if i == 0:
        dst[-1] = f32(src.shape[0])  # y[0] = n - 1


def test_views_take_stores_atomics_and_go_into_helpers(target):
    x = np.arange(12, dtype=np.float32) ** 2
    y, hits = np.zeros(12, np.float32), np.zeros(4, np.int32)
    writes_through_views[12](x, y, hits)
    want = (x[:-2] + x[1:-1] + x[2:]) / np.float32(3.0)
    np.testing.assert_allclose(y[1:-1], want, rtol=1e-6)
    assert y[0] == 11.0 and hits.tolist() == [5, 5, 0, 0]


@kernel(tile=(8,), shared=4 * KiB)
def block_copy(A: f32[M, N], out: mut[f32[M, N]], STAGES: constexpr = 2):
    Bs = tshared.alloc[f32]((STAGES * 2 - 2, 8, 8))
    r0 = group_id(0) * 8
    for c0 in tile.range(0, N, 8, prefetch=STAGES * 2 - 2):
        b = Bs[(c0 // 8) % (STAGES * 2 - 2)]
        cp_async.shared.global_(b, A[r0 : r0 + 8, c0 : c0 + 8])
        tbarrier()
        tile.store_block(out, (r0, c0), tile.load_block(b, (0, 0), (8, 8)))
        tbarrier()


def test_prefetch_and_shared_shapes_take_the_same_constant_expressions(target):
    A = np.arange(16 * 24, dtype=np.float32).reshape(16, 24)
    out = np.zeros_like(A)
    block_copy[2](A, out)
    np.testing.assert_array_equal(out, A)


def nonconstant_prefetch(x: f32[n], y: mut[f32[n]]):
    for k in tile.range(0, n, 8, prefetch=n - 1):
        y[k] = x[k]


def test_prefetch_must_be_a_constant_expression():
    with pytest.raises(KernelError, match="prefetch must be a positive integer constant"):
        kernel(tile=(8,))(nonconstant_prefetch)
