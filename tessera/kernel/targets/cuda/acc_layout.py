"""Accumulator registers: where each thread's ``mma.sync`` C fragments sit in a tile.

A register tile of ``rows x cols`` is cut into warp tiles of ``warp_m x warp_n`` (warp
``(_mwm, _mwn)`` of the generated code holds the one at ``(_mwm * warp_m, _mwn *
warp_n)``), each into the instruction's ``m x n`` pieces, ``_mj`` running over them row
by row; a thread holds the C fragment elements of every piece (isa/mma_sync.py:
``groupID`` ``_mg``, ``threadID_in_group`` ``_mq``), register ``per * _mj + i``. A *row*
register tile (a row vector: a reduction along the columns, a running maximum) holds one
value per distinct row of those: ``row_regs`` of them a thread, the same in the four
threads of a group. The epilogues, the main loops' accumulator loads and stores and the
row loops' element-wise code all iterate with :func:`register_loops` and :func:`row_loops`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ... import layout as L
from . import mma


@dataclass(frozen=True)
class AccLayout:
    inst: mma.Instruction
    warp_m: int
    warp_n: int
    # pieces whose columns interleave: of ``interleave`` n-adjacent pieces, piece ``p``'s
    # column ``c`` is column ``interleave * c + p`` of their span (8-bit main loops: a
    # 4-byte word of a B row holds one column of each of four pieces)
    interleave: int = 1

    @property
    def tiles_n(self) -> int:
        return self.warp_n // self.inst.n

    @property
    def jobs(self) -> int:
        """Instruction pieces of one warp tile."""
        return (self.warp_m // self.inst.m) * self.tiles_n

    @property
    def per(self) -> int:
        """C elements a thread holds per piece."""
        return self.inst.c.elements

    @property
    def registers(self) -> int:
        return self.jobs * self.per

    @property
    def row_offsets(self) -> list[int]:
        """The distinct row offsets of a thread's C elements within a piece."""
        return sorted({row for row, _ in self.inst.c.offsets})

    @property
    def row_regs(self) -> int:
        """Row registers a thread holds (one per distinct row of its elements)."""
        return (self.warp_m // self.inst.m) * len(self.row_offsets)

    def row_code(self, row_reg: str) -> str:
        """The code of the tile row of row register ``row_reg`` (a constant or a name)."""
        k = len(self.row_offsets)
        if k == 1:
            return f"_mwm * {self.warp_m} + ({row_reg}) * {self.inst.m} + _mg"
        step = self.row_offsets[1] - self.row_offsets[0]
        return (
            f"_mwm * {self.warp_m} + (({row_reg}) // {k}) * {self.inst.m} + _mg"
            f" + (({row_reg}) % {k}) * {step}"
        )


def linear(layout: AccLayout, shape: tuple[int, int]) -> L.LinearLayout:
    """The registers of an accumulator tile of ``shape`` as a linear layout: the
    instruction's C fragment tiled by :func:`kernel.layout.mma_acc` over the warp tiles
    (warps ``shape / (warp_m, warp_n)``, column warps fastest, as the generated code's
    ``_mwm``/``_mwn``), register ``per * _mj + i`` as :func:`register_loops` numbers
    them; interleaved pieces permute the columns of each span of ``interleave`` pieces
    (piece ``p``'s column ``c`` is column ``interleave * c + p``)."""
    warps = (shape[0] // layout.warp_m, shape[1] // layout.warp_n)
    acc = L.mma_acc(layout.inst.c.atom(), shape, warps)
    il = layout.interleave
    if il == 1:
        return acc
    n, span = layout.inst.n, layout.inst.n * il

    def column(x: int) -> int:
        piece, c = (x % span) // n, x % n
        return x - x % span + il * c + piece

    dims = tuple((name, tuple((b[0], column(b[1])) for b in bases)) for name, bases in acc.dims)
    return L.LinearLayout(acc.shape, dims)


def row_linear(layout: AccLayout, shape: tuple[int, int]) -> L.LinearLayout:
    """A row register tile of an accumulator of ``shape`` (one value per row of a
    thread's elements, :func:`row_loops`' order): :func:`kernel.layout.slice` of
    :func:`linear` along the columns."""
    return L.slice(linear(layout, shape), 1)


def _element_code(layout: AccLayout) -> tuple[str, str, str]:
    """(row offset, column offset, row register offset) of C element ``_mi4`` of a
    piece, as code over ``_mi4``; checked against the ISA table for every element."""
    inst, per = layout.inst, layout.per
    if per == 4:  # m16n8 f32: rows g, g + 8; columns 2t, 2t + 1
        codes = ("8 * (_mi4 // 2)", "_mi4 % 2", "_mi4 // 2")
    elif per == 2:  # m8n8 f64: row g; columns 2t, 2t + 1
        codes = ("0", "_mi4", "0")
    else:
        raise ValueError(f"no element loop for {per} C elements a thread")
    for i in range(per):
        row, col = (eval(c, {"_mi4": i}) for c in codes[:2])  # noqa: S307 (our own text)
        if inst.c.offsets[i] != (row, col):
            raise AssertionError(f"element {i}: {inst.c.offsets[i]} != {(row, col)}")
    return codes


UNROLLED_PIECES = 16  # accumulator pieces a thread's loop over them holds (see below)


def register_loops(out, layout: AccLayout, body) -> None:
    """Run ``body(row, col, register, row_register)`` (codes) for each accumulator
    element this thread holds (no barrier: each thread keeps to its own elements). The
    elements of a piece are a loop of constant extent, as the pieces are (NVVM unrolls
    both: the registers stay registers), so each statement's code is emitted once."""
    inst, nt = layout.inst, layout.tiles_n
    row_off, col_off, row_reg_off = _element_code(layout)
    k = len(layout.row_offsets)
    # at most UNROLLED_PIECES pieces a loop: NVVM unrolls a loop of 32 pieces no more (a
    # 64 x 64 warp tile), and its registers then went to local memory for the loop
    for first in range(0, layout.jobs, UNROLLED_PIECES):
        count = min(UNROLLED_PIECES, layout.jobs - first)
        out.emit(f"for _mjj in range({count}):  # the warp's m{inst.m}n{inst.n} pieces")
        out.indent += 1
        out.emit(f"_mj = _mjj + {first}" if first else "_mj = _mjj")
        out.emit(f"_mr0 = _mwm * {layout.warp_m} + (_mj // {nt}) * {inst.m}")
        il = layout.interleave
        if il == 1:
            out.emit(f"_mc0 = _mwn * {layout.warp_n} + (_mj % {nt}) * {inst.n}")
            col = f"_mc0 + 2 * _mq + {col_off}"
        else:  # interleaved pieces: the span's first column plus the piece's place in it
            span = f"((_mj % {nt}) // {il}) * {inst.n * il} + (_mj % {nt}) % {il}"
            out.emit(f"_mc0 = _mwn * {layout.warp_n} + {span}")
            col = f"_mc0 + {il} * (2 * _mq + {col_off})"
        out.emit(f"for _mi4 in range({layout.per}):  # the piece's elements this thread holds")
        out.indent += 1
        body(
            f"_mr0 + _mg + {row_off}",
            col,
            f"{layout.per} * _mj + _mi4",
            f"{k} * (_mj // {nt}) + {row_reg_off}",
        )
        out.indent -= 2


def row_loops(out, layout: AccLayout, body) -> None:
    """Run ``body(row, row_register)`` (codes) for each row register this thread holds."""
    out.emit(f"for _mj in range({layout.row_regs}):  # the thread's rows")
    out.indent += 1
    body(layout.row_code("_mj"), "_mj")
    out.indent -= 1
