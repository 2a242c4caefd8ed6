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
from ....tile import primitives as P
from ...ir import ScalarType
from ...typer import concrete
from ..pysource import combine, ctor, subgroup_source
from ..target import lowerings_table

LOWERINGS, lowering = lowerings_table()


@lowering(P.linear_id)
def _linear_id(cg, call, site):
    return cg.lane_id(None)


@lowering(P.id)
def _id(cg, call, site):
    return cg.lane_id(call.args[0].value)


@lowering(P.group_linear_id)
def _group_linear_id(cg, call, site):
    return "np.int64(_g)"


@lowering(P.group_id)
def _group_id(cg, call, site):
    return cg.group_axis(call.args[0].value)


@lowering(P.group_tile_count)
def _group_tile_count(cg, call, site):
    return f"np.int64({cg.lanes})"


@lowering(P.tbarrier)
def _tbarrier(cg, call, site):
    cg.emit("# tbarrier(): the lane loops before and after are the barrier", call.loc)


@lowering(P.copy_wait)
def _copy_wait(cg, call, site):
    cg.emit("# cp_async.wait(): copies complete eagerly on the CPU", call.loc)


@lowering(P.atomic_add)
def _atomic_add(cg, call, site):
    array, index, value = call.args
    at = cg.types[array.name]
    target_t = ScalarType(D.f32 if at.dtype in D.COMPUTED_IN_F32 else at.dtype)
    v = cg.conv(cg.expr(value), value.type, target_t)
    idx = cg.index(index.items, array, call.loc)
    idx = idx if len(index.items) == 1 else f"({idx})"
    args = f"{cg.name(array.name)}, {idx}, {v}"
    if at.dtype == D.f16:
        return f"_atomic_add_16({args}, _h2f, _f2h)"
    if at.dtype == D.bf16:
        return f"_atomic_add_16({args}, _b2f, _f2b)"
    return f"_atomic_add({args})"


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
