"""The CUDA instruction tables (tessera/kernel/targets/cuda/isa/) against NumPy models of
the instructions, written here from the PTX ISA's own case-by-case wording, not from the
tables: mma.sync fragments (m16n8k16 f16/bf16, m16n8k8 tf32, m8n8k4 f64, m16n8k32 s8 and
e4m3/e5m2), ldmatrix
(.x1/.x2/.x4, .trans) and the shared-memory bank model. No GPU, no numba-cuda."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tessera.kernel.targets.cuda import mma
from tessera.kernel.targets.cuda.isa import banks, ldmatrix, mma_sync


# ----------------------------------------------------------------------------- mma.sync
# "Matrix Fragments for mma.m16n8k16 with floating point type", "... mma.m16n8k8" (.tf32)
# and "... mma.m8n8k4 with .f64 floating point type", as the ISA words them
def isa_m16n8k16(operand: str, lane: int, i: int) -> tuple[int, int]:
    group, thread = lane >> 2, lane % 4
    if operand == "a":
        row = group if i in (0, 1, 4, 5) else group + 8
        col = thread * 2 + (i & 0x1) + (8 if i >= 4 else 0)
    elif operand == "b":
        row = thread * 2 + (i & 0x1) + (8 if i >= 2 else 0)
        col = group
    else:
        row = group if i < 2 else group + 8
        col = thread * 2 + (i & 0x1)
    return row, col


def isa_m16n8k8_tf32(operand: str, lane: int, i: int) -> tuple[int, int]:
    group, thread = lane >> 2, lane % 4
    if operand == "a":
        return (group if i in (0, 2) else group + 8), (thread if i < 2 else thread + 4)
    if operand == "b":
        return (thread if i == 0 else thread + 4), group
    return isa_m16n8k16("c", lane, i)


def isa_m8n8k4_f64(operand: str, lane: int, i: int) -> tuple[int, int]:
    group, thread = lane >> 2, lane % 4
    if operand == "a":
        return group, thread
    if operand == "b":
        return thread, group
    return group, thread * 2 + i


def isa_m16n8k32(operand: str, lane: int, i: int) -> tuple[int, int]:
    """ "Matrix Fragments for mma.m16n8k32" (.s8/.u8 and .e4m3/.e5m2 A and B): a0..a15 in
    four .b32 registers, b0..b7 in two, c0..c3 as m16n8k16's."""
    group, thread = lane >> 2, lane % 4
    if operand == "a":
        row = group if (0 <= i < 4 or 8 <= i < 12) else group + 8
        col = thread * 4 + (i & 0x3) + (16 if i >= 8 else 0)
        return row, col
    if operand == "b":
        return thread * 4 + (i & 0x3) + (16 if i >= 4 else 0), group
    return isa_m16n8k16("c", lane, i)


MODELS = {
    "f16": (mma_sync.M16N8K16_F16, isa_m16n8k16),
    "bf16": (mma_sync.M16N8K16_BF16, isa_m16n8k16),
    "tf32": (mma_sync.M16N8K8_TF32, isa_m16n8k8_tf32),
    "f64": (mma_sync.M8N8K4_F64, isa_m8n8k4_f64),
    "s8": (mma_sync.M16N8K32_S8, isa_m16n8k32),
    "e4m3": (mma_sync.M16N8K32_E4M3, isa_m16n8k32),
    "e5m2": (mma_sync.M16N8K32_E5M2, isa_m16n8k32),
}
ELEMENTS = {  # per lane: A, B, C/D
    "f16": (8, 4, 4),
    "bf16": (8, 4, 4),
    "tf32": (4, 2, 4),
    "f64": (1, 1, 2),
    "s8": (16, 8, 4),
    "e4m3": (16, 8, 4),
    "e5m2": (16, 8, 4),
}


def mma_model(kind: str, a_frag, b_frag, c_frag) -> np.ndarray:
    """One warp's ``mma.sync``: the D fragments (32, elements) from the A, B and C
    fragments the lanes hold, placed by the ISA's wording, multiplied in float64."""
    inst, isa = MODELS[kind]
    shapes = {"a": (inst.m, inst.k), "b": (inst.k, inst.n), "c": (inst.m, inst.n)}
    mats = {}
    for name, frag in (("a", a_frag), ("b", b_frag), ("c", c_frag)):
        mats[name] = np.full(shapes[name], np.nan)
        for lane in range(32):
            for i in range(frag.shape[1]):
                mats[name][isa(name, lane, i)] = frag[lane, i]
    d = mats["a"] @ mats["b"] + mats["c"]
    return np.array([[d[isa("c", lane, i)] for i in range(c_frag.shape[1])] for lane in range(32)])


def rounded(values: np.ndarray, kind: str) -> np.ndarray:
    """Values rounded to the instruction's input type, kept in float64."""
    if kind == "f16":
        return values.astype(np.float16).astype(np.float64)
    if kind == "bf16":
        return values.astype(ml_dtypes.bfloat16).astype(np.float64)
    if kind == "tf32":
        bits = values.astype(np.float32).view(np.uint32) & np.uint32(0xFFFFE000)
        return bits.view(np.float32).astype(np.float64)
    if kind == "s8":
        return np.clip(np.round(values * 40), -128, 127)
    if kind in ("e4m3", "e5m2"):
        fp8 = ml_dtypes.float8_e4m3fn if kind == "e4m3" else ml_dtypes.float8_e5m2
        return values.astype(fp8).astype(np.float64)
    return values


@pytest.mark.parametrize("kind", list(MODELS))
@pytest.mark.parametrize("operand", ["a", "b", "c"])
def test_fragment_tables_are_the_isa_wording_and_bijections(kind, operand):
    inst, isa = MODELS[kind]
    frag = getattr(inst, operand)
    assert frag.elements == ELEMENTS[kind]["abc".index(operand)]
    held = [frag.position(lane, i) for lane in range(32) for i in range(frag.elements)]
    assert held == [isa(operand, lane, i) for lane in range(32) for i in range(frag.elements)]
    rows, cols = frag.shape
    assert sorted(held) == [(r, c) for r in range(rows) for c in range(cols)]
    atom = frag.atom()
    assert atom.kind == "bijection" and atom.shape == frag.shape
    for lane in range(32):
        for i in range(frag.elements):
            assert atom.position(i, lane, 0) == isa(operand, lane, i)


@pytest.mark.parametrize("kind", list(MODELS))
def test_table_fragments_multiply_like_numpy_in_the_model(kind, rng):
    inst, _ = MODELS[kind]
    a = rounded(rng.standard_normal((inst.m, inst.k)), kind)
    b = rounded(rng.standard_normal((inst.k, inst.n)), kind)
    c = rng.standard_normal((inst.m, inst.n))

    def frags(f, matrix):
        return np.array(
            [[matrix[f.position(ln, i)] for i in range(f.elements)] for ln in range(32)]
        )

    d_frag = mma_model(kind, frags(inst.a, a), frags(inst.b, b), frags(inst.c, c))
    d = np.full((inst.m, inst.n), np.nan)
    for lane in range(32):
        for i in range(inst.c.elements):
            d[inst.c.position(lane, i)] = d_frag[lane, i]
    np.testing.assert_allclose(d, a @ b + c, rtol=1e-12, atol=1e-12)


def test_the_code_generator_reads_the_one_table():
    assert mma.A_16x16 is mma_sync.A_16x16 and mma.Fragment is mma_sync.Fragment
    for inst, isa in [
        (mma.M16N8K16_F16, mma_sync.M16N8K16_F16),
        (mma.M16N8K16_BF16, mma_sync.M16N8K16_BF16),
        (mma.M16N8K8_TF32, mma_sync.M16N8K8_TF32),
    ]:
        assert (inst.ptx, inst.a, inst.b, inst.c) == (isa.ptx, isa.a, isa.b, isa.c)
        assert (inst.m, inst.n, inst.k) == (isa.m, isa.n, isa.k)
    for inst, isa in [
        (mma.M16N8K32_S8, mma_sync.M16N8K32_S8),
        (mma.M16N8K32_E4M3, mma_sync.M16N8K32_E4M3),
        (mma.M16N8K32_E5M2, mma_sync.M16N8K32_E5M2),
    ]:
        assert (inst.ptx, inst.a, inst.b, inst.c, inst.per_register) == (
            isa.ptx, isa.a, isa.b, isa.c, 4
        )  # fmt: skip
    assert mma_sync.M16N8K32_S8.a_type == "s8" and mma_sync.M16N8K32_S8.d_type == "s32"
    assert mma_sync.M16N8K32_E5M2.a_type == "e5m2" and mma_sync.M16N8K32_E5M2.d_type == "f32"
    assert mma_sync.M8N8K4_F64.ptx == "mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64"
    assert (mma_sync.M8N8K4_F64.m, mma_sync.M8N8K4_F64.n, mma_sync.M8N8K4_F64.k) == (8, 8, 4)


def test_an_8bit_a_fragment_is_the_f16_one_in_16_bit_units():
    """m16n8k32's A register r holds bytes 4r..4r+3; byte pair h of it is the 16-bit unit
    m16n8k16's A holds as element 2r+h: so ``ldmatrix`` (b16) without ``.trans`` loads A
    of 8-bit elements from a K-contiguous tile at the f16 addresses (cuda/mainloop.py)."""
    a8, a16 = mma_sync.A_16x32_B8, mma_sync.A_16x16
    for lane in range(32):
        for r in range(4):
            for h in range(2):
                row, col = a16.position(lane, 2 * r + h)
                for byte in range(2):
                    at = (row, 2 * col + byte)
                    assert isa_m16n8k32("a", lane, 4 * r + 2 * h + byte) == at
                    assert a8.position(lane, 4 * r + 2 * h + byte) == at


def test_an_8bit_b_fragment_is_no_16_bit_unit_of_a_k_by_n_tile():
    """B's register bytes run down K at one column: in a K x N row-major tile (K not
    contiguous) the two bytes of each 16-bit half lie in different rows, so neither
    ``ldmatrix`` nor ``ldmatrix.trans`` (which move 16-bit units) can load it; the main
    loop loads words of rows and transposes them with ``prmt`` (cuda/mainloop.py,
    docs/targets.md)."""
    for lane in range(32):
        for i in range(0, 8, 2):
            (k0, n0), (k1, n1) = isa_m16n8k32("b", lane, i), isa_m16n8k32("b", lane, i + 1)
            assert n0 == n1 and k1 == k0 + 1


# ----------------------------------------------------------------------------- ldmatrix
def ldmatrix_model(smem: np.ndarray, addresses, num: int, trans: bool) -> np.ndarray:
    """``ldmatrix.sync.aligned.m8n8.x{num}{.trans}.shared.b16`` on shared memory ``smem``
    (bytes): "each address corresponds to the start of a matrix row. Addresses addr0-addr7
    correspond to the rows of the first matrix, addr8-addr15 to the second" ...; "each
    thread receives a fragment: row = laneid / 4, two elements at columns 2 * (laneid %
    4)" (.trans: the matrix is loaded in column-major form). Returns (32, num) uint32."""
    words = np.zeros((32, num), dtype=np.uint32)
    for m in range(num):
        matrix = np.stack(
            [
                smem[addresses[8 * m + r] : addresses[8 * m + r] + 16].view(np.uint16)
                for r in range(8)
            ]
        )
        if trans:
            matrix = matrix.T
        for lane in range(32):
            lo, hi = matrix[lane // 4, 2 * (lane % 4) : 2 * (lane % 4) + 2]
            words[lane, m] = np.uint32(lo) | (np.uint32(hi) << 16)
    return words


@pytest.mark.parametrize("num", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix_table_matches_the_model(num, trans, rng):
    load = ldmatrix.Ldmatrix(num, trans)
    assert load.ptx == f"ldmatrix.sync.aligned.m8n8.x{num}{'.trans' if trans else ''}.shared.b16"
    # matrix m's row r at a scattered 16-byte slot; its elements say (m, r, c)
    slots = rng.permutation(64)[: 8 * num]
    smem = np.zeros(64 * 16, dtype=np.uint8)
    view = smem.view(np.uint16)
    addresses = np.full(32, -1)
    for lane in range(32):
        where = load.address(lane)
        if where is None:
            assert lane >= 8 * num
            continue
        m, r = where
        assert load.address_lane(m, r) == lane
        addresses[lane] = 16 * slots[8 * m + r]
        view[8 * slots[8 * m + r] : 8 * slots[8 * m + r] + 8] = 64 * m + 8 * r + np.arange(8)
    words = ldmatrix_model(smem, addresses, num, trans)
    for lane in range(32):
        for q in range(num):
            for half in range(2):
                m, r, c = load.element(lane, q, half)
                assert (words[lane, q] >> (16 * half)) & 0xFFFF == 64 * m + 8 * r + c


def test_ldmatrix_refuses_other_counts():
    with pytest.raises(ValueError, match="1, 2 or 4"):
        ldmatrix.Ldmatrix(3)


# ----------------------------------------------------------------------------- banks
def test_bank_model_counts_wavefronts_per_phase():
    lanes = np.arange(32)
    assert banks.extra_wavefronts(4 * lanes, 4) == 0  # 32 consecutive words
    assert banks.extra_wavefronts(np.zeros(32, int), 4) == 0  # one word: broadcast
    assert banks.wavefronts(8 * lanes, 4) == 2  # stride two words: 2-way
    assert banks.wavefronts(128 * lanes, 4) == 32  # one bank: 32-way
    assert banks.extra_wavefronts(16 * lanes, 16) == 0  # 4 quarter-warps of 128 bytes
    assert banks.wavefronts(16 * lanes, 16) == 4
    assert banks.wavefronts(128 * lanes, 16) == 32  # 8 rows in one bank group per phase
    assert banks.extra_wavefronts(8 * lanes, 8) == 0  # 2 half-warps of 128 bytes
    # the 8 lanes of a quarter-warp at chunks (lane ^ row) of 8 rows of 128 bytes
    assert banks.extra_wavefronts(128 * (lanes % 8) + 16 * ((lanes % 8) ^ (lanes // 8)), 16) == 0
    inactive = np.where(lanes < 8, 16 * lanes, -1)
    assert banks.wavefronts(inactive, 16) == 1
    with pytest.raises(ValueError, match="misaligned"):
        banks.wavefronts(4 * lanes + 8, 16)
