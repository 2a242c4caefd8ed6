"""Run-time support the generated CPU code calls: 16-bit float conversions, atomics, the
fixed reduction tree and NaN-propagating min/max.

Numba's CPU target has no float16 arithmetic, so f16 and bf16 arrays travel as uint16
and every value is converted at loads and stores (f16 through LLVM's ``half``, bf16 with
integer round-to-nearest-even). Atomics are LLVM ``atomicrmw`` instructions, so they are
correct when groups run on several cores at once.
"""

from __future__ import annotations

import functools
import math

import numba
import numpy as np
from llvmlite import ir as llir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.arrayobj import populate_array

_JIT = dict(nogil=True, cache=False, error_model="numpy", inline="always")


@intrinsic
def h2f(typingctx, bits):
    """uint16 bits of an IEEE half → float32."""
    sig = types.float32(types.uint16)

    def codegen(context, builder, signature, args):
        return builder.fpext(builder.bitcast(args[0], llir.HalfType()), llir.FloatType())

    return sig, codegen


@intrinsic
def f2h(typingctx, value):
    """float32 → uint16 bits of an IEEE half (round to nearest even)."""
    sig = types.uint16(types.float32)

    def codegen(context, builder, signature, args):
        half = builder.fptrunc(args[0], llir.HalfType())
        return builder.bitcast(half, llir.IntType(16))

    return sig, codegen


@intrinsic
def f32_bits(typingctx, value):
    sig = types.uint32(types.float32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], llir.IntType(32))

    return sig, codegen


@intrinsic
def bits_f32(typingctx, bits):
    sig = types.float32(types.uint32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], llir.FloatType())

    return sig, codegen


@numba.njit(**_JIT)
def b2f(bits):
    """uint16 bits of a bfloat16 → float32 (exact)."""
    return bits_f32(np.uint32(bits) << np.uint32(16))


@numba.njit(**_JIT)
def f2b(value):
    """float32 → uint16 bits of a bfloat16, round to nearest even; NaN stays NaN."""
    bits = f32_bits(np.float32(value))
    if (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000):
        # NaN: keep the payload's top bits (a bf16 NaN round-trips exactly); only a
        # payload that truncation would turn into infinity gets the quiet bit
        high = bits >> np.uint32(16)
        if (high & np.uint32(0x7F)) == np.uint32(0):
            high |= np.uint32(0x0040)
        return np.uint16(high)
    rounding = np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return np.uint16((bits + rounding) >> np.uint32(16))


@numba.njit(**_JIT)
def round_f16(value):
    return h2f(f2h(np.float32(value)))


@numba.njit(**_JIT)
def round_bf16(value):
    return b2f(f2b(np.float32(value)))


def _element_pointer(context, builder, aryty, ary_value, idxty, idx_value):
    ary = context.make_array(aryty)(context, builder, ary_value)
    if isinstance(idxty, types.BaseTuple):
        inds = cgutils.unpack_tuple(builder, idx_value)
    else:
        inds = [idx_value]
    return cgutils.get_item_pointer2(
        context,
        builder,
        data=ary.data,
        shape=cgutils.unpack_tuple(builder, ary.shape),
        strides=cgutils.unpack_tuple(builder, ary.strides),
        layout=aryty.layout,
        inds=inds,
        wraparound=False,
    )


@intrinsic
def atomic_add(typingctx, ary, idx, value):
    """``old = a[idx]; a[idx] += value`` as one LLVM atomicrmw; returns ``old``."""
    dtype = ary.dtype
    sig = dtype(ary, idx, dtype)
    op = "fadd" if isinstance(dtype, types.Float) else "add"

    def codegen(context, builder, signature, args):
        ptr = _element_pointer(
            context, builder, signature.args[0], args[0], signature.args[1], args[1]
        )
        return builder.atomic_rmw(op, ptr, args[2], "seq_cst")

    return sig, codegen


@intrinsic
def compare_exchange(typingctx, ary, idx, expected, new):
    """Atomically ``if a[idx] == expected: a[idx] = new``; returns the previous value."""
    dtype = ary.dtype
    sig = dtype(ary, idx, dtype, dtype)

    def codegen(context, builder, signature, args):
        ptr = _element_pointer(
            context, builder, signature.args[0], args[0], signature.args[1], args[1]
        )
        pair = builder.cmpxchg(ptr, args[2], args[3], "seq_cst", "seq_cst")
        return builder.extract_value(pair, 0)

    return sig, codegen


@numba.njit(**_JIT)
def atomic_add_16(ary, idx, value, to_f32, from_f32):
    """Atomic add on a 16-bit float stored as uint16: compare-and-swap until no other
    lane changed the element in between; returns the old value as f32."""
    old = ary[idx]
    while True:
        new = from_f32(to_f32(old) + np.float32(value))
        prev = compare_exchange(ary, idx, old, new)
        if prev == old:
            return to_f32(old)
        old = prev


@numba.njit(**_JIT)
def fmax(a, b):
    """NaN-propagating maximum (like numpy.maximum), the language's max()."""
    return a if (a > b or a != a) else b


@numba.njit(**_JIT)
def fmin(a, b):
    """NaN-propagating minimum (like numpy.minimum), the language's min()."""
    return a if (a < b or a != a) else b


# The reduction tree (docs/language.md, "Determinism"): with p the largest power of two
# not above m, first s[i] op= s[i + p] for i < m - p, then halve: s[i] op= s[i + h] for
# i < h, h = p/2, p/4, ..., 1. The order depends only on m, never on threads or timing.


@numba.njit(**_JIT)
def add(a, b):
    return a + b


@numba.njit(**_JIT)
def tree_reduce(s, m, combine):
    """Reduce ``s[:m]`` in place with the fixed tree; ``combine`` is add, fmax or fmin."""
    p = 1
    while p * 2 <= m:
        p *= 2
    for i in range(m - p):
        s[i] = combine(s[i], s[i + p])
    h = p // 2
    while h >= 1:
        for i in range(h):
            s[i] = combine(s[i], s[i + h])
        h //= 2
    return s[0]


@functools.cache
def stack_array(shape: tuple[int, ...], dtype_name: str):
    """An intrinsic returning a C-contiguous array of constant ``shape`` in the calling
    function's stack frame (allocated once, at function entry; contents undefined)."""
    dtype = numba.from_dtype(np.dtype(dtype_name))
    aryty = types.Array(dtype, len(shape), "C")
    count = math.prod(shape)

    @intrinsic
    def make(typingctx):
        def codegen(context, builder, signature, args):
            elem = context.get_data_type(dtype)
            storage = cgutils.alloca_once(builder, llir.ArrayType(elem, count))
            itemsize = context.get_abi_sizeof(elem)
            strides, step = [], itemsize
            for extent in reversed(shape):
                strides.insert(0, step)
                step *= extent
            intp = context.get_value_type(types.intp)
            ary = context.make_array(aryty)(context, builder)
            populate_array(
                ary,
                data=builder.bitcast(storage, elem.as_pointer()),
                shape=[llir.Constant(intp, d) for d in shape],
                strides=[llir.Constant(intp, st) for st in strides],
                itemsize=llir.Constant(intp, itemsize),
                meminfo=None,
            )
            return ary._getvalue()

        return aryty(), codegen

    return make


def namespace() -> dict:
    """The names generated CPU code may use."""
    import math

    return {
        "np": np,
        "math": math,
        "numba": numba,
        "_h2f": h2f,
        "_f2h": f2h,
        "_b2f": b2f,
        "_f2b": f2b,
        "_round_f16": round_f16,
        "_round_bf16": round_bf16,
        "_atomic_add": atomic_add,
        "_atomic_add_16": atomic_add_16,
        "_fmax": fmax,
        "_fmin": fmin,
        "_add": add,
        "_tree_reduce": tree_reduce,
    }
