"""Layouts as data (tessera/kernel/layout.py, layout_convert.py, layout_reduce.py) against
NumPy models of the PTX ISA (tests/test_isa_models.py): bijections or documented
broadcasts, tensor-core fragments that multiply like NumPy, ldmatrix from swizzled shared
tiles giving the operand fragments, a bank model with zero conflicts for the standard
GEMM staging tiles, conversion plans that reproduce tiles, and the fixed reduction tree
over a layout bit for bit. No GPU."""

from __future__ import annotations

import numpy as np
import pytest
from test_isa_models import ldmatrix_model, mma_model, rounded

from tessera.kernel import layout as L
from tessera.kernel.layout_convert import convert
from tessera.kernel.layout_reduce import apply_tree, tree_steps
from tessera.kernel.targets import semantics
from tessera.kernel.targets.cuda.isa import banks, mma_sync
from tessera.kernel.targets.cuda.isa.ldmatrix import Ldmatrix, row_addresses

F16 = mma_sync.M16N8K16_F16
INSTRUCTIONS = {
    "f16": mma_sync.M16N8K16_F16,
    "bf16": mma_sync.M16N8K16_BF16,
    "tf32": mma_sync.M16N8K8_TF32,
    "f64": mma_sync.M8N8K4_F64,
}


def acc(shape, warps, inst=F16):
    return L.mma_acc(inst.c.atom(), shape, warps)


def operand(which, shape, warps, inst=F16):
    return L.mma_operand(which, inst.operand(which).atom(), shape, warps)


LAYOUTS = {
    "acc 16x8": (acc((16, 8), (1, 1)), "bijection"),
    "acc 128x256 2x4 warps": (acc((128, 256), (2, 4)), "bijection"),
    "acc 64x64 f64 2x2": (acc((64, 64), (2, 2), mma_sync.M8N8K4_F64), "bijection"),
    "A 128x32 2x4 warps": (operand("A", (128, 32), (2, 4)), "broadcast"),
    "B 32x256 2x4 warps": (operand("B", (32, 256), (2, 4)), "broadcast"),
    "A tf32 64x16 4x1": (operand("A", (64, 16), (4, 1), mma_sync.M16N8K8_TF32), "bijection"),
    "blocked 128x32 f16 8 warps": (L.blocked((128, 32), 8, 32, 8), "bijection"),
    "blocked 4x8 f32 1 warp": (L.blocked((4, 8), 4, 32, 1), "broadcast"),
    "blocked 1-D 1024 f32": (L.blocked((1024,), 4, 32, 4), "bijection"),
    "slice of acc 64x64 rows": (L.slice(acc((64, 64), (2, 2)), 1), "broadcast"),
    "slice of acc 64x64 cols": (L.slice(acc((64, 64), (2, 2)), 0), "broadcast"),
    "shared 128x32 f16 swizzled": (L.shared((128, 32), 2, L.swizzle_for(64)), "bijection"),
    "shared 32x256 f16 swizzled": (L.shared((32, 256), 2, L.swizzle_for(512)), "bijection"),
    "shared 64x64 f32 plain": (L.shared((64, 64), 4), "bijection"),
}


# ----------------------------------------------------------------------------- structure
@pytest.mark.parametrize("name", list(LAYOUTS))
def test_every_layout_is_a_bijection_or_a_documented_broadcast(name, rng):
    layout, kind = LAYOUTS[name]
    assert layout.kind == kind
    held = np.sort(layout.flat_positions.ravel())
    copies = held.size // layout.elements
    assert copies == (1 if kind == "bijection" else copies) and copies >= 1
    assert np.array_equal(held, np.repeat(np.arange(layout.elements), copies))
    tile = rng.standard_normal(layout.shape)
    values = layout.gather(tile)
    assert values.shape == layout.value_shape
    assert np.array_equal(layout.scatter(values), tile)
    index = tuple(np.zeros(len(layout.names), int))
    coords = layout.position(*index)
    assert all(c == 0 for c in coords)
    for holder in layout.holders(*coords):
        assert layout.position(*holder) == coords


def test_a_layout_missing_elements_is_not_a_bijection():
    broken = L.distributed((4, 4), reg=[(0, 1), (0, 1)], lane=[(1, 0), (2, 0)])
    assert broken.kind == "other"
    with pytest.raises(ValueError, match="does not cover"):
        broken.scatter(np.zeros(broken.value_shape))


def test_bad_shapes_are_errors_naming_them():
    with pytest.raises(ValueError, match="power of two"):
        L.blocked((24, 32), 8)
    with pytest.raises(ValueError, match="whole 16x8 instruction tiles"):
        acc((16, 8), (2, 1))


def test_the_standard_swizzles_are_the_gemm_staging_rules():
    rows = np.arange(64)
    chunk = np.arange(4)[:, None]
    assert np.array_equal(L.swizzle_for(64).chunk(rows, chunk), chunk ^ ((rows >> 1) & 3))
    for row_bytes in (128, 256, 512):
        chunk = np.arange(row_bytes // 16)[:, None]
        assert np.array_equal(L.swizzle_for(row_bytes).chunk(rows, chunk), chunk ^ (rows & 7))
    a = L.shared((128, 32), 2, L.swizzle_for(64))
    r, c = np.meshgrid(np.arange(128), np.arange(32), indexing="ij")
    assert np.array_equal(a.offset(r, c), r * 32 + ((c // 8) ^ ((r >> 1) & 3)) * 8 + c % 8)


# ----------------------------------------------------------------------------- tensor cores
@pytest.mark.parametrize("kind", ["f16", "tf32", "f64"])
def test_mma_layouts_tile_the_isa_fragments_over_warp_tiles(kind):
    inst = INSTRUCTIONS[kind]
    shape, warps = (64, 64), (2, 2)
    tm, tn = shape[0] // warps[0], shape[1] // warps[1]
    c = acc(shape, warps, inst)
    per = inst.c.elements
    tiles_n = tn // inst.n
    for w in range(4):
        r0, c0 = (w // warps[1]) * tm, (w % warps[1]) * tn
        for reg in range(c.size("reg")):
            t, i = divmod(reg, per)
            for lane in range(32):
                fr, fc = inst.c.position(lane, i)
                want = (r0 + (t // tiles_n) * inst.m + fr, c0 + (t % tiles_n) * inst.n + fc)
                assert c.position(reg, lane, w) == want
    a = operand("A", shape, warps, inst)
    tiles_k = shape[1] // inst.k
    for w in range(4):
        for reg in range(a.size("reg")):
            t, i = divmod(reg, inst.a.elements)
            fr, fc = inst.a.position(5, i)
            want = ((w // 2) * tm + (t // tiles_k) * inst.m + fr, (t % tiles_k) * inst.k + fc)
            assert a.position(reg, 5, w) == want


@pytest.mark.parametrize("kind", list(INSTRUCTIONS))
def test_warp_tiles_gathered_by_the_layouts_multiply_like_numpy(kind, rng):
    """A group's dot of a block tile: each warp runs the ISA model on the fragments its
    lanes hold under mma_operand(A), mma_operand(B) and mma_acc, instruction tile by
    instruction tile, and the accumulator scattered back is A @ B + C."""
    inst = INSTRUCTIONS[kind]
    (m, n, k), warps = (2 * inst.m * 2, 2 * inst.n * 2, 2 * inst.k), (2, 2)
    la, lb, lc = (
        operand("A", (m, k), warps, inst),
        operand("B", (k, n), warps, inst),
        acc((m, n), warps, inst),
    )
    a = rounded(rng.standard_normal((m, k)), kind)
    b = rounded(rng.standard_normal((k, n)), kind)
    c = rng.standard_normal((m, n))
    va, vb, vc = la.gather(a), lb.gather(b), lc.gather(c)
    ea, eb, ec = inst.a.elements, inst.b.elements, inst.c.elements
    tm, tn, tk = m // warps[0] // inst.m, n // warps[1] // inst.n, k // inst.k
    for w in range(4):
        for i in range(tm):
            for j in range(tn):
                d = vc[w, :, ec * (i * tn + j) : ec * (i * tn + j + 1)]
                for kk in range(tk):
                    fa = va[w, :, ea * (i * tk + kk) : ea * (i * tk + kk + 1)]
                    fb = vb[w, :, eb * (kk * tn + j) : eb * (kk * tn + j + 1)]
                    d = mma_model(kind, fa, fb, d)
                vc[w, :, ec * (i * tn + j) : ec * (i * tn + j + 1)] = d
    np.testing.assert_allclose(lc.scatter(vc), a @ b + c, rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------------------- staging tiles
STAGING = [  # (operand, shape, warps of the accumulator, ldmatrix .trans)
    ("A", (128, 32), (2, 4), False),
    ("B", (32, 128), (2, 2), True),
    ("B", (32, 256), (2, 4), True),
]


def _ldmatrix_plans(which, shape, warps, layout):
    """Per warp and per ldmatrix.x4: the registers it fills and what each lane wants."""
    reps = layout.size("reg") // (8 if which == "A" else 4)  # instruction tiles per warp
    tiles_n = reps // (shape[0] // 16)  # B: n8 tiles per k16 step
    plans = []
    for t in range(reps if which == "A" else reps // 2):
        if which == "A":  # one 16x16 instruction tile: registers 8t .. 8t+7
            regs = [[8 * t + 2 * q + h for h in range(2)] for q in range(4)]
        else:  # two n8 tiles of one k16 step: (b0b1, b2b3) of n-tile 2p, then of 2p+1
            kk, p = divmod(t, tiles_n // 2)
            regs = [
                [4 * (kk * tiles_n + 2 * p + (q >> 1)) + 2 * (q & 1) + h for h in range(2)]
                for q in range(4)
            ]
        plans.append(regs)
    return plans


@pytest.mark.parametrize("which, shape, warps, trans", STAGING)
def test_ldmatrix_from_the_swizzled_tile_gives_the_operand_fragments(
    which, shape, warps, trans, rng
):
    layout = operand(which, shape, warps)
    tile = rng.standard_normal(shape).astype(np.float16)
    for swizzled in (True, False):
        smem_layout = L.shared(shape, 2, L.swizzle_for(shape[1] * 2) if swizzled else None)
        smem = np.zeros(tile.size, dtype=np.float16)
        r, c = np.meshgrid(*map(np.arange, shape), indexing="ij")
        smem[smem_layout.offset(r, c)] = tile
        smem = smem.view(np.uint8)
        want_values = layout.gather(tile.view(np.uint16))
        conflicts = 0
        for w in range(layout.size("warp")):
            for regs in _ldmatrix_plans(which, shape, warps, layout):

                def want(lane, q, half, regs=regs, w=w):
                    return layout.position(regs[q][half], lane, w)

                starts = row_addresses(Ldmatrix(4, trans), want)
                addresses = np.array([2 * smem_layout.offset(*s) for s in starts])
                words = ldmatrix_model(smem, addresses, 4, trans)
                for q in range(4):
                    for h in range(2):
                        got = (words[:, q] >> (16 * h)) & 0xFFFF
                        assert np.array_equal(got, want_values[w, :, regs[q][h]])
                conflicts += banks.extra_wavefronts(addresses, 16)
        if swizzled:
            assert conflicts == 0
        else:  # 8 rows of one chunk column share bank groups: the test can fail
            assert conflicts > 0


@pytest.mark.parametrize("which, shape, warps, trans", STAGING)
@pytest.mark.parametrize("threads", [128, 256])
def test_16_byte_cp_async_writes_of_the_staging_tiles_are_conflict_free(
    which, shape, warps, trans, threads
):
    """The global-to-shared copy of a staging tile: thread vectors of a blocked layout
    (16 bytes = 8 f16 each), written into the swizzled buffer, each vector one aligned
    16-byte chunk, zero extra wavefronts per quarter-warp."""
    copy = L.blocked(shape, 8, 32, threads // 32)
    for swizzle in (L.swizzle_for(shape[1] * 2), None):
        buffer = L.shared(shape, 2, swizzle)
        for w in range(copy.size("warp")):
            for v in range(copy.size("reg") // 8):
                coords = copy.position(8 * v + np.arange(8)[:, None], np.arange(32), w)
                offsets = buffer.offset(*coords)  # (8 elements, 32 lanes)
                assert np.array_equal(offsets - offsets[0], np.arange(8)[:, None] + 0 * offsets)
                assert banks.extra_wavefronts(2 * offsets[0], 16) == 0


# ----------------------------------------------------------------------------- conversions
def _permuted(layout, dim, order):
    dims = dict(layout.dims)
    dims[dim] = tuple(dims[dim][i] for i in order)
    return L.distributed(layout.shape, dims["reg"], dims["lane"], dims["warp"])


CONVERSIONS = [  # (source, destination, plan)
    (acc((64, 64), (4, 1)), operand("A", (64, 64), (4, 1)), "identity"),  # FA2 reuse
    (acc((64, 64), (2, 2)), _permuted(acc((64, 64), (2, 2)), "reg", [4, 0, 3, 1, 2]), "rename"),
    (acc((64, 64), (2, 2)), _permuted(acc((64, 64), (2, 2)), "lane", [1, 0, 4, 3, 2]), "shuffle"),
    (acc((64, 64), (2, 2)), L.blocked((64, 64), 4, 32, 4), "shared"),
    (L.blocked((128, 32), 8, 32, 8), operand("A", (128, 32), (2, 4)), "shared"),
    (operand("B", (32, 128), (2, 2)), L.blocked((32, 128), 4, 32, 4), "shared"),
    (acc((16, 16), (1, 1)), operand("A", (16, 16), (1, 1)), "identity"),
]


@pytest.mark.parametrize("index", range(len(CONVERSIONS)))
def test_conversion_plans_applied_in_numpy_reproduce_the_tile(index, rng):
    src, dst, kind = CONVERSIONS[index]
    plan = convert(src, dst)
    assert plan.kind == kind
    tile = rng.standard_normal(src.shape).astype(np.float32)
    out = plan.apply(src.gather(tile))
    assert np.array_equal(out, dst.gather(tile))
    assert np.array_equal(dst.scatter(out), tile)


# ----------------------------------------------------------------------------- the tree
def _fmax(a, b):
    return np.where((a > b) | (a != a), a, b)


REDUCED = [
    acc((64, 128), (2, 4)),
    acc((128, 64), (4, 1)),
    acc((32, 32), (1, 1), mma_sync.M8N8K4_F64),
    L.blocked((64, 64), 4, 32, 4),
    L.blocked((8, 256), 4, 32, 2),
    operand("B", (32, 64), (2, 2)),
]


@pytest.mark.parametrize("index", range(len(REDUCED)))
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("op", ["sum", "max"])
def test_the_tree_over_a_layout_equals_the_reference_bit_for_bit(index, axis, op, rng):
    layout = REDUCED[index]
    tile = rng.standard_normal(layout.shape) * 10.0 ** rng.integers(-3, 4, layout.shape)
    tile = tile.astype(np.float32)
    if op == "max":  # NaNs with distinct payloads: which operand is left shows in the bits
        nan = rng.random(layout.shape) < 0.05
        payload = rng.integers(1, 1 << 22, nan.sum(), dtype=np.uint32)
        tile.view(np.uint32)[nan] = np.uint32(0x7FC00000) | payload
    combine = {"sum": np.add, "max": _fmax}[op]
    got = apply_tree(layout, axis, layout.gather(tile), combine)
    columns = np.moveaxis(tile, axis, 0)
    ref = np.array(
        [
            semantics.tree_reduce(list(columns[:, j]), columns.shape[0], semantics.COMBINE[op])
            for j in range(columns.shape[1])
        ],
        dtype=np.float32,
    )
    result = L.slice(layout, axis)
    assert got.shape == result.value_shape
    assert np.array_equal(got.view(np.uint32), result.gather(ref).view(np.uint32))


def test_an_accumulator_row_sum_is_register_adds_butterflies_and_one_exchange():
    steps = tree_steps(acc((128, 256), (2, 4)), 1)
    kinds = [s.kind for s in steps]
    assert kinds.count("warp") == 1 and steps[0].kind == "warp"  # the warp columns first
    assert steps[0].h == (128, 64)
    lanes = [s for s in steps if s.kind == "lane"]
    assert [(s.bits, s.h) for s in lanes] == [((1,), (4,)), ((0,), (2,))]  # bfly masks 2, 1
    assert steps[-1].kind == "reg" and steps[-1].h == (1,)
    assert [h for s in steps for h in s.h] == [2**b for b in reversed(range(8))]


def test_a_swizzled_layout_is_refused_by_the_tree():
    with pytest.raises(ValueError, match="mixes bits"):
        tree_steps(L.distributed((4, 4), reg=[(1, 1), (0, 2)], lane=[(0, 1), (2, 0)]), 1)
