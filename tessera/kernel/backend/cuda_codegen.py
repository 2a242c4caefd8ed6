"""Kernel IR → the source of a numba-cuda kernel: one CUDA block per group, one thread
per lane (flat kernels: one thread per tile, the tail guarded).

What a lane does is emitted by the shared :class:`~.pysource.SourceEmitter`, exactly as on
the CPU; this module adds the thread and block numbering and the collectives:
``tbarrier`` is ``cuda.syncthreads()``, shared arrays are ``cuda.shared.array``, group
reductions gather the lanes' values into shared scratch and run *the same* reduction
tree (semantics.py) so results are bitwise equal to the CPU target, and atomics are CUDA
atomics. Lanes are numbered row-major (the last group axis varies fastest, i.e. it is
``threadIdx.x`` of a 1-D block of ``prod(tile)`` threads).
"""

from __future__ import annotations

import math

from ... import dtypes as D
from ...errors import KernelError
from .. import ir
from ..ir import ScalarType
from ..typer import concrete
from .pysource import SourceEmitter, ctor

FLAT_BLOCK = 256  # threads per block of a flat kernel
STATIC_SHARED_LIMIT = 48 * 1024  # above this a block's shared memory must be dynamic
ATOMIC_DTYPES = (D.f16, D.f32, D.f64, D.i32, D.i64, D.u32, D.u64)  # CUDA's own atomics
NARROW_ATOMIC_DTYPES = (D.bf16, D.i8, D.i16, D.u8, D.u16)


class CudaCodegen(SourceEmitter):
    """Generates the source of ``_kernel`` (to be wrapped in ``numba.cuda.jit``)."""

    def __init__(self, kir: ir.KernelIR, grid_ndim: int, async_copies: bool = True):
        super().__init__(kir, grid_ndim)
        self.scratch: dict[str, int] = {}  # compute dtype ctor → elements of shared scratch
        self.dynamic_shared_bytes = 0  # > 0: shared arrays are carved from dynamic memory
        # cp.async for copies (off under the simulator, which cannot run inline PTX)
        self.async_copies = async_copies
        self.uses_copies = any(isinstance(s, ir.CopyAsync) for s in ir.walk_stmts(kir.body))
        self.keeps_copies_in_flight = async_copies and any(
            isinstance(s, (ir.CopyWait, ir.Barrier)) and s.keep_in_flight
            for s in ir.walk_stmts(kir.body)
        )
        # 16-bit sources copied two elements at a time need 4-byte alignment, which only
        # the launch can see: one bool argument per such array
        self.align_params: list[str] = (
            sorted(
                {
                    s.src.name
                    for s in ir.walk_stmts(kir.body)
                    if isinstance(s, ir.CopyAsync) and kir.var_types[s.src.name].dtype.itemsize == 2
                }
            )
            if async_copies
            else []
        )

    # ------------------------------------------------------------------ frame
    def generate(self) -> str:
        args = self.kernel_args()
        args += [f"_align_{name}" for name in self.align_params]
        self.emit(f"def _kernel({', '.join(args)}):")
        self.indent += 1
        self.emit(f'"""Tessera kernel {self.kir.name} ({self.kir.loc}) for CUDA."""')
        body_start = len(self.lines)
        if self.kir.grouped:
            self.grouped_frame()
        else:
            self.flat_frame()
        self.lane_block(self.kir.body)
        # shared scratch for reductions is declared up front, sized by what was emitted
        declared = [
            f"    _scr_{dt.removeprefix('np.')} = cuda.shared.array({size}, {dt})"
            for dt, size in self.scratch.items()
        ]
        self.lines[body_start:body_start] = declared
        return "\n".join(self.lines) + "\n"

    def flat_frame(self) -> None:
        total = " * ".join(f"_N{d}" for d in range(self.grid_ndim))
        self.emit("_lin = cuda.grid(1)")
        self.emit(f"if _lin >= {total}:")
        self.emit("    return")
        rest = "_lin"
        for d in reversed(range(1, self.grid_ndim)):
            self.emit(f"_t{d} = {rest} % _N{d}")
            rest = f"({rest} // _N{d})"
        self.emit(f"_t0 = {rest}")

    def grouped_frame(self) -> None:
        self.emit("_lane = cuda.threadIdx.x")
        if self.keeps_copies_in_flight:
            self.emit("_cp_it = 0  # copy groups started in this tile.range iteration")
        rest = "_lane"
        for d in reversed(range(1, len(self.tile))):
            self.emit(f"_l{d} = {rest} % {self.tile[d]}")
            rest = f"({rest} // {self.tile[d]})"
        self.emit(f"_l0 = {rest}")
        self.emit("_g = cuda.blockIdx.x")
        rest = "_g"
        for d in reversed(range(1, self.grid_ndim)):
            self.emit(f"_g{d} = {rest} % _N{d}")
            rest = f"({rest} // _N{d})"
        self.emit(f"_g0 = {rest}")
        self.emit(f"s_grid_groups = {' * '.join(f'_N{d}' for d in range(self.grid_ndim))}")
        sizes = [
            (a, math.prod(int(x) for x in a.shape) * a.dtype.itemsize) for a in self.kir.allocs
        ]
        if sum(n for _, n in sizes) <= STATIC_SHARED_LIMIT:
            for a, _ in sizes:
                shape = tuple(int(x) for x in a.shape)
                storage = self.storage(a.dtype)
                self.emit(f"_sh{a.slot} = cuda.shared.array({shape}, {storage})", a.loc)
            return
        # Dynamic shared memory (sized at launch, opted in above 48 KiB): every extern
        # shared array starts at the same address, so each allocation is a slice of one
        # of its dtype, at a byte offset rounded up to 16.
        offset = 0
        for a, nbytes in sizes:
            shape = tuple(int(x) for x in a.shape)
            start = offset // a.dtype.itemsize
            end = start + math.prod(shape)
            dtype = "_dt_" + self.storage(a.dtype).removeprefix("np.")  # a dtype instance
            view = f"cuda.shared.array(0, {dtype})[{start}:{end}]"
            if len(shape) > 1:
                view += f".reshape({shape})"
            self.emit(f"_sh{a.slot} = {view}", a.loc)
            offset += -(-nbytes // 16) * 16
        self.dynamic_shared_bytes = offset

    # ------------------------------------------------------------------ numbering
    def lane_id(self, axis: int | None) -> str:
        if not self.kir.grouped:
            if axis is None:
                return "np.int64(_lin)"
            return "np.int64(0)" if axis >= self.grid_ndim else f"np.int64(_t{axis})"
        if axis is None:
            return "np.int64(_lane)"
        return "np.int64(0)" if axis >= len(self.tile) else f"np.int64(_l{axis})"

    def group_axis(self, axis: int) -> str:
        return "np.int64(0)" if axis >= self.grid_ndim else f"np.int64(_g{axis})"

    # ------------------------------------------------------------------ memory
    # f16 is native on the GPU; bf16 travels as uint16 bits, converted with the
    # language's rounding rule (semantics.bf16_bits), as on the CPU
    @staticmethod
    def storage(dtype: D.DType) -> str:
        return "np.uint16" if dtype == D.bf16 else "np." + dtype.np_dtype.name

    def half_to_f32(self, code: str, dtype: D.DType) -> str:
        return f"_b2f({code})" if dtype == D.bf16 else f"np.float32({code})"

    def f32_to_half(self, code: str, dtype: D.DType) -> str:
        return f"_f2b({code})" if dtype == D.bf16 else f"np.float16({code})"

    def round_half(self, code: str, dtype: D.DType) -> str:
        if dtype == D.bf16:
            return f"_b2f(_f2b(np.float32({code})))"
        return f"np.float32(np.float16(np.float32({code})))"

    def atomic_add(self, array: str, dtype: D.DType, idx: str, value: str) -> str:
        if dtype in NARROW_ATOMIC_DTYPES:  # compare-and-swap loops (cuda_atomics.py)
            return f"_atomic_add_{dtype.name}({array}, {idx}, {value})"
        if dtype not in ATOMIC_DTYPES:
            supported = ATOMIC_DTYPES + NARROW_ATOMIC_DTYPES
            raise KernelError(
                self.kir.name,
                f"tile.atomic_add on {dtype.name} is not supported on the CUDA target "
                f"(supported: {', '.join(d.name for d in supported)})",
                self.kir.loc,
            )
        if dtype == D.f16:
            return f"np.float32(cuda.atomic.add({array}, {idx}, np.float16({value})))"
        return f"cuda.atomic.add({array}, {idx}, {value})"

    # ------------------------------------------------------------------ collectives
    def collective(self, s: ir.Stmt) -> None:
        if isinstance(s, ir.SharedAlloc):
            self.emit(f"{self.name(s.target)} = _sh{s.slot}", s.loc)
        elif isinstance(s, ir.Barrier):
            if self.async_copies and s.keep_in_flight:
                self.wait_keeping_in_flight(s)
            elif self.async_copies and self.uses_copies:
                self.emit("_cp_wait_all()  # a barrier completes outstanding copies", s.loc)
            self.emit("cuda.syncthreads()", s.loc)
        elif isinstance(s, ir.CopyWait):
            # other lanes' parts of a copy are visible only after a barrier as well
            if self.async_copies and s.keep_in_flight:
                self.wait_keeping_in_flight(s)
            elif self.async_copies:
                self.emit("_cp_wait_all()", s.loc)
            self.emit("cuda.syncthreads()  # cp_async.wait()", s.loc)
        elif isinstance(s, ir.CopyAsync):
            self.copy_async(s)
        elif isinstance(s, ir.For) and s.tile_range:
            self.loop_header(s)
            if self.keeps_copies_in_flight:
                self.emit("    _cp_it = 0")
            self.nested(lambda: self.lane_block(s.body))
        elif isinstance(s, ir.Assign) and isinstance(s.value, ir.Reduce):
            self.reduce(s)
        else:
            super().collective(s)

    def scratch_for(self, dtype: D.DType, size: int) -> str:
        key = ctor(dtype)
        self.scratch[key] = max(self.scratch.get(key, 0), size)
        return f"_scr_{key.removeprefix('np.')}"

    def reduce(self, s: ir.Assign) -> None:
        r = s.value
        t = concrete(r.type)
        combine = {"sum": "_add", "max": "_fmax", "min": "_fmin"}[r.op]
        if r.over == "lanes":
            size = self.lanes
            scratch = self.scratch_for(t.dtype, size)
            value = self.conv(self.expr(r.source), r.source.type, t)
            self.emit(f"{scratch}[_lane] = {value}", s.loc)
        else:
            at = self.types[r.source.name]
            shape = self.shared_shape(r.source.name, s)
            size = math.prod(shape)
            scratch = self.scratch_for(t.dtype, size)
            arr = self.name(r.source.name)
            self.emit(f"for _i in range(_lane, {size}, {self.lanes}):", s.loc)
            index, rest = [], "_i"
            for d in reversed(range(len(shape))):
                index.insert(0, f"{rest} % {shape[d]}" if d else rest)
                rest = f"({rest} // {shape[d]})"
            element = self.load_storage(f"{arr}[{', '.join(index)}]", at.dtype)
            self.emit(f"    {scratch}[_i] = {self.conv(element, ScalarType(at.dtype), t)}")
        # lane 0 runs the fixed tree (the same code as every target), then all lanes read
        self.emit("cuda.syncthreads()")
        self.emit("if _lane == 0:")
        self.emit(f"    {scratch}[0] = _tree_reduce({scratch}, {size}, {combine})")
        self.emit("cuda.syncthreads()")
        target = self.conv(f"{scratch}[0]", t, self.types[s.target])
        self.emit(f"{self.name(s.target)} = {target}", s.loc)
        self.emit("cuda.syncthreads()  # the scratch may be reused right after")

    def wait_keeping_in_flight(self, s: ir.CopyWait | ir.Barrier) -> None:
        """``cp.async.wait_group n``: the iteration's newest ``n`` groups stay in flight
        (analysis/prefetch.py proved nothing reads them before the next barrier). ``n``
        is an immediate, so the groups started so far pick one of the constant waits."""
        keep = s.keep_in_flight
        self.emit(f"if _cp_it >= {keep}:", s.loc)
        self.emit(f"    _cp_wait{keep}()")
        for n in range(keep - 1, 0, -1):
            self.emit(f"elif _cp_it == {n}:")
            self.emit(f"    _cp_wait{n}()")
        self.emit("else:")
        self.emit("    _cp_wait_all()")

    def commit(self) -> str:
        return "_cp_commit(); _cp_it += 1" if self.keeps_copies_in_flight else "_cp_commit()"

    def copy_async(self, s: ir.CopyAsync) -> None:
        """Every lane copies its share of the slice (zero-filling past the tail)."""
        self.emit(f"# cp_async.shared.global_({s.dst.name}, {s.src.name}[...])", s.loc)
        dst, src, q, src_idx, conds = self.copy_bounds(s)
        src_t = self.types[s.src.name]
        sliced = s.sliced or [True] * src_t.ndim
        itemsize = src_t.dtype.itemsize
        if self.async_copies and itemsize in (4, 8):
            self.copy_loop(s, dst, src, q, src_idx, conds, f"_cp_async{itemsize}", itemsize)
            self.emit(self.commit())
        elif self.async_copies and itemsize == 2 and q == 1 and len(sliced) == 1:
            self.copy_pairs(s, dst, src, src_idx, conds)
        else:
            self.copy_loop(s, dst, src, q, src_idx, conds, None, itemsize)

    def copy_loop(self, s, dst, src, q, src_idx, conds, intrinsic, itemsize) -> None:
        """Each lane takes every L-th element of the destination."""
        total = " * ".join(f"{dst}.shape[{d}]" for d in range(q))
        self.emit(f"for _q in range(_lane, {total}, {self.lanes}):")
        rest = "_q"
        for d in reversed(range(q)):
            self.emit(f"    _q{d} = {rest} % {dst}.shape[{d}]" if d else f"    _q{d} = {rest}")
            rest = f"({rest} // {dst}.shape[{d}])"
        dst_idx = ", ".join(f"_q{d}" for d in range(q))
        inside = " and ".join(conds)
        if intrinsic is not None:  # one cp.async per element; out of range reads 0 bytes
            zero = ", ".join("0" for _ in src_idx)
            self.emit(f"    if {inside}:")
            self.emit(
                f"        {intrinsic}({dst}, ({dst_idx},), {src}, ({', '.join(src_idx)},), "
                f"{itemsize})"
            )
            self.emit("    else:")
            self.emit(f"        {intrinsic}({dst}, ({dst_idx},), {src}, ({zero},), 0)")
            return
        self.emit(f"    if {inside}:")
        self.emit(f"        {dst}[{dst_idx}] = {src}[{', '.join(src_idx)}]")
        self.emit("    else:")
        self.emit(f"        {dst}[{dst_idx}] = 0")

    def copy_pairs(self, s, dst, src, src_idx, conds) -> None:
        """16-bit elements: cp.async moves 4 bytes at least, so each lane copies a pair
        when the source is 4-byte aligned there (else the plain copy)."""
        name = s.src.name
        self.emit(f"if _align_{name} and _cs0 >= 0 and _cs0 % 2 == 0 and {dst}.shape[0] % 2 == 0:")
        self.emit(f"    for _p in range(_lane, {dst}.shape[0] // 2, {self.lanes}):")
        self.emit("        _q0 = 2 * _p")
        self.emit("        _n = min(2, max(0, _ce0 - (_cs0 + _q0)))")
        self.emit(
            f"        _cp_async4({dst}, (_q0,), {src}, ((_cs0 + _q0) if _n > 0 else 0,), 2 * _n)"
        )
        self.emit(f"    {self.commit()}")
        self.emit("else:")
        self.indent += 1
        self.copy_loop(s, dst, src, 1, src_idx, conds, None, 2)
        self.indent -= 1
