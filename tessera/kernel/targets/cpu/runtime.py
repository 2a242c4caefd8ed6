"""Run-time support the generated CPU code calls: 16-bit float conversions, atomics, the
fixed reduction tree and NaN-propagating min/max (the atomics: atomics.py).

Numba's CPU target has no float16 arithmetic, so f16 and bf16 arrays travel as uint16
and every value is converted at loads and stores (f16 through LLVM's ``half``, bf16 with
integer round-to-nearest-even).

Everything here is made by Numba, so it is defined on first use (:func:`namespace`): a
process that only loads cached kernels never imports Numba.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from .. import integers, own_math
from ..semantics import CALLED, jitted
from ..semantics import F8_FORMATS as _SEMANTICS_FORMATS
from ..semantics import f8_value_bits as _f8_value_bits  # (plain Python: a table's)
from . import atomics, microkernel

_FP8_SHORT = {"f8e4m3": "e4m3", "f8e5m2": "e5m2"}  # the runtime's names: _e4m3_f32, ...


@functools.cache
def _definitions() -> dict:
    """Compile-time helpers and run-time functions, defined once Numba is imported."""
    import numba
    from llvmlite import ir as llir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic
    from numba.np.arrayobj import populate_array

    _JIT = CALLED  # compiled once per signature, inlined by LLVM (semantics.py)
    _SEMANTICS = jitted(called=True)
    bf16_bits = _SEMANTICS.bf16_bits

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

    @intrinsic
    def fma_f32(typingctx, a, b, c):
        """``a * b + c`` of f32 values rounded once (LLVM's ``llvm.fma``: a vector FMA
        instruction where the loop vectorises, a correctly rounded libm call elsewhere)."""
        sig = types.float32(types.float32, types.float32, types.float32)

        def codegen(context, builder, signature, args):
            return microkernel.fused_multiply_add(builder, *args)

        return sig, codegen

    @numba.njit(**_JIT)
    def b2f(bits):
        """uint16 bits of a bfloat16 → float32 (exact)."""
        return bits_f32(np.uint32(bits) << np.uint32(16))

    @numba.njit(**_JIT)
    def f2b(value):
        """float32 → uint16 bits of a bfloat16 (the rounding rule is in semantics.py)."""
        return bf16_bits(f32_bits(np.float32(value)))

    @numba.njit(**_JIT)
    def check_index(index, extent, site):
        """Bounds-checked launches: ``index`` if it is in ``[0, extent)``, else IndexError
        with the check site, which the launch turns into an error naming array and line."""
        if index < 0 or index >= extent:
            raise IndexError(site, index, extent)
        return index

    f8_bits, f8_value_bits = _SEMANTICS.f8_bits, _SEMANTICS.f8_value_bits

    def f8_conversions(ebits: int, mbits: int, finite: bool):
        # every code's float32 bits, a constant table (exact: f8_value_bits itself), so a
        # conversion is one load instead of a branchy decode that loop nests inline
        table = np.array(
            [_f8_value_bits(code, ebits, mbits, finite) for code in range(256)], np.uint32
        )

        @numba.njit(**_JIT)
        def to_f32(code):
            return bits_f32(table[np.uint8(code)])

        @numba.njit(**_JIT)
        def from_f32(value):
            return f8_bits(f32_bits(np.float32(value)), ebits, mbits, finite)

        @numba.njit(**_JIT)
        def rounded(value):
            return to_f32(from_f32(value))

        return to_f32, from_f32, rounded

    fp8 = {
        name: f8_conversions(*fmt) for name, fmt in _SEMANTICS_FORMATS.items()
    }  # f8e4m3 and f8e5m2: (to f32, from f32, rounded)

    @numba.njit(**_JIT)
    def round_f16(value):
        return h2f(f2h(np.float32(value)))

    @numba.njit(**_JIT)
    def round_bf16(value):
        return b2f(f2b(np.float32(value)))

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
                # at function entry, uninitialised: Numba's alloca_once would also store a
                # zero aggregate there, which LLVM's InstCombine takes time linear in the
                # array to turn into a memset (about 1 s for a 32 KB tile) and which then
                # clears the array on every call
                with builder.goto_entry_block():
                    storage = builder.alloca(llir.ArrayType(elem, count))
                # on a cache line: a tile's vector loads and stores never straddle two
                # (left to LLVM, the same kernel measured up to 25 % slower in one build
                # than another, its arrays 16 bytes off a line)
                storage.align = STACK_ALIGN
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

    @intrinsic
    def call_pointer(typingctx, address, args):
        """``call_pointer(address, args)``: call the compiled function at ``address`` (an
        integer; Numba's internal calling convention), its argument types those of ``args``
        (literals widened), passing on any exception it raises: a caller compiled once runs
        any such function, never linked into the caller's module."""
        if not isinstance(address, types.Integer) or not isinstance(args, types.BaseTuple):
            return None
        given = tuple(args.types)
        argtypes = tuple(types.unliteral(t) for t in given)

        def codegen(context, builder, signature, llargs):
            values = [
                context.cast(builder, v, t, want)
                for v, t, want in zip(
                    cgutils.unpack_tuple(builder, llargs[1], len(given)), given, argtypes
                )
            ]
            fnty = context.call_conv.get_function_type(types.none, argtypes)
            fn = builder.inttoptr(llargs[0], fnty.as_pointer())
            status, _ = context.call_conv.call_function(builder, fn, types.none, argtypes, values)
            with cgutils.if_unlikely(builder, status.is_error):
                context.call_conv.return_status_propagate(builder, status)
            return context.get_dummy_value()

        return types.none(address, args), codegen

    own = own_math.functions(bits_f32, f32_bits, fma_f32, numba.njit(**_JIT))  # exp, log, ...

    return dict(locals())


def call_pointer():
    """The intrinsic that calls a compiled function by its address (above)."""
    return _definitions()["call_pointer"]


STACK_ALIGN = 64  # bytes: a cache line, and one AVX-512 vector


def stack_array(shape: tuple[int, ...], dtype_name: str):
    """An intrinsic returning a C-contiguous array of constant ``shape`` in the calling
    function's stack frame (allocated once, at function entry; contents undefined)."""
    return _definitions()["stack_array"](shape, dtype_name)


def namespace() -> dict:
    """The names generated CPU code may use."""
    d = _definitions()
    semantics = d["_SEMANTICS"]
    return {
        "np": np,
        "math": math,
        "numba": d["numba"],
        "_h2f": d["h2f"],
        "_f2h": d["f2h"],
        "_b2f": d["b2f"],
        "_f2b": d["f2b"],
        "_round_f16": d["round_f16"],
        "_round_bf16": d["round_bf16"],
        **{f"_{short}_f32": d["fp8"][name][0] for name, short in _FP8_SHORT.items()},
        **{f"_f32_{short}": d["fp8"][name][1] for name, short in _FP8_SHORT.items()},
        **{f"_round_{short}": d["fp8"][name][2] for name, short in _FP8_SHORT.items()},
        **atomics.definitions(),
        "_fmax": semantics.fmax,
        "_fmin": semantics.fmin,
        "_add": semantics.add,
        "_add_i64": semantics.add_i64,
        "_check_index": d["check_index"],
        "_tree_reduce": semantics.tree_reduce,
        **d["own"],
        "_dot_tiles": microkernel.dot_tiles(),
        **integers.functions(d["numba"].njit(**d["_JIT"])),
    }
