"""Raw-address intrinsics of the register GEMM main loop (mainloop.py), sm_80+.

The main loop addresses its shared staging ring and its global operands as integers, as
CUDA C++ kernels do: ``_saddr(array)`` is a shared array's 32-bit shared-window address,
``_gaddr(array)`` a global array's data pointer. Then:

* ``_cp16(dst, src, nbytes)``: ``cp.async.cg.shared.global [dst], [src], 16, nbytes``
  (16 bytes, zero-filled past ``nbytes``; 0 reads nothing: a block overhanging its array);
* ``_ld16(src, ok)``: the 16 bits at ``src`` where ``ok``, else 0 (a predicated load, so
  a masked element never touches memory); ``_st16(dst, bits)``: ``st.shared.u16``;
* ``_ldsm4(addr)`` / ``_ldsm4t(addr)``: ``ldmatrix.sync.aligned.m8n8.x4[.trans]`` (four
  .b32 registers; isa/ldmatrix.py states which lane gets what);
* for 8-bit operands: ``_ld8(src, ok)`` / ``_st8(dst, bits)`` (element copies),
  ``_lds32(addr)`` (``ld.shared.b32``) and ``_prmt(a, b, selector)`` (``prmt.b32``, the
  byte permute that transposes B's words into fragments);
* for f64 operands: ``_ld64(src, ok)`` / ``_st64(dst, bits)`` (8-byte element copies) and
  ``_lds64(addr)`` (``ld.shared.f64``: DMMA fragments, one element per lane);
* for f32 operands (no tensor cores): ``_ld32(src, ok)`` / ``_st32(dst, bits)`` (element
  copies), ``_lds128f(addr)`` / ``_lds64f(addr)`` (``ld.shared.v4.f32`` / ``.v2.f32``: four
  or two values) and ``_ffma(a, b, c)`` (``fma.rn.f32``);
* ``_shfl_xor(value, mask)``: ``shfl.sync.bfly`` over the whole warp (row reductions);
  ``_max32``/``_min32`` (the language's max and min of f32) and ``_select(c, a, b)`` as
  LLVM selects, so a reduction tree is straight-line code.

Each is inline PTX with a memory clobber (CUDA's ``asm volatile``), so LLVM keeps them in
order with each other and with barriers. emulator.py gives every name a NumPy twin written
from the PTX ISA, which is how the loop is checked without a GPU.
"""

from __future__ import annotations

import functools


def _asm(builder, ret, arg_types, text: str, constraints: str, args):
    from llvmlite import ir

    fn = ir.FunctionType(ret, arg_types)
    return builder.call(ir.InlineAsm(fn, text, constraints, side_effect=True), args)


def _saddr():
    from llvmlite import ir
    from numba import types
    from numba.cuda import cgutils
    from numba.cuda.extending import intrinsic

    @intrinsic
    def saddr(typingctx, array):
        def codegen(context, builder, signature, args):
            data = cgutils.create_struct_proxy(signature.args[0])(
                context, builder, value=args[0]
            ).data
            i64 = ir.IntType(64)
            return _asm(
                builder,
                ir.IntType(32),
                [i64],
                "{ .reg .u64 %t; cvta.to.shared.u64 %t, $1; cvt.u32.u64 $0, %t; }",
                "=r,l",
                [builder.ptrtoint(data, i64)],
            )

        return types.uint32(array), codegen

    return saddr


def _gaddr():
    from llvmlite import ir
    from numba import types
    from numba.cuda import cgutils
    from numba.cuda.extending import intrinsic

    @intrinsic
    def gaddr(typingctx, array):
        def codegen(context, builder, signature, args):
            data = cgutils.create_struct_proxy(signature.args[0])(
                context, builder, value=args[0]
            ).data
            return builder.ptrtoint(data, ir.IntType(64))

        return types.int64(array), codegen

    return gaddr


def _cp16():
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def cp16(typingctx, dst, src, nbytes):
        def codegen(context, builder, signature, args):
            b32, i64 = ir.IntType(32), ir.IntType(64)
            kinds = (types.uint32, types.int64, types.uint32)
            values = [
                context.cast(builder, v, t, k) for v, t, k in zip(args, signature.args, kinds)
            ]
            _asm(
                builder,
                ir.VoidType(),
                [b32, i64, b32],
                "{ .reg .u64 %g; cvta.to.global.u64 %g, $1;\n"
                " cp.async.cg.shared.global [$0], [%g], 16, $2; }",
                "r,l,r,~{memory}",
                values,
            )
            return context.get_dummy_value()

        return types.void(dst, src, nbytes), codegen

    return cp16


def _ldsm4(trans: bool):
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    text = (
        f"ldmatrix.sync.aligned.m8n8.x4{'.trans' if trans else ''}.shared.b16 "
        "{$0, $1, $2, $3}, [$4];"
    )
    result = types.UniTuple(types.uint32, 4)

    @intrinsic
    def ldsm(typingctx, address):
        def codegen(context, builder, signature, args):
            b32 = ir.IntType(32)
            a = context.cast(builder, args[0], signature.args[0], types.uint32)
            four = ir.LiteralStructType([b32] * 4)
            out = _asm(builder, four, [b32], text, "=r,=r,=r,=r,r,~{memory}", [a])
            return context.make_tuple(
                builder, result, [builder.extract_value(out, i) for i in range(4)]
            )

        return result(address), codegen

    return ldsm


def _load(bits: int):
    """``_ld<bits>(src, ok)``: the ``bits``-wide element at global address ``src`` where
    ``ok``, else 0 (a predicated load: a masked element never touches memory); 8- and
    16-bit elements come back as uint32 (through a 16-bit register), 64-bit ones as
    int64 (bits, not values)."""
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    narrow = bits <= 16
    reg, move, width = {16: ("h", "mov.u16", 16), 32: ("r", "mov.b32", 32)}.get(
        max(bits, 16), ("l", "mov.b64", 64)
    )
    result = types.uint32 if bits <= 32 else types.int64
    text = f"{{ .reg .pred %p; setp.ne.b32 %p, $2, 0; {move} $0, 0;\n @%p ld.u{bits} $0, [$1]; }}"

    @intrinsic
    def load(typingctx, src, ok):
        def codegen(context, builder, signature, args):
            i64, b32 = ir.IntType(64), ir.IntType(32)
            address = context.cast(builder, args[0], signature.args[0], types.int64)
            flag = context.cast(builder, args[1], signature.args[1], types.uint32)
            out = _asm(
                builder,
                ir.IntType(width),
                [i64, b32],
                text,
                f"={reg},l,r,~{{memory}}",
                [address, flag],
            )
            return builder.zext(out, b32) if narrow else out

        return result(src, ok), codegen

    return load


def _store(bits: int):
    """``_st<bits>(dst, value)``: ``st.shared.u<bits>`` of the value's low ``bits`` (8 and
    16 from a 16-bit register)."""
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    narrow = bits <= 16
    reg, width = {16: ("h", 16), 32: ("r", 32)}.get(max(bits, 16), ("l", 64))
    kind = types.uint32 if bits <= 32 else types.int64

    @intrinsic
    def store(typingctx, dst, value):
        def codegen(context, builder, signature, args):
            address = context.cast(builder, args[0], signature.args[0], types.uint32)
            v = context.cast(builder, args[1], signature.args[1], kind)
            if narrow:
                v = builder.trunc(v, ir.IntType(16))
            _asm(
                builder,
                ir.VoidType(),
                [ir.IntType(32), ir.IntType(width)],
                f"st.shared.u{bits} [$0], $1;",
                f"r,{reg},~{{memory}}",
                [address, v],
            )
            return context.get_dummy_value()

        return types.void(dst, value), codegen

    return store


def _lds64():
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def lds64(typingctx, address):
        def codegen(context, builder, signature, args):
            a = context.cast(builder, args[0], signature.args[0], types.uint32)
            text = "ld.shared.f64 $0, [$1];"
            return _asm(builder, ir.DoubleType(), [ir.IntType(32)], text, "=d,r,~{memory}", [a])

        return types.float64(address), codegen

    return lds64


def _lds_f32(count: int):
    """``_lds128f(addr)`` / ``_lds64f(addr)``: ``ld.shared.v4.f32`` / ``.v2.f32``, four or
    two consecutive f32 values of shared memory (16- or 8-byte aligned) as a tuple: the
    f32 main loop's A and B values."""
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    outs = ", ".join(f"${i}" for i in range(count))
    text = f"ld.shared.v{count}.f32 {{{outs}}}, [${count}];"
    constraints = ",".join(["=f"] * count) + ",r,~{memory}"
    result = types.UniTuple(types.float32, count)

    @intrinsic
    def lds(typingctx, address):
        def codegen(context, builder, signature, args):
            a = context.cast(builder, args[0], signature.args[0], types.uint32)
            values = ir.LiteralStructType([ir.FloatType()] * count)
            out = _asm(builder, values, [ir.IntType(32)], text, constraints, [a])
            return context.make_tuple(
                builder, result, [builder.extract_value(out, i) for i in range(count)]
            )

        return result(address), codegen

    return lds


def _lds32():
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def lds32(typingctx, address):
        def codegen(context, builder, signature, args):
            a = context.cast(builder, args[0], signature.args[0], types.uint32)
            b32 = ir.IntType(32)
            return _asm(builder, b32, [b32], "ld.shared.b32 $0, [$1];", "=r,r,~{memory}", [a])

        return types.uint32(address), codegen

    return lds32


def _prmt():
    """``_prmt(a, b, selector)``: ``prmt.b32`` (byte permute: result byte ``i`` is the
    byte of ``{b, a}`` that nibble ``i`` of the selector names; a pure operation)."""
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def prmt(typingctx, a, b, selector):
        def codegen(context, builder, signature, args):
            b32 = ir.IntType(32)
            values = [
                context.cast(builder, v, t, types.uint32) for v, t in zip(args, signature.args)
            ]
            asm = ir.InlineAsm(
                ir.FunctionType(b32, [b32] * 3), "prmt.b32 $0, $1, $2, $3;", "=r,r,r,r"
            )
            return builder.call(asm, values)

        return types.uint32(a, b, selector), codegen

    return prmt


def _shfl_xor():
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def shfl_xor(typingctx, value, mask):
        def codegen(context, builder, signature, args):
            v = context.cast(builder, args[0], signature.args[0], types.float32)
            m = context.cast(builder, args[1], signature.args[1], types.uint32)
            return _asm(
                builder,
                ir.FloatType(),
                [ir.FloatType(), ir.IntType(32)],
                "shfl.sync.bfly.b32 $0, $1, $2, 31, -1;",
                "=f,f,r",
                [v, m],
            )

        return types.float32(value, mask), codegen

    return shfl_xor


def _extremum(greater: bool):
    """The language's ``max`` (``greater``) or ``min`` of two f32 values as one LLVM
    select, no branch: ``a`` where ``a`` beats ``b`` or is NaN, else ``b``
    (semantics.fmax / fmin)."""
    from numba import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def extremum(typingctx, a, b):
        def codegen(context, builder, signature, args):
            x, y = (
                context.cast(builder, v, t, types.float32) for v, t in zip(args, signature.args)
            )
            beats = builder.fcmp_ordered(">" if greater else "<", x, y)
            nan = builder.fcmp_unordered("uno", x, x)
            return builder.select(builder.or_(beats, nan), x, y)

        return types.float32(a, b), codegen

    return extremum


def _select():
    from numba import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def select(typingctx, condition, a, b):
        def codegen(context, builder, signature, args):
            c = context.cast(builder, args[0], signature.args[0], types.boolean)
            x = context.cast(builder, args[1], signature.args[1], types.float32)
            y = context.cast(builder, args[2], signature.args[2], types.float32)
            return builder.select(c, x, y)

        return types.float32(condition, a, b), codegen

    return select


def _ffma():
    """``_ffma(a, b, c)``: ``a * b + c`` of f32 rounded once (libdevice's ``fmaf``:
    ``fma.rn.f32``), the f32 main loop's products."""
    from numba.cuda import libdevice

    return libdevice.fmaf


@functools.cache
def namespace() -> dict:
    """The names generated register loops use (numba-cuda intrinsics, built on first use)."""
    return {
        "_shfl_xor": _shfl_xor(),
        "_max32": _extremum(True),
        "_min32": _extremum(False),
        "_select": _select(),
        "_saddr": _saddr(),
        "_gaddr": _gaddr(),
        "_cp16": _cp16(),
        "_ld8": _load(8),
        "_st8": _store(8),
        "_lds32": _lds32(),
        "_prmt": _prmt(),
        "_ld16": _load(16),
        "_st16": _store(16),
        "_ldsm4": _ldsm4(False),
        "_ldsm4t": _ldsm4(True),
        "_lds64": _lds64(),
        "_ld64": _load(64),
        "_st64": _store(64),
        "_ld32": _load(32),
        "_st32": _store(32),
        "_lds128f": _lds_f32(4),
        "_lds64f": _lds_f32(2),
        "_ffma": _ffma(),
    }
