"""The CPU target: generated Python → Numba, groups spread over cores with ``prange``.

One specialisation compiles to two Numba functions from the same source: a parallel one
(``prange`` over chunks of groups) and a serial one for launches too small to pay for
waking the thread pool. Both are compiled on first use and then called through their
compiled entry points, which skips Numba's per-call type dispatch (the launch layer has
already checked every argument type, so the dispatch would be redundant).

Each compiled function is also kept in the disk cache (``kernel/disk_cache.py``) under a key
that covers everything that shapes its machine code, so a later process loads it instead of
compiling it. The generated source runs as a module of its own, registered in
``sys.modules`` under a name derived from that key: a loaded ``CompileResult`` finds its
globals by module name.
"""

from __future__ import annotations

import functools
import hashlib
import math
import sys
import types
from pathlib import Path

import numba
from numba.core import config as numba_config

from ... import stats
from .. import disk_cache
from ..pipeline import Specialised
from . import cpu_runtime
from .cpu_codegen import CpuCodegen

JIT_OPTIONS = dict(nogil=True, error_model="numpy", fastmath=False, boundscheck=False)


class CpuProgram:
    """One compiled specialisation of a kernel for the CPU."""

    def __init__(self, spec: Specialised, grid_ndim: int, key: tuple | None = None):
        self.spec = spec
        self.grid_ndim = grid_ndim
        self.key = key  # the specialisation key; None keeps this program out of the disk cache
        codegen = CpuCodegen(spec.kir, spec.schedule, grid_ndim)
        self.source = codegen.generate()
        self.stack_arrays = codegen.stack_arrays
        self.filename = codegen.source_file("cpu")
        self.grouped = spec.kir.grouped
        self.lanes = math.prod(spec.kir.tile_shape) if self.grouped else 1
        self._entries: dict[bool, object] = {}
        self._dispatchers: dict[bool, tuple] = {}  # variant → (dispatcher, signature)

    def _build(self, parallel: bool, args: tuple) -> object:
        signature = tuple(numba.typeof(a) for a in args)
        cached = self._disk_entry(parallel, signature)
        stem = cached.path.stem if cached else f"{self.spec.kir.name}.{id(self):x}"
        module = types.ModuleType("tessera_cpu_" + stem.replace(".", "_"))
        module.__dict__.update(cpu_runtime.namespace())
        module._prange = numba.prange if parallel else range
        for name, (shape, dtype) in self.stack_arrays.items():
            setattr(module, name, cpu_runtime.stack_array(shape, dtype))
        exec(compile(self.source, self.filename, "exec"), module.__dict__)  # noqa: S102 - our codegen
        dispatcher = numba.njit(parallel=parallel, **JIT_OPTIONS)(module._kernel)
        if cached is not None:
            sys.modules[module.__name__] = module
            dispatcher._cache = cached  # Numba's cache hook: load before compiling, save after
        # Numba leaves LLVM's SLP vectoriser off by default; lane loops that LLVM fully
        # unrolls (a 16-lane row) only vectorise with it.
        saved, numba_config.SLP_VECTORIZE = numba_config.SLP_VECTORIZE, 1
        try:
            entry = dispatcher.compile(signature)
        finally:
            numba_config.SLP_VECTORIZE = saved
        stats.bump("disk_cache_hits" if cached is not None and cached.loaded else "compiles")
        self._entries[parallel] = entry
        self._dispatchers[parallel] = (dispatcher, signature)
        return entry

    def inspect(self, stage: str, args: tuple, grid: tuple[int, ...]) -> str:
        """LLVM IR ("llvm") or assembly ("asm") of the parallel variant, compiled for
        these arguments (a program built without a key: code loaded from the disk cache
        cannot be inspected)."""
        full = self._call_args(args, grid, True)
        if True not in self._dispatchers:
            self._build(True, full)
        dispatcher, signature = self._dispatchers[True]
        if stage == "llvm":
            return dispatcher.inspect_llvm(signature)
        return dispatcher.inspect_asm(signature)

    def _disk_entry(self, parallel: bool, signature: tuple) -> disk_cache.Entry | None:
        """The disk-cache file of one variant, keyed on all that shapes its machine code."""
        if self.key is None or not disk_cache.enabled():
            return None
        kir = self.spec.kir
        parts = (
            "cpu",
            kir.source_hash,
            self.key,
            "parallel" if parallel else "serial",
            tuple(str(t) for t in signature),
            hashlib.sha256(self.source.encode()).hexdigest(),
            tuple(sorted(JIT_OPTIONS.items())),
            ("SLP_VECTORIZE", 1),
            _runtime_digest(),
        )
        meta = {"variant": "parallel" if parallel else "serial", "defined": str(kir.loc)}
        return disk_cache.Entry("cpu", kir.name, disk_cache.entry_key(parts), meta)

    def _call_args(self, args: tuple, grid: tuple[int, ...], parallel: bool) -> tuple:
        if not self.grouped:
            return args + grid
        groups = math.prod(grid)
        chunks = min(groups, numba.get_num_threads() * 4) if parallel else 1
        return args + grid + (max(chunks, 1),)

    def run(self, args: tuple, grid: tuple[int, ...], parallel: bool) -> None:
        args = self._call_args(args, grid, parallel)
        entry = self._entries.get(parallel)
        if entry is None:
            entry = self._build(parallel, args)
        entry(*args)


@functools.cache
def _runtime_digest() -> str:
    """A hash of the sources the compiled code depends on besides the generated text: this
    driver, the runtime and every Tessera module whose functions the runtime namespace
    lends to the generated code (helpers inlined into it)."""
    modules = {__name__, cpu_runtime.__name__}
    for value in cpu_runtime.namespace().values():
        owner = getattr(value, "__module__", None) or ""
        if owner.startswith("tessera."):
            modules.add(owner)
    digest = hashlib.sha256()
    for name in sorted(modules):
        digest.update(name.encode())
        digest.update(Path(sys.modules[name].__file__).read_bytes())
    return digest.hexdigest()
