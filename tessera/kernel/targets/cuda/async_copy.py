"""Hardware asynchronous copies (``cp.async``, sm_80+) as numba-cuda intrinsics.

``cp.async.ca.shared.global [dst], [src], size, src_size`` copies ``size`` bytes from
global to shared memory without holding a register, and zero-fills the bytes past
``src_size``: exactly the language's tail rule, so a lane past the end of the source
passes ``src_size = 0``. Copies are grouped with ``cp.async.commit_group`` and waited
for with ``cp.async.wait_group n`` (0: all; n > 0 in prefetch loops, passes/prefetch.py).

numba-cuda is imported on first use, when generated code needs these names.
"""

from __future__ import annotations

import functools

SIZES = (4, 8, 16)


def element_pointer(context, builder, array_type, array, index_type, index):
    """The address of ``array[index]`` in generated LLVM IR (no wraparound)."""
    from numba import types
    from numba.cuda import cgutils

    if isinstance(index_type, types.BaseTuple):
        indices = cgutils.unpack_tuple(builder, index)
    else:
        indices = [index]
    indices = [
        context.cast(builder, i, t, types.intp)
        for i, t in zip(
            indices, index_type if isinstance(index_type, types.BaseTuple) else [index_type]
        )
    ]
    struct = context.make_array(array_type)(context, builder, value=array)
    return cgutils.get_item_pointer(context, builder, array_type, struct, indices, wraparound=False)


@functools.cache
def copy(size: int):
    """The intrinsic ``copy(dst, dst_index, src, src_index, src_bytes)`` for one
    ``size``-byte chunk (``src_bytes`` < ``size`` zero-fills the rest)."""
    if size not in SIZES:
        raise ValueError(f"cp.async copies 4, 8 or 16 bytes, not {size}")
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    cache = "cg" if size == 16 else "ca"

    @intrinsic
    def cp_async(typingctx, dst, dst_index, src, src_index, src_bytes):
        def codegen(context, builder, signature, args):
            dst_t, dst_i_t, src_t, src_i_t, bytes_t = signature.args
            dst_ptr = element_pointer(context, builder, dst_t, args[0], dst_i_t, args[1])
            src_ptr = element_pointer(context, builder, src_t, args[2], src_i_t, args[3])
            i64 = ir.IntType(64)
            count = context.cast(builder, args[4], bytes_t, types.uint32)
            asm = ir.InlineAsm(
                ir.FunctionType(ir.VoidType(), [i64, i64, ir.IntType(32)]),
                "{ .reg .u64 %sd, %gs;\n"
                " cvta.to.shared.u64 %sd, $0;\n"
                " cvta.to.global.u64 %gs, $1;\n"
                f" cp.async.{cache}.shared.global [%sd], [%gs], {size}, $2;\n}}",
                "l,l,r,~{memory}",
                side_effect=True,
            )
            builder.call(
                asm, [builder.ptrtoint(dst_ptr, i64), builder.ptrtoint(src_ptr, i64), count]
            )
            return context.get_dummy_value()

        return types.void(dst, dst_index, src, src_index, src_bytes), codegen

    return cp_async


def _statement(ptx: str):
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def emit(typingctx):
        def codegen(context, builder, signature, args):
            asm = ir.InlineAsm(
                ir.FunctionType(ir.VoidType(), []), ptx, "~{memory}", side_effect=True
            )
            builder.call(asm, [])
            return context.get_dummy_value()

        return types.void(), codegen

    return emit


@functools.cache
def namespace() -> dict:
    """Names the generated CUDA code uses for asynchronous copies. ``_cp_wait<n>`` waits
    until at most n groups are pending (the n newest stay in flight: prefetch loops)."""
    return {
        "_cp_async4": copy(4),
        "_cp_async8": copy(8),
        "_cp_async16": copy(16),
        "_cp_commit": _statement("cp.async.commit_group;"),
        "_cp_wait_all": _statement("cp.async.wait_group 0;"),
        **{f"_cp_wait{n}": _statement(f"cp.async.wait_group {n};") for n in range(1, 8)},
    }
