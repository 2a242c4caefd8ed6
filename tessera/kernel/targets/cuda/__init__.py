"""The CUDA target: one block per group, one thread per lane, through numba-cuda
(docs/targets.md). ``auto`` picks it when any argument is a GPU array. f16 is native on
the GPU; bf16 travels as uint16 bits. Without a GPU, numba-cuda's simulator runs it, and
its code still compiles to PTX and cubins for any architecture (the ``ptx``, ``cubin``
and ``meta`` stages).
"""

from __future__ import annotations

import math

import numpy as np

from .... import dtypes as D
from ....arrays import BF16, is_device_array
from ....errors import LaunchError, TesseraError
from ..target import BuildOptions, Target
from . import compile_job, memory, sass
from .codegen import FLAT_BLOCK
from .graphs import CudaGraph
from .lowerings import LOWERINGS
from .memory import POOL
from .program import CudaProgram, ampere_for, cuda_signature, fp8_for, stages_for
from .runtime import cuda_module, simulating
from .streams import gpu_work_queued, stream, synchronize_device

_BITS = np.dtype(np.uint16)
MAX_BLOCKS = 2**31 - 1
MAX_BLOCK_THREADS = 1024  # threads of a CUDA block: the lanes of a group


class CudaTarget(Target):
    def accepts(self, args: tuple) -> bool:
        return any(is_device_array(a) for a in args)

    def storage(self, dtype: D.DType) -> np.dtype | None:
        if dtype in D.FP8:  # numba-cuda has no 8-bit float: their bits
            return np.dtype(np.uint8)
        return _BITS if dtype == D.bf16 else None

    def check_arrays(self, kernel: str, params: list, args: tuple) -> None:
        arrays = [(p.name, is_device_array(a)) for p, a in zip(params, args) if p.kind == "array"]
        on_device = {name for name, device in arrays if device}
        if on_device and len(on_device) != len(arrays):
            on_host = [name for name, device in arrays if not device]
            raise LaunchError(
                kernel,
                f"mixes GPU arrays ({', '.join(sorted(on_device))}) with host arrays "
                f"({', '.join(on_host)}); move them all to the GPU or all to the host",
            )

    def check_grid(self, kernel: str, grid: tuple, lanes_per_group: int, grouped: bool) -> None:
        """CUDA launches one block per group (``gridDim.x`` at most 2**31 - 1); a flat
        kernel's tiles go FLAT_BLOCK to a block."""
        super().check_grid(kernel, grid, lanes_per_group, grouped)
        total = 1
        for extent in grid:
            total *= extent
        blocks = total if grouped else -(-total // FLAT_BLOCK)
        if blocks > MAX_BLOCKS:
            what = "groups" if grouped else f"blocks of {FLAT_BLOCK} tiles"
            raise LaunchError(
                kernel,
                f"grid {grid} needs {blocks} {what}; a CUDA launch has at most {MAX_BLOCKS} "
                "blocks (gridDim.x)",
            )

    def build(self, spec, grid_ndim: int, key: tuple, options: BuildOptions, call_args: tuple):
        lanes = math.prod(spec.kir.tile_shape)
        if spec.kir.grouped and lanes > MAX_BLOCK_THREADS:
            raise LaunchError(
                spec.kir.name,
                f"a group of tile={spec.kir.tile_shape} has {lanes} lanes; a CUDA block runs "
                f"at most {MAX_BLOCK_THREADS} threads",
            )
        arch = options.arch
        return CudaProgram(
            spec, grid_ndim, self, ampere_for(arch), stages_for(arch), fp8=fp8_for(arch)
        )

    def compile_jobs(
        self, program, call_args: tuple, grid: tuple, parallel: bool, arch: str | None = None
    ) -> list:
        return compile_job.jobs_for(program, call_args, grid, arch)

    def stage(self, program, name: str, call_args: tuple, grid: tuple, options: BuildOptions):
        program = program.for_args(call_args)  # the variant a launch with them runs
        if name == "cuda":
            return program.source
        if name == "layouts":
            return program.layouts()
        if program.simulated:
            raise TesseraError(
                f"k.inspect({name!r}) under numba-cuda's simulator (NUMBA_ENABLE_CUDASIM=1): "
                "the simulator runs kernels as Python and compiles nothing, so there is no "
                "ptx, cubin, sass or meta stage; run without NUMBA_ENABLE_CUDASIM (no GPU needed) "
                "for them, or inspect 'cuda' for the generated source"
            )
        arch = options.arch or program.device_arch()
        signature = cuda_signature(call_args, len(grid), len(program.align_params))
        if name == "ptx":
            return program.ptx(signature, arch)
        if name == "cubin":
            return program.cubin(signature, arch)[0]
        if name == "sass":
            return sass.disassemble(program.cubin(signature, arch)[0], program.kir.name)
        return program.metadata(signature, arch, grid)

    def synchronize(self) -> None:
        if gpu_work_queued():
            synchronize_device()

    def empty(self, shape: tuple[int, ...], dtype: np.dtype):
        if simulating():
            return cuda_module().device_array(shape, dtype)
        return POOL.empty(shape, dtype)  # recycled device memory (memory.py)

    def copy(self, dst, src) -> None:
        if simulating():
            dst.copy_to_device(src)
        else:
            memory.copy(dst, src)  # one asynchronous driver call (memory.py)

    def wrap_interface(self, face: dict, owner, bf16: bool):
        """A ``__cuda_array_interface__`` (``face``, bf16 already spelt as uint16) as a
        numba-cuda device array on ``owner``'s memory, bf16 kept as such; under the
        simulator (device memory is host memory) a simulator array over a NumPy view."""
        if simulating():
            from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

            host = np.asarray(_Interface(face, owner))
            return FakeCUDAArray(host.view(BF16) if bf16 else host)
        array = cuda_module().from_cuda_array_interface(face, owner=owner, sync=False)
        return array.view(BF16) if bf16 else array

    def from_host(self, array: np.ndarray):
        return cuda_module().to_device(np.ascontiguousarray(array))

    def stream_scope(self, name: str):
        return stream(name)  # the named stream, made once (streams.py)

    def availability(self) -> list[tuple[str, str]]:
        try:
            cuda = cuda_module()
        except TesseraError as exc:  # numba-cuda is not installed: say what to install
            return [("cuda GPU", f"no ({exc})"), ("cuda simulator", "no (needs numba-cuda)")]
        try:
            gpu = cuda.is_available()
        except Exception as exc:  # a broken driver install must not break `tessera info`
            return [("cuda GPU", f"no ({str(exc).splitlines()[0]})"), _SIMULATOR]
        return [("cuda GPU", "usable" if gpu else "no (no CUDA GPU or driver found)"), _SIMULATOR]

    def device_name(self) -> str:
        try:
            return str(cuda_module().get_current_device().name)
        except Exception:  # the simulator or no GPU
            return "cuda"

    def semantic_tests(self, simulator: bool) -> bool:
        return simulator

    def timed_with_events(self) -> bool:
        return not simulating()

    def device_graph(self, name: str, launches: list):
        if simulating():  # the simulator has no graphs: the launches replay one by one
            return None
        return CudaGraph.capture(name, launches)

    def dumpable(self, program, stage: str) -> bool:
        return not program.simulated  # metadata needs a cubin, which the simulator lacks


class _Interface:
    """A CUDA array interface read as NumPy's array interface (the simulator's memory)."""

    def __init__(self, face: dict, owner):
        self.__array_interface__ = {
            "shape": tuple(face["shape"]),
            "typestr": face["typestr"],
            "data": (int(face["data"][0]), bool(face["data"][1])),
            "strides": face.get("strides"),
            "version": 3,
        }
        self.owner = owner


_SIMULATOR = ("cuda simulator", "available with NUMBA_ENABLE_CUDASIM=1")

CUDA = CudaTarget(
    "cuda",
    "NVIDIA GPUs, through numba-cuda",
    lowerings=LOWERINGS,
    stages=("cuda", "layouts", "ptx", "cubin", "sass", "meta"),
    dump_stages=("meta",),
    device_arrays=True,
)
