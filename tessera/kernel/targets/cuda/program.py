"""CUDA programs: generated Python → ``numba.cuda.jit``, launched one block per group.

Under numba-cuda's simulator (``NUMBA_ENABLE_CUDASIM=1``) the same kernels run on the CPU,
thread by thread, which is how the project tests this target without a GPU. Without a
GPU and without the simulator, the kernels still compile to PTX (NVVM) and to a cubin
(nvJitLink) for any architecture: ``ptx()``, ``cubin()`` and ``metadata()``.
"""

from __future__ import annotations

import dataclasses
import linecache
import logging
import math
import re
import time

import numpy as np

from ....arrays import DeviceArg, contiguous_strides, device_info, layout_class
from ....errors import OutOfBoundsError, TesseraError
from ....observe import stats
from ....observe.observers import stage
from ...pipeline import Specialised
from ...seed_metadata import seed_keys
from ...source import generated
from ..target import Target
from . import (
    blocked_tiles,
    cubin_cache,
    mainloop,
    runtime,
    shared_memory,
    sim_blocks,
    stage_copy,
)
from . import driver as driver_module
from .codegen import FLAT_BLOCK, STATIC_SHARED_LIMIT, CudaCodegen, padded
from .compile_job import (
    build_cubin,
    entry_symbol,
    kernel_function,
    lowering_key,
    parse_arch,
    spill_bytes,
)
from .compile_job import symbol_name as symbol_name
from .launcher import DirectLauncher, storage_dtype
from .occupancy import occupancy
from .passes import layouts
from .passes.launch_shape import blocks_per_sm
from .passes.mainloop import FP8_ARCH
from .runtime import cuda_module, simulating
from .streams import current_stream, fence, fence_now, fencing_on, gpu_work, note_gpu_work

log = logging.getLogger("tessera")
POOR_SHAPE_BYTES = 16 << 20  # a launch over this much memory on few blocks is worth a word
_warned_shapes: set[tuple[str, str]] = set()  # (kernel, where defined) warned about

CUDA_STAGES = ("cuda", "ptx", "cubin")


def cuda_signature(call_args: tuple, grid_ndim: int, aligned: int = 0) -> tuple:
    """Numba types of a launch's arguments (arrays, scalars, symbols, grid dims, then the
    alignment flags of 16-bit cp_async sources). An array's type comes from its dtype (bf16
    as its bits), dims and layout class, whatever library it belongs to, so a launch and
    ``k.inspect`` with the same arrays compile the same code."""
    import numba
    from numba.np import numpy_support

    types = []
    for a in call_args:
        info = (0, a.shape, a.strides, a.dtype) if isinstance(a, np.ndarray) else device_info(a)
        if info is None:
            types.append(numba.typeof(a))
            continue
        _, shape, strides, dtype = info
        dtype = storage_dtype(dtype)
        layout = layout_class(shape, strides, dtype.itemsize)
        types.append(numba.types.Array(numpy_support.from_dtype(dtype), len(shape), layout))
    return tuple(types) + (numba.int64,) * grid_ndim + (numba.boolean,) * aligned


def _aligned4(a) -> bool:
    """Whether a 16-bit array's rows start on 4-byte boundaries (pairs can use cp.async)."""
    interface = getattr(a, "__cuda_array_interface__", None)
    if interface is not None:
        address = interface["data"][0]
        strides = interface.get("strides") or ()
    elif isinstance(a, np.ndarray):
        address, strides = a.ctypes.data, a.strides
    else:
        return False
    return (
        address % 4 == 0
        and all(st % 4 == 0 for st in strides[:-1])
        and (not strides or strides[-1] == 2)
    )


def _chunk_view(a, simulated: bool) -> tuple[int, tuple, tuple] | None:
    """(data pointer, shape, byte strides) of array argument ``a`` as the kernel will see
    it. A host array is copied to the GPU first (``_on_device``: a contiguous copy where it
    is neither C- nor F-contiguous, at an aligned address); under the simulator a copy
    only ever makes an array more aligned, so its own address answers."""
    if type(a) is DeviceArg:
        return a[0], a[1], a[2]
    if isinstance(a, np.ndarray):
        if simulated:
            return a.ctypes.data, a.shape, a.strides
        if not (a.flags.c_contiguous or a.flags.f_contiguous):  # the copy's strides
            return 0, a.shape, contiguous_strides(a.shape, a.dtype.itemsize)
        return 0, a.shape, a.strides
    info = device_info(a)
    if info is not None:
        return info[0], info[1], info[2]
    host = getattr(a, "_ary", None)  # the simulator's device arrays hold NumPy's
    if isinstance(host, np.ndarray):
        return host.ctypes.data, host.shape, host.strides
    return None


def _as_copied(a: np.ndarray) -> np.ndarray:
    """A stand-in with the shape and strides of ``a``'s contiguous copy (its data unread:
    only its type is worked out)."""
    strides = contiguous_strides(a.shape, a.dtype.itemsize)
    return np.lib.stride_tricks.as_strided(np.zeros(1, a.dtype), a.shape, strides)


def _address(a) -> int:
    """Where a GPU array's data starts (the simulator's arrays: their host buffer's)."""
    info = device_info(a)
    if info is not None:
        return info[0]
    host = getattr(a, "_ary", a)
    return host.ctypes.data if isinstance(host, np.ndarray) else id(a)


AMPERE = (8, 0)  # cp.async and mma.sync m16n8k16 exist from sm_80 (Ampere) on


HOPPER = (9, 0)
NEWEST = (9, 0)  # what code is made for where there is no GPU to ask


def capability_for(arch: str | None) -> tuple[int, int]:
    """The compute capability code is made for: ``arch``'s, or (None) this machine's
    GPU's, or the newest architecture's where there is none."""
    if arch is not None:
        return parse_arch(arch)
    try:
        return tuple(cuda_module().get_current_device().compute_capability)
    except Exception:  # no GPU here: code for the newest architectures
        return NEWEST


def ampere_for(arch: str | None) -> bool:
    """Whether code for ``arch`` (None: this machine's GPU) uses sm_80's instructions,
    hardware async copies and ``mma.sync`` tensor cores: sm_80 and newer do; older GPUs
    and the simulator copy with loads and stores and multiply on the plain path."""
    return not simulating() and capability_for(arch) >= AMPERE


def fp8_for(arch: str | None) -> bool:
    """Whether code for ``arch`` (None: this machine's GPU, or the newest architecture's
    where there is none) runs f8 ``tile.dot`` on ``mma.sync`` with .e4m3/.e5m2 operands:
    sm_89 (Ada) and newer (PTX ISA 8.4); older GPUs keep the exact emulation (the plain
    path)."""
    return ampere_for(arch) and capability_for(arch) >= FP8_ARCH


def stages_for(arch: str | None) -> int:
    """The depth of a register main loop's staging ring where ``prefetch=`` does not say
    (GPU.md §2): 4 on sm_90 and newer, 3 before."""
    return 4 if capability_for(arch) >= HOPPER else 3


class CudaProgram:
    """One specialisation of a kernel for CUDA (for GPUs with or without sm_80's
    ``cp.async`` and ``mma.sync``)."""

    def __init__(
        self,
        spec: Specialised,
        grid_ndim: int,
        target: Target,
        ampere: bool | None = None,
        stages: int = 3,
        warp_twins=None,
        chunks: bool | None = None,
        whole: bool = False,
        fp8: bool | None = None,
    ):
        self.spec = spec
        self.kir = spec.kir
        self.grid_ndim = grid_ndim
        self.simulated = simulating()
        # warp_twins (warp_sim.Twins, under the simulator only): the register path's
        # source with its inline PTX replaced by the twins, instead of the plain path
        self.warp_twins = warp_twins if self.simulated else None
        ampere = (ampere_for(None) if ampere is None else ampere) and not self.simulated
        self.async_copies = ampere
        # f8 tile.dot on mma.sync (sm_89+); the warp simulator runs it as sm_90 would
        self.fp8 = (fp8_for(None) if fp8 is None else fp8) and (
            ampere or self.warp_twins is not None
        )
        codegen, self.source = blocked_tiles.generated(
            lambda excluded: CudaCodegen(
                spec.kir,
                grid_ndim,
                target,
                async_copies=ampere,
                simulated=self.simulated and self.warp_twins is None,
                tensor_cores=ampere or self.warp_twins is not None,
                stages=stages,
                chunks=chunks,
                whole=whole,
                fp8=self.fp8,
                excluded=excluded,
            )
        )
        self.stages = stages
        self._target = target
        # main loops whose steady loop the launch chooses by the arrays: this program is
        # the launch's choice between two variants (``for_args``), each with one loop;
        # its own source, with both loops chosen in the kernel, is for ahead-of-time images
        self.chunk_checks = codegen.chunk_checks if chunks is None else ()
        self.whole_checks = codegen.whole_checks
        self._variants: dict[tuple[bool, bool], CudaProgram] = {}
        self.register_loops = bool(codegen.mainloops)  # tile.dot on the register path
        # what its main loops multiply on (k.metadata()'s ``fragments``: m16n8k32 for 8-bit)
        self.fragments = next(map(mainloop.fragments, codegen.mainloops.values()), None)
        self.threads = codegen.lanes if spec.kir.grouped else FLAT_BLOCK  # a block's
        self.min_blocks = blocks_per_sm(codegen.mainloops.values(), codegen.row_loops, self.threads)
        self.align_params = codegen.align_params
        self.shared_arrays = codegen.shared_arrays
        # where each tile lives (passes/layouts.py: k.inspect("layouts"), metadata "tiles")
        self.placements = layouts.placements(codegen, padded)
        self.dynamic_shared_bytes = codegen.dynamic_shared_bytes  # known once generated
        dynamic = spec.kir.dynamic_alloc  # tshared.dynamic: its bytes come with the launch
        self.dynamic_size = (
            None
            if dynamic is None
            else (spec.kir.call_arg_index(dynamic.shape[0].name), dynamic.dtype.itemsize)
        )
        self.scratch_bytes = sum(
            size * (8 if dt.endswith("64") else 4 if dt.endswith("32") else 2)
            for dt, size in codegen.scratch.items()
        )
        self.filename = codegen.source_file("cuda")
        self._function = None
        self._builds: dict = {}  # (signature, arch) -> build()'s PTX, cubin and report
        self._kernel = None  # the simulator's numba-cuda dispatcher
        self._launcher: DirectLauncher | None = None
        self.entry_name: str | None = None  # the cubin's entry symbol, once loaded
        self._arrays = [p for p in spec.kir.params if p.kind == "array"]
        self._array_count = len(self._arrays)
        self._shared_limit = 0  # the device's opt-in limit, read when loaded
        self._align_at = tuple(self._align_positions())
        self._few_blocks = 0  # SMs of this GPU while a launch shape is to be watched
        self._group_threads = self.threads if spec.kir.grouped else 0

    def python_function(self):
        """The generated ``_kernel`` as a Python function (what numba-cuda compiles),
        named for the kernel: the cubin's entry symbol is ``tessera::<name>`` mangled, so
        ncu, Nsight and traces show the user's kernel name."""
        if self._function is None:
            namespace = runtime.namespace(self.async_copies)
            if self.warp_twins is not None:
                namespace.update(self.warp_twins.namespace())
            self._function = kernel_function(
                self.source, self.filename, symbol_name(self.kir.name), namespace
            )
        return self._function

    def for_args(self, args: tuple) -> CudaProgram:
        """The program a launch with ``args`` runs: this one, or where the launch chooses
        the main loops' steady loop, the variant with the chunked loop when every staged
        array allows 16-byte chunks (``stage_copy.launch_chunkable``), else the one with
        the general loop; the chunked loop copies without bounds along the loop where its
        tiles all lie inside the arrays (``mainloop.WholeTiles``, ``row_loop.WholeRows``).
        All compute the same values; each is compiled when first run."""
        if not self.chunk_checks:
            return self
        chunked = True
        views = {}
        for index, block in self.chunk_checks:
            view = views[index] = _chunk_view(args[index], self.simulated)
            if view is None or not stage_copy.launch_chunkable(block, *view):
                chunked = False
                break
        whole = chunked and bool(self.whole_checks)
        for check in self.whole_checks if whole else ():
            if not check.holds(args, views):
                whole = False
                break
        key = (chunked, whole)
        found = self._variants.get(key)
        if found is None:
            found = self._variants[key] = CudaProgram(
                self.spec,
                self.grid_ndim,
                self._target,
                self.async_copies,
                self.stages,
                self.warp_twins,
                chunks=chunked,
                whole=whole,
                fp8=self.fp8,
            )
        return found

    def launch_bound(self, min_blocks: int | None = None):
        """The launch bound ptxas compiles for: the most threads a block of this kernel
        has (so it keeps to the registers that let a whole group run), and with
        ``min_blocks`` above 1 the blocks an SM should hold at once."""
        blocks = self.min_blocks if min_blocks is None else min_blocks
        return (self.threads, blocks) if blocks > 1 else self.threads

    def build(self, signature: tuple, arch: str) -> tuple[list, bytes, str]:
        """(PTX codes, cubin, ptxas's report) for ``arch`` (NVVM and nvJitLink; needs no
        GPU). A kernel that asks for two blocks an SM (launch_shape.blocks_per_sm) is
        compiled again for one where ptxas spills under that register cap. Kept per
        signature and arch: ``k.inspect("ptx")``, ``"sass"``, ``k.metadata()`` and a
        launch of one specialisation share one compile."""
        found = self._builds.get((signature, arch))
        if found is not None:
            return found
        cc = parse_arch(arch)
        shared_memory.check(self.kir, self.shared_arrays, shared_memory.limit_for(cc), arch)
        spill_bound = self.launch_bound(1) if self.min_blocks > 1 else None
        key = None  # (warp twins replace names: the simulator's, never lowered)
        if self.warp_twins is None:
            key = lowering_key(self.source, symbol_name(self.kir.name), self.async_copies)
        found = self._builds[signature, arch] = build_cubin(
            self.python_function(), signature, arch, self.launch_bound(), spill_bound, key
        )
        return found

    def launch_shape(self, grid: tuple[int, ...]) -> tuple[int, int]:
        """(blocks, threads per block) of a launch over ``grid``."""
        if self.kir.grouped:
            return math.prod(grid), self.threads
        total = math.prod(grid)
        threads = min(FLAT_BLOCK, max(total, 1))
        return -(-total // threads), threads

    def run(self, args: tuple, grid: tuple[int, ...], parallel: bool) -> None:
        """Queue the kernel on the current stream (asynchronous for device arrays; NumPy
        arguments are copied over and back, which waits for the kernel)."""
        if self.chunk_checks:  # the variant these arrays allow runs
            return self.for_args(args).run(args, grid, parallel)
        del parallel  # a GPU always runs groups in parallel
        stream = current_stream()
        if self.simulated:
            return self._run_simulated(args, grid, stream)
        write_back = None
        if self._array_count and type(args[0]) is not DeviceArg:
            # (a launch's first array is a DeviceArg only when its lean check read every
            # array as one: launch.Binder.fast_device)
            for a in args[: self._array_count]:
                if type(a) is np.ndarray:  # host arrays travel to the GPU and back
                    args, write_back = self._on_device(args, stream)
                    break
        aligned = tuple(_aligned4(args[k]) for k in self._align_at) if self._align_at else ()
        launcher = self._launcher
        if launcher is None:
            launcher = self._launcher = self._load(args, grid, aligned)
        gpu_work[0] = True
        shared = self.dynamic_shared_bytes
        if self.dynamic_size is not None:
            index, itemsize = self.dynamic_size
            shared += int(args[index]) * itemsize
        if shared > STATIC_SHARED_LIMIT:  # above 48 KiB a kernel must opt in
            self._check_shared(shared)
            launcher.allow_shared(shared)
        total = 1
        for extent in grid:
            total *= extent
        if self._group_threads:
            blocks, threads = total, self._group_threads
        else:  # a flat kernel: FLAT_BLOCK tiles a block, fewer for a small grid
            threads = FLAT_BLOCK if total >= FLAT_BLOCK else max(total, 1)
            blocks = -(-total // threads)
        if fencing_on[0] and fence_now():
            fence(stream, [_address(a) for a in args[: self._array_count]])
        launcher.pack(args + grid + aligned if aligned else args + grid)
        # fewer blocks than SMs over much memory: maybe a poor launch shape
        if blocks < self._few_blocks and launcher.array_bytes[0] >= POOR_SHAPE_BYTES:
            self._check_shape(launcher.array_bytes[0], blocks, threads)
        launcher.launch_packed(blocks, threads, shared, stream)
        if write_back:
            self._write_back(write_back, stream)

    # ------------------------------------------------------------------ the launch path
    def _load(self, args, grid: tuple, aligned: tuple) -> DirectLauncher:
        """The direct launcher of this specialisation: its cubin from the disk cache, or
        compiled (and cached) now; loaded into the current context."""
        name, (major, minor), limit = driver_module.DRIVER.device()
        shared_memory.check(self.kir, self.shared_arrays, limit, f"this GPU ({name})")
        self._shared_limit = limit
        if not generated(self.kir.loc.file):  # the user can act on a launch shape
            self._few_blocks = driver_module.DRIVER.multiprocessors()
        arch = f"sm_{major}{minor}"
        argtypes = cuda_signature(tuple(args), len(grid), len(aligned))
        entry_name, cubin = self.compiled(argtypes, arch)
        _, function = driver_module.DRIVER.load(cubin, entry_name)
        self.entry_name = entry_name
        return DirectLauncher(self.kir.name, function, argtypes)

    def launch_signature(self, args: tuple, grid_ndim: int) -> tuple:
        """The argument types a launch with ``args`` compiles for (what ``_load`` works
        out once host arrays are on the GPU: a copy is contiguous where they were not)."""
        args = tuple(
            _as_copied(a)
            if isinstance(a, np.ndarray) and not (a.flags.c_contiguous or a.flags.f_contiguous)
            else a
            for a in args
        )
        return cuda_signature(args, grid_ndim, len(self.align_params))

    def compiled(self, argtypes: tuple, arch: str) -> tuple[str, bytes]:
        """(entry symbol, cubin) for ``argtypes`` on ``arch``: read from the disk cache,
        else compiled here (one process of a node at a time: cubin_cache.compiling)."""
        entry = cubin_cache.entry(
            self.kir.name, self.source, argtypes, arch, self.launch_bound(), str(self.kir.loc)
        )
        found = self._read(entry)
        if found is not None:
            return found
        with cubin_cache.compiling(entry) as waited:
            found = self._read(entry) if waited else None
            if found is not None:
                return found
            start = time.perf_counter()
            with stage("compile", self.kir.name, step=f"numba-cuda, NVVM, nvJitLink ({arch})"):
                codes, cubin, _ = self.build(argtypes, arch)
                entry_name = entry_symbol(codes)
            stats.bump("compiles")
            log.info(
                "compiled kernel '%s' for cuda (%s) in %.2f s",
                self.kir.name,
                arch,
                time.perf_counter() - start,
            )
            if entry is not None:
                entry.write(cubin_cache.pack(entry_name, cubin), repr(argtypes))
            return entry_name, cubin

    @staticmethod
    def _read(entry) -> tuple[str, bytes] | None:
        payload = entry.read() if entry is not None else None
        found = cubin_cache.unpack(payload) if payload is not None else None
        if payload is not None and found is None:
            entry.ignore("it holds no cubin")
        if found is not None:
            stats.bump("disk_cache_hits")
        return found

    def _on_device(self, args: tuple, stream) -> tuple[tuple, list]:
        """The arguments with every NumPy array copied to the GPU (mutable ones are copied
        back after the launch: ``write_back`` lists them). Documented in docs/targets.md:
        it waits for the kernel, so pass device arrays where speed matters."""
        args = list(args)
        write_back = []
        arrays = self._array_count
        for k in range(arrays):
            a = args[k]
            if not isinstance(a, np.ndarray):
                continue
            host = a if (a.flags.c_contiguous or a.flags.f_contiguous) else np.ascontiguousarray(a)
            on_device = cuda_module().to_device(host, stream=stream)
            if self._arrays[k].mutable:
                write_back.append((a, host, on_device))
            args[k] = on_device
        return tuple(args), write_back

    @staticmethod
    def _write_back(write_back: list, stream) -> None:
        for _, host, on_device in write_back:
            on_device.copy_to_host(host, stream=stream)
        (stream if stream != 0 else cuda_module()).synchronize()
        for original, host, _ in write_back:
            if host is not original:
                original[...] = host

    def _check_shape(self, nbytes: int, blocks: int, threads: int) -> None:
        """Warn, once per kernel, about a launch of fewer blocks than the GPU has SMs over
        ``nbytes`` of arrays, much memory: a group runs on one SM, so the others sit idle
        (a CPU-style grid-stride loop over a few groups). Small launches cost little
        either way: not reported; neither are the operator layer's kernels (the user
        cannot change them)."""
        sms, self._few_blocks = self._few_blocks, 0  # reported at most once
        key = (self.kir.name, str(self.kir.loc))
        if key in _warned_shapes:
            return
        _warned_shapes.add(key)
        log.warning(
            "kernel '%s' (%s) launched %d group(s) of %d lanes over %.1f MiB of arrays on a "
            "GPU with %d SMs: a group runs on one SM, so %d of them sat idle. Launch at "
            "least %d groups, e.g. one group per block of elements instead of a grid-stride "
            "loop over a few groups; this is reported once per kernel",
            self.kir.name,
            self.kir.loc,
            blocks,
            threads,
            nbytes / 2**20,
            sms,
            sms - blocks,
            sms,
        )

    def _check_shared(self, shared: int) -> None:
        """Above 48 KiB a kernel must fit the device's opt-in limit."""
        limit = self._shared_limit
        if shared > limit:
            raise TesseraError(
                f"kernel '{self.kir.name}' needs {shared} bytes of shared "
                f"memory per group; this GPU allows at most {limit}"
            )

    # ------------------------------------------------------------------ the simulator
    def _run_simulated(self, args: tuple, grid: tuple[int, ...], stream) -> None:
        """numba-cuda's simulator runs the kernel through its dispatcher, thread by thread."""
        if self._kernel is None:
            self._kernel = cuda_module().jit(self.python_function())
            stats.bump("compiles")
            log.info("kernel '%s' for cuda: numba-cuda's simulator runs it", self.kir.name)
        blocks, threads = self.launch_shape(grid)
        cuda = cuda_module()
        args = list(args)
        write_back = []
        for k, p in enumerate(self._arrays):
            a = args[k]
            if not isinstance(a, np.ndarray):
                continue
            if not (a.flags.c_contiguous or a.flags.f_contiguous):
                args[k] = np.ascontiguousarray(a)
                if p.mutable:
                    write_back.append((a, args[k]))
            if not p.mutable:
                args[k] = cuda.to_device(args[k])
        aligned = [_aligned4(args[k]) for k in self._align_positions()]
        note_gpu_work()
        shared = self.dynamic_shared_bytes
        if self.dynamic_size is not None:
            index, itemsize = self.dynamic_size
            shared += int(args[index]) * itemsize
        if fencing_on[0]:
            fence(stream, [_address(a) for a in args[: self._array_count]])
        try:
            with sim_blocks.blocks():
                self._kernel[blocks, threads, stream, shared](*args, *grid, *aligned)
        except IndexError as exc:  # the simulator checks every index, as NumPy does
            raise self._out_of_bounds(exc) from None
        for original, copy in write_back:
            original[...] = copy

    def _out_of_bounds(self, exc: IndexError) -> OutOfBoundsError:
        """The simulator's IndexError as the error a bounds-checked launch raises: the
        kernel, the thread, the index and the kernel's line (from the generated line's
        ``# line N`` comment). On a GPU such an access is not checked (docs/targets.md)."""
        where = ()
        tb = exc.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == self.filename:
                text = linecache.getline(self.filename, tb.tb_lineno)
                found = re.search(r"# line (\d+)", text)
                if found:
                    loc = dataclasses.replace(self.kir.loc, line=int(found.group(1)), col=0)
                    where = (("", loc),)
            tb = tb.tb_next
        return OutOfBoundsError(
            self.kir.name, f"{exc} (numba-cuda's simulator checks every index)", where
        )

    @staticmethod
    def device_arch() -> str:
        """The current GPU's architecture ("sm_90"), or sm_90 where there is no GPU."""
        try:
            major, minor = cuda_module().get_current_device().compute_capability
        except Exception:  # no GPU or driver: metadata for the newest supported arch
            return "sm_90"
        return f"sm_{major}{minor}"

    def _align_positions(self) -> list[int]:
        arrays = [p.name for p in self.kir.params if p.kind == "array"]
        return [arrays.index(name) for name in self.align_params]

    # ------------------------------------------------------------------ without a GPU
    def ptx(self, signature: tuple, arch: str) -> str:
        """PTX for ``arch``, the one the cubin is built from (needs no GPU)."""
        return self.build(signature, arch)[0][0]

    def cubin(self, signature: tuple, arch: str) -> tuple[bytes, str]:
        """A cubin for ``arch`` and ptxas's report (nvJitLink; needs no GPU)."""
        _, cubin, report = self.build(signature, arch)
        return cubin, report

    def metadata(self, signature: tuple, arch: str, grid: tuple[int, ...]) -> dict:
        """What the seeds' kernel metadata lists, read from the cubin's ptxas report."""
        _, report = self.cubin(signature, arch)
        return self.describe(report, arch, grid)

    def describe(self, report: str, arch: str, grid: tuple[int, ...] | None) -> dict:
        """The metadata of this kernel's code for ``arch`` from ptxas's ``report``; for a
        launch over ``grid``, or (None) for any launch (an ahead-of-time image)."""
        registers = re.search(r"Used (\d+) registers", report)
        spills = spill_bytes(report)
        # every shared array the generated code declares (tiles, scratch, staging rings,
        # tshared arrays), or the declared budget where that is more
        arrays = sum(n for _, n in self.shared_arrays)
        shared = max(
            max(self.spec.shared_bytes, self.dynamic_shared_bytes) + self.scratch_bytes, arrays
        )
        regs = int(registers.group(1)) if registers else 0
        if grid is None:
            threads = self.threads
            blocks_of, grid_of = "per launch", "per launch"
        else:
            blocks, threads = self.launch_shape(grid)
            blocks_of, grid_of = [blocks, 1, 1], list(grid)
        meta = {
            "name": self.kir.name,
            "arch": arch,
            "grid": grid_of,
            "shared_bytes": shared,
            "registers_per_thread": regs,
            "spill_bytes": spills,
            "occupancy": occupancy(parse_arch(arch), threads, regs, shared),
            "launch": {"grid": blocks_of, "block": [threads, 1, 1], "smem_bytes": shared},
        }
        resources = {"regs_per_thread": regs, "smem_per_cta": shared, "spill_bytes": spills}
        stages = self.stages if self.register_loops else None
        group = list(self.kir.tile_shape) or [threads]
        meta.update(seed_keys(self.kir, group, resources, stages, self.async_copies))
        if self.fragments is not None:
            meta["fragments"] = self.fragments
        meta["tiles"] = {v: p.as_dict() for v, p in sorted(self.placements.items())}
        return meta

    def layouts(self) -> str:
        """``k.inspect("layouts")``: the typed IR with each tile's placement."""
        return layouts.describe(self.kir, self.placements, self.threads, self.shared_arrays)
