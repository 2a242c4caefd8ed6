"""The CUDA target's lowering of each primitive (one function per primitive).

One thread is one lane, so ids are thread and block indices, and a collective is code
every thread of the block runs: group exchanges go through shared scratch between
``cuda.syncthreads()`` calls, and the order of arithmetic is the one every target uses
(the fixed tree for reductions, lane order for scans), so results are bitwise equal to
the CPU's. Shuffles are ``shfl.sync`` on a GPU; the simulator, which has no warp
shuffles, exchanges through shared scratch instead.
"""

from __future__ import annotations

import math

from .... import dtypes as D
from ....errors import KernelError
from ....tile import blocks as B
from ....tile import primitives as P
from ...ir import ScalarType
from ...passes.prefetch import keep_in_flight
from ...typer import concrete
from ..common_lowerings import COMMON_LOWERINGS
from ..pysource import combine, ctor, subgroup_source
from ..target import lowerings_table
from . import atomics, blocked_tiles, mma

LOWERINGS, lowering = lowerings_table()
SHFL_TYPES = {D.i32: "np.int32", D.i64: "np.int64", D.f32: "np.float32", D.f64: "np.float64"}
WARP = 32


@lowering(*P.ATOMICS)
def _atomic(cg, call, site):
    """CUDA's own atomic where it has one, else a compare-and-swap loop (atomics.py)."""
    array, index, *values = call.args
    dtype = cg.types[array.name].dtype
    op = call.prim.atomic
    if dtype.name not in atomics.DTYPES:
        raise KernelError(
            cg.kir.name,
            f"{call.prim.name} on {dtype.name} is not supported on the CUDA target "
            f"(supported: {', '.join(atomics.DTYPES)})",
            call.loc,
        )
    given = ScalarType(D.f32 if dtype in (D.f16, D.bf16) else dtype)
    vs = [cg.conv(cg.expr(v), v.type, given) for v in values]
    idx = cg.index(index.items, array, call.loc)
    idx = idx if len(index.items) == 1 else f"({idx})"
    return atomics.call(op, dtype.name, cg.name(array.name), idx, vs)


@lowering(P.tbarrier)
def _tbarrier(cg, call, site):
    if cg.async_copies and keep_in_flight(site):
        cg.wait_keeping_in_flight(site)
    elif cg.async_copies and cg.uses_copies:
        cg.emit("_cp_wait_all()  # a barrier completes outstanding copies", call.loc)
    cg.emit("cuda.syncthreads()", call.loc)


@lowering(P.copy_wait)
def _copy_wait(cg, call, site):
    # other lanes' parts of a copy are visible only after a barrier as well
    if cg.async_copies and keep_in_flight(site):
        cg.wait_keeping_in_flight(site)
    elif cg.async_copies:
        cg.emit("_cp_wait_all()", call.loc)
    cg.emit("cuda.syncthreads()  # cp_async.wait()", call.loc)


def _finish(cg, site, scratch: str, size: int, op: str, t, result=None) -> None:
    """The fixed tree over ``scratch[:size]`` (of ``t``'s dtype), run by the lanes
    together; all lanes read the result (of type ``result``, default ``t``)."""
    cg.emit("cuda.syncthreads()")
    parallel_tree(cg, scratch, size, combine(op, t.dtype))
    cg.set_result(site, f"{scratch}[0]", result or t)
    cg.emit("cuda.syncthreads()  # the scratch may be reused right after")


def tree_steps(size: int) -> list[tuple[int, int]]:
    """The fixed tree (docs/language.md) over ``size`` values as steps ``(count, offset)``:
    ``s[i] = s[i] ⊕ s[i + offset]`` for ``i < count``. First ``size - p`` with offset ``p``
    (``p`` the largest power of two ≤ size), then ``h, h`` for ``h = p/2 … 1``."""
    p = 1
    while p * 2 <= size:
        p *= 2
    steps = [(size - p, p)] if size > p else []
    h = p // 2
    while h >= 1:
        steps.append((h, h))
        h //= 2
    return steps


def parallel_tree(cg, scratch: str, size: int, combine_fn: str) -> None:
    """Emit the fixed tree as steps run by all lanes, a barrier after each: a step's
    combines write ``s[:count]`` and read ``s[offset:offset + count]`` (offset ≥ count), so
    lanes take one each. The same pairs in the same order as ``_tree_reduce`` on every
    target, bit for bit, in log2(size) barriers instead of one lane's size - 1 steps."""
    for count, offset in tree_steps(size):
        i = "_lane" if count <= cg.lanes else "_i"
        if count <= cg.lanes:
            cg.emit(f"if _lane < {count}:")
        else:
            cg.emit(f"for _i in range(_lane, {count}, {cg.lanes}):")
        cg.emit(f"    {scratch}[{i}] = {combine_fn}({scratch}[{i}], {scratch}[{i} + {offset}])")
        cg.emit("cuda.syncthreads()")


@lowering(P.reduce_sum, P.reduce_max, P.reduce_min)
def _reduce_shared(cg, call, site):
    source = call.args[0]
    t = concrete(call.type)
    at = cg.types[source.name]
    shape = cg.shared_shape(source.name, site)
    size = math.prod(shape)
    scratch = cg.scratch_for(t.dtype, size)
    cg.emit(f"for _i in range(_lane, {size}, {cg.lanes}):", call.loc)
    index, rest = [], "_i"
    for d in reversed(range(len(shape))):
        index.insert(0, f"{rest} % {shape[d]}" if d else rest)
        rest = f"({rest} // {shape[d]})"
    element = cg.load_storage(f"{cg.name(source.name)}[{', '.join(index)}]", at.dtype)
    cg.emit(f"    {scratch}[_i] = {cg.conv(element, ScalarType(at.dtype), t)}")
    _finish(cg, site, scratch, size, call.prim.op, t)


def warp_tree(lanes: int):
    """The fixed tree over ``lanes`` values (a power of two, at least a warp) as warp 0
    runs it: for its lane ``i``, ``(cross, shuffles)``: ``cross`` the steps whose offsets
    are a warp or more, folded into one expression over the values at ``i + c`` (nested
    pairs ``(left, right)`` of such constants ``c``; the tree's pairs and order), then
    ``shuffles``: the offsets below a warp, each ``v = v ⊕ v[i ^ h]`` (for ``i < h``,
    ``i ^ h`` is the tree's ``i + h``; the other lanes' values are never read)."""

    def fold(c: int, offsets: list[int]):
        if not offsets:
            return c
        return (fold(c, offsets[:-1]), fold(c + offsets[-1], offsets[:-1]))

    offsets = [offset for _, offset in tree_steps(lanes)]
    cross = [o for o in offsets if o >= WARP]
    return fold(0, cross), [o for o in offsets if o < WARP]


def _fold_code(tree, scratch: str, fn: str) -> str:
    if isinstance(tree, int):
        return f"{scratch}[_lane + {tree}]" if tree else f"{scratch}[_lane]"
    left, right = tree
    return f"{fn}({_fold_code(left, scratch, fn)}, {_fold_code(right, scratch, fn)})"


def _shuffle_tree(cg, site, scratch: str, op: str, t, result=None) -> None:
    """The fixed tree with two barriers instead of log2(lanes): every lane posts its
    value, warp 0 combines the posted values of its lane's column in the tree's order
    (the steps of offsets a warp and above), then the steps below a warp by
    ``shfl.sync.bfly``; lane 0 posts the result. The same pairs in the same order as
    :func:`parallel_tree`, so the same bits."""
    fn = combine(op, t.dtype)
    cross, shuffles = warp_tree(cg.lanes)
    wire = SHFL_TYPES[t.dtype]
    cg.emit("cuda.syncthreads()")
    cg.emit(f"if _lane < {WARP}:")
    cg.emit(f"    _wt = {_fold_code(cross, scratch, fn)}")
    for h in shuffles:
        moved = f"cuda.shfl_sync(np.uint32(0xFFFFFFFF), {wire}(_wt), np.int32(_lane ^ {h}))"
        cg.emit(f"    _wt = {fn}(_wt, {ctor(t.dtype)}({moved}))")
    cg.emit("    if _lane == 0:")
    cg.emit(f"        {scratch}[0] = _wt")
    cg.emit("cuda.syncthreads()")
    cg.set_result(site, f"{scratch}[0]", result or t)
    cg.emit("cuda.syncthreads()  # the scratch may be reused right after")


def _warp_shuffles(cg, t) -> bool:
    """Whether a lane reduction of ``t`` runs as :func:`_shuffle_tree`: on a GPU (the
    simulator has no shuffles), a power-of-two group of whole warps, a type a shuffle
    carries whole."""
    lanes = cg.lanes
    return not cg.simulated and lanes >= WARP and lanes & (lanes - 1) == 0 and t.dtype in SHFL_TYPES


@lowering(P.sum, P.max, P.min)
def _reduce_lanes(cg, call, site):
    value = call.args[0]
    t = concrete(call.type)
    scratch = cg.scratch_for(t.dtype, cg.lanes)
    cg.emit(f"{scratch}[_lane] = {cg.conv(cg.expr(value), value.type, t)}", call.loc)
    if _warp_shuffles(cg, t):
        _shuffle_tree(cg, site, scratch, call.prim.op, t)
    else:
        _finish(cg, site, scratch, cg.lanes, call.prim.op, t)


@lowering(P.prefix_sum)
def _prefix_sum(cg, call, site):
    """Lane 0 adds the lanes' values one after another, in lane order (the order every
    target adds in: bitwise equal results); each lane reads its prefix."""
    value, exclusive = call.args
    t = concrete(call.type)
    scratch = cg.scratch_for(t.dtype, cg.lanes)
    cg.emit(f"{scratch}[_lane] = {cg.conv(cg.expr(value), value.type, t)}", call.loc)
    cg.emit("cuda.syncthreads()")
    cg.emit("if _lane == 0:")
    cg.emit(f"    for _i in range(1, {cg.lanes}):")
    cg.emit(f"        {scratch}[_i] = {cg.arith(f'{scratch}[_i - 1]', '+', f'{scratch}[_i]', t)}")
    cg.emit("cuda.syncthreads()")
    if exclusive.value:
        result = f"({scratch}[_lane - 1] if _lane > 0 else {ctor(t.dtype)}(0))"
    else:
        result = f"{scratch}[_lane]"
    cg.set_result(site, result, t)
    cg.emit("cuda.syncthreads()  # the scratch may be reused right after")


@lowering(P.shuffle, P.shuffle_xor, P.shuffle_down, P.shuffle_up)
def _shuffle(cg, call, site):
    """``shfl.sync`` (idx mode) from the lane the language defines: computed here, so
    the rule for sources outside the sub-group is the same on every target."""
    value, offset = call.args
    t = concrete(call.type)
    width = P.subgroup_width(cg.lanes)
    delta = cg.conv(cg.expr(offset), offset.type, ScalarType(D.i64))
    cg.emit(f"_pos = _lane % {width}", call.loc)
    cg.emit(f"_src = {subgroup_source(call.prim, '_pos', delta, width)}")
    v = cg.conv(cg.expr(value), value.type, t)
    if cg.simulated:  # no warp shuffles in the simulator: exchange through scratch
        scratch = cg.scratch_for(t.dtype, cg.lanes)
        cg.emit(f"{scratch}[_lane] = {v}")
        cg.emit("cuda.syncthreads()")
        cg.set_result(site, f"{scratch}[_lane - _pos + _src]", t)
        cg.emit("cuda.syncthreads()  # the scratch may be reused right after")
        return
    wire = SHFL_TYPES.get(t.dtype, "np.int64" if t.dtype.is_int else "np.float32")
    if t.dtype == D.bool_:
        wire = "np.int32"
    mask = hex((1 << width) - 1)
    shuffled = f"cuda.shfl_sync(np.uint32({mask}), {wire}({v}), np.int32(_src))"
    cg.set_result(site, f"{ctor(t.dtype)}({shuffled})", t)


# ----------------------------------------------------------------------------- tiles
# Tiles live in shared memory and every lane computes its share of the elements, in the
# order the other targets use (so the results are the same bits), except tile.dot on
# sm_80+, which runs on tensor cores (mma.py).
LOWERINGS.update(COMMON_LOWERINGS)


@lowering(B.dot)
def _dot(cg, call, site):
    """f16/bf16/i8 (f32 with ``allow_tf32``) on sm_80+, in whole instruction tiles and whole
    warps: ``mma.sync`` fragments spread over the group's warps (mma.py). Otherwise the
    plain path (FFMA): each lane computes a block of whole elements of the result in
    registers, k in order (the CPU's order). A result that replaces an input is computed
    aside, then copied."""
    a, b, acc, allow_tf32 = call.args[:4]
    t = call.type
    (m, k), n = a.type.shape, b.type.shape[1]
    x, y = cg.name(a.name), cg.name(b.name)
    # computed aside where the result replaces an input: other lanes still read that tile
    replaces_input = site.target in (a.name, b.name)
    dest = cg.tile_temp(t) if replaces_input else cg.name(site.target)
    init = cg.name(acc.name) if acc is not None else None
    cg.emit(f"# tile.dot: {a.type.shape} @ {b.type.shape}", call.loc)
    inst = None
    if cg.tensor_cores:
        tf32 = allow_tf32 is not None and bool(allow_tf32.value)
        inst = mma.instruction_for(a.type.dtype, b.type.dtype, tf32, m, n, k, cg.lanes)
    if inst is not None:
        mma.emit_dot(cg, inst, x, y, init, dest, (m, k, n))
    else:
        _register_blocked_dot(cg, x, y, init, dest, (m, k, n), ctor(t.dtype))
    if replaces_input:
        target = cg.name(site.target)
        cg.element_loops(t.shape, lambda: cg.emit(f"{target}[_e0, _e1] = {dest}[_e0, _e1]"))


# Steps of k per iteration of the plain tile.dot's loop (NVVM does not unroll it): 4 ran
# a 4096^3 f32 product 1.16x faster than 1 on an H100, 2 in between (bench/README.md)
UNROLL_K = 4


def micro_tile(m: int, n: int, lanes: int) -> tuple[int, int]:
    """The rows and columns of the result each lane of the plain ``tile.dot`` computes
    at once (powers of two dividing ``m`` and ``n``): its share of the result, at most
    8 x 8 = 64 accumulators, which stay in registers."""
    share = min(64, max(1, m * n // lanes))
    rows = 1
    while rows * 2 <= 8 and (rows * 2) ** 2 <= share and m % (rows * 2) == 0:
        rows *= 2
    cols = 1
    while cols * 2 <= 8 and rows * cols * 2 <= share and n % (cols * 2) == 0:
        cols *= 2
    return rows, cols


def _register_blocked_dot(cg, x: str, y: str, init, dest: str, mkn, rep: str) -> None:
    """The plain path: each lane computes an ``r x c`` block of the result in registers,
    reading ``r + c`` operand values from shared memory per step of ``k`` for ``r * c``
    multiply-adds (one element per lane would read two per multiply-add). A lane's rows
    lie ``m / r`` apart and its columns ``n / c`` apart, so neighbouring lanes read
    neighbouring columns of ``y`` (no bank conflicts) and mostly the same row of ``x``
    (a broadcast). Every element still sums over ``k`` in order: the same bits as one
    element per lane. The block is written as loops over small local arrays (the
    accumulators, a column of ``x``, a row of ``y``) of constant extents, which NVVM
    unrolls into registers (tests/test_cuda_plain_dot.py: no local memory), not as
    ``r * c`` named variables: a fifth of the source for numba-cuda's frontend to
    process (the flash-attention example's kernel 10.4 → 4.7 s to PTX)."""
    m, k, n = mkn
    r, c = micro_tile(m, n, cg.lanes)
    row_step, col_step = m // r, n // c
    cg.emit(f"for _t in range(_lane, {row_step * col_step}, {cg.lanes}):")
    cg.indent += 1
    cg.emit(f"_i0 = _t // {col_step}")
    cg.emit(f"_j0 = _t % {col_step}")
    cg.emit(f"_acc = cuda.local.array({r * c}, {rep})")
    cg.emit(f"_xs = cuda.local.array({r}, {rep})")
    cg.emit(f"_ys = cuda.local.array({c}, {rep})")
    cg.emit(f"for _i in range({r}):")
    cg.emit(f"    for _j in range({c}):")
    start = f"{init}[_i0 + _i * {row_step}, _j0 + _j * {col_step}]" if init is not None else "0"
    cg.emit(f"        _acc[_i * {c} + _j] = {rep}({start})")
    unroll = UNROLL_K if k % UNROLL_K == 0 else 1
    cg.emit(f"for _kb in range(0, {k}, {unroll}):")
    cg.indent += 1
    for step in range(unroll):  # written out: NVVM keeps a loop over the steps a loop
        cg.emit(f"_k = _kb + {step}" if step else "_k = _kb")
        cg.emit(f"for _i in range({r}):")
        cg.emit(f"    _xs[_i] = {rep}({x}[_i0 + _i * {row_step}, _k])")
        cg.emit(f"for _j in range({c}):")
        cg.emit(f"    _ys[_j] = {rep}({y}[_k, _j0 + _j * {col_step}])")
        cg.emit(f"for _i in range({r}):")
        cg.emit(f"    for _j in range({c}):")
        cg.emit(f"        _acc[_i * {c} + _j] = {rep}(_acc[_i * {c} + _j] + _xs[_i] * _ys[_j])")
    cg.indent -= 1
    cg.emit(f"for _i in range({r}):")
    cg.emit(f"    for _j in range({c}):")
    cg.emit(f"        {dest}[_i0 + _i * {row_step}, _j0 + _j * {col_step}] = _acc[_i * {c} + _j]")
    cg.indent -= 1
    cg.emit("cuda.syncthreads()")


@lowering(B.tile_sum, B.tile_max, B.tile_min)
def _tile_reduce(cg, call, site):
    """The fixed tree: lane 0 over all elements, or each lane for its results along
    ``axis`` (gathered into a lane-private array)."""
    source, axis = call.args
    shape = source.type.shape
    t = source.type
    combine_fn = combine(call.prim.op, t.dtype)
    if axis is None and source.name in cg.blocked:  # each thread's values, then the threads
        scratch = blocked_tiles.reduce_tile(
            cg, source, lambda n: cg.scratch_for(t.dtype, n), combine_fn, tree_steps
        )
        if _warp_shuffles(cg, t):
            _shuffle_tree(cg, site, scratch, call.prim.op, t, call.type)
        else:
            _finish(cg, site, scratch, cg.lanes, call.prim.op, t, call.type)
        return
    if axis is None:
        size = math.prod(shape)
        scratch = cg.scratch_for(t.dtype, size)
        lin = " + ".join(f"_e{d} * {math.prod(shape[d + 1 :])}" for d in range(len(shape)))
        cg.element_loops(
            shape, lambda: cg.emit(f"{scratch}[{lin}] = {cg.tile_read(source.name, shape)}")
        )
        cg.emit("cuda.syncthreads()")
        parallel_tree(cg, scratch, size, combine_fn)
        cg.set_result(site, f"{scratch}[0]", call.type)
        cg.emit("cuda.syncthreads()  # the scratch may be reused right after")
        return
    a = axis.value
    out_shape = shape[:a] + shape[a + 1 :]
    dest = cg.name(site.target)

    def body():
        rest = list(cg.element)
        index = ", ".join(rest[:a] + ["_r"] + rest[a:])
        cg.emit(f"_row = cuda.local.array({shape[a]}, {ctor(t.dtype)})")
        cg.emit(f"for _r in range({shape[a]}):")
        cg.emit(f"    _row[_r] = {cg.name(source.name)}[{index}]")
        cg.emit(f"{dest}[{', '.join(rest)}] = _tree_reduce(_row, {shape[a]}, {combine_fn})")

    cg.element_loops(out_shape, body)
