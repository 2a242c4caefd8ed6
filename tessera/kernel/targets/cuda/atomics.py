"""The atomic updates CUDA has no instruction for, so that every ``tile.atomic_*`` works
on every dtype on CUDA as it does on the CPU (docs/language.md, "Atomics").

CUDA's own atomics (``cuda.atomic.*``) cover add on f16/f32/f64/i32/i64/u32/u64 and
max, min, and, or, xor and exchange on the 32- and 64-bit integers. Everything else is a
compare-and-swap loop: read the element, compute the update with the language's rules
(NaN-propagating max/min, bf16 rounding, integers wrapping), swap it in if the element
still has the bits read, else retry with what the swap saw. The swap is
:func:`_cas_element_intrinsic`: a ``cmpxchg`` of the element's bits for 32- and 64-bit
elements, and for 8- and 16-bit ones a swap of the aligned 32-bit word holding the
element (CUDA's smallest compare-and-swap), retried when a neighbour in the same word
changed meanwhile. ``tile.atomic_cas`` is that swap once (bits compared: -0.0 is not 0.0);
it and ``tile.atomic_xchg`` fence device memory before and after (``membar.gl``), so a
lock taken with one and released with the other orders the writes between.

Under numba-cuda's simulator, which runs kernels as Python threads, each update is the
same arithmetic under one lock.
"""

from __future__ import annotations

import functools
import threading

import numpy as np

from ....tile.primitives import ATOMIC_OPS, BITWISE_ATOMICS
from ..semantics import ATOMIC_UPDATE, jitted
from .async_copy import element_pointer
from .device_helpers import device_helper

NARROW_INTS = {"i8": np.int8, "i16": np.int16, "u8": np.uint8, "u16": np.uint16}


@functools.cache
def _cas_element_intrinsic():
    from llvmlite import ir
    from numba.cuda.extending import intrinsic

    def as_bits(builder, value, element):
        return value if isinstance(value.type, ir.IntType) else builder.bitcast(value, element)

    @intrinsic
    def cas_element(typingctx, array, index, expected, new):
        def codegen(context, builder, signature, args):
            array_t, index_t = signature.args[:2]
            bits = array_t.dtype.bitwidth
            i32, i64, element = ir.IntType(32), ir.IntType(64), ir.IntType(bits)
            ptr = element_pointer(context, builder, array_t, args[0], index_t, args[1])
            want, put = (as_bits(builder, v, element) for v in args[2:4])
            if bits >= 32:
                pair = builder.cmpxchg(
                    builder.bitcast(ptr, element.as_pointer()), want, put, "monotonic", "monotonic"
                )
                old = builder.extract_value(pair, 0)
                return old if old.type == args[2].type else builder.bitcast(old, args[2].type)
            address = builder.ptrtoint(ptr, i64)
            word_ptr = builder.inttoptr(
                builder.and_(address, ir.Constant(i64, ~3)), i32.as_pointer()
            )
            shift = builder.trunc(
                builder.shl(builder.and_(address, ir.Constant(i64, 3)), ir.Constant(i64, 3)), i32
            )
            mask = builder.shl(ir.Constant(i32, (1 << bits) - 1), shift)
            expected_bits = builder.shl(builder.zext(want, i32), shift)
            new_bits = builder.shl(builder.zext(put, i32), shift)
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
            old = builder.trunc(builder.lshr(final, shift), element)
            return old if old.type == args[2].type else builder.bitcast(old, args[2].type)

        dtype = array.dtype
        return dtype(array, index, dtype, dtype), codegen

    @intrinsic
    def bits(typingctx, value):
        from numba import types

        def codegen(context, builder, signature, args):
            element = ir.IntType(value.bitwidth)
            return as_bits(builder, args[0], element)

        return types.Integer(f"uint{value.bitwidth}")(value), codegen

    return cas_element, bits


# CUDA's own atomics: op -> (``cuda.atomic`` function, the dtypes it takes)
_INTS = ("i32", "i64", "u32", "u64")
NATIVE = {
    "add": ("add", ("f16", "f32", "f64") + _INTS),
    "max": ("max", _INTS),
    "min": ("min", _INTS),
    "and": ("and_", _INTS),
    "or": ("or_", _INTS),
    "xor": ("xor", _INTS),
}
FENCED = ("xchg", "cas")  # synchronisation: device memory fenced before and after
_FLOATS = ("f16", "bf16", "f32", "f64")
DTYPES = _FLOATS + _INTS + tuple(NARROW_INTS)  # the dtypes the atomics take on CUDA


def call(op: str, dtype: str, name: str, idx: str, values: list[str]) -> str:
    """The generated code of atomic ``op`` on ``name[idx]`` of ``dtype``."""
    if op in NATIVE and dtype in NATIVE[op][1]:
        if dtype == "f16":
            return (
                f"np.float32(cuda.atomic.{NATIVE[op][0]}({name}, {idx}, np.float16({values[0]})))"
            )
        return f"cuda.atomic.{NATIVE[op][0]}({name}, {idx}, {values[0]})"
    return f"_atomic_{op}_{dtype}({', '.join([name, idx, *values])})"


_NUMPY = {"f16": np.float16, "f32": np.float32, "f64": np.float64, "i32": np.int32}
_NUMPY.update({"i64": np.int64, "u32": np.uint32, "u64": np.uint64, **NARROW_INTS})


def _identity(value):
    return value


@functools.cache
def namespace(simulated: bool, b2f, f2b) -> dict:
    """``_atomic_<op>_<dtype>`` for every update CUDA has no instruction for; each
    returns the element's old value (f16 and bf16 as f32; ``b2f``/``f2b`` convert
    bf16 bits).
    Made once per process."""
    names = {}
    for op in ATOMIC_OPS:
        for dtype in DTYPES:
            if op in NATIVE and dtype in NATIVE[op][1]:
                continue
            if op in BITWISE_ATOMICS and dtype in _FLOATS:
                continue
            # 16-bit floats computed in f32 (numba-cuda's f16 arithmetic needs NVRTC)
            load = {"bf16": b2f, "f16": np.float32}.get(dtype, _identity)
            store = f2b if dtype == "bf16" else _NUMPY[dtype]
            if simulated:
                fn = _simulated(op, load, store)
            else:
                fn = _device(op, load, store)
            names[f"_atomic_{op}_{dtype}"] = fn
    return names


_LOCK = threading.Lock()


def _simulated(op: str, load, store):
    """The update under one lock (the simulator's threads are Python threads)."""
    combine = ATOMIC_UPDATE.get(op)

    def update(array, index, *values):
        with _LOCK:
            old = array[index]
            if op == "cas":
                want = np.asarray(store(values[0]), old.dtype)
                if np.asarray(old).tobytes() == want.tobytes():
                    array[index] = store(values[1])
            else:
                with np.errstate(all="ignore"):
                    array[index] = store(combine(load(old), values[0]))
        return load(old)

    return update


def _device(op: str, load, store):
    """The update as a numba-cuda device function around the compare-and-swap."""
    from numba import cuda

    cas, bits = _cas_element_intrinsic()
    fence = op in FENCED
    if load is _identity:
        load = device_helper(_identity)
    if op == "cas":

        def swap(array, index, expected, new):
            cuda.threadfence()
            old = cas(array, index, store(expected), store(new))
            cuda.threadfence()
            return load(old)

        return device_helper(swap)
    combine = getattr(jitted(), f"atomic_{op}")

    def update(array, index, value):
        if fence:
            cuda.threadfence()
        old = array[index]
        while True:
            new = store(combine(load(old), value))
            seen = cas(array, index, old, new)
            if bits(seen) == bits(old):
                break
            old = seen
        if fence:
            cuda.threadfence()
        return load(old)

    return device_helper(update)
