"""The CPU target's lowering of each primitive (one function per primitive).

Lanes are loop iterations here, so ids are loop counters, and a collective is group-level
code between two lane loops: it reads every lane's value from the lanes' arrays
(``_la_<name>``, codegen.py) and writes one result, or one per lane. Each lowering gets
the code generator, the call and, for a collective, its statement; it returns the code of
the value, or emits the statements of a collective.
"""

from __future__ import annotations

import math

from .... import dtypes as D
from ....tile import blocks as B
from ....tile import primitives as P
from ...ir import ScalarType
from ...typer import concrete
from ..common_lowerings import COMMON_LOWERINGS, block_offsets
from ..pysource import combine, ctor, subgroup_source
from ..target import lowerings_table
from . import atomics, block_copies

LOWERINGS, lowering = lowerings_table()


@lowering(P.tbarrier)
def _tbarrier(cg, call, site):
    cg.emit("# tbarrier(): the lane loops before and after are the barrier", call.loc)


@lowering(P.copy_wait)
def _copy_wait(cg, call, site):
    cg.emit("# cp_async.wait(): copies complete eagerly on the CPU", call.loc)


@lowering(*P.ATOMICS)
def _atomic(cg, call, site):
    """An LLVM atomic on a global array (groups run on several cores); a plain
    read-modify-write on a shared array, which only its group's core touches (atomics.py)."""
    array, index, *values = call.args
    at = cg.types[array.name]
    target_t = ScalarType(D.f32 if at.dtype in D.COMPUTED_IN_F32 else at.dtype)
    vs = [cg.conv(cg.expr(v), v.type, target_t) for v in values]
    idx = cg.index(index.items, array, call.loc)
    idx = idx if len(index.items) == 1 else f"({idx})"
    args = ", ".join([cg.name(array.name), idx, *vs])
    sixteen_bit = at.dtype in (D.f16, D.bf16)
    fn = atomics.name(call.prim.atomic, at.space == "shared", sixteen_bit)
    if at.dtype == D.f16:
        return f"{fn}({args}, _h2f, _f2h)"
    if at.dtype == D.bf16:
        return f"{fn}({args}, _b2f, _f2b)"
    return f"{fn}({args})"


@lowering(P.reduce_sum, P.reduce_max, P.reduce_min)
def _reduce_shared(cg, call, site):
    """Gather the whole shared array into scratch, then the fixed tree (semantics.py)."""
    source = call.args[0]
    t = concrete(call.type)
    at = cg.types[source.name]
    shape = cg.shared_shape(source.name, site)
    size = math.prod(shape)
    scratch = cg.scratch_for(ctor(t.dtype), size)
    idx = ", ".join(f"_i{d}" for d in range(len(shape)))
    lin = "_i0"
    for d in range(1, len(shape)):
        lin = f"({lin} * {shape[d]} + _i{d})"
    for d, n in enumerate(shape):
        cg.emit(f"{'    ' * d}for _i{d} in range({n}):", call.loc if d == 0 else None)
    element = cg.load_storage(f"{cg.name(source.name)}[{idx}]", at.dtype)
    value = cg.conv(element, ScalarType(at.dtype), t)
    cg.emit(f"{'    ' * len(shape)}{scratch}[{lin}] = {value}")
    reduced = f"_tree_reduce({scratch}, {size}, {combine(call.prim.op, t.dtype)})"
    cg.set_result(site, reduced, t)


@lowering(P.sum, P.max, P.min)
def _reduce_lanes(cg, call, site):
    """Every lane's value into scratch, in lane order, then the fixed tree."""
    value = call.args[0]
    t = concrete(call.type)
    scratch = cg.scratch_for(ctor(t.dtype), cg.lanes)
    cg.emit(f"for _i in range({cg.lanes}):", call.loc)
    cg.emit(f"    {scratch}[_i] = {cg.conv(cg.lane_value(value, '_i'), value.type, t)}")
    reduced = f"_tree_reduce({scratch}, {cg.lanes}, {combine(call.prim.op, t.dtype)})"
    cg.set_result(site, reduced, t)


@lowering(P.prefix_sum)
def _prefix_sum(cg, call, site):
    """One lane after another, in lane order: the order every target adds in."""
    value, exclusive = call.args
    t = concrete(call.type)
    acc = f"_acc{len(cg.lines)}"  # a name of its own: each scan may have another type
    cg.emit(f"{acc} = {ctor(t.dtype)}(0)", call.loc)
    cg.emit(f"for _i in range({cg.lanes}):")
    cg.indent += 1
    v = cg.conv(cg.lane_value(value, "_i"), value.type, t)
    if exclusive.value:
        cg.set_result(site, acc, t, lane="_i")
    cg.emit(f"{acc} = {cg.arith(acc, '+', v, t)}")
    if not exclusive.value:
        cg.set_result(site, acc, t, lane="_i")
    cg.indent -= 1


@lowering(P.shuffle, P.shuffle_xor, P.shuffle_down, P.shuffle_up)
def _shuffle(cg, call, site):
    """Each lane takes the value of another lane of its sub-group (its own where the
    source is outside the sub-group)."""
    value, offset = call.args
    t = concrete(call.type)
    width = P.subgroup_width(cg.lanes)
    scratch = cg.scratch_for(ctor(t.dtype), cg.lanes)
    cg.emit(f"for _i in range({cg.lanes}):", call.loc)
    cg.emit(f"    {scratch}[_i] = {cg.conv(cg.lane_value(value, '_i'), value.type, t)}")
    cg.emit(f"for _i in range({cg.lanes}):")
    cg.indent += 1
    delta = cg.conv(cg.lane_value(offset, "_i"), offset.type, ScalarType(D.i64))
    position = subgroup_source(call.prim, f"(_i % {width})", delta, width)
    cg.emit(f"_k = _i - _i % {width} + {position}")
    cg.set_result(site, f"{scratch}[_k]", t, lane="_i")
    cg.indent -= 1


# ----------------------------------------------------------------------------- tiles
# A group runs on one core: a tile primitive is straight loop code run once per group,
# writing the tile variable (an array per chunk) its statement assigns.
LOWERINGS.update(COMMON_LOWERINGS)


@lowering(B.load_block)
def _load_block(cg, call, site):
    """A call of the shared function for the block's shape (block_copies.py), where the
    element needs no conversion; else the inline loops."""
    src, offset, _, other = call.args
    t = call.type
    if not block_copies.plain(cg.types[src.name].dtype, t.dtype):
        return COMMON_LOWERINGS[B.load_block](cg, call, site)
    array = cg.name(src.name)
    offsets = block_offsets(cg, offset, array, t.shape)
    fill = cg.conv(cg.expr(other), other.type, ScalarType(t.dtype))
    fn = cg.block_copy("load", len(offsets) - len(t.shape), t.shape)
    cg.emit(f"{fn}({cg.name(site.target)}, {array}, ({', '.join(offsets)},), {fill})", call.loc)


@lowering(B.store_block)
def _store_block(cg, call, site):
    dst, offset, t, mask = call.args
    shape = t.type.shape
    plain = block_copies.plain(cg.types[dst.name].dtype, t.type.dtype)
    if not plain or (mask is not None and mask.type.shape != shape):
        return COMMON_LOWERINGS[B.store_block](cg, call, site)
    array = cg.name(dst.name)
    offsets = block_offsets(cg, offset, array, shape)
    fn = cg.block_copy("store", len(offsets) - len(shape), shape, mask is not None)
    args = [array, cg.name(t.name), f"({', '.join(offsets)},)"]
    args += [cg.name(mask.name)] if mask is not None else []
    cg.emit(f"{fn}({', '.join(args)})", call.loc)


@lowering(B.dot)
def _dot(cg, call, site):
    """``acc + a @ b`` by the register-blocked micro-kernel (microkernel.py): each element
    adds its products in k order, fused."""
    a, b, acc = call.args[:3]
    m, n = call.type.shape
    k = a.type.shape[1]
    dest = cg.name(site.target)
    if site.target in (a.name, b.name):  # the product reads the tile it replaces
        dest = cg.tile_temp(call.type)
    init = cg.name(acc.name) if acc is not None else dest
    cg.emit(f"# tile.dot: ({m}, {k}) @ ({k}, {n})", call.loc)
    x, y = cg.name(a.name), cg.name(b.name)
    cg.emit(f"_dot_tiles({dest}, {init}, {x}, {y}, {m}, {n}, {k}, {acc is None})")
    if dest != cg.name(site.target):
        target = cg.name(site.target)
        cg.element_loops(
            call.type.shape,
            lambda: cg.emit(f"{target}[_e0, _e1] = {dest}[_e0, _e1]"),
        )


@lowering(B.tile_sum, B.tile_max, B.tile_min)
def _tile_reduce(cg, call, site):
    """The fixed tree over all elements (row-major), or along ``axis`` per result."""
    source, axis = call.args
    shape = source.type.shape
    rep = ctor(source.type.dtype)
    combine_fn = combine(call.prim.op, source.type.dtype)
    if axis is None:
        size = math.prod(shape)
        scratch = cg.scratch_for(rep, size)
        lin = (
            "_e0"
            if len(shape) == 1
            else " + ".join(f"_e{d} * {math.prod(shape[d + 1 :])}" for d in range(len(shape)))
        )
        cg.element_loops(
            shape,
            lambda: cg.emit(f"{scratch}[{lin}] = {cg.tile_read(source.name, shape)}"),
        )
        cg.set_result(site, f"_tree_reduce({scratch}, {size}, {combine_fn})", call.type)
        return
    a = axis.value
    out_shape = shape[:a] + shape[a + 1 :]
    scratch = cg.scratch_for(rep, shape[a])
    dest = cg.name(site.target)

    def body():
        rest = list(cg.element)
        index = ", ".join(rest[:a] + ["_r"] + rest[a:])
        cg.emit(f"for _r in range({shape[a]}):")
        cg.emit(f"    {scratch}[_r] = {cg.name(source.name)}[{index}]")
        cg.emit(f"{dest}[{', '.join(rest)}] = _tree_reduce({scratch}, {shape[a]}, {combine_fn})")

    cg.element_loops(out_shape, body)
