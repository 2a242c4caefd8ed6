"""Groups → the source of generated ``@kernel`` functions (kernel-language Python).

Each group becomes one kernel whose shapes are literals (a graph is traced per shape):

* elementwise: a flat kernel, one lane per element of the group's shape; inputs are
  passed flat and read at the element's broadcast index;
* matmul: a tile kernel, one group of lanes per ``BM × BN`` block of the result,
  ``tile.dot`` over ``BK`` steps, the epilogue as tile expressions on the accumulator,
  each stored value written with ``tile.store_block`` (edges masked);
* reduce: a flat kernel, one lane per result, in index order (the same bits on every
  target; float sums accumulate in f64 and round once), the prologue computed per
  element inside the loop;
* softmax: one group per row (lanes take strided elements; max and sum meet in the
  language's fixed tree); cross_entropy (row losses, and their gradient) the same way;
  transpose: one lane per element.

:class:`Source` says what the plan passes: each argument's value and whether it goes
flat (1-d) or as the 2-d matrix.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np

from .. import dtypes as D
from .declare import OPS, pow_code
from .fuse import Group, epilogue_layout
from .ir import Const, Node, Value

KERNEL_GLOBALS = (
    *("math", "tile", "group_id", "mut", "KiB", "complex64", "complex128"),
    *(d.name for d in D.ALL_DTYPES),
)


@dataclass
class Arg:
    value: Value
    flat: bool  # passed as a 1-d view (else as a matrix: the leading dims folded into rows)
    written: bool = False


@dataclass
class Source:
    name: str
    text: str
    grid: tuple[int, ...]
    args: list[Arg]


def literal(value: float) -> str:
    """A float as kernel source (``math.nan``, ``math.inf`` for the numbers ``repr``
    spells as names the kernel would not know)."""
    value = float(value)
    if math.isnan(value):
        return "math.nan"
    if math.isinf(value):
        return "math.inf" if value > 0 else "-math.inf"
    return repr(value)


def _param(a: Arg, i: int) -> str:
    shape = a.value.shape
    dims = (math.prod(shape),) if a.flat else (math.prod(shape[:-1]), shape[-1])
    t = f"{a.value.dtype.name}[{', '.join(map(str, dims))}]"
    return f"p{i}: {'mut[' + t + ']' if a.written else t}"


class _Emitter:
    def __init__(self, group: Group, name: str):
        self.group, self.name = group, name
        self.lines: list[str] = []
        self.args: list[Arg] = []
        self.names: dict[int, str] = {}  # id(value) → its local name in the kernel

    def arg(self, value: Value, flat: bool, written: bool = False) -> str:
        for i, a in enumerate(self.args):
            if a.value is value and a.flat == flat and a.written == written:
                return f"p{i}"
        self.args.append(Arg(value, flat, written))
        return f"p{len(self.args) - 1}"

    def emit(self, line: str, depth: int) -> None:
        self.lines.append("    " * depth + line)

    def source(self, decorator: str, grid: tuple[int, ...]) -> Source:
        params = ", ".join(_param(a, i) for i, a in enumerate(self.args))
        head = [decorator, f"def {self.name}({params}):"]
        return Source(self.name, "\n".join(head + self.lines) + "\n", grid, self.args)

    # ---------------------------------------------------------------- element code
    def const(self, c: Const, dtype: D.DType) -> str:
        if dtype is not None and dtype.is_float:
            return literal(c.value)
        return repr(c.value)

    def node_code(self, n: Node, tiles: bool) -> str:
        decl = OPS[n.op]
        operand_dtype = next((v.dtype for v in n.inputs if not isinstance(v, Const)), n.dtype)
        if n.op == "where":
            operand_dtype = n.dtype
        parts = [
            self.const(v, operand_dtype) if isinstance(v, Const) else self.names[id(v)]
            for v in n.inputs
        ]
        template = decl.tile_code if tiles and decl.tile_code else decl.code
        if n.op == "pow":
            template = pow_code(n.inputs[1], n.dtype) or template
        elif n.op in ("floor_divide", "remainder") and not tiles and not n.dtype.is_float:
            # NumPy's integer // 0 and % 0 are 0: said here, so that the debug target's
            # check of a kernel's division by zero (an error there) does not fire
            template = f"({template} if {{1}} != 0 else {{dtype}}(0))"
        extra = {k: v for k, v in n.attrs.items() if k not in ("dtype", "shape")}
        return template.format(*parts, dtype=n.attrs.get("dtype", n.dtype).name, **extra)


def _digits(shape: tuple[int, ...], index: str) -> list[str]:
    """The multi-index of flat ``index`` in row-major ``shape``, per axis."""
    out = []
    for d, n in enumerate(shape):
        stride = math.prod(shape[d + 1 :])
        part = f"({index} // {stride})" if stride != 1 else index
        out.append(f"({part} % {n})" if d else part)
    return out


def broadcast_index(shape: tuple[int, ...], out_shape: tuple[int, ...], index: str) -> str:
    """The flat index into an array of ``shape`` broadcast to ``out_shape``."""
    if shape == out_shape:
        return index
    digits = _digits(out_shape, index)
    terms = []
    offset = len(out_shape) - len(shape)
    for e, n in enumerate(shape):
        if n != 1:
            stride = math.prod(shape[e + 1 :])
            terms.append(digits[e + offset] + (f" * {stride}" if stride != 1 else ""))
    return " + ".join(terms) if terms else "0"


def _element_body(em: _Emitter, nodes: list[Node], shape, index: str, depth: int) -> None:
    """Statements computing ``nodes`` at flat ``index`` of ``shape`` (loads first)."""
    for n in nodes:
        for v in n.inputs:
            if isinstance(v, Const) or id(v) in em.names:
                continue
            local = f"x{len(em.names)}"
            em.names[id(v)] = local
            at = broadcast_index(v.shape, shape, index)
            em.emit(f"{local} = {em.arg(v, flat=True)}[{at}]", depth)
        local = f"v{n.number}"
        em.emit(f"{local} = {em.node_code(n, tiles=False)}", depth)
        em.names[id(n)] = local


def elementwise(group: Group, name: str) -> Source:
    em = _Emitter(group, name)
    size = math.prod(group.shape)
    em.emit("i = tile.linear_id()", 1)
    em.emit(f"if i < {size}:", 1)
    _element_body(em, group.nodes, group.shape, "i", 2)
    for n in group.outputs:
        em.emit(f"{em.arg(n, flat=True, written=True)}[i] = {em.names[id(n)]}", 2)
    return em.source("@kernel", (max(size, 1),))


def reduce(group: Group, name: str) -> Source:
    em = _Emitter(group, name)
    node = group.head
    source = node.inputs[0]
    shape, axis = source.shape, node.attrs["axis"]
    outer = math.prod(shape[:axis]) if axis is not None else 1
    length = shape[axis] if axis is not None else math.prod(shape)
    inner = math.prod(shape[axis + 1 :]) if axis is not None else 1
    acc_t = "f32" if node.dtype in D.COMPUTED_IN_F32 else node.dtype.name
    if node.dtype.is_float and node.op in ("sum", "mean"):
        acc_t = "f64"  # float sums add in f64, in index order, and round once at the end
    total = outer * inner
    if inner == 1 and row_reduction(length) and node.dtype != D.bool_:
        return _row_reduce(em, group, outer, length, acc_t)
    columns = inner >= COLUMN_GROUP  # a reduction down columns: lanes side by side
    if columns:  # (o clamped: every lane runs the loop, so the lanes stay in step)
        em.emit(f"o = group_id(0) * {COLUMN_GROUP} + tile.id(1)", 1)
        em.emit(f"base = (min(o, {total - 1}) // {inner}) * {length * inner}", 1)
        em.emit(f"base = base + min(o, {total - 1}) % {inner}", 1)
        depth = 1
    else:
        em.emit("o = tile.linear_id()", 1)
        em.emit(f"if o < {total}:", 1)
        em.emit(f"base = (o // {inner}) * {length * inner} + o % {inner}", 2)
        depth = 2
    em.emit(f"acc = {acc_t}({_identity(node.op, node.dtype)})", depth)
    em.emit(f"for r in range({length}):", depth)
    em.emit(f"i = base + r * {inner}", depth + 1)
    _element_body(em, group.nodes[:-1], shape, "i", depth + 1)
    if id(source) not in em.names:
        em.names[id(source)] = "x_in"
        em.emit(f"x_in = {em.arg(source, flat=True)}[i]", depth + 1)
    value = em.names[id(source)]
    step = {"sum": f"acc + {acc_t}({value})", "mean": f"acc + {acc_t}({value})"}.get(node.op)
    em.emit(f"acc = {step or f'{node.op}(acc, {value})'}", depth + 1)
    result = f"acc / {acc_t}({length})" if node.op == "mean" else "acc"
    out = em.arg(node, flat=True, written=True)
    if columns:
        em.emit(f"if o < {total}:", 1)
    em.emit(f"{out}[o] = {result}", 2)
    if columns:
        return em.source(f"@kernel(tile=(1, {COLUMN_GROUP}))", (-(-total // COLUMN_GROUP),))
    return em.source("@kernel", (max(total, 1),))


def row_reduction(length: int) -> bool:
    """Whether a reduction over the last axis (or over everything) of rows of ``length``
    runs as one group per row (else one lane per row, in index order)."""
    return length >= ROW_MIN


# rows at least this long are reduced by a group each (shorter ones by one lane each)
ROW_MIN = 64


def _row_reduce(em: _Emitter, group: Group, rows: int, length: int, acc_t: str) -> Source:
    """One group per row (``row_lanes`` lanes): each lane combines every ``lanes``-th
    element of the row in order (float sums in f64), the lanes' values meet in the
    language's fixed tree (``tile.sum``/``tile.max``/``tile.min``: the same bits on every
    target), lane 0 writes the result."""
    node = group.head
    source = node.inputs[0]
    lanes = row_lanes(length)
    em.emit(f"base = group_id(0) * {length}", 1)
    em.emit(f"acc = {acc_t}({_identity(node.op, node.dtype)})", 1)
    _emit_each(em, _each("r", length, lanes), 1)
    em.emit("i = base + r", 2)
    _element_body(em, group.nodes[:-1], source.shape, "i", 2)
    if id(source) not in em.names:
        em.names[id(source)] = "x_in"
        em.emit(f"x_in = {em.arg(source, flat=True)}[i]", 2)
    value = f"{acc_t}({em.names[id(source)]})"
    em.emit(
        f"acc = {f'acc + {value}' if node.op in ('sum', 'mean') else f'{node.op}(acc, {value})'}", 2
    )
    tree = "sum" if node.op in ("sum", "mean") else node.op
    em.emit(f"total = tile.{tree}(acc)", 1)
    result = f"total / {acc_t}({length})" if node.op == "mean" else "total"
    out = em.arg(node, flat=True, written=True)
    em.emit("if tile.linear_id() == 0:", 1)
    em.emit(f"{out}[group_id(0)] = {result}", 2)
    scratch = lanes * 8
    return em.source(f"@kernel(tile=({lanes},), shared={scratch})", (max(rows, 1),))


# a reduction down the columns of a row-major array (axis not the last) gives each group
# this many neighbouring columns: the loop over rows runs once per group with the lanes
# innermost (region formation), so one row's loads are contiguous and vectorise
COLUMN_GROUP = 64


def _identity(op: str, dtype: D.DType) -> str:
    if op in ("sum", "mean"):
        return "0"
    if dtype.is_float:
        return "-math.inf" if op == "max" else "math.inf"
    if dtype == D.bool_:
        return "False" if op == "max" else "True"
    info = np.iinfo(dtype.np_dtype)
    return str(info.min if op == "max" else info.max)


def row_lanes(length: int) -> int:
    """Lanes of the group that handles one row of ``length``: about 8 elements each, a
    power of two from 32 (a warp) to 256."""
    lanes = 32
    while lanes < 256 and lanes * 8 < length:
        lanes *= 2
    return lanes


def _each(var: str, length: int, lanes: int) -> tuple[str, ...]:
    """The loop header over a lane's elements of a row, every ``lanes``-th from the
    lane's own: where the lanes divide the row, a loop of a constant trip count (a GPU
    compiler unrolls it, so a thread's loads are in flight together) whose first
    statement sets ``var``; else ``range(lane, length, lanes)``. Same elements, same
    order."""
    if length % lanes:
        return (f"for {var} in range(tile.linear_id(), {length}, {lanes}):",)
    return (
        f"for jt in range({length // lanes}):",
        f"    {var} = tile.linear_id() + jt * {lanes}",
    )


def _emit_each(em, each: tuple[str, ...], depth: int) -> None:
    for line in each:
        em.emit(line, depth)


def _row_max_and_sum(em, x: str, acc_t: str, each: tuple[str, ...], keep: str = "") -> None:
    """Emit a row kernel's ``row_max`` and ``total`` (the sum of ``exp(x - row_max)``):
    each lane over its elements (``each``, the loop header), then the fixed tree.
    ``keep``: an array of the accumulator's dtype that gets each ``exp`` (so later passes
    read it instead of computing it again: the same values)."""
    em.emit(f"m = {acc_t}(-math.inf)", 1)
    _emit_each(em, each, 1)
    em.emit(f"m = max(m, {acc_t}({x}[base + j]))", 2)
    em.emit("row_max = tile.max(m)", 1)
    em.emit(f"s = {acc_t}(0)", 1)
    _emit_each(em, each, 1)
    if keep:
        em.emit(f"e = math.exp({acc_t}({x}[base + j]) - row_max)", 2)
        em.emit("s = s + e", 2)
        em.emit(f"{keep}[base + j] = e", 2)
    else:
        em.emit(f"s = s + math.exp({acc_t}({x}[base + j]) - row_max)", 2)
    em.emit("total = tile.sum(s)", 1)


# a GPU's softmax row kernel holds a lane's elements in registers when it has this many
# or fewer (the row read once and written once, as fast kernels do); more, and it loops
HELD_ELEMENTS = 32


def softmax(group: Group, name: str, device: bool = False) -> Source:
    """One group per row: each lane takes every ``lanes``-th element (max, then the sum of
    ``exp(x - max)``, in its elements' order), the lanes' values meet in the language's
    fixed tree (``tile.max``, ``tile.sum``: the same bits on every target), then each lane
    writes its elements. An f32/f64 result keeps each ``exp`` (computed once) and is
    divided in place; an f16/bf16 one computes it again and rounds once. On a GPU
    (``device``) a lane with at most ``HELD_ELEMENTS`` elements keeps them in variables of
    its own (registers): each element read once, its ``exp`` computed once, each result
    written once; the same operations in the same order, so the same bits."""
    em = _Emitter(group, name)
    node = group.head
    length = node.shape[-1]
    rows = math.prod(node.shape[:-1])
    acc_t = "f64" if node.dtype == D.f64 else "f32"
    x, y = em.arg(node.inputs[0], flat=True), em.arg(node, flat=True, written=True)
    lanes = row_lanes(length)
    scratch = lanes * (8 if acc_t == "f64" else 4)
    decorator = f"@kernel(tile=({lanes},), shared={scratch})"
    em.emit(f"base = group_id(0) * {length}", 1)
    held = length // lanes
    if node.op == "log_softmax":
        _log_softmax(em, x, y, acc_t, node.dtype.name, length, lanes, device)
        return em.source(decorator, (rows,))
    if device and length % lanes == 0 and held <= HELD_ELEMENTS:
        _held_softmax(em, x, y, acc_t, lanes, held)
        return em.source(decorator, (rows,))
    each = _each("j", length, lanes)
    keep = y if node.dtype.name == acc_t else ""  # f16/bf16 results: exp again
    _row_max_and_sum(em, x, acc_t, each, keep)
    _emit_each(em, each, 1)
    e = f"{y}[base + j]" if keep else f"math.exp({acc_t}({x}[base + j]) - row_max)"
    em.emit(f"{y}[base + j] = {e} / total", 2)
    return em.source(decorator, (rows,))


def _log_softmax(
    em, x: str, y: str, acc_t: str, out: str, length: int, lanes: int, device: bool
) -> None:
    """``log_softmax``'s row: the row's max and sum of ``exp(x - max)`` as softmax's (the
    same tree), then each element ``(x - max) - log(sum)`` in the accumulator's dtype,
    rounded once. On a GPU a lane of at most ``HELD_ELEMENTS`` elements keeps them in
    registers (read once; the ``exp`` of each kept aside, the element itself kept for its
    result): the same operations in the same order, so the same bits."""
    held = length // lanes
    if device and length % lanes == 0 and held <= HELD_ELEMENTS:
        at = _held_max_and_sum(em, x, acc_t, lanes, held, keep_exp=False)
        em.emit("lse = math.log(total)", 1)
        for k in range(held):
            em.emit(f"{y}[{at[k]}] = {out}((v{k} - row_max) - lse)", 1)
        return
    each = _each("j", length, lanes)
    _row_max_and_sum(em, x, acc_t, each)
    em.emit("lse = math.log(total)", 1)
    _emit_each(em, each, 1)
    em.emit(f"{y}[base + j] = {out}(({acc_t}({x}[base + j]) - row_max) - lse)", 2)


def _held_softmax(em, x: str, y: str, acc_t: str, lanes: int, held: int) -> None:
    """The lane's ``held`` elements as variables (:func:`_held_max_and_sum`), the
    quotients written: what the division loop computes, in its order."""
    at = _held_max_and_sum(em, x, acc_t, lanes, held)
    for k in range(held):
        em.emit(f"{y}[{at[k]}] = v{k} / total", 1)


def _held_max_and_sum(
    em, x: str, acc_t: str, lanes: int, held: int, keep_exp: bool = True
) -> list[str]:
    """The lane's ``held`` elements (every ``lanes``-th from its own) as variables
    ``v0 ..``: read once, the running max, each ``exp`` kept in place of its element
    (``keep_exp``; else the elements stay), the running sum: ``row_max`` and ``total`` as
    :func:`_row_max_and_sum` computes them, in its order. Returns each element's index
    code."""
    em.emit("lane = tile.linear_id()", 1)
    at = [f"base + lane + {k * lanes}" if k else "base + lane" for k in range(held)]
    for k in range(held):
        em.emit(f"v{k} = {acc_t}({x}[{at[k]}])", 1)
    em.emit(f"m = {acc_t}(-math.inf)", 1)
    for k in range(held):
        em.emit(f"m = max(m, v{k})", 1)
    em.emit("row_max = tile.max(m)", 1)
    em.emit(f"s = {acc_t}(0)", 1)
    for k in range(held):
        if keep_exp:
            em.emit(f"v{k} = math.exp(v{k} - row_max)", 1)
            em.emit(f"s = s + v{k}", 1)
        else:
            em.emit(f"s = s + math.exp(v{k} - row_max)", 1)
    em.emit("total = tile.sum(s)", 1)
    return at


def cross_entropy(group: Group, name: str, device: bool = False) -> Source:
    """``cross_entropy`` (each row's loss) or ``cross_entropy_grad`` (d loss / d logits),
    as :func:`softmax`: one group per row, each lane over every ``lanes``-th element, the
    row's max and sum of ``exp(x - max)`` met in the fixed tree. A loss is
    ``max + log(sum) - x[target]``, written by lane 0; a gradient element is
    ``(exp(x - max) / sum - [j == target]) * g[row]``. A target outside ``0..C-1`` is
    never read through: its row's loss (and gradient) is NaN."""
    em = _Emitter(group, name)
    node = group.head
    logits, targets = node.inputs[:2]
    rows, length = logits.shape
    acc_t = "f64" if logits.dtype == D.f64 else "f32"
    x, t = em.arg(logits, flat=True), em.arg(targets, flat=True)
    upstream = em.arg(node.inputs[2], flat=True) if node.op == "cross_entropy_grad" else None
    y = em.arg(node, flat=True, written=True)
    lanes = row_lanes(length)
    each = _each("j", length, lanes)
    em.emit("r = group_id(0)", 1)
    em.emit(f"base = r * {length}", 1)
    grad = node.op == "cross_entropy_grad"
    held = length // lanes  # on a GPU, few enough a lane: in registers (see softmax)
    held = held if device and length % lanes == 0 and held <= HELD_ELEMENTS else 0
    keep = y if grad and node.dtype.name == acc_t and not held else ""  # each exp once
    at = _held_max_and_sum(em, x, acc_t, lanes, held) if held else []
    if not held:
        _row_max_and_sum(em, x, acc_t, each, keep)
    em.emit(f"k = i64({t}[r])", 1)
    em.emit(f"kk = min(max(k, 0), {length - 1})", 1)  # (a target out of range: NaN)
    out = node.dtype.name
    if upstream is None:
        em.emit(f"loss = row_max + math.log(total) - {acc_t}({x}[base + kk])", 1)
        em.emit("if tile.linear_id() == 0:", 1)
        em.emit(f"{y}[r] = {out}(loss if kk == k else {acc_t}(math.nan))", 2)
    elif held:
        em.emit(f"g = {acc_t}({upstream}[r]) if kk == k else {acc_t}(math.nan)", 1)
        for i in range(held):
            em.emit(f"hit = {acc_t}(1) if lane + {i * lanes} == k else {acc_t}(0)", 1)
            em.emit(f"{y}[{at[i]}] = {out}((v{i} / total - hit) * g)", 1)
    else:
        em.emit(f"g = {acc_t}({upstream}[r]) if kk == k else {acc_t}(math.nan)", 1)
        _emit_each(em, each, 1)
        e = f"{y}[base + j]" if keep else f"math.exp({acc_t}({x}[base + j]) - row_max)"
        em.emit(f"p = {e} / total", 2)
        em.emit(f"hit = {acc_t}(1) if j == k else {acc_t}(0)", 2)
        em.emit(f"{y}[base + j] = {out}((p - hit) * g)", 2)
    scratch = lanes * (8 if acc_t == "f64" else 4)
    return em.source(f"@kernel(tile=({lanes},), shared={scratch})", (rows,))


def norm(group: Group, name: str, device: bool = False) -> Source:
    """layernorm / rmsnorm in one kernel, one lane per row: the row's sums (f64, in
    index order, rounded once, as ``op.mean``), then every element. Rounding follows the
    ops the normalisation is defined by step for step, so f32 and f64 give the bits of
    the composite; f16/bf16 compute in f32 and round once."""
    em = _Emitter(group, name)
    node = group.head
    x, *params = node.inputs
    length, rows = node.shape[-1], math.prod(node.shape[:-1])
    ct = "f64" if node.dtype == D.f64 else "f32"
    px = em.arg(x, flat=True)
    pw = [em.arg(p, flat=True) for p in params]
    py = em.arg(node, flat=True, written=True)
    if row_reduction(length):
        return _row_norm(em, node, rows, length, ct, px, pw, py, device)
    em.emit("r = tile.linear_id()", 1)
    em.emit(f"if r < {rows}:", 1)
    em.emit(f"base = r * {length}", 2)
    if node.op == "layernorm":
        em.emit("s = f64(0)", 2)
        em.emit(f"for j in range({length}):", 2)
        em.emit(f"s = s + f64({ct}({px}[base + j]))", 3)
        em.emit(f"mu = {ct}(s / f64({length}))", 2)
        centred = f"({ct}({px}[base + j]) - mu)"
    else:
        centred = f"{ct}({px}[base + j])"
    em.emit("v = f64(0)", 2)
    em.emit(f"for j in range({length}):", 2)
    em.emit(f"d = {centred}", 3)
    em.emit("v = v + f64(d * d)", 3)
    em.emit(f"sd = math.sqrt({ct}(v / f64({length})) + {ct}({literal(node.attrs['eps'])}))", 2)
    em.emit(f"for j in range({length}):", 2)
    y = f"{centred} / sd * {ct}({pw[0]}[j])"
    if node.op == "layernorm":
        y = f"{y} + {ct}({pw[1]}[j])"
    em.emit(f"{py}[base + j] = {node.dtype.name}({y})", 3)
    return em.source("@kernel", (max(rows, 1),))


def _row_norm(
    em: _Emitter, node, rows: int, length: int, ct: str, px, pw, py, device: bool = False
) -> Source:
    """layernorm / rmsnorm with one group per row: the row's sums as ``op.mean`` takes
    them on such rows (each lane's elements in order in f64, the lanes' sums in the fixed
    tree, rounded once), so the bits are the composite's; then each lane writes its
    elements. On a GPU a lane's elements are held in registers where they are few
    (:func:`_held_norm`)."""
    lanes = row_lanes(length)
    decorator = f"@kernel(tile=({lanes},), shared={lanes * 8})"
    em.emit(f"base = group_id(0) * {length}", 1)
    if device and length % lanes == 0 and length // lanes <= HELD_ELEMENTS:
        _held_norm(em, node, length, lanes, ct, px, pw, py)
        return em.source(decorator, (max(rows, 1),))
    each = _each("j", length, lanes)
    if node.op == "layernorm":
        em.emit("s = f64(0)", 1)
        _emit_each(em, each, 1)
        em.emit(f"s = s + f64({ct}({px}[base + j]))", 2)
        em.emit(f"mu = {ct}(tile.sum(s) / f64({length}))", 1)
        centred = f"({ct}({px}[base + j]) - mu)"
    else:
        centred = f"{ct}({px}[base + j])"
    em.emit("v = f64(0)", 1)
    _emit_each(em, each, 1)
    em.emit(f"d = {centred}", 2)
    em.emit("v = v + f64(d * d)", 2)
    eps = literal(node.attrs["eps"])
    em.emit(f"sd = math.sqrt({ct}(tile.sum(v) / f64({length})) + {ct}({eps}))", 1)
    _emit_each(em, each, 1)
    y = f"{centred} / sd * {ct}({pw[0]}[j])"
    if node.op == "layernorm":
        y = f"{y} + {ct}({pw[1]}[j])"
    em.emit(f"{py}[base + j] = {node.dtype.name}({y})", 2)
    return em.source(decorator, (max(rows, 1),))


def _held_norm(em: _Emitter, node, length: int, lanes: int, ct: str, px, pw, py) -> None:
    """:func:`_row_norm`'s steps with the lane's elements read once into ``v0 ..`` and
    their centred values kept as ``d0 ..``: the same operations in the same order."""
    held = length // lanes
    em.emit("lane = tile.linear_id()", 1)
    j = [f"lane + {k * lanes}" if k else "lane" for k in range(held)]
    for k in range(held):
        em.emit(f"v{k} = {ct}({px}[base + {j[k]}])", 1)
    if node.op == "layernorm":
        em.emit("s = f64(0)", 1)
        for k in range(held):
            em.emit(f"s = s + f64(v{k})", 1)
        em.emit(f"mu = {ct}(tile.sum(s) / f64({length}))", 1)
    em.emit("v = f64(0)", 1)
    for k in range(held):
        em.emit(f"d{k} = (v{k} - mu)" if node.op == "layernorm" else f"d{k} = v{k}", 1)
        em.emit(f"v = v + f64(d{k} * d{k})", 1)
    eps = literal(node.attrs["eps"])
    em.emit(f"sd = math.sqrt({ct}(tile.sum(v) / f64({length})) + {ct}({eps}))", 1)
    for k in range(held):
        y = f"d{k} / sd * {ct}({pw[0]}[{j[k]}])"
        if node.op == "layernorm":
            y = f"{y} + {ct}({pw[1]}[{j[k]}])"
        em.emit(f"{py}[base + {j[k]}] = {node.dtype.name}({y})", 1)


def transpose(group: Group, name: str) -> Source:
    """One lane per element; a batch of matrices is transposed matrix by matrix."""
    em = _Emitter(group, name)
    node = group.head
    rows, cols = node.shape[-2:]
    size = math.prod(node.shape)
    x, y = em.arg(node.inputs[0], flat=True), em.arg(node, flat=True, written=True)
    em.emit("i = tile.linear_id()", 1)
    em.emit(f"if i < {size}:", 1)
    em.emit(f"z = i - i % {rows * cols}", 2)
    em.emit(f"r = (i % {rows * cols}) // {cols}", 2)
    em.emit(f"{y}[i] = {x}[z + (i % {cols}) * {rows} + r]", 2)
    return em.source("@kernel", (max(size, 1),))


def _block(n: int, most: int) -> int:
    return min(most, max(8, -(-n // 8) * 8))


def _batch_index(shape: tuple[int, ...], batch: list[int]) -> str:
    """The index of an operand's matrix (batch dims ``shape``) in product ``z``."""
    return "0" if math.prod(batch) == 1 else broadcast_index(shape, tuple(batch), "z")


def _times(index: str, rows: int) -> str:
    return "0" if index == "0" else f"{index} * {rows}"


def _plus(offset: str, start: str) -> str:
    return start if offset == "0" else f"{offset} + {start}"


def matmul(group: Group, name: str, device: bool = False) -> Source:
    """One group per ``BM × BN`` block of one product of the batch (``group_id(2)``):
    128 x 128 x 32 by default, 128 x 256 x 32 for f16/bf16 products of arrays on a GPU
    (:func:`device_block`).

    Every operand is passed as a matrix (its batch dims folded into the rows), so a
    block can reach past its own matrix into the next one; such rows of the result are
    not stored, and rows of the ``k`` dimension past the end are zeroed before the
    product (they would otherwise add the next matrix's values)."""
    em = _Emitter(group, name)
    node = group.head
    a, b = node.inputs
    *batch, m, n = node.shape
    trans_a, trans_b = node.attrs.get("trans_a"), node.attrs.get("trans_b")
    k = a.shape[-1] if not trans_a else a.shape[-2]
    shape_attr = node.attrs.get("tile_shape")
    tuned = shape_attr == "auto" or (bool(shape_attr) and isinstance(shape_attr[0], tuple))
    acc_t = D.f64 if node.dtype == D.f64 else D.f32  # f64 products accumulate in f64
    if tuned:  # tile_shape="auto" or a space: the sizes are the autotuner's constants
        bm, bn, bk = "BM", "BN", "BK"
    else:  # f64 blocks of 64 x 64: their tiles' bytes fit a GPU's shared memory
        most = 64 if acc_t == D.f64 else 128
        bm, bn, bk = shape_attr or (_block(m, most), _block(n, most), _block(k, 32))
        if device and not shape_attr and device_block(node, m, n):
            bn = 2 * bn
    ragged_m, ragged_k = tuned or m % bm, tuned or k % bk
    count = math.prod(batch)
    em.emit(f"m0 = group_id(0) * {bm}", 1)
    em.emit(f"n0 = group_id(1) * {bn}", 1)
    if count > 1:
        em.emit("z = group_id(2)", 1)
    za, zb = _batch_index(a.shape[:-2], batch), _batch_index(b.shape[:-2], batch)
    em.emit(f"acc = tile.zeros(({bm}, {bn}), {acc_t.name})", 1)
    em.emit(f"for k0 in tile.range(0, {k}, {bk}):", 1)
    pa, pb = em.arg(a, flat=False), em.arg(b, flat=False)
    rows_a, rows_b = a.shape[-2], b.shape[-2]
    if trans_a:
        em.emit(
            f"xt = tile.load_block({pa}, ({_plus(_times(za, rows_a), 'k0')}, m0), ({bk}, {bm}))", 2
        )
        _zero_past_k(em, "xt", za != "0" and ragged_k, k, bk, a.dtype)
        em.emit("x = xt.T", 2)
    else:
        em.emit(
            f"x = tile.load_block({pa}, ({_plus(_times(za, rows_a), 'm0')}, k0), ({bm}, {bk}))", 2
        )
    if trans_b:
        em.emit(
            f"yt = tile.load_block({pb}, ({_plus(_times(zb, rows_b), 'n0')}, k0), ({bn}, {bk}))", 2
        )
        em.emit("y = yt.T", 2)
    else:
        em.emit(
            f"y = tile.load_block({pb}, ({_plus(_times(zb, rows_b), 'k0')}, n0), ({bk}, {bn}))", 2
        )
        _zero_past_k(em, "y", zb != "0" and ragged_k, k, bk, b.dtype)
    em.emit("acc = tile.dot(x, y, acc)", 2)
    em.names[id(node)] = "acc"
    reads = Counter(id(v) for e in group.nodes[1:] for v in e.inputs)
    stored = {id(out) for out in group.outputs}
    for e in group.nodes[1:]:
        for v in e.inputs:
            if isinstance(v, Const) or id(v) in em.names:
                continue
            local = f"t{len(em.names)}"
            em.names[id(v)] = local
            em.emit(f"{local} = {_tile_load(em, v, node.shape, (bm, bn))}", 1)
        code = em.node_code(e, tiles=True)
        if reads[id(e)] == 1 and id(e) not in stored:  # read once: part of its reader's
            em.names[id(e)] = f"({code})"  # statement (one loop, no tile of its own)
            continue
        # the one result of the epilogue replaces the accumulator (computed in place: no
        # second block-sized tile, which on a GPU halves the shared memory a block needs)
        last = e is group.nodes[-1] and len(group.outputs) == 1 and e.dtype == acc_t
        local = "acc" if last else f"v{e.number}"
        em.emit(f"{local} = {code}", 1)
        em.names[id(e)] = local
    mask = ""
    if count > 1 and ragged_m:
        mask = f", mask=(tile.arange({bm}) + m0 < {m})[:, None]"
    row = _plus(f"z * {m}", "m0") if count > 1 else "m0"
    for out in group.outputs:
        value = em.names[id(out)]
        if out.dtype != acc_t and out.dtype != D.bool_:
            value = f"{value}.astype({out.dtype.name})"
        dst = em.arg(out, flat=False, written=True)
        em.emit(f"tile.store_block({dst}, ({row}, n0), {value}{mask})", 1)
    size = acc_t.itemsize
    if tuned:
        space = tile_space(shape_attr, m, n, k)
        return em.source(_tuned_decorator(space, size), _tuned_grid(m, n, count))
    grid = (-(-m // bm), -(-n // bn)) + ((count,) if count > 1 else ())
    return em.source(
        f"@kernel(tile=({PRODUCT_LANES},), shared={shared_kib(bm, bn, bk, size)} * KiB)", grid
    )


def device_block(node: Node, m: int, n: int) -> bool:
    """Whether a product of arrays on a GPU takes blocks of 128 x 256: f16 or bf16
    operands (the CUDA target's register main loop, which reads A and B as they are
    stored, transposed or not; 8 warps of 64 x 64 accumulators, one block an SM) with at
    least 128 x 256 of result."""
    a, b = node.inputs
    half = a.dtype in (D.f16, D.bf16) and b.dtype == a.dtype
    return half and m >= 128 and n >= 256


# Lanes of a product's group. The CPU runs a tile kernel's group as one thread, whatever
# this is; on a GPU it is the block's threads, and 256 gives each of them an 8 x 8 block
# of a 128 x 128 result in registers (the CUDA target's plain tile.dot).
PRODUCT_LANES = 256


def shared_kib(bm: int, bn: int, bk: int, itemsize: int = 4) -> int:
    """Shared memory for a product's tiles (accumulator, epilogue, operands), in KiB, for
    elements of ``itemsize`` bytes (4: f16/bf16/f32 tiles are held as f32; 8: f64)."""
    return max(48, -(-(3 * bm * bn + (bm + bn) * bk) * itemsize // 1024))


def _tuned_decorator(space: dict, itemsize: int = 4) -> str:
    """Blocks of at most 32 KiB of results (8,192 f32, 4,096 f64) are kept."""
    size = "" if itemsize == 4 else f", {itemsize}"
    return (
        f"@autotune(space={space!r}, tile=({PRODUCT_LANES},), "
        f"prune=lambda c: c.BM * c.BN <= {32768 // itemsize}, "
        f"shared=lambda c: shared_kib(c.BM, c.BN, c.BK{size}) * KiB)"
    )


def _tuned_grid(m: int, n: int, count: int):
    batch = (count,) if count > 1 else ()
    return lambda c: (-(-m // c.BM), -(-n // c.BN), *batch)


def tile_space(shape_attr, m: int, n: int, k: int) -> dict:
    """The autotuner's space for ``tile_shape="auto"`` (block sizes up to the matrix's;
    blocks of at most 8,192 results are kept), or the user's own (pairs of a name and
    its candidates)."""
    if shape_attr != "auto":
        return {name: list(values) for name, values in shape_attr}
    rows = [s for s in (32, 64, 128) if s <= max(32, _block(m, 128))]
    cols = [s for s in (32, 64, 128) if s <= max(32, _block(n, 128))]
    depth = [s for s in (32, 64) if s <= max(32, _block(k, 64))]
    return {"BM": rows, "BN": cols, "BK": depth}


def _zero_past_k(em: _Emitter, name: str, needed: bool, k: int, bk, dtype) -> None:
    """Zero the rows of a loaded ``(BK, ·)`` block past ``k`` when they may belong to
    the next matrix of the batch (past the last one the load already reads zeros)."""
    if needed:
        keep = f"(tile.arange({bk}) + k0 < {k})[:, None]"
        em.emit(f"{name} = tile.where({keep}, {name}, tile.zeros(({bk}, 1), {dtype.name}))", 2)


def _tile_load(em: _Emitter, v: Value, shape, block) -> str:
    """An epilogue input as a tile beside the ``block`` of the product (f32 values)."""
    *batch, m, n = shape
    bm, bn = block
    kind, vbatch = epilogue_layout(v.shape, tuple(shape))
    z = _batch_index(vbatch, batch)
    if kind == "full":
        at = f"({_plus(_times(z, m), 'm0')}, n0)"
        code = f"tile.load_block({em.arg(v, flat=False)}, {at}, ({bm}, {bn}))"
    elif kind == "row":
        at = f"({_plus(_times(z, n), 'n0')},)"
        code = f"tile.load_block({em.arg(v, flat=True)}, {at}, ({bn},))[None, :]"
    elif kind == "col":
        at = f"({_plus(_times(z, m), 'm0')},)"
        code = f"tile.load_block({em.arg(v, flat=True)}, {at}, ({bm},))[:, None]"
    else:  # a single element
        code = f"tile.load_block({em.arg(v, flat=True)}, ({z},), (1,))[None, :]"
    if v.dtype in D.COMPUTED_IN_F32:
        code += ".astype(f32)"
    return code
