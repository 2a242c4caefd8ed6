"""``mma.sync`` fragments as data: which lane holds which element (PTX ISA, sm_80+).

One ``mma.sync.aligned`` computes ``D = A @ B + C`` for one warp; each lane holds a few
elements of each matrix (its *fragment*) in registers. For lane ``l``, with
``groupID = l >> 2`` and ``threadID_in_group = l % 4``, element ``i`` of its fragment is
at (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type", "... for
mma.m16n8k8" (.tf32) and "... for mma.m8n8k4 with .f64 floating point type"):

* m16n8k16, A 16x16 f16/bf16 (four .b32 registers of two elements, low half first):
  row ``groupID + 8 * ((i >> 1) & 1)``, col ``2 * threadID_in_group + (i & 1) + 8 * (i >> 2)``;
  B 16x8 (two .b32): row ``2 * threadID_in_group + (i & 1) + 8 * (i >> 1)``, col ``groupID``;
  C and D 16x8 (four f32): row ``groupID + 8 * (i >> 1)``, col ``2 * threadID_in_group + (i & 1)``
* m16n8k8 .tf32 (one element per register): A 16x8 row ``groupID + 8 * (i & 1)``, col
  ``threadID_in_group + 4 * (i >> 1)``; B 8x8 row ``threadID_in_group + 4 * i``, col
  ``groupID``; C and D as m16n8k16's
* m8n8k4 .f64 (one f64 per register): A 8x4 row ``groupID``, col ``threadID_in_group``;
  B 4x8 row ``threadID_in_group``, col ``groupID``; C and D 8x8 row ``groupID``, col
  ``2 * threadID_in_group + i``
* m16n8k32 with 8-bit A and B (.s8/.u8 with .s32 C and D, sm_80+; .e4m3/.e5m2 with f32 C
  and D, sm_89+; "Matrix Fragments for mma.m16n8k32"), four elements per .b32 register,
  the lowest-numbered in the low byte: A 16x32 (four .b32) row ``groupID + 8 * ((i >> 2)
  & 1)``, col ``4 * threadID_in_group + (i & 3) + 16 * (i >> 3)``; B 32x8 (two .b32) row
  ``4 * threadID_in_group + (i & 3) + 16 * (i >> 2)``, col ``groupID``; C and D as
  m16n8k16's (four .s32 or f32)

This module is the one statement of these tables: cuda/mma.py generates code from them,
:meth:`Fragment.atom` turns one into a linear layout (kernel/layout.py) that
``mma_acc`` / ``mma_operand`` tile over a warp tile, and tests/test_isa_models.py checks
them against a NumPy model of the instructions written from the ISA's own wording.
"""

from __future__ import annotations

from dataclasses import dataclass

from ....layout import LinearLayout, distributed

WARP = 32


@dataclass(frozen=True)
class Fragment:
    """One operand of an ``mma.sync`` spread over a warp. Lane ``l``'s element ``i`` is at
    (row, col) = ``base(l) + offsets[i]``, where the base is linear in ``groupID = l >> 2``
    and ``threadID_in_group = l % 4``: ``row = row_of[0] * groupID + row_of[1] *
    threadID_in_group`` (``col`` alike)."""

    shape: tuple[int, int]
    row_of: tuple[int, int]
    col_of: tuple[int, int]
    offsets: tuple[tuple[int, int], ...]  # per element of a lane's fragment

    @property
    def elements(self) -> int:
        """Elements each lane holds."""
        return len(self.offsets)

    def position(self, lane: int, i: int) -> tuple[int, int]:
        """(row, col) of element ``i`` of lane ``lane``'s fragment."""
        group, thread = lane >> 2, lane % 4
        row, col = self.offsets[i]
        return (
            self.row_of[0] * group + self.row_of[1] * thread + row,
            self.col_of[0] * group + self.col_of[1] * thread + col,
        )

    def code(self, i: int, group: str, thread: str) -> tuple[str, str]:
        """(row, col) of element ``i`` as source code over the names of the lane's
        ``groupID`` and ``threadID_in_group``."""

        def linear(coefficients: tuple[int, int], offset: int) -> str:
            terms = [
                name if c == 1 else f"{c} * {name}"
                for c, name in zip(coefficients, (group, thread))
                if c
            ]
            if offset or not terms:
                terms.append(str(offset))
            return " + ".join(terms)

        row, col = self.offsets[i]
        return linear(self.row_of, row), linear(self.col_of, col)

    def atom(self) -> LinearLayout:
        """The fragment as a linear layout over (``reg`` = element index, ``lane``): one
        basis per bit, read off the table at powers of two and checked to reproduce
        every position (the tables are linear over GF(2))."""
        regs = (self.elements - 1).bit_length()
        reg = [self.position(0, 1 << b) for b in range(regs)]
        lane = [self.position(1 << b, 0) for b in range(5)]
        layout = distributed(self.shape, reg, lane)
        for ln in range(WARP):
            for i in range(self.elements):
                if layout.position(i, ln, 0) != self.position(ln, i):
                    raise AssertionError(f"fragment not linear at lane {ln}, element {i}")
        return layout


@dataclass(frozen=True)
class Mma:
    """One ``mma.sync`` shape and type: ``D = A @ B + C`` of (m, k) by (k, n)."""

    ptx: str
    a: Fragment
    b: Fragment
    c: Fragment  # C and D share one layout
    per_register: int  # elements of A and B in one .b32 register (f64: one per .f64)

    @property
    def m(self) -> int:
        return self.a.shape[0]

    @property
    def n(self) -> int:
        return self.b.shape[1]

    @property
    def k(self) -> int:
        return self.a.shape[1]

    @property
    def a_type(self) -> str:
        """The PTX type of A's elements (``f16``, ``s8``, ``u8``, ``e4m3``, ...)."""
        return self.ptx.split(".")[-3]

    @property
    def b_type(self) -> str:
        """The PTX type of B's elements (A's but for the mixed 8-bit forms)."""
        return self.ptx.split(".")[-2]

    @property
    def d_type(self) -> str:
        """The PTX type of C's and D's elements (``f32``, ``s32``, ``f64``)."""
        return self.ptx.split(".")[-4]

    def operand(self, name: str) -> Fragment:
        """Fragment ``"A"``, ``"B"`` or ``"C"`` (also D's)."""
        return {"A": self.a, "B": self.b, "C": self.c, "D": self.c}[name.upper()]


# m16n8k16 with .f16 / .bf16 A and B, f32 C and D
A_16x16 = Fragment(
    (16, 16),
    (1, 0),
    (0, 2),
    tuple((8 * ((i >> 1) & 1), (i & 1) + 8 * (i >> 2)) for i in range(8)),
)
B_16x8 = Fragment((16, 8), (0, 2), (1, 0), tuple(((i & 1) + 8 * (i >> 1), 0) for i in range(4)))
C_16x8 = Fragment((16, 8), (1, 0), (0, 2), tuple((8 * (i >> 1), i & 1) for i in range(4)))
# m16n8k8 with .tf32 A and B (one element per register)
A_16x8_TF32 = Fragment(
    (16, 8), (1, 0), (0, 1), tuple((8 * (i & 1), 4 * (i >> 1)) for i in range(4))
)
B_8x8_TF32 = Fragment((8, 8), (0, 1), (1, 0), tuple((4 * i, 0) for i in range(2)))
# m8n8k4 with .f64 A, B, C and D
A_8x4_F64 = Fragment((8, 4), (1, 0), (0, 1), ((0, 0),))
B_4x8_F64 = Fragment((4, 8), (0, 1), (1, 0), ((0, 0),))
C_8x8_F64 = Fragment((8, 8), (1, 0), (0, 2), ((0, 0), (0, 1)))
# m16n8k32 with 8-bit A and B (.s8, .u8, .e4m3, .e5m2); C and D are C_16x8
A_16x32_B8 = Fragment(
    (16, 32),
    (1, 0),
    (0, 4),
    tuple((8 * ((i >> 2) & 1), (i & 3) + 16 * (i >> 3)) for i in range(16)),
)
B_32x8_B8 = Fragment((32, 8), (0, 4), (1, 0), tuple(((i & 3) + 16 * (i >> 2), 0) for i in range(8)))

M16N8K16_F16 = Mma("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", A_16x16, B_16x8, C_16x8, 2)
M16N8K16_BF16 = Mma(
    "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", A_16x16, B_16x8, C_16x8, 2
)
M16N8K8_TF32 = Mma(
    "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", A_16x8_TF32, B_8x8_TF32, C_16x8, 1
)
M8N8K4_F64 = Mma(
    "mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64", A_8x4_F64, B_4x8_F64, C_8x8_F64, 1
)

M16N8K32_S8 = Mma(
    "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32", A_16x32_B8, B_32x8_B8, C_16x8, 4
)
# the unsigned and mixed-sign integer forms (sm_80+): the same fragments
M16N8K32_U8 = Mma(
    "mma.sync.aligned.m16n8k32.row.col.s32.u8.u8.s32", A_16x32_B8, B_32x8_B8, C_16x8, 4
)
M16N8K32_U8S8 = Mma(
    "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32", A_16x32_B8, B_32x8_B8, C_16x8, 4
)
M16N8K32_S8U8 = Mma(
    "mma.sync.aligned.m16n8k32.row.col.s32.s8.u8.s32", A_16x32_B8, B_32x8_B8, C_16x8, 4
)
# sm_89+ (PTX ISA 8.4): f8 operands, f32 accumulation
M16N8K32_E4M3 = Mma(
    "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32", A_16x32_B8, B_32x8_B8, C_16x8, 4
)
M16N8K32_E5M2 = Mma(
    "mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32", A_16x32_B8, B_32x8_B8, C_16x8, 4
)
M16N8K32_E4M3_E5M2 = Mma(
    "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e5m2.f32", A_16x32_B8, B_32x8_B8, C_16x8, 4
)
M16N8K32_E5M2_E4M3 = Mma(
    "mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e4m3.f32", A_16x32_B8, B_32x8_B8, C_16x8, 4
)
EIGHT_BIT = (
    M16N8K32_S8,
    M16N8K32_U8,
    M16N8K32_U8S8,
    M16N8K32_S8U8,
    M16N8K32_E4M3,
    M16N8K32_E5M2,
    M16N8K32_E4M3_E5M2,
    M16N8K32_E5M2_E4M3,
)

ALL = (M16N8K16_F16, M16N8K16_BF16, M16N8K8_TF32, M8N8K4_F64, *EIGHT_BIT)
