"""Tensor-core fragments: ``tile.dot`` as warp-wide ``mma.sync`` instructions (sm_80+).

One ``mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32`` multiplies a 16x16 block of A
by a 16x8 block of B and adds a 16x8 block of C, all held by the 32 lanes of one warp:
each lane holds a few elements of each matrix (its *fragment*) in registers. Which lane
holds which element is fixed by the PTX ISA; the tables (:class:`Fragment`, ``A_16x16``,
``B_16x8``, ``C_16x8`` and the tf32 ones) are stated once, in isa/mma_sync.py, and
re-exported here. :meth:`Fragment.code` gives a position as generated source, which is
how the code generator loads fragments from the shared-memory tiles and stores the
results.

Tile values live in shared memory in their compute representation (f32 for f16 and
bf16), so two elements are packed into one .b32 register with ``cvt.rn.f16x2.f32``
(``.bf16x2``), exact for values that are already f16/bf16. The intrinsics are inline PTX
in numba-cuda ``@intrinsic`` functions, like async_copy.py's ``cp.async``; numba-cuda is
imported on first use. The simulator cannot run inline PTX: it keeps the plain path.
Written against the PTX ISA and checked without a GPU (PTX, cubins, the NumPy model);
not yet run on one (tests/test_cuda_gpu.py waits for a machine that has one).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from .... import dtypes as D
from .isa import mma_sync
from .isa.mma_sync import (  # noqa: F401 (the tables, stated once in isa/mma_sync.py)
    A_16x8_TF32,
    A_16x16,
    B_8x8_TF32,
    B_16x8,
    C_16x8,
    Fragment,
)

WARP = 32


@dataclass(frozen=True)
class Instruction:
    """One ``mma.sync`` shape and type as the ISA states it (isa/mma_sync.py: ``ptx``, the
    ``a``/``b``/``c`` fragments, ``per_register``, ``m``/``n``/``k``), with the generated
    code's names of its packing and mma intrinsics."""

    isa: mma_sync.Mma
    pack: str  # the generated code's name of the packing intrinsic
    name: str  # the generated code's name of the mma intrinsic

    def __getattr__(self, attr: str):
        if attr == "isa":  # (not set yet: no recursion)
            raise AttributeError(attr)
        return getattr(self.isa, attr)


def _instruction(isa: mma_sync.Mma, pack: str, name: str) -> Instruction:
    return Instruction(isa, pack, name)


M16N8K16_F16 = _instruction(mma_sync.M16N8K16_F16, "_mma_pack_f16", "_mma_f16")
M16N8K16_BF16 = _instruction(mma_sync.M16N8K16_BF16, "_mma_pack_bf16", "_mma_bf16")
M16N8K8_TF32 = _instruction(mma_sync.M16N8K8_TF32, "_mma_to_tf32", "_mma_tf32")
# DMMA, used by the register main loop (mainloop.py): f64 operands need no packing
M8N8K4_F64 = _instruction(mma_sync.M8N8K4_F64, "", "_mma_f64")


# f32 without TF32 (GPU.md §2: register-blocked FFMA from conflict-free shared memory): no
# tensor-core instruction. The f32 main loop (mainloop.py) has each thread accumulate, by
# fma.rn.f32, exactly the elements m16n8's C fragment gives it: A's rows groupID and
# groupID + 8 (four k of one 16-byte chunk, the same in every lane of a quad) times B's
# columns 2 threadID and 2 threadID + 1. So its accumulator layout, epilogue and layouts
# are the tensor-core loops'; these fragments say what a lane reads of A and B per k4 step.
A_16x4_F32 = mma_sync.Fragment(
    (16, 4), (1, 0), (0, 0), tuple((8 * (i >> 2), i & 3) for i in range(8))
)
B_4x8_F32 = mma_sync.Fragment((4, 8), (0, 0), (0, 2), tuple((i >> 1, i & 1) for i in range(8)))
FFMA_M16N8K4 = _instruction(
    mma_sync.Mma("fma.rn.m16n8k4.f32.f32.f32.f32", A_16x4_F32, B_4x8_F32, mma_sync.C_16x8, 1),
    "",
    "_ffma",
)


# 8-bit operands: the register main loop (mainloop.py) loads their bytes as they are
# stored: i8 and u8 (sm_80+), f8e4m3 and f8e5m2 (sm_89+), one of each sign or format
# too; emit_dot packs integer tiles' values (f8
# tiles hold f32 values, rounded only where stored: they keep the plain path there)
def _eight_bit(isa: mma_sync.Mma) -> Instruction:
    """An 8-bit form's instruction, named for its operand types (``_mma_s8``,
    ``_mma_u8s8``, ``_mma_e4m3e5m2``: B's type only where it differs from A's); integer
    tiles' values are packed into bytes (``_mma_pack_s8``: their low bytes, either sign)."""
    types = isa.a_type + (isa.b_type if isa.b_type != isa.a_type else "")
    return _instruction(isa, "_mma_pack_s8" if isa.d_type == "s32" else "", f"_mma_{types}")


EIGHT_BIT = tuple(_eight_bit(isa) for isa in mma_sync.EIGHT_BIT)
_DTYPE_NAMES = {"s8": "i8", "u8": "u8", "e4m3": "f8e4m3", "e5m2": "f8e5m2"}  # by PTX type
# 8-bit operand dtypes (A's, B's) -> their instruction (the integer ones also outside a
# GEMM loop: instruction_for)
BY_DTYPES = {(_DTYPE_NAMES[i.a_type], _DTYPE_NAMES[i.b_type]): i for i in EIGHT_BIT}
M16N8K32_S8, M16N8K32_U8 = BY_DTYPES["i8", "i8"], BY_DTYPES["u8", "u8"]
M16N8K32_E4M3, M16N8K32_E5M2 = BY_DTYPES["f8e4m3", "f8e4m3"], BY_DTYPES["f8e5m2", "f8e5m2"]
_PACKING = {  # the PTX converting f32 values into one .b32 register of A or B
    "_mma_pack_f16": "cvt.rn.f16x2.f32",
    "_mma_pack_bf16": "cvt.rn.bf16x2.f32",
    "_mma_to_tf32": "cvt.rna.tf32.f32",
}
# four integers' low bytes into one .b32, the first lowest: rounds of ``prmt``
_PACK_BYTES = (
    "{ .reg .b32 %p, %q; prmt.b32 %p, $1, $2, 0x3340; prmt.b32 %q, $3, $4, 0x3340;\n"
    " prmt.b32 $0, %p, %q, 0x5410; }"
)


def instruction_for(
    dtype: D.DType, b_dtype: D.DType, allow_tf32: bool, m: int, n: int, k: int, lanes: int
) -> Instruction | None:
    """The ``mma.sync`` a ``tile.dot`` of ``(m, k) @ (k, n)`` of a ``dtype`` by a
    ``b_dtype`` tile runs on (f16, bf16, 8-bit integers of either sign; f32 with
    ``allow_tf32``), or None where it takes the plain path: other dtypes (8-bit float
    tiles hold f32 values), f32 without ``allow_tf32``, shapes that are not whole
    instruction tiles, or a group that is not whole warps."""
    if lanes < WARP or lanes % WARP:
        return None
    inst = {D.f16: M16N8K16_F16, D.bf16: M16N8K16_BF16}.get(dtype) if b_dtype is dtype else None
    if dtype in (D.i8, D.u8) and b_dtype in (D.i8, D.u8):
        inst = BY_DTYPES[dtype.name, b_dtype.name]
    if dtype == D.f32 and allow_tf32:
        inst = M16N8K8_TF32
    if inst is None or m % inst.m or n % inst.n or k % inst.k:
        return None
    return inst


def n_tiles_per_job(inst: Instruction, m: int, n: int, warps: int) -> int:
    """How many n-adjacent instruction tiles one warp computes together (sharing its A
    fragment): as many as 4 while every warp still has a job."""
    tiles_m, tiles_n = m // inst.m, n // inst.n
    for width in (4, 2):
        if tiles_n % width == 0 and tiles_m * (tiles_n // width) >= warps:
            return width
    return 1


def emit_dot(cg, inst: Instruction, x: str, y: str, init: str | None, dest: str, shape) -> None:
    """``dest = init + x @ y`` on tensor cores. The (m, n) result is cut into jobs of one
    m-tile by ``width`` n-tiles, dealt to the group's warps round-robin (warp-uniform
    loops, as ``mma.sync.aligned`` requires); each warp walks k in steps of the
    instruction's k, loading its fragments from the shared-memory tiles ``x`` and ``y``,
    and stores D into ``dest``. A lane reads ``init`` at exactly the elements it later
    writes, so ``init`` may be ``dest`` itself. The group waits at the end."""
    m, k, n = shape
    warps = cg.lanes // WARP
    width = n_tiles_per_job(inst, m, n, warps)
    jobs_n = n // (inst.n * width)
    jobs = (m // inst.m) * jobs_n
    cg.emit(f"# on tensor cores: {inst.ptx}, {jobs} jobs of {inst.m}x{inst.n * width}")
    cg.emit(f"_fg = (_lane % {WARP}) >> 2  # groupID")
    cg.emit("_ft = _lane % 4  # threadID_in_group")
    cg.emit(f"for _job in range(_lane // {WARP}, {jobs}, {warps}):")
    cg.indent += 1
    cg.emit(f"_m0 = (_job // {jobs_n}) * {inst.m}")
    cg.emit(f"_n0 = (_job % {jobs_n}) * {inst.n * width}")
    c = inst.c
    acc = "np.int32" if inst.d_type == "s32" else "np.float32"
    for j in range(width):
        for i in range(c.elements):
            row, col = c.code(i, "_fg", "_ft")
            start = f"{init}[_m0 + {row}, {_n(inst, j)} + {col}]" if init else "0"
            cg.emit(f"_d{j}_{i} = {acc}({start})")
    cg.emit(f"for _k0 in range(0, {k}, {inst.k}):")
    cg.indent += 1
    a_regs = _registers(cg, inst, inst.a, "_a", x, "_m0", "_k0")
    for j in range(width):
        b_regs = _registers(cg, inst, inst.b, f"_b{j}_", y, "_k0", _n(inst, j))
        d = [f"_d{j}_{i}" for i in range(c.elements)]
        cg.emit(f"{', '.join(d)} = {inst.name}({', '.join(a_regs + b_regs + d)})")
    cg.indent -= 1
    for j in range(width):
        for i in range(c.elements):
            row, col = c.code(i, "_fg", "_ft")
            cg.emit(f"{dest}[_m0 + {row}, {_n(inst, j)} + {col}] = _d{j}_{i}")
    cg.indent -= 1
    cg.emit("cuda.syncthreads()")


def _n(inst: Instruction, j: int) -> str:
    """The first column of the job's ``j``-th n-tile."""
    return f"_n0 + {inst.n * j}" if j else "_n0"


def _registers(
    cg, inst: Instruction, frag: Fragment, prefix: str, tile: str, row0: str, col0: str
) -> list[str]:
    """Emit a lane's fragment registers from the block of ``tile`` at (``row0``,
    ``col0``): element i goes to register i // per_register, the lower-numbered element
    in the low half. Returns the registers' names."""
    per = inst.per_register
    names = []
    for r in range(frag.elements // per):
        values = []
        for e in range(per):
            row, col = frag.code(r * per + e, "_fg", "_ft")
            values.append(f"{tile}[{row0} + {row}, {col0} + {col}]")
        names.append(f"{prefix}{r}")
        cg.emit(f"{names[-1]} = {inst.pack}({', '.join(values)})")
    return names


# ----------------------------------------------------------------------------- intrinsics
def _mma_sync(ptx: str, integer: bool = False):
    """The intrinsic ``(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3) -> (d0, d1, d2, d3)``
    issuing one ``ptx`` (four .b32 A registers, two .b32 B, four f32 C and D; ``integer``:
    four .s32 C and D)."""
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    asm_text = f"{ptx} {{$0, $1, $2, $3}}, {{$4, $5, $6, $7}}, {{$8, $9}}, {{$10, $11, $12, $13}};"
    reg, acc_t = ("r", types.int32) if integer else ("f", types.float32)
    constraints = ",".join([f"={reg}"] * 4 + ["r"] * 6 + [reg] * 4)
    result = types.UniTuple(acc_t, 4)

    @intrinsic
    def mma(typingctx, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        def codegen(context, builder, signature, args):
            b32 = ir.IntType(32)
            acc = b32 if integer else ir.FloatType()
            kinds = [types.uint32] * 6 + [acc_t] * 4
            values = [
                context.cast(builder, v, t, kind) for v, t, kind in zip(args, signature.args, kinds)
            ]
            asm = ir.InlineAsm(
                ir.FunctionType(ir.LiteralStructType([acc] * 4), [b32] * 6 + [acc] * 4),
                asm_text,
                constraints,
                side_effect=True,  # like CUDA's asm volatile: never moved out of warp lockstep
            )
            out = builder.call(asm, values)
            return context.make_tuple(
                builder, result, [builder.extract_value(out, i) for i in range(4)]
            )

        return result(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3), codegen

    return mma


def _pack_two(cvt: str):
    """The intrinsic ``(low, high) -> .b32`` packing two f32 values as 16-bit halves
    (``cvt`` puts its first operand in the upper half)."""
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def pack(typingctx, low, high):
        def codegen(context, builder, signature, args):
            f32 = ir.FloatType()
            lo, hi = (
                context.cast(builder, v, t, types.float32) for v, t in zip(args, signature.args)
            )
            asm = ir.InlineAsm(
                ir.FunctionType(ir.IntType(32), [f32, f32]), f"{cvt} $0, $1, $2;", "=r,f,f"
            )
            return builder.call(asm, [hi, lo])

        return types.uint32(low, high), codegen

    return pack


def _pack_one(cvt: str):
    """The intrinsic ``(value) -> .b32`` converting one f32 (tf32 keeps 10 mantissa bits)."""
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def pack(typingctx, value):
        def codegen(context, builder, signature, args):
            v = context.cast(builder, args[0], signature.args[0], types.float32)
            asm = ir.InlineAsm(
                ir.FunctionType(ir.IntType(32), [ir.FloatType()]), f"{cvt} $0, $1;", "=r,f"
            )
            return builder.call(asm, [v])

        return types.uint32(value), codegen

    return pack


def _pack_bytes():
    """The intrinsic ``(b0, b1, b2, b3) -> .b32`` of four integers' low bytes, ``b0``
    lowest (i8 tile values into a register of an m16n8k32 fragment)."""
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def pack(typingctx, b0, b1, b2, b3):
        def codegen(context, builder, signature, args):
            b32 = ir.IntType(32)
            values = [
                context.cast(builder, v, t, types.int32) for v, t in zip(args, signature.args)
            ]
            asm = ir.InlineAsm(ir.FunctionType(b32, [b32] * 4), _PACK_BYTES, "=r,r,r,r,r")
            return builder.call(asm, values)

        return types.uint32(b0, b1, b2, b3), codegen

    return pack


def _mma_f64(ptx: str):
    """The intrinsic ``(a, b, c0, c1) -> (d0, d1)`` issuing one f64 ``mma.sync``
    (m8n8k4: one f64 of A and of B, two of C and D per lane)."""
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    result = types.UniTuple(types.float64, 2)

    @intrinsic
    def mma(typingctx, a, b, c0, c1):
        def codegen(context, builder, signature, args):
            f64 = ir.DoubleType()
            values = [
                context.cast(builder, v, t, types.float64) for v, t in zip(args, signature.args)
            ]
            asm = ir.InlineAsm(
                ir.FunctionType(ir.LiteralStructType([f64] * 2), [f64] * 4),
                f"{ptx} {{$0, $1}}, {{$2}}, {{$3}}, {{$4, $5}};",
                "=d,=d,d,d,d,d",
                side_effect=True,
            )
            out = builder.call(asm, values)
            return context.make_tuple(
                builder, result, [builder.extract_value(out, i) for i in range(2)]
            )

        return result(a, b, c0, c1), codegen

    return mma


@functools.cache
def namespace() -> dict:
    """Names the generated CUDA code uses for tensor-core ``tile.dot``."""
    names = {M8N8K4_F64.name: _mma_f64(M8N8K4_F64.ptx)}
    for inst in EIGHT_BIT:
        names[inst.name] = _mma_sync(inst.ptx, integer=inst.d_type == "s32")
    names[M16N8K32_S8.pack] = _pack_bytes()
    for inst in (M16N8K16_F16, M16N8K16_BF16, M16N8K8_TF32):
        names[inst.name] = _mma_sync(inst.ptx)
        cvt = _PACKING[inst.pack]
        names[inst.pack] = _pack_two(cvt) if inst.per_register == 2 else _pack_one(cvt)
    return names
