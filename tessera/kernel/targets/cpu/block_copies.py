"""Block loads and stores as LLVM IR emitted whole (one intrinsic call each).

``tile.load_block`` of a 2-d block is two loop nests in a branch (the plain copy of a
block inside the array, and the checked copy of a block at an edge); written into the
kernel's generated source, every load adds them to the function Numba compiles, and
Numba's passes (liveness, SSA) grow faster than linearly with its loops and variables: a
kernel with 20 loads (flash attention's backward pass) spent most of its compile there.
So the CPU target emits each block copy as one call of an intrinsic whose LLVM IR is
written here whole (the loops, with the block's constant extents, and the edge checks):
Numba types and lowers one call. The IR is a function of the kernel's module, one for
each kind, shape and argument types, called from every site that copies such a block:
LLVM unrolls and vectorises a copy's loops into hundreds of instructions, and a kernel
with every copy written into it spent most of its LLVM time there (the flash-attention
backward pass: 26.6 s to compile on a 2-core AVX2 machine with the copies and ``tile.dot``
products written in, 14-18 s with both called).

Only copies whose element needs no conversion take this way (the array's dtype is the
tile's, and neither is stored in other bits: f16, bf16, FP8); the others keep the inline
loops (common_lowerings.py), which spell the conversion out.
"""

from __future__ import annotations

import functools

from ....dtypes import COMPUTED_IN_F32
from .microkernel import module_function


def plain(array_dtype, tile_dtype) -> bool:
    """Whether a block copy between an array and a tile of these dtypes is a plain copy of
    each element (the same dtype, held in its own bits)."""
    return array_dtype == tile_dtype and array_dtype not in COMPUTED_IN_F32


def name(kind: str, lead: int, shape: tuple[int, ...], masked: bool = False) -> str:
    """The generated code's name for the function (a kernel module attribute)."""
    dims = "x".join(map(str, shape))
    return f"_{kind}_block_{lead}_{dims}{'_m' if masked else ''}"


@functools.cache
def function(kind: str, lead: int, shape: tuple[int, ...], masked: bool = False):
    """The intrinsic copying a block of ``shape`` out of (``kind="load"``:
    ``f(dest, src, offsets, fill)``) or into (``"store"``: ``f(dst, t, offsets[, mask])``)
    an array, after ``lead`` fixed indices (``offsets``: a tuple of ``lead + len(shape)``
    int64). Tiles are C-contiguous; the array has any strides. Offsets of blocks wholly
    outside have been moved to ``-n`` by the caller, so ``o + e`` never wraps. Elements
    outside the array read ``fill`` (a load) or are skipped (a store), as are a store's
    elements masked off."""
    from numba import types
    from numba.extending import intrinsic

    count = lead + len(shape)

    def typed(tile_or_array, other, offsets, rest):
        if not isinstance(offsets, types.UniTuple) or offsets.count != count:
            return None
        if tile_or_array.dtype != other.dtype:  # a plain copy: one dtype on both sides
            return None
        sig = types.none(tile_or_array, other, offsets, *rest)

        def codegen(context, builder, signature, args):
            body = _outlined(context, builder.module, signature, kind, lead, shape, masked)
            builder.call(body, args)
            return context.get_dummy_value()

        return sig, codegen

    if kind == "load":

        @intrinsic
        def copy(typingctx, dest, src, offsets, fill):
            return typed(dest, src, offsets, (fill,))

    elif masked:

        @intrinsic
        def copy(typingctx, dst, tile, offsets, mask):
            return typed(dst, tile, offsets, (mask,))

    else:

        @intrinsic
        def copy(typingctx, dst, tile, offsets):
            return typed(dst, tile, offsets, ())

    return copy


def _outlined(context, module, signature, kind, lead, shape, masked):
    """The copy as a function of ``module`` taking the intrinsic's arguments
    (``microkernel.module_function``): a kernel's copies of one kind, shape and argument
    types are one body for LLVM to optimise and make machine code of, not one each (LLVM
    unrolls a copy's loops into hundreds of instructions; a call costs nothing beside a
    block's copy)."""
    from numba.core import cgutils

    def body(builder, args):
        emit = _Emitter(context, builder, cgutils, signature, args)
        if kind == "load":
            emit.load(lead, shape)
        else:
            emit.store(lead, shape, masked)

    key = f"{kind}_block{lead}{shape}{masked}{signature.args}"
    argtypes = [context.get_value_type(t) for t in signature.args]
    return module_function(module, key, argtypes, body)


class _Emitter:
    """The LLVM IR of one block copy, in the calling function (so Numba compiles one
    call, and LLVM sees the loops with their constant extents)."""

    def __init__(self, context, builder, cgutils, signature, args):
        self.context, self.builder, self.cgutils = context, builder, cgutils
        self.types, self.args = signature.args, args
        self.i64 = context.get_value_type(signature.args[2].dtype)

    def array(self, i):
        ty = self.types[i]
        return ty, self.context.make_array(ty)(self.context, self.builder, self.args[i])

    def pointer(self, ty, array, indices):
        b, cg = self.builder, self.cgutils
        shape = cg.unpack_tuple(b, array.shape, ty.ndim)
        strides = cg.unpack_tuple(b, array.strides, ty.ndim)
        return cg.get_item_pointer2(self.context, b, array.data, shape, strides, ty.layout, indices)

    def loops(self, shape, body, elements=()):
        """Nested loops over ``shape`` (the last innermost) running ``body(elements)``."""
        if len(elements) == len(shape):
            body(list(elements))
            return
        count = self.i64(shape[len(elements)])
        with self.cgutils.for_range(self.builder, count, intp=self.i64) as loop:
            self.loops(shape, body, (*elements, loop.index))

    def positions(self, offsets, lead, elements):
        b = self.builder
        return list(offsets[:lead]) + [b.add(o, e) for o, e in zip(offsets[lead:], elements)]

    def inside(self, ty, array, positions):
        """Whether every position is within the array's extent (unsigned: negatives fail)."""
        b, cg = self.builder, self.cgutils
        shape = cg.unpack_tuple(b, array.shape, ty.ndim)
        ok = cg.true_bit
        for p, n in zip(positions, shape):
            ok = b.and_(ok, b.icmp_unsigned("<", p, n))
        return ok

    def whole(self, ty, array, offsets, lead, shape):
        """Whether the block lies wholly inside the array (one check for the plain copy)."""
        b, cg = self.builder, self.cgutils
        extents = cg.unpack_tuple(b, array.shape, ty.ndim)
        ok = cg.true_bit
        for d, o in enumerate(offsets):
            n = extents[d]
            if d < lead:
                ok = b.and_(ok, b.icmp_unsigned("<", o, n))
            else:
                last = b.add(o, self.i64(shape[d - lead]))
                ok = b.and_(ok, b.icmp_signed(">=", o, self.i64(0)))
                ok = b.and_(ok, b.icmp_signed("<=", last, n))
        return ok

    def load(self, lead, shape):
        b, cg = self.builder, self.cgutils
        dest_t, dest = self.array(0)
        src_t, src = self.array(1)
        offsets = cg.unpack_tuple(b, self.args[2], lead + len(shape))
        fill = self.context.data_model_manager[self.types[3]].as_data(b, self.args[3])

        def plain(elements):
            value = b.load(self.pointer(src_t, src, self.positions(offsets, lead, elements)))
            b.store(value, self.pointer(dest_t, dest, elements))

        def checked(elements):
            positions = self.positions(offsets, lead, elements)
            target = self.pointer(dest_t, dest, elements)
            with b.if_else(self.inside(src_t, src, positions)) as (then, otherwise):
                with then:
                    b.store(b.load(self.pointer(src_t, src, positions)), target)
                with otherwise:
                    b.store(fill, target)

        self._either(self.whole(src_t, src, offsets, lead, shape), shape, plain, checked)

    def store(self, lead, shape, masked):
        b, cg = self.builder, self.cgutils
        dst_t, dst = self.array(0)
        tile_t, tile = self.array(1)
        offsets = cg.unpack_tuple(b, self.args[2], lead + len(shape))
        mask = self.array(3) if masked else None

        def plain(elements):
            value = b.load(self.pointer(tile_t, tile, elements))
            b.store(value, self.pointer(dst_t, dst, self.positions(offsets, lead, elements)))

        def checked(elements):
            positions = self.positions(offsets, lead, elements)
            ok = self.inside(dst_t, dst, positions)
            if mask is not None:
                bit = b.load(self.pointer(mask[0], mask[1], elements))
                ok = b.and_(ok, b.icmp_unsigned("!=", bit, bit.type(0)))
            with b.if_then(ok):
                value = b.load(self.pointer(tile_t, tile, elements))
                b.store(value, self.pointer(dst_t, dst, positions))

        if mask is not None:
            self.loops(shape, checked)
        else:
            self._either(self.whole(dst_t, dst, offsets, lead, shape), shape, plain, checked)

    def _either(self, condition, shape, plain, checked):
        with self.builder.if_else(condition, likely=True) as (then, otherwise):
            with then:
                self.loops(shape, plain)
            with otherwise:
                self.loops(shape, checked)
