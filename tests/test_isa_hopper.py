"""Hopper's instructions as data (isa/wgmma.py, isa/tma.py, isa/mbarrier.py and
layout.wgmma_acc), checked against NumPy models written from the PTX ISA and the driver
API's rules (GPU.md §4, "without a GPU")."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.kernel import layout
from tessera.kernel.targets.cuda.isa import banks, mma_sync, wgmma
from tessera.kernel.targets.cuda.isa.mbarrier import MBarrier, RingError, run_ring
from tessera.kernel.targets.cuda.isa.tma import TensorMapError, box_load, tensor_map


# ----------------------------------------------------------------------------- descriptors
def _field(bits: int, lo: int, hi: int) -> int:
    """Bits lo..hi (inclusive) of a 64-bit word, read one bit at a time."""
    word = np.array([bits], np.uint64).view(np.uint8)
    flat = np.unpackbits(word, bitorder="little")
    return int(sum(int(flat[b]) << (b - lo) for b in range(lo, hi + 1)))


def test_a_descriptor_puts_each_field_in_the_isas_bits():
    d = wgmma.Descriptor(
        address=0x3A40, leading_bytes=16, stride_bytes=1024, base_offset=5, swizzle="128B"
    )
    bits = d.encode()
    assert _field(bits, 0, 13) == 0x3A40 >> 4
    assert _field(bits, 16, 29) == 1
    assert _field(bits, 32, 45) == 1024 >> 4
    assert _field(bits, 49, 51) == 5
    assert _field(bits, 62, 63) == 1  # 128-byte swizzle
    assert _field(bits, 14, 15) == _field(bits, 30, 31) == _field(bits, 46, 48) == 0
    assert wgmma.Descriptor.decode(bits) == d


@pytest.mark.parametrize("mode, code", [("none", 0), ("128B", 1), ("64B", 2), ("32B", 3)])
def test_every_swizzle_mode_has_its_code(mode, code):
    assert _field(wgmma.Descriptor(0, swizzle=mode).encode(), 62, 63) == code


def test_a_misaligned_address_is_refused():
    with pytest.raises(ValueError, match="multiple of 16"):
        wgmma.Descriptor(address=24).encode()


def test_advancing_a_descriptor_moves_only_the_address():
    d = wgmma.k_major(2048, rows=64, row_bytes=128)
    assert d.advance(32) == wgmma.Descriptor(2080, 16, 1024, 0, "128B")


def test_a_k_major_tile_is_atoms_of_eight_rows():
    d = wgmma.k_major(0, rows=64, row_bytes=128)
    assert (d.stride_bytes, d.swizzle) == (8 * 128, "128B")
    with pytest.raises(ValueError, match="rows of 128 bytes"):
        wgmma.k_major(0, rows=64, row_bytes=64)
    with pytest.raises(ValueError, match="whole atoms"):
        wgmma.k_major(0, rows=12, row_bytes=128)
    with pytest.raises(ValueError, match="1024-byte boundary"):
        wgmma.k_major(512, rows=8, row_bytes=128)


# ----------------------------------------------------------------------------- swizzles
@pytest.mark.parametrize("mode, span", [("128B", 128), ("64B", 64), ("32B", 32)])
def test_a_swizzle_xors_each_rows_chunks_by_the_row(mode, span):
    chunks = span // 16
    for row in range(16):
        for chunk in range(8):
            for byte in (0, 5, 15):
                offset = row * 128 + chunk * 16 + byte
                # the ISA's rule over 128-byte lines: the 16-byte chunk index XOR the
                # line's index modulo (span / 16)
                want = row * 128 + ((chunk ^ (row % chunks)) * 16) + byte
                assert wgmma.swizzle(offset, mode) == want


def test_the_128_byte_swizzle_is_a_permutation_of_each_atom():
    atom = np.arange(1024)
    assert sorted(wgmma.swizzle(int(o), "128B") for o in atom) == list(range(1024))


def test_reading_one_chunk_of_eight_swizzled_rows_is_conflict_free():
    for chunk in range(8):  # an ldmatrix phase: 8 lanes, 16 bytes each, rows 0..7
        lanes = [wgmma.stored_offset(r, chunk * 16) for r in range(8)] + [-1] * 24
        assert banks.wavefronts(lanes, 16) == 1
        plain = [r * 128 + chunk * 16 for r in range(8)] + [-1] * 24
        assert banks.wavefronts(plain, 16) == 8  # unswizzled: all in one bank group


def test_stored_offsets_stack_atoms():
    assert wgmma.stored_offset(9, 32) == 1024 + wgmma.swizzle(128 + 32, "128B")


# ----------------------------------------------------------------------------- instructions
def test_instruction_text_per_input_type():
    assert wgmma.instruction(128, "f16", "f32") == (
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {d...}, descA, descB, p, 1, 1, 0, 0;"
    )
    assert ".m64n64k8.f32.tf32.tf32" in wgmma.instruction(64, "tf32", "f32")
    assert wgmma.instruction(256, "e4m3", "f32").endswith("descB, p, 1, 1;")
    assert wgmma.instruction(32, "s8", "s32").endswith(
        ".m64n32k32.s32.s8.s8 {d...}, descA, descB, p;"
    )


def test_invalid_shapes_and_types_are_refused():
    with pytest.raises(ValueError, match="N=12"):
        wgmma.instruction(12, "f16", "f32")
    with pytest.raises(ValueError, match="N=40"):
        wgmma.instruction(40, "s8", "s32")  # integers: multiples of 16 from 32
    with pytest.raises(ValueError, match="accumulates in f32"):
        wgmma.instruction(64, "bf16", "f16")
    assert wgmma.valid_n(24, "s8") and wgmma.valid_n(248, "f16") and not wgmma.valid_n(264, "f16")


# ----------------------------------------------------------------------------- accumulator
@pytest.mark.parametrize("n", [8, 16, 64, 128, 256])
def test_the_wgmma_accumulator_is_the_isas_figure(n):
    acc = layout.wgmma_acc(mma_sync.C_16x8.atom(), n)
    seen = np.zeros((64, n), int)
    for warp in range(4):
        for lane in range(32):
            for i in range(n // 2):
                # PTX ISA, the m64nNk16 D fragment: warp w holds rows 16w.., like mma's
                # m16n8 C fragment for each 8-column block j = i // 4
                row = 16 * warp + lane // 4 + 8 * ((i >> 1) & 1)
                col = 8 * (i >> 2) + 2 * (lane % 4) + (i & 1)
                assert acc.position(i, lane, warp) == (row, col)
                seen[row, col] += 1
    assert (seen == 1).all()  # every element in exactly one thread's register


def test_two_warpgroups_stack_along_the_rows():
    acc = layout.wgmma_acc(mma_sync.C_16x8.atom(), 64, warpgroups=2)
    assert acc.shape == (128, 64) and acc.position(0, 0, 4) == (64, 0)


# ----------------------------------------------------------------------------- TMA
def test_a_tensor_map_is_in_the_drivers_order():
    tmap = tensor_map((1000, 512), (1024, 2), np.float16, (64, 64))
    assert (tmap.dims, tmap.strides, tmap.box) == ((512, 1000), (1024,), (64, 64))
    args = tmap.encode_args(0x7F0000001000)
    assert args[:3] == (6, 2, 0x7F0000001000) and args[8] == 3  # f16, rank 2, 128B swizzle


@pytest.mark.parametrize(
    "shape, strides, dtype, box, mode, message",
    [
        ((100, 100), (400, 4), np.float32, (300, 32), "128B", "outside \\[1, 256\\]"),
        ((100, 100), (400, 4), np.float32, (64, 2), "128B", "not a multiple of 16"),
        ((100, 100), (404, 4), np.float32, (64, 32), "128B", "stride of 404"),
        ((100, 100), (400, 4), np.float32, (64, 64), "128B", "at most 128 bytes"),
        ((100, 100), (800, 8), np.complex64, (64, 8), "none", "no complex64"),
        ((100, 100), (4, 400), np.float32, (64, 32), "none", "innermost dim"),
    ],
)
def test_descriptions_the_driver_refuses_are_refused(shape, strides, dtype, box, mode, message):
    with pytest.raises(TensorMapError, match=message):
        tensor_map(shape, strides, dtype, box, mode)


def test_a_misaligned_global_address_is_refused():
    with pytest.raises(TensorMapError, match="16-byte aligned"):
        tensor_map((64, 64), (256, 4), np.float32, (8, 32)).encode_args(8)


def test_a_box_past_the_edge_is_zero_filled():
    a = np.arange(50 * 40, dtype=np.float32).reshape(50, 40) + 1
    tmap = tensor_map(a.shape, a.strides, a.dtype, (16, 16), "none")
    got = box_load(a, tmap, (40, 32)).view(np.float32).reshape(16, 16)
    want = np.zeros((16, 16), np.float32)
    want[:10, :8] = a[40:, 32:]
    np.testing.assert_array_equal(got, want)
    before = box_load(a, tmap, (-3, -5)).view(np.float32).reshape(16, 16)
    assert (before[:3] == 0).all() and (before[:, :5] == 0).all()
    np.testing.assert_array_equal(before[3:, 5:], a[:13, :11])


def test_a_swizzled_box_lands_where_the_swizzle_says():
    a = np.arange(64 * 64, dtype=np.float16).reshape(64, 64)
    tmap = tensor_map(a.shape, a.strides, a.dtype, (16, 64), "128B")
    placed = box_load(a, tmap, (8, 0))
    plain = np.ascontiguousarray(a[8:24]).reshape(-1).view(np.uint8)
    for offset in range(plain.size):
        assert placed[wgmma.swizzle(offset, "128B")] == plain[offset]


# ----------------------------------------------------------------------------- mbarrier
def test_a_phase_completes_on_its_arrivals_and_bytes():
    b = MBarrier(2)
    assert not b.try_wait(0)  # phase 0 in progress
    b.arrive(expect_tx=128)
    b.arrive()
    assert not b.try_wait(0)  # 128 bytes still expected
    b.complete_tx(128)
    assert b.try_wait(0) and not b.try_wait(1) and b.pending == 2


@pytest.mark.parametrize("stages", [2, 3, 4, 5, 6])
@pytest.mark.parametrize("consumers", [1, 2])
def test_the_staging_ring_runs_to_completion_under_any_schedule(stages, consumers):
    for seed in range(25):
        assert run_ring(stages, consumers, steps=3 * stages + 1, seed=seed) > 0


@pytest.mark.parametrize(
    "broken", [dict(consumer_parity_offset=1), dict(release=False), dict(empty_count=1)]
)
def test_a_broken_ring_is_caught(broken):
    failures = 0
    for seed in range(10):
        try:
            run_ring(3, 2, steps=10, seed=seed, **broken)
        except RingError:
            failures += 1
    assert failures == 10


# ----------------------------------------------------------------------------- together
def test_a_hopper_gemm_block_of_tma_boxes_descriptors_and_wgmma_is_numpys():
    """One 64 x 64 block of C = A @ B^T (f16 in, f32 out) the sm_90a way: each K tile of A
    and B (K-major, 64 f16 = 128 bytes per row) arrives as a 128-byte-swizzled TMA box, four
    wgmma m64n64k16 read it through descriptors advanced 32 bytes per step, and the
    accumulator is read back through its register layout."""
    rng = np.random.default_rng(7)
    m_total, n_total, k_total = 100, 80, 192  # ragged: the last boxes are zero-filled
    a = rng.standard_normal((m_total, k_total)).astype(np.float16)
    b_t = rng.standard_normal((n_total, k_total)).astype(np.float16)  # B stored K-major
    m0, n0 = 64, 64
    ta = tensor_map(a.shape, a.strides, a.dtype, (64, 64), "128B")
    tb = tensor_map(b_t.shape, b_t.strides, b_t.dtype, (64, 64), "128B")
    smem = np.zeros(16384, np.uint8)  # A's stage at 0, B's at 8192 (1 KiB aligned)
    acc = layout.wgmma_acc(mma_sync.C_16x8.atom(), 64)
    regs = np.zeros((4, 32, 32), np.float32)  # warp, lane, the 32 f32 of m64n64
    for k0 in range(0, k_total, 64):
        smem[:8192] = box_load(a, ta, (m0, k0))
        smem[8192:] = box_load(b_t, tb, (n0, k0))
        desc_a, desc_b = wgmma.k_major(0, 64, 128), wgmma.k_major(8192, 64, 128)
        for step in range(4):  # 16 f16 of K = 32 bytes per instruction
            d = wgmma.execute(
                smem, desc_a.advance(32 * step), desc_b.advance(32 * step), 64, np.float16
            )
            for w in range(4):
                for lane in range(32):
                    for i in range(32):
                        regs[w, lane, i] += d[acc.position(i, lane, w)]
    c = np.zeros((64, 64), np.float32)
    for w in range(4):
        for lane in range(32):
            for i in range(32):
                c[acc.position(i, lane, w)] = regs[w, lane, i]
    want = np.zeros((64, 64), np.float32)
    block = a[m0:, :].astype(np.float32) @ b_t[n0:, :].astype(np.float32).T
    want[: block.shape[0], : block.shape[1]] = block
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-3)
