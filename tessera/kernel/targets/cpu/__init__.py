"""The CPU target: groups spread over cores, lanes as vectorisable loops (docs/targets.md).

Passes of its own: strip-mining of lane-strided loops and region formation (a grouped
kernel becomes lane loops between collectives). f16 and bf16 travel as uint16 bits:
Numba's CPU target has no half type.
"""

from __future__ import annotations

import numpy as np

from .... import dtypes as D
from ....arrays import is_device_array
from ...pipeline import REGIONS, STRIP_MINE
from ..target import BuildOptions, Target
from . import compile_job
from .lowerings import LOWERINGS
from .program import CheckedProgram, CpuProgram

_BITS = np.dtype(np.uint16)
_BYTE = np.dtype(np.uint8)  # 8-bit floats travel as their bits


class CpuTarget(Target):
    def accepts(self, args: tuple) -> bool:
        return not any(is_device_array(a) for a in args)

    def storage(self, dtype: D.DType) -> np.dtype | None:
        if dtype in D.FP8:
            return _BYTE
        return _BITS if dtype in D.COMPUTED_IN_F32 else None

    def build(self, spec, grid_ndim: int, key: tuple, options: BuildOptions, call_args: tuple):
        if options.checked:
            return CheckedProgram(spec, grid_ndim, self)
        return CpuProgram(spec, grid_ndim, self, key)  # with its key: it can use the disk cache

    def compile_jobs(
        self, program, call_args: tuple, grid: tuple, parallel: bool, arch: str | None = None
    ) -> list:
        return compile_job.jobs_for(program, call_args, grid, parallel)

    def stage(self, program, name: str, call_args: tuple, grid: tuple, options: BuildOptions):
        if name == "cpu":
            return program.source
        # llvm/asm: compiled afresh by Numba (code loaded from the disk cache has no IR)
        fresh = CpuProgram(program.spec, program.grid_ndim, self)
        return fresh.inspect(name, call_args, grid)


CPU = CpuTarget(
    "cpu",
    "the CPU, through Numba",
    passes=(STRIP_MINE, REGIONS),
    lowerings=LOWERINGS,
    stages=("cpu", "llvm", "asm"),
    dump_stages=("cpu",),
)
