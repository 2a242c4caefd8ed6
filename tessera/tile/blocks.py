"""The declarations of tile values: blocks of numbers owned by the whole group.

A tile has a static shape and a dtype and is immutable; one statement makes, moves or
multiplies a whole block (docs/language.md, "Tile values"). Each operation is declared here
once, with its *rule*: a function from the described arguments to the result, which the
typer calls. Arguments are described as:

* a tile (kind ``tile``): ``Block(dtype, shape)``; an ``operand``: a Block or a dtype
  (a scalar, broadcast);
* ``shape``: a tuple of ints; ``dtype``: a DType; ``array``: ``(dtype, ndim)``;
* ``index``: how many items it has; ``value``/``number``: the dtype; ``axisopt``: an int
  or None; ``flag``: a bool.

A rule returns a Block (a tile result; dtype None means "the operands' promoted dtype",
which the typer works out as for scalars), a DType (a scalar result) or None (a
statement), and raises :class:`RuleError` with a message for arguments it refuses.
"""

from __future__ import annotations

from typing import NamedTuple

from .. import dtypes as D
from .primitives import RuleError, declare

__all__ = ["Block", "arange", "broadcast", "dot", "expand_dims", "full", "gather", "load_block"]
__all__ += ["scatter", "store_block", "where", "zeros"]


class Block(NamedTuple):
    dtype: D.DType | None
    shape: tuple[int, ...]


def broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy's broadcast of tile shapes (right-aligned; a 1 stretches)."""
    rank = max(len(s) for s in shapes)
    out = []
    for axis in range(rank):
        sizes = {s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0}
        sizes.discard(1)
        if len(sizes) > 1:
            raise RuleError(f"tile shapes {' and '.join(map(str, shapes))} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def _shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    if not 1 <= len(shape) <= 3 or any(d <= 0 for d in shape):
        raise RuleError(f"a tile shape has 1 to 3 positive dims, not {shape}")
    return shape


def _filled(shape, dtype, value=None):
    return Block(dtype, _shape(shape))


def _arange(n):
    return Block(D.i64, _shape(n))


def _load(src, offset, shape, other):
    """A block of the last ``len(shape)`` dims; the offset's leading indices (a sub-array,
    ``As[j]``) are fixed."""
    dtype, ndim = src
    if offset != ndim or not 1 <= len(shape) <= ndim:
        raise RuleError(
            f"a {ndim}-d array needs a {ndim}-d offset and a shape of at most {ndim} dims, not "
            f"{offset} and {len(shape)}"
        )
    return Block(dtype, _shape(shape))


def _store(dst, offset, t, mask):
    dtype, ndim = dst
    if offset != ndim or len(t.shape) > ndim:
        raise RuleError(
            f"storing a {len(t.shape)}-d tile into a {ndim}-d array at a {offset}-d offset"
        )
    if mask is not None:
        if mask.dtype != D.bool_:
            raise RuleError(f"the mask must be a bool tile, not {mask.dtype.name}")
        if broadcast(mask.shape, t.shape) != t.shape:
            raise RuleError(f"a mask of shape {mask.shape} does not cover a tile {t.shape}")
    return None


def _index_shape(what: str, ndim: int, index: tuple, mask) -> tuple[int, ...]:
    count, shape = index
    if count != ndim:
        raise RuleError(
            f"{what} of a {ndim}-d array needs {ndim} indices, one per dim, not {count}"
        )
    if shape is None:
        raise RuleError(f"{what} needs a tile of indices (one block: tile.load_block/store_block)")
    if mask is not None:
        if mask.dtype != D.bool_:
            raise RuleError(f"the mask must be a bool tile, not {mask.dtype.name}")
        shape = broadcast(mask.shape, shape)
    return _shape(shape)


def _gather(src, index, mask, other):
    dtype, ndim = src
    return Block(dtype, _index_shape("tile.gather", ndim, index, mask))


def _scatter(dst, index, t, mask):
    shape = _index_shape("tile.scatter", dst[1], index, mask)
    if broadcast(shape, t.shape) != t.shape:
        raise RuleError(f"indices of shape {shape} do not cover a tile {t.shape}")
    return None


_DOT_INPUTS = {D.f16: D.f32, D.bf16: D.f32, D.f32: D.f32, D.f64: D.f64, D.i8: D.i32}
_DOT_INPUTS.update({D.f8e4m3: D.f32, D.f8e5m2: D.f32})  # products exact in f32
# (a's dtype, b's) -> the result's: one dtype, or 8-bit integers of either sign (u8 x i8:
# quantized activations by weights), or the two 8-bit floats (e4m3 x e5m2: FP8 training's
# backward products)
DOT_PAIRS = {(d, d): out for d, out in _DOT_INPUTS.items()}
DOT_PAIRS.update({(D.u8, D.u8): D.i32, (D.u8, D.i8): D.i32, (D.i8, D.u8): D.i32})
DOT_PAIRS.update({(D.f8e4m3, D.f8e5m2): D.f32, (D.f8e5m2, D.f8e4m3): D.f32})


def _dot(a, b, acc, allow_tf32):
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise RuleError(f"tile.dot multiplies 2-d tiles, not {a.shape} and {b.shape}")
    if a.shape[1] != b.shape[0]:
        raise RuleError(
            f"tile.dot of {a.shape} and {b.shape}: the inner dims {a.shape[1]} and "
            f"{b.shape[0]} differ"
        )
    result = DOT_PAIRS.get((a.dtype, b.dtype))
    if result is None:
        raise RuleError(
            "tile.dot takes two f16, bf16, f32, f64, i8, u8, f8e4m3 or f8e5m2 tiles of one "
            "dtype, an i8 and a u8 tile, or an f8e4m3 and an f8e5m2 tile, not "
            f"{a.dtype.name} and {b.dtype.name}"
        )
    out = Block(result, (a.shape[0], b.shape[1]))
    if acc is not None and acc != out:
        raise RuleError(
            f"the accumulator must be {out.dtype.name}{list(out.shape)}, not "
            f"{acc.dtype.name}{list(acc.shape)}"
        )
    return out


def _where(c, a, b):
    shapes = [x.shape for x in (c, a, b) if isinstance(x, Block)]
    if (c.dtype if isinstance(c, Block) else c) != D.bool_:
        raise RuleError("the condition of tile.where must be bool")
    return Block(None, broadcast(*shapes))


def _astype(t, dtype):
    return Block(dtype, t.shape)


def _transpose(t):
    return Block(t.dtype, tuple(reversed(t.shape)))


def _expand(t, axis):
    if axis is None or not 0 <= axis <= len(t.shape) or len(t.shape) >= 3:
        raise RuleError(f"cannot add an axis at {axis} to a tile of shape {t.shape}")
    return Block(t.dtype, t.shape[:axis] + (1,) + t.shape[axis:])


def _reduce(t, axis):
    if t.dtype == D.bool_:
        raise RuleError("reductions need a numeric tile, not bool_")
    if axis is None:
        return t.dtype
    if not 0 <= axis < len(t.shape):
        raise RuleError(f"axis {axis} is out of range for a tile of shape {t.shape}")
    rest = t.shape[:axis] + t.shape[axis + 1 :]
    return Block(t.dtype, rest) if rest else t.dtype


def _tile(name: str, args: str, rule, doc: str, **flags: object):
    return declare(name, args, "rule", doc, tile=True, rule=rule, **flags)


zeros = _tile(
    "tile.zeros",
    "shape:shape dtype:dtype=f32",
    _filled,
    "A tile of zeros.",
    collective=True,
    grouped_only=True,
)
full = _tile(
    "tile.full",
    "shape:shape value:value dtype:dtype=f32",
    lambda shape, value, dtype: _filled(shape, dtype),
    "A tile filled with one (group-uniform) value.",
    collective=True,
    grouped_only=True,
)
arange = _tile(
    "tile.arange",
    "n:shape",
    _arange,
    "The tile [0, 1, ..., n - 1] (i64); `tile.arange(start, end)`, Triton's form, is "
    "`start + tile.arange(end - start)` (end - start a constant, or end written `start + n`).",
    collective=True,
    grouped_only=True,
)
load_block = _tile(
    "tile.load_block",
    "src:array offset:index shape:shape other:value=0",
    _load,
    "The block of `src` at `offset` (one index per dim); elements outside the array read "
    "`other`. A shape of fewer dims than `src` is a block of its last dims, the offset's "
    "leading indices fixed.",
    collective=True,
    grouped_only=True,
)
store_block = declare(
    "tile.store_block",
    "dst:array offset:index t:tile mask:tile=None",
    "rule",
    "Writes tile `t` into `dst` at `offset` (leading indices fixed when `t` has fewer dims); "
    "elements outside the array, or where `mask` is False, are not written.",
    tile=True,
    rule=_store,
    collective=True,
    grouped_only=True,
    writes=True,
    statement=True,
)
gather = _tile(
    "tile.gather",
    "src:array index:tiles mask:tile=None other:value=0",
    _gather,
    "The tile of `src[i0, i1, ...]` for index tiles `(i0, i1, ...)`, one per dim of `src`, "
    "broadcast together (and with `mask`); an element whose index is outside the array, or "
    "where `mask` is False, reads `other`.",
    collective=True,
    grouped_only=True,
)
scatter = declare(
    "tile.scatter",
    "dst:array index:tiles t:tile mask:tile=None",
    "rule",
    "Writes each element of `t` to `dst[i0, i1, ...]` at its index tiles' element; indices "
    "outside the array, or where `mask` is False, are not written.",
    tile=True,
    rule=_scatter,
    collective=True,
    grouped_only=True,
    writes=True,
    statement=True,
)
dot = _tile(
    "tile.dot",
    "a:tile b:tile acc:tile=None allow_tf32:flag=False",
    _dot,
    "`acc + a @ b` for 2-d tiles (M, K) and (K, N): f16/bf16/f8e4m3/f8e5m2/f32 in, f32 out; "
    "f64 in, f64 out; i8/u8 in, i32 out; also u8 × i8, i8 × u8 (i32) and f8e4m3 × f8e5m2 "
    "either way (f32).",
    collective=True,
    grouped_only=True,
)
where = _tile(
    "tile.where",
    "c:operand a:operand b:operand",
    _where,
    "Elementwise `a if c else b`, broadcast.",
    grouped_only=True,
)
expand_dims = _tile(
    "tile.expand_dims",
    "t:tile axis:axisopt",
    _expand,
    "Adds an axis of size 1 at `axis` (what `t[None, :]` and `t[:, None]` write).",
    grouped_only=True,
)
astype = _tile(
    "t.astype",
    "t:tile dtype:dtype",
    _astype,
    "The tile converted to `dtype` (the rounding of scalar casts).",
    grouped_only=True,
    method=True,
)
transpose = _tile(
    "t.T", "t:tile", _transpose, "The transposed tile.", grouped_only=True, method=True
)


def _reduction(op: str):
    return _tile(
        f"t.{op}",
        "t:tile axis:axisopt=None",
        _reduce,
        f"The {op} along `axis` (of all elements for None: a scalar), by the fixed tree.",
        collective=True,
        grouped_only=True,
        method=True,
        op=op,
    )


tile_sum, tile_max, tile_min = _reduction("sum"), _reduction("max"), _reduction("min")
