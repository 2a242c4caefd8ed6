"""Lowerings the targets that generate Python for Numba (CPU, CUDA) share: ids, which each
target's code generator numbers (``lane_id``, ``group_axis``), and tile primitives that
are element loops (``element_loops``: nested loops on the CPU, every lane its share on
CUDA), plus the elementwise tile forms of tile_source.py. Each target adds these to its
own table (``LOWERINGS.update(COMMON_LOWERINGS)``).
"""

from __future__ import annotations

from ... import dtypes as D
from ...tile import blocks as B
from ...tile import primitives as P
from ..ir import ScalarType, TileType
from ..passes.tile_indexing import IN_BOUNDS
from .pysource import ctor
from .target import lowerings_table
from .tile_source import ELEMENTWISE_LOWERINGS

COMMON_LOWERINGS, common = lowerings_table()
COMMON_LOWERINGS.update(ELEMENTWISE_LOWERINGS)


@common(P.linear_id)
def _linear_id(cg, call, site):
    return cg.lane_id(None)


@common(P.id)
def _id(cg, call, site):
    return cg.lane_id(call.args[0].value)


@common(P.group_linear_id)
def _group_linear_id(cg, call, site):
    return "np.int64(_g)"


@common(P.group_id)
def _group_id(cg, call, site):
    return cg.group_axis(call.args[0].value)


@common(P.group_count)
def _group_count(cg, call, site):
    axis = call.args[0].value
    return f"np.int64(_N{axis})" if axis < cg.grid_ndim else "np.int64(1)"


@common(P.group_tile_count)
def _group_tile_count(cg, call, site):
    return f"np.int64({cg.group_lanes})"


def _fill(cg, site, t, code) -> None:
    dest = cg.name(site.target)
    cg.element_loops(t.shape, lambda: cg.emit(f"{dest}[{', '.join(cg.element)}] = {code}"))


@common(B.zeros)
def _zeros(cg, call, site):
    _fill(cg, site, call.type, f"{ctor(call.type.dtype)}(0)")


@common(B.full)
def _full(cg, call, site):
    value = call.args[1]
    code = cg.conv(cg.expr(value), value.type, ScalarType(call.type.dtype))
    cg.emit(f"_fv = {code}", call.loc)
    _fill(cg, site, call.type, "_fv")


@common(B.arange)
def _arange(cg, call, site):
    _fill(cg, site, call.type, "np.int64(_e0)")


def block_offsets(cg, offset, array: str, shape: tuple[int, ...]) -> list[str]:
    """Emit the block's offsets (``_o<d>``, i64) into ``array``; ``shape`` is the block's.
    An offset along a block dim whose block lies wholly outside the array (past either
    end, however far: 2**63 - 1 included) is moved to ``-n``, still wholly outside, so
    ``offset + element`` never wraps around to the array's first elements: one check per
    block, the element loops unchanged (they mask every element of such a block)."""
    names = []
    lead = len(offset.items) - len(shape)  # fixed leading indices: a block of a sub-array
    for d, item in enumerate(offset.items):
        code = cg.conv(cg.expr(item), item.type, ScalarType(D.i64))
        if d >= lead:
            n = shape[d - lead]
            cg.emit(f"_o{d} = {code}")
            code = cg.block_origin(f"_o{d}", n, f"{array}.shape[{d}]")
        cg.emit(f"_o{d} = {code}")
        names.append(f"_o{d}")
    return names


def _positions(cg, array: str, offsets: list[str]) -> tuple[str, str]:
    """(the array index, the in-bounds condition) of the current element of a block; the
    offsets before the block's dims are fixed indices (a block of a sub-array)."""
    lead = len(offsets) - len(cg.element)
    pos = offsets[:lead] + [f"{o} + {e}" for o, e in zip(offsets[lead:], cg.element)]
    inside = " and ".join(f"0 <= {p} < {array}.shape[{d}]" for d, p in enumerate(pos))
    return ", ".join(f"np.uint64({p})" for p in pos), inside


@common(B.load_block)
def _load_block(cg, call, site):
    """Inside the array (the usual block): a plain copy; at an edge, each element is
    checked and the ones outside read ``other``."""
    src, offset, _, other = call.args
    t, array = call.type, cg.name(src.name)
    offsets = block_offsets(cg, offset, array, t.shape)
    cg.emit(f"_fv = {cg.conv(cg.expr(other), other.type, ScalarType(t.dtype))}", call.loc)
    dest = cg.name(site.target)
    lead = len(offsets) - len(t.shape)  # fixed leading indices: a block of a sub-array
    whole = " and ".join(
        [f"0 <= {o} < {array}.shape[{d}]" for d, o in enumerate(offsets[:lead])]
        + [
            f"0 <= {o} and {o} + {n} <= {array}.shape[{lead + d}]"
            for d, (o, n) in enumerate(zip(offsets[lead:], t.shape))
        ]
    )
    dtype = cg.types[src.name].dtype

    def inside():
        fixed = [f"np.uint64({o})" for o in offsets[:lead]]
        moving = [f"np.uint64({o} + {e})" for o, e in zip(offsets[lead:], cg.element)]
        index = ", ".join(fixed + moving)
        element = cg.load_storage(f"{array}[{index}]", dtype)
        cg.emit(f"{dest}[{', '.join(cg.element)}] = {element}")

    def edge():
        index, inside_cond = _positions(cg, array, offsets)
        element = cg.load_storage(f"{array}[{index}]", dtype)
        cg.emit(f"{dest}[{', '.join(cg.element)}] = {element} if {inside_cond} else _fv")

    cg.emit(f"if {whole}:")
    cg.indent += 1
    cg.element_loops(t.shape, inside)
    cg.indent -= 1
    cg.emit("else:")
    cg.indent += 1
    cg.element_loops(t.shape, edge)
    cg.indent -= 1


@common(B.store_block)
def _store_block(cg, call, site):
    dst, offset, t, mask = call.args
    array = cg.name(dst.name)
    offsets = block_offsets(cg, offset, array, t.type.shape)
    cg.emit(f"# tile.store_block({dst.name}, ...)", call.loc)

    def body():
        index, inside = _positions(cg, array, offsets)
        if mask is not None:
            inside += f" and {cg.tile_read(mask.name, mask.type.shape)}"
        value = cg.store_code(
            cg.tile_read(t.name, t.type.shape), t.type.dtype, cg.types[dst.name].dtype
        )
        cg.emit(f"if {inside}:")
        cg.emit(f"    {array}[{index}] = {value}")

    cg.element_loops(t.type.shape, body)


def _indexed(cg, call, index, mask, src: str) -> tuple[str, str]:
    """Emit the current element's array position (``_p<d>``, i64) from the index tiles of
    a gather or scatter; (the array index, the condition to touch it). A ``tile.load`` or
    ``tile.store`` (passes/tile_indexing.py) in a bounds-checked launch checks each
    position not masked off: one outside is the launch's error, naming array and line."""
    array = cg.name(src)
    conds = []
    for d, item in enumerate(index.items):
        if isinstance(item.type, TileType):
            code = cg.tile_read(item.name, item.type.shape)
            code = cg.conv(code, ScalarType(item.type.dtype), ScalarType(D.i64))
        else:
            code = cg.conv(cg.expr(item), item.type, ScalarType(D.i64))
        cg.emit(f"_p{d} = {code}")
        conds.append(f"0 <= _p{d} < {array}.shape[{d}]")
    keep = None if mask is None else cg.tile_read(mask.name, mask.type.shape)
    if cg.checked and call.attrs.get(IN_BOUNDS):
        rank, indent = len(index.items), ""
        if keep is not None:
            cg.emit(f"if {keep}:")
            indent = "    "
        for d in range(rank):
            site = len(cg.check_sites)
            cg.check_sites.append((src, d, rank, call.loc))
            cg.emit(f"{indent}_check_index(_p{d}, {array}.shape[{d}], {site})")
    if keep is not None:
        conds.append(keep)
    position = ", ".join(f"np.uint64(_p{d})" for d in range(len(index.items)))
    return position, " and ".join(conds)


@common(B.gather)
def _gather(cg, call, site):
    """Each element reads its own position (``other`` outside the array or masked)."""
    src, index, mask, other = call.args
    t, array = call.type, cg.name(src.name)
    cg.emit(f"_fv = {cg.conv(cg.expr(other), other.type, ScalarType(t.dtype))}", call.loc)
    dest, dtype = cg.name(site.target), cg.types[src.name].dtype

    def body():
        position, inside = _indexed(cg, call, index, mask, src.name)
        element = cg.load_storage(f"{array}[{position}]", dtype)
        cg.emit(f"{dest}[{', '.join(cg.element)}] = {element} if {inside} else _fv")

    cg.element_loops(t.shape, body)


@common(B.scatter)
def _scatter(cg, call, site):
    dst, index, t, mask = call.args
    array = cg.name(dst.name)
    cg.emit(f"# tile.scatter({dst.name}, ...)", call.loc)

    def body():
        position, inside = _indexed(cg, call, index, mask, dst.name)
        value = cg.store_code(
            cg.tile_read(t.name, t.type.shape), t.type.dtype, cg.types[dst.name].dtype
        )
        cg.emit(f"if {inside}:")
        cg.emit(f"    {array}[{position}] = {value}")

    cg.element_loops(t.type.shape, body)
