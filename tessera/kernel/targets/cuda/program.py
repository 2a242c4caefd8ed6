"""CUDA programs: generated Python → ``numba.cuda.jit``, launched one block per group.

Under numba-cuda's simulator (``NUMBA_ENABLE_CUDASIM=1``) the same kernels run on the CPU,
thread by thread, which is how the project tests this target without a GPU. Without a
GPU and without the simulator, the kernels still compile to PTX (NVVM) and to a cubin
(nvJitLink) for any architecture: ``ptx()``, ``cubin()`` and ``metadata()``.
"""

from __future__ import annotations

import logging
import math
import re
import time

import numpy as np

from .... import stats
from ....errors import TesseraError
from ....observers import stage
from ...pipeline import Specialised
from ..target import Target
from . import runtime, shared_memory
from .codegen import FLAT_BLOCK, STATIC_SHARED_LIMIT, CudaCodegen
from .runtime import cuda_module, simulating
from .streams import current_stream, note_gpu_work

log = logging.getLogger("tessera")

CUDA_STAGES = ("cuda", "ptx", "cubin")


def cuda_signature(call_args: tuple, grid_ndim: int, aligned: int = 0) -> tuple:
    """Numba types of a launch's arguments (arrays, scalars, symbols, grid dims, then the
    alignment flags of 16-bit cp_async sources)."""
    import numba

    return (
        tuple(numba.typeof(a) for a in call_args)
        + (numba.int64,) * grid_ndim
        + (numba.boolean,) * aligned
    )


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


def parse_arch(arch: str) -> tuple[int, int]:
    """``"sm_90"`` → ``(9, 0)``."""
    match = re.fullmatch(r"sm_(\d+)(\d)a?", arch)
    if not match:
        raise TesseraError(f"arch {arch!r} is not a CUDA architecture such as 'sm_80'")
    return int(match.group(1)), int(match.group(2))


AMPERE = (8, 0)  # cp.async and mma.sync m16n8k16 exist from sm_80 (Ampere) on


def ampere_for(arch: str | None) -> bool:
    """Whether code for ``arch`` (None: this machine's GPU) uses sm_80's instructions,
    hardware async copies and ``mma.sync`` tensor cores: sm_80 and newer do; older GPUs
    and the simulator copy with loads and stores and multiply on the plain path."""
    if simulating():
        return False
    if arch is None:
        try:
            return cuda_module().get_current_device().compute_capability >= AMPERE
        except Exception:  # no GPU here: code for the newest architectures
            return True
    return parse_arch(arch) >= AMPERE


class CudaProgram:
    """One specialisation of a kernel for CUDA (for GPUs with or without sm_80's
    ``cp.async`` and ``mma.sync``)."""

    def __init__(
        self, spec: Specialised, grid_ndim: int, target: Target, ampere: bool | None = None
    ):
        self.spec = spec
        self.kir = spec.kir
        self.grid_ndim = grid_ndim
        self.simulated = simulating()
        ampere = (ampere_for(None) if ampere is None else ampere) and not self.simulated
        self.async_copies = ampere
        codegen = CudaCodegen(
            spec.kir,
            grid_ndim,
            target,
            async_copies=ampere,
            simulated=self.simulated,
            tensor_cores=ampere,
        )
        self.align_params = codegen.align_params
        self.source = codegen.generate()
        self.shared_arrays = codegen.shared_arrays
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
        self._kernel = None

    def python_function(self):
        """The generated ``_kernel`` as a Python function (what numba-cuda compiles)."""
        if self._function is None:
            namespace = runtime.namespace(self.async_copies)
            exec(compile(self.source, self.filename, "exec"), namespace)  # noqa: S102
            self._function = namespace["_kernel"]
        return self._function

    def max_threads(self) -> int:
        """The most threads a block of this kernel has: its launch bound, so ptxas keeps
        to the registers that let a whole group run (tensor-core tile.dot holds many)."""
        return math.prod(self.kir.tile_shape) if self.kir.grouped else FLAT_BLOCK

    def launch_shape(self, grid: tuple[int, ...]) -> tuple[int, int]:
        """(blocks, threads per block) of a launch over ``grid``."""
        if self.kir.grouped:
            return math.prod(grid), math.prod(self.kir.tile_shape)
        total = math.prod(grid)
        threads = min(FLAT_BLOCK, max(total, 1))
        return -(-total // threads), threads

    def run(self, args: tuple, grid: tuple[int, ...], parallel: bool) -> None:
        """Queue the kernel on the current stream (asynchronous for device arrays; NumPy
        arguments are copied over and back, which waits for the kernel)."""
        del parallel  # a GPU always runs groups in parallel
        stream = current_stream()
        first = self._kernel is None
        if first and not self.simulated:
            device = cuda_module().get_current_device()
            limit = device.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
            shared_memory.check(self.kir, self.shared_arrays, limit, f"this GPU ({device.name})")
        if first:
            jit_options = {} if self.simulated else {"launch_bounds": self.max_threads()}
            self._kernel = cuda_module().jit(self.python_function(), **jit_options)
            stats.bump("compiles")
            if self.simulated:
                log.info("kernel '%s' for cuda: numba-cuda's simulator runs it", self.kir.name)
        blocks, threads = self.launch_shape(grid)
        cuda = cuda_module()
        # numba-cuda copies host arrays to the GPU and back after the launch. Read-only
        # parameters go over once, explicitly (nothing to copy back, and a read-only
        # NumPy array could not take it); a strided view travels as a contiguous copy
        # that is written back into it afterwards.
        args = list(args)
        write_back = []
        arrays = [p for p in self.kir.params if p.kind == "array"]
        for k, p in enumerate(arrays):
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
        if shared > STATIC_SHARED_LIMIT:  # above 48 KiB a kernel must opt in
            self._opt_in_dynamic_shared(args, grid, aligned, shared)
        launch = self._kernel[blocks, threads, stream, shared]
        if first and not self.simulated:  # numba-cuda compiles on the first call
            start = time.perf_counter()
            with stage("compile", self.kir.name, step="numba-cuda (first launch)"):
                launch(*args, *grid, *aligned)
            log.info(
                "compiled kernel '%s' for cuda with numba-cuda in %.2f s (at its first "
                "launch; the time includes the launch)",
                self.kir.name,
                time.perf_counter() - start,
            )
        else:
            launch(*args, *grid, *aligned)
        for original, copy in write_back:
            original[...] = copy

    def _opt_in_dynamic_shared(self, args, grid, aligned, shared: int) -> None:
        """Above 48 KiB a kernel must opt in to its dynamic shared memory
        (cuKernelSetAttribute MAX_DYNAMIC_SHARED_SIZE_BYTES) and fit the device's limit.
        Written against the CUDA driver API; ran on an H100 (tests/test_gpu_paths.py)."""
        if self.simulated or getattr(self, "_opted_in", 0) >= shared:
            return
        cuda = cuda_module()
        device = cuda.get_current_device()
        limit = device.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
        if shared > limit:
            raise TesseraError(
                f"kernel '{self.kir.name}' needs {shared} bytes of shared "
                f"memory per group; this GPU allows at most {limit}"
            )
        from cuda.bindings import driver as cu
        from numba.cuda.cudadrv.driver import driver

        signature = cuda_signature(tuple(args), len(grid), len(aligned))
        compiled = self._kernel.compile(signature)
        function = compiled._codelibrary.get_cufunc()
        attribute = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        driver.cuKernelSetAttribute(attribute, shared, function.handle, device.id)
        self._opted_in = shared

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
        """PTX for ``arch`` (NVVM; needs no GPU)."""
        cc = parse_arch(arch)
        shared_memory.check(self.kir, self.shared_arrays, shared_memory.limit_for(cc), arch)
        cuda = cuda_module()
        ptx, _ = cuda.compile_ptx(
            self.python_function(),
            signature,
            cc=cc,
            launch_bounds=self.max_threads(),
        )
        return ptx

    def cubin(self, signature: tuple, arch: str) -> tuple[bytes, str]:
        """A cubin for ``arch`` and ptxas's report (nvJitLink; needs no GPU)."""
        from cuda.bindings import nvjitlink

        ptx = self.ptx(signature, arch).encode()
        handle = nvjitlink.create(2, [f"-arch={arch}", "-verbose"])
        try:
            nvjitlink.add_data(handle, nvjitlink.InputType.PTX, ptx, len(ptx), "kernel.ptx")
            try:
                nvjitlink.complete(handle)
            except Exception as exc:
                raise TesseraError(f"ptxas failed for {arch}: {_log(nvjitlink, handle)}") from exc
            cubin = bytearray(nvjitlink.get_linked_cubin_size(handle))
            nvjitlink.get_linked_cubin(handle, cubin)
            return bytes(cubin), _log(nvjitlink, handle)
        finally:
            nvjitlink.destroy(handle)

    def metadata(self, signature: tuple, arch: str, grid: tuple[int, ...]) -> dict:
        """What the seeds' kernel metadata lists, read from the cubin's ptxas report."""
        _, report = self.cubin(signature, arch)
        registers = re.search(r"Used (\d+) registers", report)
        spills = re.findall(r"(\d+) bytes spill (?:stores|loads)", report)
        blocks, threads = self.launch_shape(grid)
        shared = max(self.spec.shared_bytes, self.dynamic_shared_bytes) + self.scratch_bytes
        return {
            "name": self.kir.name,
            "arch": arch,
            "tile": list(self.kir.tile_shape) or [threads],
            "grid": list(grid),
            "shared_bytes": shared,
            "registers_per_thread": int(registers.group(1)) if registers else 0,
            "spill_bytes": sum(int(n) for n in spills),
            "launch": {"grid": [blocks, 1, 1], "block": [threads, 1, 1], "smem_bytes": shared},
        }


def _log(nvjitlink, handle) -> str:
    size = nvjitlink.get_info_log_size(handle)
    log = bytearray(size)
    if size:
        nvjitlink.get_info_log(handle, log)
    return log.decode(errors="replace").rstrip("\x00")
