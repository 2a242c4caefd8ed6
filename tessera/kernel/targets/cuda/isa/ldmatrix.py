"""``ldmatrix`` as data: which lane supplies which row address, which register gets
which elements (PTX ISA, "Warp-level matrix load instruction: ldmatrix", sm_75+).

``ldmatrix.sync.aligned.m8n8.x{1,2,4}{.trans}.shared.b16`` loads one, two or four 8x8
matrices of 16-bit elements from shared memory into every lane of a warp. Each matrix
row is 16 contiguous bytes at an address one lane supplies: lanes ``8q .. 8q+7`` give
rows 0..7 of matrix ``q`` (``.x1`` reads lanes 0-7's addresses, ``.x2`` 0-15's, ``.x4``
all 32). Matrix ``q`` lands in destination register ``q`` of every lane: without
``.trans`` lane ``l`` gets row ``l / 4``, elements ``2 (l % 4)`` and ``2 (l % 4) + 1``;
with ``.trans`` it gets element ``l / 4`` of rows ``2 (l % 4)`` and ``2 (l % 4) + 1``
(the matrix read column by column). The lower-numbered element is the low 16 bits.

:func:`row_addresses` plans one load: given the tile coordinates a layout wants in each
lane's registers, which tile row start each lane must address (tests/test_layouts.py
reads a swizzled shared tile with it and gets the ``mma_operand`` fragments).
"""

from __future__ import annotations

from dataclasses import dataclass

WARP = 32
ROWS = 8  # rows (and 16-bit columns) of one matrix


@dataclass(frozen=True)
class Ldmatrix:
    """``ldmatrix`` loading ``num`` (1, 2 or 4) 8x8 b16 matrices, ``trans`` or not."""

    num: int
    trans: bool = False

    def __post_init__(self):
        if self.num not in (1, 2, 4):
            raise ValueError(f"ldmatrix loads 1, 2 or 4 matrices, not {self.num}")

    @property
    def ptx(self) -> str:
        trans = ".trans" if self.trans else ""
        return f"ldmatrix.sync.aligned.m8n8.x{self.num}{trans}.shared.b16"

    def address(self, lane: int) -> tuple[int, int] | None:
        """(matrix, row) whose 16-byte row start ``lane`` supplies, None if its address
        is not read."""
        if lane >= ROWS * self.num:
            return None
        return lane // ROWS, lane % ROWS

    def address_lane(self, matrix: int, row: int) -> int:
        """The lane supplying row ``row`` of matrix ``matrix``."""
        return ROWS * matrix + row

    def element(self, lane: int, register: int, half: int) -> tuple[int, int, int]:
        """(matrix, row, col) that half ``half`` (0 low, 1 high) of destination register
        ``register`` of ``lane`` receives."""
        if not 0 <= register < self.num:
            raise ValueError(f"register {register} of an .x{self.num} load")
        major, minor = lane // 4, 2 * (lane % 4) + half
        return (register, minor, major) if self.trans else (register, major, minor)


def row_addresses(load: Ldmatrix, want) -> list[tuple[int, int]]:
    """The tile coordinates (row, first col) each address lane must point at so that
    ``load`` delivers ``want(lane, register, half) -> (row, col)`` (the tile coordinates
    a lane's destination registers should hold), checking that every lane's every half
    then gets what it wants. Lanes whose address is not read get (-1, -1)."""
    starts = {}
    for q in range(load.num):
        for r in range(ROWS):
            # the lane and half receiving element (r, 0) of matrix q (column 0 of row r)
            lane, half = (r // 2, r % 2) if load.trans else (4 * r, 0)
            starts[q, r] = tuple(want(lane, q, half))  # a row of the stored tile
    for lane in range(WARP):
        for q in range(load.num):
            for half in range(2):
                m, r, c = load.element(lane, q, half)
                row, col = starts[m, r]
                if want(lane, q, half) != (row, col + c):
                    raise ValueError(
                        f"{load.ptx} cannot deliver the wanted element at lane {lane}, "
                        f"register {q}, half {half}: rows are not 8 contiguous elements"
                    )
    out = []
    for lane in range(WARP):
        where = load.address(lane)
        out.append(starts[where] if where is not None else (-1, -1))
    return out
