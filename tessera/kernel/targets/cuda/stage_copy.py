"""Blocks of a global array into a shared stage: the copy code register loops share.

A stage holds a block of ``rows x cols`` elements of ``element`` bytes, rows of
``row_bytes``, 16-byte chunks XOR-swizzled (:func:`swizzle`). The threads fill it with
16-byte ``cp.async`` copies (``_cp16``, zero fill where the block overhangs the array)
when the array allows whole 16-byte chunks — a 16-byte aligned base, rows a multiple of
16 bytes apart, contiguous elements, a last dimension and a first column that are whole
chunks — and element by element with predicated loads otherwise (``_ld8``/``_st8``,
``_ld16``/``_st16``, ``_ld64``/``_st64``). Every branch is uniform over the block; every
per-thread value is index arithmetic (emulator.py runs this code with NumPy vectors for
the threads).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...layout import Swizzle, swizzle_down_columns, swizzle_for


def swizzle(element: int, row_bytes: int, row: str, chunk: str, down_columns: bool = False) -> str:
    """The code of the stored chunk of logical ``chunk`` in ``row``. 8- and 16-bit rows:
    ``layout.swizzle_for`` (conflict-free for ldmatrix and the copies), or where the rows
    are read a byte at a time down a column (``down_columns``: 8-bit B fragments)
    ``layout.swizzle_down_columns``; 8-byte rows (at least 128 bytes): ``chunk ^ 2 (row %
    4)``, which puts the four rows and two chunks a half-warp's DMMA fragment loads read
    in eight different 16-byte bank groups."""
    if element == 8:
        return f"(({chunk}) ^ ((({row}) % 4) * 2))"
    sw = _xor(row_bytes, down_columns)
    term = f"((({row}) // {sw.per_phase}) % {sw.max_phase})"
    return f"(({chunk}) ^ ({term} * {sw.scale}))" if sw.scale != 1 else f"(({chunk}) ^ {term})"


def _xor(row_bytes: int, down_columns: bool) -> Swizzle:
    return swizzle_down_columns(row_bytes) if down_columns else swizzle_for(row_bytes)


def stage_swizzle(element: int, row_bytes: int, down_columns: bool = False) -> Swizzle:
    """The swizzle :func:`swizzle` codes, as data (8-byte rows: ``chunk ^ 2 (row % 4)``)."""
    return Swizzle(1, 4, 2) if element == 8 else _xor(row_bytes, down_columns)


@dataclass(frozen=True)
class Block:
    """One staged block: ``name`` tags the generated code's variables of its array
    (``_mb<name>`` base address, ``_ms<name>0``/``1`` strides)."""

    name: str
    array: str  # the global array in the generated code
    rows: int
    cols: int
    element: int  # bytes
    down_columns: bool = False  # read a byte at a time down columns (swizzle_down_columns)
    # rows as they are: for a block whose readers never meet a bank conflict unswizzled
    # (the f32 loop's K x N B: a warp reads 32 bytes of one row), so that its shared
    # offsets are a running base plus constants, not an XOR an access
    swizzled: bool = True

    @property
    def swizzle(self) -> Swizzle | None:
        """The stage's swizzle as data (None: rows as they are)."""
        if not self.swizzled:
            return None
        return stage_swizzle(self.element, self.row_bytes, self.down_columns)

    def chunk(self, row: str, chunk: str) -> str:
        """The code of the stored chunk of logical ``chunk`` in ``row``."""
        if not self.swizzled:
            return f"({chunk})"
        return swizzle(self.element, self.row_bytes, row, chunk, self.down_columns)

    @property
    def row_bytes(self) -> int:
        return self.cols * self.element

    @property
    def bytes(self) -> int:
        return self.rows * self.row_bytes

    @property
    def chunk_elements(self) -> int:
        return 16 // self.element


def array_info(out, block: Block) -> None:
    """Emit the array's base address and byte strides (once, before the loop)."""
    out.emit(f"_mb{block.name} = _gaddr({block.array})")
    out.emit(f"_ms{block.name}0 = np.int64({block.array}.strides[0])")
    out.emit(f"_ms{block.name}1 = np.int64({block.array}.strides[1])")


def chunks_possible(block: Block) -> str:
    """The code of: this array allows 16-byte chunks (the first column aside)."""
    n, ce = block.name, block.chunk_elements
    return (
        f"_mb{n} % 16 == 0 and _ms{n}1 == {block.element} and _ms{n}0 % 16 == 0"
        f" and {block.array}.shape[1] % {ce} == 0"
    )


def launch_chunkable(block: Block, address: int, shape: tuple, strides: tuple) -> bool:
    """At the launch, of the array ``block`` is copied from: what the kernel's
    ``chunks_possible`` and ``narrow`` conditions compute (a launch that chooses the kernel
    by it must agree with them: tests/test_cuda_chunk_variants.py checks both)."""
    if len(shape) != 2 or len(strides) != 2:
        return False
    limit = 2**31 - 2 * max(block.rows, block.cols)
    return (
        address % 16 == 0
        and strides[1] == block.element
        and strides[0] % 16 == 0
        and shape[1] % block.chunk_elements == 0
        and shape[0] < limit
        and shape[1] < limit
    )


def chunks_fixed(block: Block, threads: int) -> bool:
    """Whether each thread keeps its chunk column and swizzle from pass to pass (then
    :func:`chunk_setup` emits and the branch-free loop exists)."""
    return _chunk_rows(block, threads) is not None


def _chunk_rows(block: Block, threads: int) -> int | None:
    """Rows of the block one pass of the threads' 16-byte copies covers, when every
    thread keeps its chunk column and its swizzle term from pass to pass (then a pass
    adds constants to offsets computed once per thread); None otherwise."""
    chunks = block.cols // block.chunk_elements
    if threads % chunks or (block.rows * chunks) % threads:
        return None
    rows = threads // chunks
    period = block.swizzle.period if block.swizzle is not None else 1
    return rows if rows % period == 0 else None


def chunk_setup(out, block: Block, threads: int, fixed: str, moving: str) -> bool:
    """Emit, once before a loop, each thread's share of ``block``'s 16-byte copies: its
    row and chunk, the shared offset of its first chunk, the byte offset of its first
    chunk in the array (from the fixed offset ``fixed``, code of a clamped i64, along
    the dimension that does not move; ``moving`` is ``"rows"`` when the loop walks the
    block down the array (a B block, keys) or ``"cols"`` when it walks along the rows
    (an A block)) and what of its bounds check does not depend on the loop. Returns
    False (emitting nothing) where the passes do not keep their columns and swizzle;
    :func:`copy` then computes every chunk's offsets in the loop."""
    rows = _chunk_rows(block, threads)
    if rows is None:
        return False
    e = out.emit
    n, arr, elem, ce = block.name, block.array, block.element, block.chunk_elements
    chunks = block.cols // ce
    e(f"_mx{n}r = _lane // {chunks}  # this thread's row and chunk of the block's copies")
    e(f"_mx{n}c = _lane % {chunks}")
    swz = block.chunk(f"_mx{n}r", f"_mx{n}c")
    e(f"_mx{n}o = _mx{n}r * {block.row_bytes} + {swz} * 16  # its first chunk in a stage")
    e(f"_mx{n}p = {rows} * _ms{n}0  # the array's bytes between two passes")
    if moving == "cols":  # rows fixed: which passes are inside is known now
        # pass j's row is inside when l <= j*rows < h (the same for every tile)
        e(f"_mx{n}l = -({fixed} + _mx{n}r)")
        e(f"_mx{n}h = {arr}.shape[0] - ({fixed} + _mx{n}r)")
        e(f"_mx{n}l32, _mx{n}h32 = np.int32(_mx{n}l), np.int32(_mx{n}h)  # (where narrow)")
        e(f"_mx{n}e = np.int32({ce} * _mx{n}c)")
        e(f"_mx{n}g = ({fixed} + _mx{n}r) * _ms{n}0 + {ce * elem} * _mx{n}c")
    else:  # columns fixed
        e(f"_mx{n}e = {fixed} + {ce} * _mx{n}c")
        e(f"_mx{n}k = (_mx{n}e >= 0) & (_mx{n}e < {arr}.shape[1])")
        e(f"_mx{n}g = _mx{n}r * _ms{n}0 + _mx{n}e * {elem}")
        e(f"_mx{n}r = np.int32(_mx{n}r)")
    return True


def chunk_copy(
    out,
    block: Block,
    threads: int,
    base: str,
    offset: str,
    moving: str,
    live: str = "",
    whole: bool = False,
) -> None:
    """The loop's side of :func:`chunk_setup`: the block at ``offset`` (code of a clamped
    i64) along the moving dimension, one ``cp.async`` per pass with offsets that differ
    from the thread's first chunk by constants; ``live``: code of a further condition of
    every chunk (a copy where it is false fills zeros). ``whole``: every live block lies
    inside the array along the moving dimension (the launch checked the loop's bounds:
    ``mainloop.whole_tiles``), so only the fixed dimension's bounds, worked out before the
    loop, mask a chunk."""
    e = out.emit
    n, arr, elem = block.name, block.array, block.element
    rows = _chunk_rows(block, threads)
    passes = block.rows // rows
    if whole:
        e(f"_my{n} = {offset} * {elem if moving == 'cols' else f'_ms{n}0'}")
        if moving == "cols":
            row = f"np.int32(_mj * {rows})"
            inside = f"({row} >= _mx{n}l32) & ({row} < _mx{n}h32)"
        else:
            inside = f"_mx{n}k"
        e(f"for _mj in range({passes}):")
        e(f"    _mok = {inside}{f' & {live}' if live else ''}")
        e(
            f"    _cp16({base} + _mx{n}o + _mj * {rows * block.row_bytes}, "
            f"_mb{n} + _mx{n}g + _my{n} + _mj * _mx{n}p, _mok * 16)"
        )
        return
    # the tile's bounds relative to the block, clamped to it (32-bit checks, the same
    # answers): a chunk outside the array copies nothing and fills zeros (its address,
    # which the copy does not read, is not masked)
    clamp = _narrow if live else _clamp  # (the branch-free loop runs on narrow extents)
    if moving == "cols":
        e(f"_my{n} = {offset} * {elem}")
        e(f"_myl{n} = {clamp(f'-{offset}', block.cols)}")
        e(f"_myh{n} = {clamp(f'{arr}.shape[1] - {offset}', block.cols)}")
        lo, hi, row = (
            (f"_mx{n}l32", f"_mx{n}h32", f"np.int32(_mj * {rows})")
            if live
            else (
                f"_mx{n}l",
                f"_mx{n}h",
                f"_mj * {rows}",
            )
        )
        inside = f"({row} >= {lo}) & ({row} < {hi}) & (_mx{n}e >= _myl{n}) & (_mx{n}e < _myh{n})"
    else:
        e(f"_my{n} = {offset} * _ms{n}0")
        e(f"_myl{n} = {clamp(f'-{offset}', block.rows)}")
        e(f"_myh{n} = {clamp(f'{arr}.shape[0] - {offset}', block.rows)}")
        row = f"(_mx{n}r + np.int32(_mj * {rows}))"
        inside = f"_mx{n}k & ({row} >= _myl{n}) & ({row} < _myh{n})"
    e(f"for _mj in range({passes}):")
    e(f"    _mok = {inside}{f' & {live}' if live else ''}")
    e(
        f"    _cp16({base} + _mx{n}o + _mj * {rows * block.row_bytes}, "
        f"_mb{n} + _mx{n}g + _my{n} + _mj * _mx{n}p, _mok * 16)"
    )


def narrow(block: Block) -> str:
    """The code of: both extents of the array are below 2**31 - 2 * the block's (then a
    clamped offset's bounds relative to the block fit an i32 as they are)."""
    limit = 2**31 - 2 * max(block.rows, block.cols)
    return f"{block.array}.shape[0] < {limit} and {block.array}.shape[1] < {limit}"


def _narrow(code: str, extent: int) -> str:
    """``code`` (an i64 that fits an i32: :func:`narrow` holds) as an i32."""
    return f"np.int32({code})"


def _clamp(code: str, extent: int) -> str:
    """``code`` (a block-uniform i64) clamped to ``-1 .. extent + 1`` as an i32: compared
    with an index in ``0 .. extent - 1`` it gives the same answers as the unclamped value."""
    return f"np.int32(min(max({code}, -1), {extent + 1}))"


def copy(
    out,
    block: Block,
    threads: int,
    base: str,
    row0: str,
    col0: str,
    fast: str,
    moving: str | None = None,
) -> None:
    """Fill ``block`` at stage byte address ``base`` from the array's block at (``row0``,
    ``col0``) (codes of clamped i64 offsets): 16-byte ``cp.async`` chunks when ``fast``
    holds, else element by element; a position outside the array reads nothing and
    stores 0. ``moving``: the dimension (``"rows"``/``"cols"``) whose offset the loop
    changes, when :func:`chunk_setup` emitted the thread's offsets before it."""
    e = out.emit
    arr, n, elem, ce = block.array, block.name, block.element, block.chunk_elements
    chunks = block.cols // ce
    bits = str(8 * elem)  # the element copies' _ld8/_st8, _ld16/_st16 or _ld64/_st64
    inside = f"(_mgr >= 0) & (_mgr < {arr}.shape[0]) & (_mgc >= 0) & (_mgc < {arr}.shape[1])"
    e(f"if {fast}:")
    out.indent += 1
    if moving is not None:
        chunk_copy(out, block, threads, base, row0 if moving == "rows" else col0, moving)
        out.indent -= 1
        _element_copy(out, block, threads, base, row0, col0, inside, bits)
        return
    e(f"for _mj in range({block.rows * chunks // threads}):")
    out.indent += 1
    e(f"_mc = _lane + {threads} * _mj")
    e(f"_mr = _mc // {chunks}")
    e(f"_mc8 = _mc % {chunks}")
    e(f"_mgr = {row0} + _mr")
    e(f"_mgc = {col0} + {ce} * _mc8")
    e(f"_mok = {inside}")
    e(
        f"_cp16({base} + _mr * {block.row_bytes} + "
        f"{block.chunk('_mr', '_mc8')} * 16, "
        f"_mb{n} + _mok * (_mgr * _ms{n}0 + _mgc * {elem}), _mok * 16)"
    )
    out.indent -= 2
    _element_copy(out, block, threads, base, row0, col0, inside, bits)


def _element_copy(out, block: Block, threads, base, row0, col0, inside, bits) -> None:
    """The ``else`` branch of :func:`copy`: element by element, predicated."""
    e = out.emit
    n, elem, ce = block.name, block.element, block.chunk_elements
    e("else:")
    out.indent += 1
    e(f"for _mj in range({block.rows * block.cols // threads}):")
    out.indent += 1
    e(f"_mc = _lane + {threads} * _mj")
    e(f"_mr = _mc // {block.cols}")
    e(f"_mcc = _mc % {block.cols}")
    e(f"_mgr = {row0} + _mr")
    e(f"_mgc = {col0} + _mcc")
    e(f"_mok = {inside}")
    chunk = block.chunk("_mr", f"_mcc // {ce}")
    e(
        f"_st{bits}({base} + _mr * {block.row_bytes} + {chunk} * 16 + (_mcc % {ce}) * {elem}, "
        f"_ld{bits}(_mb{n} + _mok * (_mgr * _ms{n}0 + _mgc * _ms{n}1), _mok))"
    )
    out.indent -= 2
