"""The CPU target: generated Python → Numba, groups spread over cores with ``prange``.

One specialisation compiles to two Numba functions from the same source: a parallel one
(``prange`` over chunks of groups) and a serial one for launches too small to pay for
waking the thread pool. Both are compiled on first use and then called through their
compiled entry points, which skips Numba's per-call type dispatch (the launch layer has
already checked every argument type, so the dispatch would be redundant).
"""

from __future__ import annotations

import linecache
import math

import numba
from numba.core import config as numba_config

from ... import stats
from ..pipeline import Specialised
from . import cpu_runtime
from .cpu_codegen import CpuCodegen

JIT_OPTIONS = dict(nogil=True, error_model="numpy", fastmath=False, boundscheck=False)


class CpuProgram:
    """One compiled specialisation of a kernel for the CPU."""

    def __init__(self, spec: Specialised, grid_ndim: int):
        self.spec = spec
        self.grid_ndim = grid_ndim
        codegen = CpuCodegen(spec.kir, spec.schedule, grid_ndim)
        self.source = codegen.generate()
        self.stack_arrays = codegen.stack_arrays
        self.filename = f"<tessera-cpu {spec.kir.name} {id(self):x}>"
        linecache.cache[self.filename] = (
            len(self.source),
            None,
            self.source.splitlines(True),
            self.filename,
        )
        self.grouped = spec.kir.grouped
        self.lanes = math.prod(spec.kir.tile_shape) if self.grouped else 1
        self._entries: dict[bool, object] = {}

    def _build(self, parallel: bool, args: tuple) -> object:
        namespace = cpu_runtime.namespace()
        namespace["_prange"] = numba.prange if parallel else range
        for name, (shape, dtype) in self.stack_arrays.items():
            namespace[name] = cpu_runtime.stack_array(shape, dtype)
        exec(compile(self.source, self.filename, "exec"), namespace)  # noqa: S102 - our codegen
        dispatcher = numba.njit(parallel=parallel, **JIT_OPTIONS)(namespace["_kernel"])
        signature = tuple(numba.typeof(a) for a in args)
        # Numba leaves LLVM's SLP vectoriser off by default; lane loops that LLVM fully
        # unrolls (a 16-lane row) only vectorise with it.
        saved, numba_config.SLP_VECTORIZE = numba_config.SLP_VECTORIZE, 1
        try:
            entry = dispatcher.compile(signature)
        finally:
            numba_config.SLP_VECTORIZE = saved
        stats.bump("compiles")
        self._entries[parallel] = entry
        return entry

    def run(self, args: tuple, grid: tuple[int, ...], parallel: bool) -> None:
        if self.grouped:
            groups = math.prod(grid)
            chunks = min(groups, numba.get_num_threads() * 4) if parallel else 1
            args = args + grid + (max(chunks, 1),)
        else:
            args = args + grid
        entry = self._entries.get(parallel)
        if entry is None:
            entry = self._build(parallel, args)
        entry(*args)
