"""Layouts as data: which thread, which register holds each element of a tile.

A *linear layout* (as Triton's ``LinearLayout``, arXiv 2505.23819) maps the bits of a few
input indices to tile coordinates: every input dimension (``reg``, ``lane``, ``warp`` for
a tile spread over a group's registers; ``offset`` for a buffer in shared memory) has one
*basis* per bit, a coordinate vector, and the position of an index is the XOR of the bases
of its set bits, per coordinate. Tile dimensions are powers of two, so XOR acts on each
coordinate's bits; a basis that is a single coordinate bit is a plain stride, a basis with
several bits is a swizzle, and a zero basis is a *broadcast* (the index bit selects a copy
of the same elements).

A layout is valid if its non-zero bases are linearly independent over GF(2) and span the
tile: then it is a bijection (no zero basis) or a documented broadcast (each element held
``2**zeros`` times: operands shared by the warps of one row or column, reduction results
that every lane of the reduced row keeps). :attr:`LinearLayout.kind` says which.

Constructors: :func:`blocked` (16-byte vectors along the contiguous axis, for global loads
and stores), :func:`mma_acc` and :func:`mma_operand` (tensor-core fragments tiled over a
warp tile, from one instruction's fragment, an *atom*, that the target states:
targets/cuda/isa/mma_sync.py), :func:`slice` (reduction results) and :func:`shared`
(staging buffers, XOR swizzle of 16-byte chunks). Conversions between layouts are
kernel/layout_convert.py; the fixed reduction tree over a layout is
kernel/layout_reduce.py. Target-neutral and NumPy-only.

A :class:`Placement` says where a target keeps one tile value of a kernel: its home
(registers, shared memory, a staging ring, or computed from indices where read), the
layout's kind and, for power-of-two tiles, its linear layout. The CUDA target's layout
pass (targets/cuda/passes/layouts.py) gives every tile value one, checked against the code
it generates; ``k.inspect("layouts")`` prints the typed IR with them (docs/targets.md,
"Layouts").
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

WARP = 32
DISTRIBUTED = ("reg", "lane", "warp")


def _log2(n: int, what: str) -> int:
    if n < 1 or n & (n - 1):
        raise ValueError(f"{what} must be a power of two, not {n}")
    return n.bit_length() - 1


def _unit(rank: int, axis: int, value: int) -> tuple[int, ...]:
    return tuple(value if d == axis else 0 for d in range(rank))


@dataclass(frozen=True)
class LinearLayout:
    """Input indices (``dims``: name -> one basis per bit) to coordinates of a tile of
    ``shape``. Arrays of values held under the layout have one axis per input dimension,
    in reverse order: ``(warp, lane, reg)`` for a distributed layout."""

    shape: tuple[int, ...]
    dims: tuple[tuple[str, tuple[tuple[int, ...], ...]], ...]

    def __post_init__(self):
        for n in self.shape:
            _log2(n, "a layout's tile dimension")
        for name, bases in self.dims:
            for b in bases:
                if len(b) != len(self.shape) or any(not 0 <= c < n for c, n in zip(b, self.shape)):
                    raise ValueError(f"basis {b} of {name!r} is not a coordinate of {self.shape}")

    # ------------------------------------------------------------------ structure
    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.dims)

    def bases(self, name: str) -> tuple[tuple[int, ...], ...]:
        return dict(self.dims)[name]

    def size(self, name: str) -> int:
        """How many values the input dimension ``name`` indexes (registers, lanes, ...)."""
        return 1 << len(self.bases(name)) if name in self.names else 1

    @property
    def value_shape(self) -> tuple[int, ...]:
        """The shape of an array of held values: input dimensions in reverse order."""
        return tuple(self.size(name) for name in reversed(self.names))

    @property
    def elements(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def _flat(self, coords: tuple[int, ...]) -> int:
        flat = 0
        for c, n in zip(coords, self.shape):
            flat = flat * n + c
        return flat

    def _coords(self, flat):
        out = []
        for n in reversed(self.shape):
            out.append(flat % n)
            flat = flat // n
        return tuple(reversed(out))

    @functools.cached_property
    def flat_positions(self) -> np.ndarray:
        """The flat (row-major) tile index of every input index, shaped ``value_shape``."""
        table = np.zeros((), dtype=np.int64)
        for name in self.names:
            flats = np.zeros(1, dtype=np.int64)
            for b in self.bases(name):
                flats = np.concatenate([flats, flats ^ self._flat(b)])
            table = flats.reshape((-1,) + (1,) * table.ndim) ^ table[None]
        return table

    # ------------------------------------------------------------------ maps
    def position(self, *indices):
        """Tile coordinates held at the input indices (``reg, lane, warp`` for a
        distributed layout, ``offset`` for a shared one); ints or NumPy arrays."""
        if len(indices) != len(self.names):
            raise TypeError(f"position takes {len(self.names)} indices ({', '.join(self.names)})")
        flat = self.flat_positions[tuple(reversed(indices))]
        return self._coords(flat)

    def holders(self, *coords) -> np.ndarray:
        """Every input index (rows of ``len(names)`` values, in ``names`` order) holding
        the element at ``coords``: one for a bijection, ``2**zeros`` for a broadcast."""
        where = np.argwhere(self.flat_positions == self._flat(tuple(coords)))
        return where[:, ::-1]

    @functools.cached_property
    def inverse(self) -> np.ndarray:
        """For a bijection or broadcast: the flat input index (row-major over
        ``value_shape``) of one holder of each flat tile index."""
        if self.kind == "other":
            raise ValueError("a layout that does not cover its tile has no inverse")
        _, first = np.unique(self.flat_positions.ravel(), return_index=True)
        return first

    def offset(self, *coords):
        """For a one-dimensional layout (shared memory): the offset holding ``coords``."""
        if len(self.names) != 1:
            raise TypeError("offset() is for layouts with one input dimension")
        flat = np.zeros_like(np.asarray(coords[0]), dtype=np.int64)
        for c, n in zip(coords, self.shape):
            flat = flat * n + np.asarray(c)
        return self.inverse[flat]

    # ------------------------------------------------------------------ checks
    @functools.cached_property
    def kind(self) -> str:
        """``"bijection"``, ``"broadcast"`` (independent non-zero bases spanning the tile,
        plus zero bases) or ``"other"`` (some elements held by nobody)."""
        vectors = [self._flat(b) for _, bases in self.dims for b in bases]
        nonzero = [v for v in vectors if v]
        bits = sum(_log2(n, "dim") for n in self.shape)
        if _rank(nonzero) != bits or len(nonzero) != bits:
            return "other"
        return "bijection" if len(nonzero) == len(vectors) else "broadcast"

    # ------------------------------------------------------------------ data
    def gather(self, tile: np.ndarray) -> np.ndarray:
        """The values each input index holds, shaped ``value_shape`` (a NumPy model of
        loading ``tile`` into this layout)."""
        tile = np.asarray(tile)
        if tile.shape != self.shape:
            raise ValueError(f"tile of shape {tile.shape} for a layout of {self.shape}")
        return tile.reshape(-1)[self.flat_positions]

    def scatter(self, values: np.ndarray) -> np.ndarray:
        """The tile the held ``values`` represent (the inverse of :meth:`gather`; a
        broadcast element takes the value of its first holder)."""
        values = np.asarray(values)
        if values.shape != self.value_shape:
            raise ValueError(f"values of shape {values.shape}, layout holds {self.value_shape}")
        return values.reshape(-1)[self.inverse].reshape(self.shape)


def _rank(vectors: list[int]) -> int:
    """Rank over GF(2) of integers read as bit vectors."""
    rank, rows = 0, list(vectors)
    while rows:
        pivot = max(rows)
        rows.remove(pivot)
        if pivot == 0:
            continue
        rank += 1
        top = pivot.bit_length() - 1
        rows = [r ^ pivot if r >> top & 1 else r for r in rows]
    return rank


def distributed(shape, reg=(), lane=(), warp=()) -> LinearLayout:
    """A layout over a group's registers, lanes and warps from explicit bases."""
    shape = tuple(shape)
    dims = (("reg", tuple(reg)), ("lane", tuple(lane)), ("warp", tuple(warp)))
    return LinearLayout(shape, tuple((n, tuple(tuple(b) for b in bs)) for n, bs in dims))


def _fill(shape, used, count, order):
    """``count`` bases continuing over the tile along axes in ``order`` (fastest first),
    past the coordinate bits already ``used`` per axis; zero bases (broadcast) once the
    tile is covered."""
    rank, used, out = len(shape), list(used), []
    for _ in range(count):
        for axis in order:
            if 1 << used[axis] < shape[axis]:
                out.append(_unit(rank, axis, 1 << used[axis]))
                used[axis] += 1
                break
        else:
            out.append((0,) * rank)
    return out, used


def blocked(shape, vector: int, threads: int = WARP, warps: int = 1) -> LinearLayout:
    """Coalesced vectors: each thread holds ``vector`` contiguous elements of the last
    axis (16 bytes: 8 of f16, 4 of f32), consecutive lanes the next vectors along it
    and then the next rows, warps after lanes, and further registers repeat the pattern
    over what is left (contiguous axis first). Threads past the tile hold copies
    (broadcast)."""
    shape = tuple(shape)
    order = tuple(reversed(range(len(shape))))
    reg, used = _fill(shape, [0] * len(shape), _log2(vector, "vector"), order)
    if any(b == (0,) * len(shape) for b in reg):
        raise ValueError(f"a vector of {vector} does not fit the tile {shape}")
    lane, used = _fill(shape, used, _log2(threads, "threads"), order)
    warp, used = _fill(shape, used, _log2(warps, "warps"), order)
    more = sum(_log2(n, "dim") for n in shape) - sum(used)
    rest, _ = _fill(shape, used, more, order)
    return distributed(shape, reg + rest, lane, warp)


def _tile_atom(atom: LinearLayout, shape, warps, broadcast_axis=None) -> LinearLayout:
    """Tile an instruction's fragment (``atom``: ``reg`` and ``lane`` bases over its own
    small shape) over ``shape`` with ``warps = (rows, cols)`` of warps, each warp a
    contiguous ``shape / warps`` warp tile: register bits repeat the atom along the
    columns first, then the rows; warp bits go along the columns first (warp index
    ``row * cols + col``). With ``broadcast_axis``, the warps along that axis hold the
    same elements (zero bases) and each warp covers the whole axis."""
    shape, warps = tuple(shape), tuple(warps)
    per_warp = [n // w for n, w in zip(shape, warps)]
    if broadcast_axis is not None:
        per_warp[broadcast_axis] = shape[broadcast_axis]
    for a, p in zip(atom.shape, per_warp):
        if p < a or p % a:
            raise ValueError(
                f"a {shape[0]}x{shape[1]} tile over {warps[0]}x{warps[1]} warps is not "
                f"whole {atom.shape[0]}x{atom.shape[1]} instruction tiles per warp"
            )
    used = [_log2(a, "atom") for a in atom.shape]
    more = sum(_log2(p, "warp tile") for p in per_warp) - sum(used)
    reps, used = _fill(per_warp, used, more, (1, 0))
    warp = []
    for axis in (1, 0):
        for bit in range(_log2(warps[axis], "warps")):
            if axis == broadcast_axis:
                warp.append((0, 0))
            else:
                warp.append(_unit(2, axis, per_warp[axis] << bit))
    # warp bits: columns first means the column warp bits are the low bits of the index
    return distributed(shape, atom.bases("reg") + tuple(reps), atom.bases("lane"), warp)


def mma_acc(atom: LinearLayout, shape, warps=(1, 1)) -> LinearLayout:
    """The accumulator of a tensor-core ``tile.dot``: the instruction's C/D fragment
    (``atom``, e.g. m16n8's four f32 per lane) tiled over each warp's tile, warps laid
    ``warps = (rows, cols)``. Register ``i`` of a lane is element ``i % atom_regs`` of
    instruction tile ``i // atom_regs`` (column tiles fastest)."""
    return _tile_atom(atom, shape, warps)


def wgmma_acc(atom: LinearLayout, n: int, warpgroups: int = 1) -> LinearLayout:
    """The accumulator of ``wgmma.mma_async.m64nNk*`` (sm_90a): each warpgroup's four
    warps own 16 rows each (warp ``w``: rows ``16 w`` to ``16 w + 15``), every warp's rows
    laid as ``mma.sync``'s m16n8 accumulator (``atom``) repeated N/8 times along the
    columns: register ``4 j + i`` of a lane is element ``i`` of column tile ``j`` (the
    PTX ISA's figure for the m64nN D fragment; N/2 f32 per thread). Warpgroups stack
    along the rows."""
    return _tile_atom(atom, (64 * warpgroups, n), (4 * warpgroups, 1))


def mma_operand(operand: str, atom: LinearLayout, shape, warps=(1, 1)) -> LinearLayout:
    """Operand ``"A"`` (m x k) or ``"B"`` (k x n) of a tensor-core ``tile.dot``, from the
    instruction's fragment ``atom`` (m16n8k16 f16/bf16: eight / four 16-bit elements,
    packed in pairs into .b32 registers, consecutive elements one register). ``warps``
    is the accumulator's (rows, cols): A is split over the warp rows and broadcast over
    the warp columns (each warp holds its rows, every k), B the other way round."""
    if operand not in ("A", "B"):
        raise ValueError(f"operand must be 'A' or 'B', not {operand!r}")
    shape, warps = tuple(shape), tuple(warps)
    # A's columns and B's rows are k, which no warp splits
    return _tile_atom(atom, shape, warps, broadcast_axis=1 if operand == "A" else 0)


def slice(parent: LinearLayout, axis: int) -> LinearLayout:  # noqa: A001 (Triton's name)
    """The layout of ``parent`` reduced along ``axis`` (``t.sum(axis)``): coordinates drop
    the axis; registers that held different elements of the axis collapse to one (the
    remaining register bits keep their order), and lanes and warps that held them all
    keep a copy of the result: a documented broadcast."""
    if parent.names != DISTRIBUTED:
        raise ValueError("slice() takes a distributed (reg, lane, warp) layout")

    def drop(b):
        return b[:axis] + b[axis + 1 :]

    shape = drop(parent.shape)
    reg = [drop(b) for b in parent.bases("reg") if drop(b) != (0,) * len(shape) or not any(b)]
    lane = [drop(b) for b in parent.bases("lane")]
    warp = [drop(b) for b in parent.bases("warp")]
    return distributed(shape, reg, lane, warp)


def slice_registers(parent: LinearLayout, axis: int) -> np.ndarray:
    """The parent's register indices that :func:`slice` keeps, in the slice's order."""
    keep = [
        i
        for i, b in enumerate(parent.bases("reg"))
        if any(c for d, c in enumerate(b) if d != axis) or not any(b)
    ]
    return np.array(
        [sum(((r >> k) & 1) << keep[k] for k in range(len(keep))) for r in range(1 << len(keep))],
        dtype=np.int64,
    )


@dataclass(frozen=True)
class Swizzle:
    """XOR swizzle of 16-byte chunks (Triton's vec/per_phase/max_phase with vec = one
    chunk): in row ``r`` the chunk ``c`` is stored at chunk
    ``c ^ (((r // per_phase) % max_phase) * scale)``."""

    per_phase: int
    max_phase: int
    scale: int = 1

    def chunk(self, row, chunk):
        return chunk ^ (((row // self.per_phase) % self.max_phase) * self.scale)

    @property
    def period(self) -> int:
        """Rows after which the XOR terms repeat."""
        return self.per_phase * self.max_phase


def swizzle_for(row_bytes: int) -> Swizzle:
    """The conflict-free swizzle for 16-byte accesses to rows of ``row_bytes``: 128-byte
    phases (``per_phase = 128 / row_bytes`` rows share one), at most 8 chunks XORed.
    64-byte rows give ``chunk ^ ((row >> 1) & 3)``, rows of 128 bytes or more
    ``chunk ^ (row & 7)``."""
    _log2(row_bytes, "row bytes")
    if row_bytes < 16:
        raise ValueError("rows shorter than one 16-byte chunk are not swizzled")
    return Swizzle(max(1, 128 // row_bytes), min(8, row_bytes // 16))


def swizzle_down_columns(row_bytes: int) -> Swizzle:
    """The swizzle for a K x N tile of bytes read down its columns (8-bit ``mma.sync`` B
    fragments): the lanes of thread-in-group ``t`` read rows ``4 t + j`` (t = 0..3), each
    lane a 4-byte word of a pair of chunks (32 columns): ``chunk ^ 2 ((row // 4) % m)``,
    ``m = min(4, chunks / 2)``, sends the four rows' chunk pairs to different bank groups
    (rows of 128 bytes or more: no conflicts; 64 bytes: the rows share 16 banks, 2-way)
    and keeps each row's chunks a permutation, so 16-byte copies stay conflict-free. The
    terms repeat every ``4 m`` rows (at most 16)."""
    _log2(row_bytes, "row bytes")
    if row_bytes < 16:
        raise ValueError("rows shorter than one 16-byte chunk are not swizzled")
    return Swizzle(4, max(1, min(4, row_bytes // 32)), 2)


def shared(shape, element_bytes: int, swizzle: Swizzle | None = None) -> LinearLayout:
    """A row-major buffer in shared memory, ``offset`` (in elements) -> coordinates, with
    16-byte chunks of each row XOR-swizzled by ``swizzle`` (None: plain row-major)."""
    shape = tuple(shape)
    vector = 16 // element_bytes
    cols = shape[-1]
    rank = len(shape)
    offset = []
    for bit in range(_log2(cols, "columns")):
        offset.append(_unit(rank, rank - 1, 1 << bit))
    if swizzle is not None:
        if rank != 2 or cols < vector:
            raise ValueError("a swizzle needs 2-D tiles of at least one chunk per row")
        if swizzle.max_phase > cols // vector:
            raise ValueError(
                f"a swizzle of {swizzle.max_phase} chunks on rows of {cols // vector} chunks"
            )
    for axis in reversed(range(rank - 1)):
        for bit in range(_log2(shape[axis], "rows")):
            row = 1 << bit
            col = swizzle.chunk(row, 0) * vector if swizzle is not None else 0
            offset.append(_unit(rank, axis, row)[:-1] + (col,))
    return LinearLayout(shape, (("offset", tuple(offset)),))


HOMES = ("registers", "shared", "staged", "computed")


@dataclass(frozen=True)
class Placement:
    """Where a target keeps one tile value. ``home``: ``registers`` (spread over the
    group's threads as ``layout`` says), ``shared`` (one copy in the group's shared
    memory), ``staged`` (never a whole value: blocks of it pass through a ring of shared
    stages into instruction fragments) or ``computed`` (arithmetic on element indices,
    evaluated where read). ``kind`` names the layout (``blocked``, ``mma_acc``,
    ``slice``, ``mma_operand(A)``, ``shared``, ...); ``layout`` is its linear layout where
    the tile's dimensions are powers of two (else None); ``registers`` the 32-bit
    registers a thread holds of it, ``shared_bytes`` its bytes in shared memory; ``note``
    says how it got there in words (why it is in shared memory, which instruction)."""

    home: str
    kind: str
    layout: LinearLayout | None = None
    registers: int = 0
    shared_bytes: int = 0
    note: str = ""

    def __post_init__(self):
        if self.home not in HOMES:
            raise ValueError(f"home must be one of {', '.join(HOMES)}, not {self.home!r}")

    def __str__(self) -> str:
        return self.kind

    def as_dict(self) -> dict:
        """The placement as plain data (``k.metadata()["tiles"]``)."""
        return {
            "home": self.home,
            "layout": self.kind,
            "registers_per_thread": self.registers,
            "shared_bytes": self.shared_bytes,
            "note": self.note,
        }
