"""``aot.compile``: one kernel, its compile-time values fixed, as the code of an image.

A kernel is specialised once (constexprs and dtypes fixed now; shapes stay symbols bound at
each launch, as in Python) and compiled once per layout class of its arrays: "contiguous"
(every array C-contiguous, Numba's ``C`` layout) and "strided" (any strides, ``A``). The
runtime takes the first class that fits a launch's tensors.

Grouped kernels are compiled for a 3-d grid (an image is launched with ``grid_x``,
``grid_y``, ``grid_z``; a 1-d launch is ``(G, 1, 1)``, which runs the same groups as
``k[G]``); flat kernels for the rank their ``tile.id(axis)`` calls need (1 for most).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from .. import dtypes as D
from ..autotune import store
from ..autotune.tuner import Autotuned
from ..dtypes import DTypeVar, ShardedDim, Symbol
from ..errors import AOTError, LaunchError
from ..kernel import ir, launch
from ..kernel.kernel import Kernel, ShapedKernel
from ..kernel.pipeline import specialise
from ..kernel.seed_metadata import seed_keys
from ..kernel.signature import resolve_dtypes
from ..kernel.targets import TARGETS
from ..kernel.targets.cpu import CPU
from ..kernel.targets.cpu.program import JIT_OPTIONS, CpuProgram
from . import cpu_object, cuda_blobs
from .argtypes import numba_argtypes
from .image_format import Param, Spec

LAYOUT_CLASSES = ("contiguous", "strided")
# DLPack's type code of each Tessera dtype (dlpack.h: kDLInt 0, kDLUInt 1, kDLFloat 2,
# kDLBfloat 4, kDLBool 6, kDLFloat8_e4m3fn 10, kDLFloat8_e5m2 12)
DL_CODES = {"i": 0, "u": 1, "f": 2}
DL_SPECIAL = {"bf16": (4, 16), "bool_": (6, 8), "f8e4m3": (10, 8), "f8e5m2": (12, 8)}


@dataclass
class Image:
    """One kernel compiled ahead of time for one target (:func:`compile`); put it in a
    module with :func:`tessera.aot.write_c` or :func:`tessera.aot.save`."""

    kernel: str
    target: str  # "cpu" or "cuda"
    grouped: bool
    grid_rank: int
    tile: tuple[int, int, int]
    params: list[Param]
    symbols: list[str]
    metadata: dict
    specs: list[Spec] = field(default_factory=list)
    cpu_code: list[bytes] = field(default_factory=list)  # per CPU spec: its LLVM bitcode
    blobs: list = field(default_factory=list)  # per CUDA spec: image_format.Blob(s)
    static_shared: int = 0
    dynamic_arg: int = -1
    dynamic_itemsize: int = 0

    def __repr__(self) -> str:
        archs = sorted({s.arch for s in self.specs if s.arch})
        where = f"cuda {', '.join(archs)}" if archs else self.target
        layouts = ", ".join(dict.fromkeys(s.layout for s in self.specs))
        return f"<tessera.aot.Image {self.kernel} ({where}; {layouts})>"


def compile(  # noqa: A001 - the spec's name (tessera.aot.compile)
    kernel,
    *,
    target: str,
    arch=None,
    ptx: bool = False,
    constexprs: dict | None = None,
    config: dict | None = None,
    layouts: tuple[str, ...] = LAYOUT_CLASSES,
    dtypes: dict | None = None,
    cpu: str | None = None,
) -> Image:
    """Compile ``kernel`` ahead of time for ``target`` ("cpu" or "cuda"); see the package."""
    name = getattr(kernel, "name", getattr(kernel, "__name__", repr(kernel)))
    if target == "debug":
        raise AOTError(
            name,
            'target="debug" runs kernels in Python and has no machine code; compile '
            'for "cpu" (and debug in Python)',
        )
    if target not in ("cpu", "cuda"):
        raise AOTError(name, f'target={target!r}: an image holds "cpu" or "cuda" code')
    layouts = (layouts,) if isinstance(layouts, str) else tuple(layouts)
    bad = [lay for lay in layouts if lay not in LAYOUT_CLASSES]
    if bad or not layouts:
        raise AOTError(name, f"layouts={layouts!r}: choose from {', '.join(LAYOUT_CLASSES)}")
    values = dict(constexprs or {})
    values.update(dtypes or {})
    k = _concrete_kernel(kernel, name, values, config)
    fixed = _constexprs(k, values)
    params = resolve_dtypes(k.params, fixed)
    _check_supported(k, params, target)
    spec = specialise(k.ir, fixed, TARGETS[target].passes)
    image = Image(
        kernel=k.name,
        target=target,
        grouped=k.grouped,
        grid_rank=3 if k.grouped else _flat_rank(spec.kir),
        tile=tuple((list(k.options.tile) + [1, 1])[:3]) if k.grouped else (0, 0, 0),
        params=[_param(p) for p in params if p.kind != "constexpr"],
        symbols=list(k.ir.symbols),
        metadata={},
        static_shared=spec.shared_bytes,
    )
    dynamic = spec.kir.dynamic_alloc
    if dynamic is not None:
        image.dynamic_arg = spec.kir.call_arg_index(dynamic.shape[0].name)
        image.dynamic_itemsize = dynamic.dtype.itemsize
    digest = _digest(k, fixed)
    if target == "cpu":
        _compile_cpu(k, spec, params, image, layouts, digest)
        image.metadata = cpu_metadata(k, spec, image)
    else:
        cuda_blobs.compile_cuda(k, spec, params, image, layouts, digest, arch, ptx)
    return image


def _concrete_kernel(kernel, name: str, values: dict, config: dict | None) -> Kernel:
    """The :class:`Kernel` to compile: the kernel itself, the one of a named group shape,
    or an autotuned kernel's config (``config=``, else its one cached winner)."""
    if isinstance(kernel, Autotuned):
        return _tuned_kernel(kernel, config)
    if config is not None:
        raise AOTError(name, "config= is for autotuned kernels; pass constexprs= instead")
    if isinstance(kernel, ShapedKernel):
        args = [values.get(p.name, p.default[0] if p.default else None) for p in kernel.params]
        try:
            return kernel.kernel_for(tuple(args))
        except LaunchError as exc:
            raise AOTError(name, exc.message) from None
    if not isinstance(kernel, Kernel):
        raise AOTError(name, f"aot.compile takes a @kernel function, not {type(kernel).__name__}")
    return kernel


def _tuned_kernel(tuned, config: dict | None) -> Kernel:
    if config is None:
        winners = {
            tuple(sorted(e["config"].items()))
            for e in store.entries()
            if e.get("kernel") == tuned.name
            and isinstance(e.get("config"), dict)
            and not e.get("problem")
        }
        if len(winners) != 1:
            why = "no cached winner" if not winners else f"{len(winners)} cached winners"
            raise AOTError(
                tuned.name,
                f"an autotuned kernel is compiled for one config: pass config= ({why} in the "
                "autotune cache to take instead)",
            )
        config = dict(next(iter(winners)))
    chosen = next((c for c in tuned.configs if dict(c.items()) == dict(config)), None)
    if chosen is None:
        raise AOTError(tuned.name, f"config={config!r} is not one of the kernel's configs")
    found = tuned.kernel_for(chosen)
    if isinstance(found, str):
        raise AOTError(tuned.name, f"config={config!r} {found}")
    return found


def _constexprs(k: Kernel, values: dict) -> dict:
    """Every constexpr of ``k`` with its value (given or the default), checked as a launch
    checks it; an unknown name or a missing value is an AOTError."""
    names = {p.name for p in k.params if p.kind == "constexpr"}
    unknown = sorted(set(values) - names - set(k.constants))
    if unknown:
        known = ", ".join(sorted(names)) or "none"
        raise AOTError(
            k.name,
            f"constexprs= names {', '.join(unknown)}, which the kernel does not take "
            f"(its constexpr parameters: {known})",
            k.ir.loc,
        )
    fixed = {}
    for p in k.params:
        if p.kind != "constexpr":
            continue
        if p.name in values:
            value = values[p.name]
        elif p.default:
            value = p.default[0]
        else:
            raise AOTError(
                k.name,
                f"constexpr parameter '{p.name}' has no value: pass "
                f"constexprs={{'{p.name}': ...}} (or dtypes= for a dtype_constexpr)",
                p.loc,
            )
        try:
            fixed[p.name] = launch._constexpr(k.name, p, value)
        except LaunchError as exc:
            raise AOTError(k.name, exc.message, p.loc) from None
    return fixed


def _check_supported(k: Kernel, params, target: str) -> None:
    """What the C runtime cannot pass, and what AOT code cannot hold, named with its line."""
    for p in params:
        if isinstance(p.dtype, DTypeVar):
            raise AOTError(k.name, f"parameter '{p.name}' has no dtype: pass dtypes=", p.loc)
        if p.kind == "constexpr":
            continue
        if p.dtype in D.COMPLEX_PARTS:
            raise AOTError(
                k.name,
                f"parameter '{p.name}' is complex ({p.dtype.name}); the C runtime passes "
                "real dtypes only: pass its real and imaginary parts as a real array",
                p.loc,
            )
        if any(isinstance(d, ShardedDim) for d in p.dims):
            raise AOTError(
                k.name,
                f"parameter '{p.name}' has a sharded dim ({p.describe()}), which only an "
                "index launch binds; an image takes local shapes: declare it unsharded",
                p.loc,
            )
        if p.kind == "scalar" and p.dtype in D.FP8:
            raise AOTError(
                k.name,
                f"scalar parameter '{p.name}' is {p.dtype.name}; C passes 8-bit float "
                "scalars in no agreed form: take it as f32",
                p.loc,
            )
    for stmt in ir.walk_stmts(k.ir.body):
        if isinstance(stmt, ir.Print):
            raise AOTError(
                k.name,
                "print() needs Python (or CUDA's printf buffer), which an ahead-of-time "
                "module runs without: remove it to compile this kernel ahead of time",
                stmt.loc,
            )
        if target == "cpu" and isinstance(stmt, ir.SharedAlloc) and stmt.dynamic:
            raise AOTError(
                k.name,
                "a tshared.dynamic array is allocated on the heap on the CPU, which "
                "AOT code cannot do (it links with libc alone): give it a constant size",
                stmt.loc,
            )


def _param(p) -> Param:
    dtype = p.dtype
    code, bits = DL_SPECIAL.get(dtype.name, (DL_CODES.get(dtype.np_dtype.kind), dtype.bits))
    dims = tuple(d.name if isinstance(d, Symbol) else int(d) for d in p.dims)
    kind = "array" if p.kind == "array" else "scalar"
    return Param(p.name, kind, dtype.name, code, bits, p.mutable, dims)


def _flat_rank(kir: ir.KernelIR) -> int:
    """The grid rank a flat kernel needs: 1 past the largest constant ``tile.id`` axis."""
    rank = 1
    for stmt in ir.walk_stmts(kir.body):
        for e in ir.stmt_exprs(stmt):
            if isinstance(e, ir.PrimCall) and e.prim.name == "tile.id" and e.args:
                axis = e.args[0]
                if isinstance(axis, ir.Const) and isinstance(axis.value, int):
                    rank = max(rank, min(axis.value, 2) + 1)
    return rank


def _digest(k: Kernel, fixed: dict) -> str:
    text = f"{k.ir.source_hash} {sorted((n, repr(v)) for n, v in fixed.items())}"
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def _compile_cpu(k: Kernel, spec, params, image: Image, layouts, digest: str) -> None:
    import numba

    program = CpuProgram(spec, image.grid_rank, CPU, None, chunked=True)
    chunk = program._module(False)._chunk
    for layout in layouts:
        argtypes = numba_argtypes(params, k, layout, image.grid_rank, CPU.storage)
        signature = (numba.types.intp, *argtypes, numba.int64)
        with program._compile_settings():
            dispatcher = numba.njit(**JIT_OPTIONS)(chunk)
            dispatcher.compile(signature)
        cres = dispatcher.overloads[signature]
        entry = f"tsr_{_identifier(k.name)}_{digest}_{layout}"
        bitcode, kinds = cpu_object.entry_module(cres, entry, k.name, k.ir.loc)
        slots = tuple(kinds[1:-1])  # the chunk index and count are passed apart
        expected = _slot_count(params, len(k.ir.symbols), image.grid_rank)
        if len(slots) != expected:
            raise AOTError(
                k.name,
                f"Numba passes this kernel's arguments in {len(slots)} slots where "
                f"{expected} were expected: this Numba release changed its calling convention",
            )
        image.specs.append(Spec("cpu", layout, "", entry, slots, entry_index=len(image.cpu_code)))
        image.cpu_code.append(bitcode)


def _slot_count(params, symbols: int, grid_rank: int) -> int:
    arrays = sum(5 + 2 * p.ndim for p in params if p.kind == "array")
    scalars = sum(1 for p in params if p.kind == "scalar")
    return arrays + scalars + symbols + grid_rank


def _identifier(name: str) -> str:
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return out if out and not out[0].isdigit() else f"k_{out}"


def cpu_metadata(k: Kernel, spec, image: Image) -> dict:
    """The seed's metadata keys of CPU code (no registers or spills to report)."""
    group = list(k.options.tile) if k.grouped else None
    resources = {"regs_per_thread": None, "smem_per_cta": spec.shared_bytes, "spill_bytes": None}
    block = list(image.tile) if k.grouped else [1, 1, 1]
    meta = {"name": k.name, "target": "cpu", "launch": {"grid": "per launch", "block": block}}
    meta.update(seed_keys(spec.kir, group, resources))
    return meta
