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
from ....errors import RaceError
from ....tile import blocks as B
from ....tile import primitives as P
from ...ir import ScalarType, TileType
from ...passes.tile_indexing import IN_BOUNDS
from ...typer import concrete
from .. import semantics
from ..target import lowerings_table
from . import tiles
from .values import HALF, cast_function, compute_type, convert

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


@lowering(P.group_count)
def _group_count(c, call, site):
    axis = call.args[0].value
    return lambda f: np.int64(f.vars["__grid__"][axis] if axis < len(f.group_ids) else 1)


@lowering(P.group_tile_count)
def _group_tile_count(c, call, site):
    size = np.int64(np.prod(c.kir.tile_shape))
    return lambda f: size


def _same_bits(a, b) -> bool:
    """Whether two values of one NumPy dtype have the same bits (what ``atomic_cas``
    compares: -0.0 is not 0.0, a NaN matches itself)."""
    return np.asarray(a).tobytes() == np.asarray(b).astype(np.asarray(a).dtype).tobytes()


@lowering(*P.ATOMICS)
def _atomic(c, call, site):
    """``old = a[i]; a[i] = update(old, ...)``: the lanes run one at a time, so an atomic
    is a plain read-modify-write, rounded to the element's dtype once when stored."""
    array, index, *values = call.args
    name, loc, op = array.name, call.loc, call.prim.atomic
    dtype = c.types[name].dtype
    where = c.indices(index.items)
    given = ScalarType(D.f32 if dtype in HALF else dtype)
    vs = [convert(c.expr(v), v.type, given) for v in values]
    to_compute = np.float32 if dtype in HALF else None
    what = f"atomic {op}"
    combine = semantics.ATOMIC_UPDATE.get(op)
    fenced = op in ("xchg", "cas")  # they order memory (races.py)

    def run(frame):
        args = [v(frame) for v in vs]
        if op == "cas":
            expected, new = args

            def update(old):
                return new if _same_bits(old, expected) else old
        else:
            (value,) = args

            def update(old):
                return combine(old, value)

        with np.errstate(all="ignore"):  # the result is rounded to the element's dtype once
            old = frame.vars[name].atomic(where(frame), update, frame.who(loc), what, fenced)
        return to_compute(old) if to_compute is not None else old

    return run


def _nothing(frame):
    return None


@lowering(P.tbarrier)
def _tbarrier(c, call, site):
    def perform(run, stmt, payloads):
        run.clock.tick()  # orders the group's global accesses too (races.py)
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


# ----------------------------------------------------------------------------- tiles
# A tile primitive that makes a value runs once per group, in lane 0's frame (its
# operands are uniform); the elementwise ones compute one element at frame.element.


def _group_once(compute):
    """(payload, perform) of a tile collective: ``compute(frame, run)`` once, for all."""

    def perform(run, stmt, frames):
        return [compute(frames[0], run)] * len(frames)

    return (lambda f: f), perform


def _shape(call, k: int) -> tuple[int, ...]:
    return tuple(int(d.value) for d in call.args[k].items)


@lowering(B.zeros, B.full)
def _filled(c, call, site):
    t = call.type
    value = (
        convert(c.expr(call.args[1]), call.args[1].type, ScalarType(t.dtype))
        if call.prim is B.full
        else (lambda f: 0)
    )
    return _group_once(lambda f, run: np.full(t.shape, value(f), compute_type(t.dtype)))


@lowering(B.arange)
def _arange(c, call, site):
    n = call.type.shape[0]
    return _group_once(lambda f, run: np.arange(n, dtype=np.int64))


def _read_tile(c, name: str, t, other, loc, positions):
    """A tile read from array ``name``: each element from the position ``positions(frame,
    array)`` gives it (None: outside the array, or masked: ``other``)."""
    fill = convert(c.expr(other), other.type, ScalarType(t.dtype))
    to_compute = np.float32 if t.dtype in HALF else None

    def compute(frame, run):
        array, who = frame.vars[name], run.group_who(loc)
        out = np.empty(t.shape, compute_type(t.dtype))
        for index, pos in positions(frame, array):
            value = array.load(pos, who) if pos is not None else fill(frame)
            out[index] = to_compute(value) if to_compute is not None else value
        return out

    return _group_once(compute)


@lowering(B.load_block)
def _load_block(c, call, site):
    src, offset, _, other = call.args
    start, shape = c.indices(offset.items), call.type.shape

    def positions(frame, array):
        at = tuple(int(i) for i in start(frame))
        return tiles.block_positions(at, shape, array.shape)

    return _read_tile(c, src.name, call.type, other, call.loc, positions)


@lowering(B.store_block)
def _store_block(c, call, site):
    dst, offset, t, mask = call.args
    name, loc = dst.name, call.loc
    start = c.indices(offset.items)
    to_storage = tiles.storage_of(t.type.dtype, c.types[name].dtype)

    def compute(frame, run):
        array, who = frame.vars[name], run.group_who(loc)
        values = frame.vars[t.name]
        keep = frame.vars[mask.name] if mask is not None else None
        at = tuple(int(i) for i in start(frame))
        for index, pos in tiles.block_positions(at, values.shape, array.shape):
            if pos is None or (keep is not None and not keep[tiles.at_element(keep.shape, index)]):
                continue
            with np.errstate(all="ignore"):
                array.store(pos, to_storage(values[index]), who)
        return None

    return _group_once(compute)


def _index_reader(c, call, index, mask):
    """``positions(frame, shape)``: each element's array position (a tuple of ints) and
    whether it is touched, from the index tiles of a gather or scatter. A ``tile.load`` or
    ``tile.store`` (passes/tile_indexing.py) touches each position not masked off, so one
    outside the array is the array's OutOfBoundsError, naming it and the line."""
    checked = bool(call.attrs.get(IN_BOUNDS))
    items = []
    for item in index.items:
        if isinstance(item.type, TileType):
            items.append(lambda f, name=item.name: f.vars[name])
        else:
            items.append(c.expr(item))

    def positions(frame, shape, extent):
        idx = [np.broadcast_to(np.asarray(get(frame), np.int64), shape) for get in items]
        keep = np.broadcast_to(frame.vars[mask.name], shape) if mask is not None else None
        for element in np.ndindex(*shape):
            pos = tuple(int(i[element]) for i in idx)
            inside = checked or all(0 <= p < n for p, n in zip(pos, extent))
            yield element, pos if inside and (keep is None or keep[element]) else None

    return positions


@lowering(B.gather)
def _gather(c, call, site):
    src, index, mask, other = call.args
    indexed, shape = _index_reader(c, call, index, mask), call.type.shape
    return _read_tile(
        c, src.name, call.type, other, call.loc, lambda f, a: indexed(f, shape, a.shape)
    )


@lowering(B.scatter)
def _scatter(c, call, site):
    """Two elements written to one position must carry the same bits: which one lands is
    the target's choice (CUDA's threads race), so anything else is a ``RaceError``."""
    dst, index, t, mask = call.args
    name, loc = dst.name, call.loc
    positions = _index_reader(c, call, index, mask)
    what = "tile.store" if call.attrs.get(IN_BOUNDS) else "tile.scatter"
    to_storage = tiles.storage_of(t.type.dtype, c.types[name].dtype)

    def compute(frame, run):
        array, who = frame.vars[name], run.group_who(loc)
        values = frame.vars[t.name]
        written: dict = {}
        for element, pos in positions(frame, values.shape, array.shape):
            if pos is None:
                continue
            with np.errstate(all="ignore"):
                value = to_storage(values[element])
            bits = np.asarray(value).tobytes()
            first = written.setdefault(pos, (element, bits))
            if first[1] != bits:
                raise RaceError(
                    who.kernel,
                    f"{what} writes different values to element {pos} of '{name}' "
                    f"(from the tile's elements {first[0]} and {element}): which one lands "
                    "differs between targets",
                    (("", loc),),
                )
            array.store(pos, value, who)
        return None

    return _group_once(compute)


@lowering(B.dot)
def _dot(c, call, site):
    a, b, acc = call.args[0].name, call.args[1].name, call.args[2]
    t = call.type
    rep = compute_type(t.dtype)

    def compute(frame, run):
        x, y = frame.vars[a].astype(rep), frame.vars[b].astype(rep)
        out = frame.vars[acc.name].copy() if acc is not None else np.zeros(t.shape, rep)
        with np.errstate(all="ignore"):  # k in order, each product and sum in the acc type
            for k in range(x.shape[1]):
                out = (out + (x[:, k : k + 1] * y[k : k + 1, :]).astype(rep)).astype(rep)
        return out

    return _group_once(compute)


@lowering(B.tile_sum, B.tile_max, B.tile_min)
def _tile_reduce(c, call, site):
    name, axis = call.args[0].name, call.args[1]
    op = call.prim.op

    def compute(frame, run):
        values = frame.vars[name]
        if axis is None:
            return tree_reduce(values.ravel(), op)
        moved = np.moveaxis(values, axis.value, -1)
        out = np.empty(moved.shape[:-1], values.dtype)
        for index in np.ndindex(*out.shape):
            out[index] = tree_reduce(moved[index], op)
        return out

    return _group_once(compute)


@lowering(B.where)
def _where(c, call, site):
    cond = c.truth(call.args[0])
    a = convert(c.expr(call.args[1]), call.args[1].type, call.type)
    b = convert(c.expr(call.args[2]), call.args[2].type, call.type)
    return lambda f: a(f) if cond(f) else b(f)


@lowering(B.astype)
def _astype(c, call, site):
    source, dtype = call.args[0], call.args[1].value
    value = c.expr(source)
    if dtype in HALF:  # an explicit conversion rounds, as a scalar cast does
        rounding = cast_function(dtype)
        return lambda f: rounding(value(f))
    return convert(value, source.type, ScalarType(dtype))


@lowering(B.transpose)
def _transpose(c, call, site):
    rank = len(call.type.shape)
    return tiles.moved(
        c.expr(call.args[0]), lambda el: el[: len(el) - rank] + el[len(el) - rank :][::-1]
    )


@lowering(B.expand_dims)
def _expand_dims(c, call, site):
    rank, axis = len(call.type.shape), call.args[1].value

    def move(el):
        head, tail = el[: len(el) - rank], el[len(el) - rank :]
        return head + tail[:axis] + tail[axis + 1 :]

    return tiles.moved(c.expr(call.args[0]), move)
