"""Atomic adds that CUDA has no instruction for: on 8- and 16-bit elements (``bf16``,
``i8``, ``i16``, ``u8``, ``u16``), so that ``tile.atomic_add`` works on every dtype on
CUDA as it does on the CPU.

The building block is a compare-and-swap of one narrow element, done on the aligned
32-bit word that holds it (CUDA's smallest compare-and-swap): load the word; if the
element is not the expected value, fail with what is there; else swap the word with the
element replaced, retrying when a neighbour in the same word changed meanwhile. The add
is the usual loop around it: read, compute the sum with the language's rounding (``bf16``)
or wrap-around (integers), swap if nobody changed the element, else retry with what the
swap saw. Under numba-cuda's simulator, which runs kernels as Python, the swap is the
simulator's locked ``cuda.atomic.cas``.
"""

from __future__ import annotations

import functools

import numpy as np

from .async_copy import element_pointer

NARROW_INTS = {"i8": np.int8, "i16": np.int16, "u8": np.uint8, "u16": np.uint16}


@functools.cache
def _cas_narrow_intrinsic():
    from llvmlite import ir
    from numba.cuda.extending import intrinsic

    @intrinsic
    def cas_narrow(typingctx, array, index, expected, new):
        def codegen(context, builder, signature, args):
            array_t, index_t = signature.args[:2]
            bits = array_t.dtype.bitwidth
            i32, i64, element = ir.IntType(32), ir.IntType(64), ir.IntType(bits)
            ptr = element_pointer(context, builder, array_t, args[0], index_t, args[1])
            address = builder.ptrtoint(ptr, i64)
            word_ptr = builder.inttoptr(
                builder.and_(address, ir.Constant(i64, ~3)), i32.as_pointer()
            )
            shift = builder.trunc(
                builder.shl(builder.and_(address, ir.Constant(i64, 3)), ir.Constant(i64, 3)), i32
            )
            mask = builder.shl(ir.Constant(i32, (1 << bits) - 1), shift)
            expected_bits = builder.shl(builder.zext(args[2], i32), shift)
            new_bits = builder.shl(builder.zext(args[3], i32), shift)
            entry = builder.block
            loop = builder.append_basic_block("cas.loop")
            attempt = builder.append_basic_block("cas.attempt")
            done = builder.append_basic_block("cas.done")
            first = builder.load(word_ptr, align=4)
            builder.branch(loop)
            builder.position_at_end(loop)
            word = builder.phi(i32)
            word.add_incoming(first, entry)
            differs = builder.icmp_unsigned("!=", builder.and_(word, mask), expected_bits)
            builder.cbranch(differs, done, attempt)
            builder.position_at_end(attempt)
            replaced = builder.or_(builder.and_(word, builder.not_(mask)), new_bits)
            pair = builder.cmpxchg(word_ptr, word, replaced, "monotonic", "monotonic")
            seen, swapped = builder.extract_value(pair, 0), builder.extract_value(pair, 1)
            word.add_incoming(seen, attempt)
            builder.cbranch(swapped, done, loop)
            builder.position_at_end(done)
            final = builder.phi(i32)  # on success the element was the expected value
            final.add_incoming(word, loop)
            final.add_incoming(word, attempt)
            return builder.trunc(builder.lshr(final, shift), element)

        dtype = array.dtype
        return dtype(array, index, dtype, dtype), codegen

    return cas_narrow


def namespace(cuda, simulated: bool, b2f, f2b) -> dict:
    """``_atomic_add_bf16`` and ``_atomic_add_<i8|i16|u8|u16>`` for generated CUDA code;
    each returns the element's old value (as f32 for bf16)."""
    if simulated:  # what ``cuda.atomic`` is inside a simulated kernel
        from numba.cuda.simulator.kernelapi import FakeCUDAAtomic

        cas = FakeCUDAAtomic().cas

        def device(fn):
            return fn
    else:
        cas = _cas_narrow_intrinsic()

        def device(fn):
            return cuda.jit(device=True, inline="always")(fn)  # inlined in Numba IR

    def atomic_add_bf16(array, index, value):
        old = array[index]
        while True:
            new = np.uint16(f2b(b2f(old) + np.float32(value)))
            seen = cas(array, index, old, new)
            if seen == old:
                return b2f(old)
            old = seen

    def integer_add(cast):
        def atomic_add_int(array, index, value):
            old = array[index]
            while True:
                seen = cas(array, index, old, cast(old + value))  # wraps like the CPU
                if seen == old:
                    return old
                old = seen

        return atomic_add_int

    names = {"_atomic_add_bf16": device(atomic_add_bf16)}
    for name, cast in NARROW_INTS.items():
        names[f"_atomic_add_{name}"] = device(integer_add(cast))
    return names
