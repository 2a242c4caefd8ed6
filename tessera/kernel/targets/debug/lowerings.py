"""The debug target's lowering of each primitive (one function per primitive).

A plain primitive becomes a closure ``f(frame) -> value``. A collective becomes a pair:
``payload(frame)``, what each lane hands to the group, and ``perform(run, stmt,
payloads)``, what the group does once every lane has arrived (program.py's scheduler
calls it), returning each lane's result. This is the reference the other targets match
bit for bit, so each is written as plainly as the language's definition.
"""

from __future__ import annotations

import numpy as np

from .... import dtypes as D
from ....tile import primitives as P
from ...ir import ScalarType
from ...typer import concrete
from .. import semantics
from ..target import lowerings_table
from .values import HALF, compute_type, convert

LOWERINGS, lowering = lowerings_table()


@lowering(P.linear_id)
def _linear_id(c, call, site):
    return lambda f: np.int64(f.lane)


@lowering(P.id)
def _id(c, call, site):
    axis = call.args[0].value
    return lambda f: np.int64(f.lane_ids[axis] if axis < len(f.lane_ids) else 0)


@lowering(P.group_linear_id)
def _group_linear_id(c, call, site):
    return lambda f: np.int64(f.group)


@lowering(P.group_id)
def _group_id(c, call, site):
    axis = call.args[0].value
    return lambda f: np.int64(f.group_ids[axis] if axis < len(f.group_ids) else 0)


@lowering(P.group_tile_count)
def _group_tile_count(c, call, site):
    size = np.int64(np.prod(c.kir.tile_shape))
    return lambda f: size


@lowering(P.atomic_add)
def _atomic_add(c, call, site):
    array, index, value = call.args
    name, loc = array.name, call.loc
    dtype = c.types[name].dtype
    where = c.indices(index.items)
    v = convert(c.expr(value), value.type, ScalarType(D.f32 if dtype in HALF else dtype))
    to_compute = np.float32 if dtype in HALF else None

    def run(frame):
        amount = v(frame)
        with np.errstate(all="ignore"):  # the sum is rounded to the element's dtype once
            old = frame.vars[name].atomic_add(where(frame), amount, frame.who(loc))
        return to_compute(old) if to_compute is not None else old

    return run


def _nothing(frame):
    return None


@lowering(P.tbarrier)
def _tbarrier(c, call, site):
    def perform(run, stmt, payloads):
        for s in run.shared:
            s.check_uninitialised_reads()
            s.new_epoch()
            s.complete_copies()
        return [None] * len(payloads)

    return _nothing, perform


@lowering(P.copy_wait)
def _copy_wait(c, call, site):
    def perform(run, stmt, payloads):
        for s in run.shared:
            s.complete_copies()
        return [None] * len(payloads)

    return _nothing, perform


def tree_reduce(values: np.ndarray, op: str):
    """The language's reduction tree on ``values`` (a copy is reduced)."""
    scratch = values.copy()
    with np.errstate(all="ignore"):
        return semantics.tree_reduce(scratch, scratch.size, semantics.COMBINE[op])


@lowering(P.reduce_sum, P.reduce_max, P.reduce_min)
def _reduce_shared(c, call, site):
    name, rep = call.args[0].name, compute_type(call.type.dtype)

    def perform(run, stmt, payloads):
        values = payloads[0].read_all(run.group_who(stmt.loc)).astype(rep).ravel()
        return [tree_reduce(values, call.prim.op)] * len(payloads)

    return (lambda f: f.vars[name]), perform


def _lane_value(c, call, arg):
    """Each lane's value of argument ``arg``, converted to the call's type."""
    return convert(c.expr(arg), arg.type, concrete(call.type))


@lowering(P.sum, P.max, P.min)
def _reduce_lanes(c, call, site):
    rep = compute_type(call.type.dtype)

    def perform(run, stmt, payloads):
        return [tree_reduce(np.array(payloads, dtype=rep), call.prim.op)] * len(payloads)

    return _lane_value(c, call, call.args[0]), perform


@lowering(P.prefix_sum)
def _prefix_sum(c, call, site):
    rep, exclusive = compute_type(call.type.dtype), call.args[1].value

    def perform(run, stmt, payloads):
        out, acc = [], rep(0)
        with np.errstate(all="ignore"):  # integers wrap at their width
            for v in payloads:
                if exclusive:
                    out.append(acc)
                acc = rep(acc + rep(v))
                if not exclusive:
                    out.append(acc)
        return out

    return _lane_value(c, call, call.args[0]), perform


@lowering(P.shuffle, P.shuffle_xor, P.shuffle_down, P.shuffle_up)
def _shuffle(c, call, site):
    value = _lane_value(c, call, call.args[0])
    offset = convert(c.expr(call.args[1]), call.args[1].type, ScalarType(D.i64))
    prim = call.prim

    def perform(run, stmt, payloads):
        width = P.subgroup_width(len(payloads))
        return [
            payloads[_source(prim, lane, int(d), width)][0] for lane, (_, d) in enumerate(payloads)
        ]

    return (lambda f: (value(f), offset(f))), perform


def _source(prim, lane: int, delta: int, width: int) -> int:
    """The lane whose value lane ``lane`` gets (its own outside the sub-group)."""
    base, pos = lane - lane % width, lane % width
    if prim is P.shuffle:
        return base + (delta & (width - 1))
    k = {P.shuffle_xor: pos ^ delta, P.shuffle_down: pos + delta}.get(prim, pos - delta)
    return base + k if 0 <= k < width else lane
