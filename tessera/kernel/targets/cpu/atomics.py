"""The atomic updates on the CPU target (``tile.atomic_add``, ``_max``, ``_min``, ``_and``,
``_or``, ``_xor``, ``_xchg``, ``_cas``; docs/language.md, "Atomics").

On a global array an update is one LLVM ``atomicrmw`` where LLVM has the operation
(integers: add, max/min signed or unsigned, and, or, xor, exchange; floats: add and
exchange), else a compare-and-swap loop written here as LLVM IR (the float max/min, with
the language's NaN-propagating rule) or, for the 16-bit floats that travel as uint16, as
a Numba loop around a compare-and-swap of the bits: groups run on several cores at once.
On a shared array an update is a plain read-modify-write: a group's shared memory belongs
to the one core that runs its lanes one after another (a locked instruction there would
only cost time: about 6x on a shared-memory histogram).

``atomic_cas`` compares bits (``cmpxchg`` of the element's bits: -0.0 is not 0.0, a NaN
matches the same NaN). The generated code calls ``_<atomic|plain>_<op>[_16]`` (the names
:func:`name` gives), with the 16-bit variants taking the conversions to and from f32.
"""

from __future__ import annotations

import functools

import numpy as np

from ....tile.primitives import ATOMIC_OPS
from ..semantics import CALLED, jitted

_JIT = CALLED  # compiled once per signature, inlined by LLVM (semantics.py)
_NATIVE = {"add": "add", "and": "and", "or": "or", "xor": "xor", "xchg": "xchg"}


def name(op: str, shared: bool, sixteen_bit: bool) -> str:
    """The runtime function the generated code calls for atomic ``op``."""
    return f"_{'plain' if shared else 'atomic'}_{op}{'_16' if sixteen_bit else ''}"


def element_pointer(context, builder, aryty, ary_value, idxty, idx_value):
    """The LLVM pointer to ``ary[idx]`` (no wraparound, no bounds check)."""
    from numba import types
    from numba.core import cgutils

    ary = context.make_array(aryty)(context, builder, ary_value)
    inds = (
        cgutils.unpack_tuple(builder, idx_value)
        if isinstance(idxty, types.BaseTuple)
        else [idx_value]
    )
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


def _bits_type(builder, value):
    from llvmlite import ir

    width = value.type.width if isinstance(value.type, ir.IntType) else None
    if width is None:
        width = {"half": 16, "float": 32, "double": 64}[str(value.type)]
    return ir.IntType(width)


def _float_update(builder, op: str, old, value):
    """The language's NaN-propagating max/min of two floats, as LLVM IR."""
    wins = builder.fcmp_ordered(">" if op == "max" else "<", old, value)
    wins = builder.or_(wins, builder.fcmp_unordered("uno", old, old))
    return builder.select(wins, old, value)


def _emit_cas_loop(builder, ptr, value, op: str):
    """``old = *ptr; do new = update(old) while cmpxchg(old, new) fails``; returns old."""
    ity = _bits_type(builder, value)
    iptr = builder.bitcast(ptr, ity.as_pointer())
    entry = builder.block
    first = builder.load(iptr)
    loop = builder.append_basic_block("cas.loop")
    done = builder.append_basic_block("cas.done")
    builder.branch(loop)
    builder.position_at_end(loop)
    seen = builder.phi(ity)
    seen.add_incoming(first, entry)
    old = builder.bitcast(seen, value.type)
    new = builder.bitcast(_float_update(builder, op, old, value), ity)
    pair = builder.cmpxchg(iptr, seen, new, "seq_cst", "seq_cst")
    seen.add_incoming(builder.extract_value(pair, 0), builder.block)
    builder.cbranch(builder.extract_value(pair, 1), done, loop)
    builder.position_at_end(done)
    return old


@functools.cache
def definitions() -> dict:
    """The runtime functions by the names the generated code calls (Numba made)."""
    import numba
    from numba import types
    from numba.extending import intrinsic

    update = jitted(called=True)

    def atomic_intrinsic(op: str):
        @intrinsic
        def atomic(typingctx, ary, idx, value):
            """``old = a[idx]; a[idx] = update(old, value)`` as one atomic step."""
            dtype = ary.dtype
            is_float = isinstance(dtype, types.Float)

            def codegen(context, builder, signature, args):
                aryty, idxty, _ = signature.args
                ptr = element_pointer(context, builder, aryty, args[0], idxty, args[1])
                if op in ("max", "min"):
                    if is_float:
                        return _emit_cas_loop(builder, ptr, args[2], op)
                    kind = op if dtype.signed else f"u{op}"
                    return builder.atomic_rmw(kind, ptr, args[2], "seq_cst")
                kind = "fadd" if op == "add" and is_float else _NATIVE[op]
                return builder.atomic_rmw(kind, ptr, args[2], "seq_cst")

            return dtype(ary, idx, dtype), codegen

        return atomic

    @intrinsic
    def compare_exchange(typingctx, ary, idx, expected, new):
        """Atomically ``if bits(a[idx]) == bits(expected): a[idx] = new``; the previous
        value."""
        dtype = ary.dtype

        def codegen(context, builder, signature, args):
            aryty, idxty = signature.args[:2]
            ptr = element_pointer(context, builder, aryty, args[0], idxty, args[1])
            ity = _bits_type(builder, args[2])
            iptr = builder.bitcast(ptr, ity.as_pointer())
            want, put = (builder.bitcast(a, ity) for a in args[2:4])
            pair = builder.cmpxchg(iptr, want, put, "seq_cst", "seq_cst")
            return builder.bitcast(builder.extract_value(pair, 0), args[2].type)

        return dtype(ary, idx, dtype, dtype), codegen

    @intrinsic
    def bits(typingctx, value):
        """A value's bits as the unsigned integer of its width."""
        width = value.bitwidth

        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], _bits_type(builder, args[0]))

        return types.Integer(f"uint{width}")(value), codegen

    jit = numba.njit(**_JIT)

    @jit
    def same_bits(a, b):
        return bits(a) == bits(b)

    names: dict = {}
    for op in ATOMIC_OPS[:-1]:
        combine = getattr(update, f"atomic_{op}")
        names[name(op, False, False)] = atomic_intrinsic(op)
        names[name(op, False, True)] = jit(_cas_loop_16(combine, compare_exchange))
        names[name(op, True, False)] = jit(_plain(combine))
        names[name(op, True, True)] = jit(_plain_16(combine))
    names[name("cas", False, False)] = compare_exchange
    names[name("cas", False, True)] = jit(_cas_16(compare_exchange))
    names[name("cas", True, False)] = jit(_plain_cas(same_bits))
    names[name("cas", True, True)] = jit(_plain_cas_16)
    return names


def _cas_loop_16(combine, compare_exchange):
    def atomic_16(ary, idx, value, to_f32, from_f32):
        """An update of a 16-bit float stored as uint16: compute in f32, round once,
        swap the bits if no other lane changed them meanwhile, else retry; the old
        value as f32."""
        old = ary[idx]
        while True:
            new = from_f32(combine(to_f32(old), np.float32(value)))
            prev = compare_exchange(ary, idx, old, new)
            if prev == old:
                return to_f32(old)
            old = prev

    return atomic_16


def _cas_16(compare_exchange):
    def cas_16(ary, idx, expected, new, to_f32, from_f32):
        return to_f32(compare_exchange(ary, idx, from_f32(expected), from_f32(new)))

    return cas_16


def _plain(combine):
    def plain(ary, idx, value):
        """The update on memory no other core touches (a group's shared arrays);
        integers wrap as the atomic does; returns ``old``."""
        old = ary[idx]
        ary[idx] = combine(old, value)
        return old

    return plain


def _plain_16(combine):
    def plain_16(ary, idx, value, to_f32, from_f32):
        old = to_f32(ary[idx])
        ary[idx] = from_f32(combine(old, np.float32(value)))
        return old

    return plain_16


def _plain_cas(same_bits):
    def plain_cas(ary, idx, expected, new):
        old = ary[idx]
        if same_bits(old, expected):
            ary[idx] = new
        return old

    return plain_cas


def _plain_cas_16(ary, idx, expected, new, to_f32, from_f32):
    old = ary[idx]
    if old == from_f32(expected):  # the bits, as uint16
        ary[idx] = from_f32(new)
    return to_f32(old)
