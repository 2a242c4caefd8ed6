"""``tile.dot`` on the CPU: a register-blocked micro-kernel written as LLVM vector IR.

A product of two tiles is the hot loop of a GEMM, and the speed it reaches is decided by
one thing: whether a block of results stays in vector registers across the whole ``k``
loop, each step being a few vector loads of ``b``, one broadcast of ``a`` per row and one
fused multiply-add per register. Written as Python for Numba, the block is scalar locals;
LLVM's SLP vectoriser starts from stores, and the ``k`` loop has none, so it stays scalar
(about 7 % of BLAS here). So the kernel is emitted here directly as LLVM IR with explicit
``<W x float>`` vectors and ``llvm.fma``; LLVM maps them to AVX-512 (or pairs of AVX2)
registers.

Blocks (:func:`block`, chosen by the host's vector registers): rows × vectors of one
register each. With AVX-512, 8 rows × 2 vectors of 64 bytes (16 lanes of f32 or i32, 8 of
f64: 8 × 32 f32 or 8 × 16 f64 results), so every dtype keeps 16 accumulators, two loads of
``b`` and one broadcast, which fits its 32 registers. With AVX2's 16 registers of 32
bytes, 4 rows × 2 vectors (8 accumulators, 11 registers in all): the AVX-512 block there
is 32 register halves of accumulators alone, and LLVM spilled them to the stack at every
``k`` (measured on a 2-core AVX2 machine: the f32 tile GEMM at 34-57 GFLOP/s with it,
105-110 with this block, NumPy's BLAS 118). Edges use narrower blocks:
one vector, then single columns, then single rows. Every result element adds its
products in ``k`` order, fused (TILES.md §3 leaves ``tile.dot``'s rounding to the
backend; it is the same bits on every run and thread count): f32 accumulators for
f16/bf16/f32 tiles, f64 for f64 tiles. Integer tiles (i8 → i32) use the same blocks with
integer multiply and add (wrapping, as the other targets).

Shapes are constants of the call (Numba literals), so the loop bounds are known when the
IR is made; the arrays are C-contiguous tiles (``cpu/codegen.py`` makes them).
"""

from __future__ import annotations

import functools
import hashlib

from .vector_width import host_has_avx512

AVX512_BLOCK = (8, 2, 64)  # rows, vectors of a row, bytes of a vector register
AVX2_BLOCK = (4, 2, 32)


@functools.cache
def block() -> tuple[int, int, int]:
    """(rows, vectors a row, bytes a vector) of this host's register block (above)."""
    return AVX512_BLOCK if host_has_avx512() else AVX2_BLOCK


def width_of(itemsize: int, vector_bytes: int | None = None) -> int:
    """Lanes of one accumulator vector of ``itemsize``-byte elements (with AVX-512: 16
    f32, 8 f64)."""
    return (vector_bytes or block()[2]) // itemsize


def regions(
    m: int, n: int, width: int, shape: tuple[int, int] | None = None
) -> list[tuple[int, int, int, int, int, int, int]]:
    """Loop nests covering an ``m`` × ``n`` result, each ``(row0, row_blocks, rows, col0,
    col_blocks, vectors, width)``: ``row_blocks`` blocks of ``rows`` rows from ``row0``
    times ``col_blocks`` blocks of ``vectors`` × ``width`` columns from ``col0``
    (``width``: the lanes of a full vector, :func:`width_of` the accumulator; ``shape``:
    the block's rows and vectors, this host's by default)."""
    rows_full, vectors_full = shape or block()[:2]
    row_parts = []
    full_rows = m - m % rows_full
    if full_rows:
        row_parts.append((0, full_rows // rows_full, rows_full))
    if m - full_rows:
        row_parts.append((full_rows, m - full_rows, 1))
    col_parts = []
    wide = vectors_full * width
    full_wide = n - n % wide
    if full_wide:
        col_parts.append((0, full_wide // wide, vectors_full, width))
    single = n - full_wide - (n - full_wide) % width
    if single:
        col_parts.append((full_wide, single // width, 1, width))
    done = full_wide + single
    if n - done:
        col_parts.append((done, n - done, 1, 1))
    return [(*r, *c) for r in row_parts for c in col_parts]


def module_function(module, key: str, argtypes: list, body):
    """The internal, never-inlined ``void`` function of ``module`` named for ``key`` (made
    at the first call: ``body(builder, args)`` writes its IR before the return), so that
    every site of one kernel that needs the same code calls one copy of it."""
    from llvmlite import ir as llir

    name = f"tessera_{hashlib.sha256(key.encode()).hexdigest()[:16]}"
    if name in module.globals:
        return module.globals[name]
    fn = llir.Function(module, llir.FunctionType(llir.VoidType(), argtypes), name)
    fn.linkage = "internal"
    fn.attributes.add("noinline")
    fn.attributes.add("nounwind")
    builder = llir.IRBuilder(fn.append_basic_block("entry"))
    body(builder, list(fn.args))
    builder.ret_void()
    return fn


@functools.cache
def fused_multiply_add(builder, x, y, c):
    """``x * y + c`` rounded once: a call of LLVM's ``llvm.fma`` on f32 or f64 scalars or
    vectors (one FMA instruction each; the own math functions use it too, runtime.py)."""
    from llvmlite import ir as llir
    from numba.core import cgutils

    t = c.type
    vector = isinstance(t, llir.VectorType)
    kind = {"float": "f32", "double": "f64"}[str(t.element if vector else t)]
    name = f"llvm.fma.v{t.count}{kind}" if vector else f"llvm.fma.{kind}"
    fma = cgutils.get_or_insert_function(builder.module, llir.FunctionType(t, [t, t, t]), name)
    return builder.call(fma, [x, y, c])


def dot_tiles():
    """The intrinsic ``dot_tiles(dest, init, a, b, m, n, k, from_zero)``:
    ``dest = (0 if from_zero else init) + a @ b`` for C-contiguous ``a`` (m × k), ``b``
    (k × n), ``init`` and ``dest`` (m × n, may be the same array); ``m, n, k`` and
    ``from_zero`` are literal constants."""
    from llvmlite import ir as llir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic

    def literal(t):
        return getattr(t, "literal_value", None)

    @intrinsic(prefer_literal=True)
    def dot(typingctx, dest, init, a, b, m, n, k, from_zero):
        shape = tuple(literal(t) for t in (m, n, k))
        zero = literal(from_zero)
        if any(not isinstance(v, int) for v in shape) or not isinstance(zero, bool):
            return None
        sig = types.none(dest, init, a, b, m, n, k, from_zero)

        def codegen(context, builder, signature, args):
            arrays = [
                context.make_array(t)(context, builder, v).data
                for t, v in zip(signature.args[:4], args[:4])
            ]
            acc = signature.args[0].dtype
            # how an integer operand widens: by its sign (u8 operands zero-extend)
            signed = tuple(getattr(t.dtype, "signed", True) for t in signature.args[2:4])
            itemsize = acc.bitwidth // 8
            acc_t = context.get_data_type(acc)
            body = _outlined(builder.module, arrays, acc_t, shape, zero, itemsize, signed)
            builder.call(body, arrays)
            return context.get_dummy_value()

        return sig, codegen

    def _outlined(module, arrays, acc_t, shape, zero, itemsize, signed):
        """The micro-kernel of one shape, accumulator and operand types as a function of
        the module (:func:`module_function`): a kernel's products of one shape are one
        body for LLVM to optimise and make machine code of, not one each (a call costs
        nothing beside a tile product)."""
        pointers = [str(p.type) for p in arrays]
        key = f"dot{shape}{zero}{signed}{acc_t}{pointers}{block()}"

        def body(builder, args):
            _emit(builder, args, acc_t, shape, zero, itemsize, signed)

        return module_function(module, key, [p.type for p in arrays], body)

    def _emit(builder, arrays, acc_t, shape, zero, itemsize, signed):
        dest, init, a, b = arrays
        m, n, k = shape
        is_float = isinstance(acc_t, (llir.FloatType, llir.DoubleType))
        i64 = llir.IntType(64)

        def const(v):
            return llir.Constant(i64, v)

        def element(ptr, row, col, cols):
            return builder.gep(ptr, [builder.add(builder.mul(row, const(cols)), col)])

        def widen(value, sign):  # an input element as the accumulator's type
            if value.type == acc_t:
                return value
            if is_float:
                return builder.fpext(value, acc_t)
            return builder.sext(value, acc_t) if sign else builder.zext(value, acc_t)

        def load_vector(ptr, width, sign):
            vt = llir.VectorType(ptr.type.pointee, width) if width > 1 else ptr.type.pointee
            raw = builder.load(builder.bitcast(ptr, vt.as_pointer()), align=1)
            if width == 1:
                return widen(raw, sign)
            if raw.type.element == acc_t:
                return raw
            out = llir.VectorType(acc_t, width)
            if is_float:
                return builder.fpext(raw, out)
            return builder.sext(raw, out) if sign else builder.zext(raw, out)

        def splat(value, width):
            if width == 1:
                return value
            vt = llir.VectorType(acc_t, width)
            one = builder.insert_element(llir.Constant(vt, None), value, const(0))
            return builder.shuffle_vector(
                one,
                llir.Constant(vt, None),
                llir.Constant(llir.VectorType(llir.IntType(32), width), [0] * width),
            )

        def madd(x, y, c):
            if is_float:
                return fused_multiply_add(builder, x, y, c)
            return builder.add(c, builder.mul(x, y))

        for row0, row_blocks, rows, col0, col_blocks, vectors, width in regions(
            m, n, width_of(itemsize)
        ):
            vt = llir.VectorType(acc_t, width) if width > 1 else acc_t
            accs = [[cgutils.alloca_once(builder, vt) for _ in range(vectors)] for _ in range(rows)]
            with cgutils.for_range(builder, const(row_blocks)) as rloop:
                i = builder.add(const(row0), builder.mul(rloop.index, const(rows)))
                with cgutils.for_range(builder, const(col_blocks)) as cloop:
                    j = builder.add(const(col0), builder.mul(cloop.index, const(vectors * width)))
                    for r in range(rows):
                        row = builder.add(i, const(r))
                        for v in range(vectors):
                            if zero:
                                start = llir.Constant(vt, [0] * width if width > 1 else 0)
                            else:
                                col = builder.add(j, const(v * width))
                                start = load_vector(element(init, row, col, n), width, True)
                            builder.store(start, accs[r][v])
                    with cgutils.for_range(builder, const(k)) as kloop:
                        kk = kloop.index
                        bs = [
                            load_vector(
                                element(b, kk, builder.add(j, const(v * width)), n),
                                width,
                                signed[1],
                            )
                            for v in range(vectors)
                        ]
                        for r in range(rows):
                            x = builder.load(element(a, builder.add(i, const(r)), kk, k))
                            x = widen(x, signed[0])
                            x = splat(x, width)
                            for v in range(vectors):
                                c = builder.load(accs[r][v])
                                builder.store(madd(x, bs[v], c), accs[r][v])
                    for r in range(rows):
                        row = builder.add(i, const(r))
                        for v in range(vectors):
                            col = builder.add(j, const(v * width))
                            ptr = element(dest, row, col, n)
                            target = builder.bitcast(ptr, vt.as_pointer()) if width > 1 else ptr
                            builder.store(builder.load(accs[r][v]), target, align=1)

    return dot
