"""CPU programs: generated Python → Numba, groups spread over cores with ``prange``.

One specialisation compiles to two Numba functions from the same source: a parallel one
(``prange`` over chunks of groups) and a serial one for launches too small to pay for
waking the thread pool. Both are compiled on first use and then called through their
compiled entry points, which skips Numba's per-call type dispatch (the launch layer has
already checked every argument type, so the dispatch would be redundant).

Each compiled function is also kept in the disk cache (``kernel/disk_cache.py``) as a native
image (``native.py``: object code and what linking it needs) under a key that covers
everything that shapes its machine code. A later process loads the image and calls it
without importing Numba, so a warm start costs NumPy, llvmlite and Tessera's front end, not
Numba's half-second import; Numba is imported only to compile.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import linecache
import logging
import math
import os
import time
import types
import weakref
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ....errors import OutOfBoundsError
from ....observe import stats
from ....observe.observers import stage
from ... import compile_feedback, disk_cache, ir
from ...ir import TileType
from ...pipeline import Specialised
from ...source import generated
from .. import printing
from ..target import Target
from . import block_copies, native, parallel_driver, runtime, vector_width
from .codegen import CpuCodegen

JIT_OPTIONS = dict(nogil=True, error_model="numpy", fastmath=False, boundscheck=False)
# a group holding a tile of this many elements does enough work per launch (a tile
# statement is a loop over the elements) to pay for waking the thread pool, whatever the
# lane count says (the parallel threshold counts lanes)
HEAVY_TILE = 1024
# a launch on fewer groups than threads that runs this long has left cores idle for long
# enough to matter (shorter ones are tests and toy sizes: no warning for those)
STARVED_SECONDS = 1e-3
log = logging.getLogger("tessera")
_warned_starved: set[tuple[str, str]] = set()  # (kernel, where defined) warned about
_CORES = max(os.cpu_count() or 1, 2)  # launches on this many groups or more fill the cores


class CpuProgram:
    """One compiled specialisation of a kernel for the CPU."""

    def __init__(
        self,
        spec: Specialised,
        grid_ndim: int,
        target: Target,
        key: tuple | None = None,
        chunked: bool = False,
    ):
        """``chunked``: a flat kernel's code is a ``_chunk`` as well (codegen.py)."""
        self.spec = spec
        self.name = spec.kir.name
        self.grid_ndim = grid_ndim
        self.key = key  # the specialisation key; None keeps this program out of the disk cache
        codegen = CpuCodegen(spec.kir, spec.schedule, grid_ndim, target, chunked)
        self.source = codegen.generate()
        self.check_sites = codegen.check_sites
        self.assert_sites = codegen.assert_sites
        self.stack_arrays = codegen.stack_arrays
        self.block_copies = codegen.block_copies
        # loops over the own exp, log, tanh, erf are bound by arithmetic: wide vectors pay
        self.arithmetic_bound = codegen.own_math_calls > 0
        self.filename = codegen.source_file("cpu")
        # its generated source leaves linecache with it (an evicted program is freed whole)
        weakref.finalize(self, linecache.cache.pop, self.filename, None)
        self.grouped = spec.kir.grouped
        self.lanes = math.prod(spec.kir.tile_shape) if self.grouped else 1
        self.heavy_groups = any(
            isinstance(t, TileType) and math.prod(t.shape) >= HEAVY_TILE
            for t in spec.kir.var_types.values()
        )
        self.prints = ir.prints(spec.kir.body)
        self._entries: dict[bool, object] = {}  # variant → the compiled function
        self._dispatchers: dict[bool, tuple] = {}  # variant → (dispatcher, signature)
        self._chunks: dict[tuple, tuple] = {}  # signature → the chunk's (dispatcher, cres)
        # until this kernel's starved launch is reported; never for the operator layer's
        # kernels (their shapes are tessera's to choose: the user could do nothing about it)
        self._watch_shape = self.grouped and not generated(spec.kir.loc.file)

    @classmethod
    def compiler(cls, job) -> CpuProgram:
        """A program that can only compile a :class:`~.compile_job.CompileJob`'s variant
        (and store it): what a compile worker makes of a job, without the kernel's IR."""
        program = cls.__new__(cls)
        program.name, program.source, program.grouped = job.kernel, job.source, job.grouped
        program.filename = f"<tessera-cpu {job.kernel} {job.variant} worker>"
        linecache.cache[program.filename] = (len(job.source), None, job.source.splitlines(True), "")
        program.stack_arrays, program.block_copies = job.stack_arrays, job.block_copies
        program.arithmetic_bound = job.arithmetic_bound
        program._entries, program._dispatchers, program._chunks = {}, {}, {}
        return program

    def _build(self, parallel: bool, args: tuple) -> object:
        """The variant's function: from the disk cache if there, else compiled (and stored)
        by one process of a node at a time (disk_cache.compiling: the others wait for its
        entry, then load it)."""
        variant = "parallel" if parallel else "serial"
        entry = self._disk_entry(parallel, args)
        function = self._load(entry, variant)
        if function is None:
            with disk_cache.compiling(entry) as waited:
                function = self._load(entry, variant) if waited else None
                if function is None:
                    function = self._compile_and_store(entry, parallel, args, variant)
        self._entries[parallel] = function
        return function

    def _load(self, entry: disk_cache.Entry | None, variant: str) -> object | None:
        """The variant's function loaded from its disk-cache entry, or None (a miss)."""
        name = self.name
        function = None
        with stage("cache load", name, variant=variant) as fields:
            payload = entry.read() if entry is not None else None
            fields["found"] = payload is not None
            if entry is not None:
                found = "hit" if payload is not None else "miss"
                log.debug(
                    "disk cache %s: kernel '%s' (cpu, %s) %s", found, name, variant, entry.path
                )
            if payload is not None:
                try:
                    function = native.load(native.Image.from_bytes(payload), name)
                except (native.NativeLoadError, ValueError, KeyError, TypeError) as exc:
                    entry.ignore(f"cannot be loaded: {exc}")  # type: ignore[union-attr]
                    fields["found"] = False
        if function is not None:
            stats.bump("disk_cache_hits")
        return function

    def _compile_and_store(self, entry, parallel: bool, args: tuple, variant: str) -> object:
        name = self.name
        log.info("compiling kernel '%s' for cpu (%s variant) with Numba", name, variant)
        with (
            compile_feedback.compiling(name, f"cpu ({variant} variant)"),
            stage("compile", name, step="numba", variant=variant),
        ):
            function, cres = self._compile(parallel, args)
        stats.bump("compiles")
        if entry is not None:
            chunk = self._parallel_chunk() if parallel else None
            if chunk is None:
                image = native.image_of(cres)
            else:  # the shared driver, and the chunk whose address it takes
                image = native.image_of(cres, (chunk[1],), chunk[1].fndesc.llvm_func_name)
            if image is not None:
                entry.write(image.to_bytes(), str(cres.signature))
        return function

    def _compile(self, parallel: bool, args: tuple) -> tuple:
        """Compile the variant with Numba: (its entry point, Numba's CompileResult). A
        grouped kernel's body, ``_chunk``, is compiled once for both variants: the
        one-core variant *is* it, called for chunk 0 of 1 (``_call_args``); the parallel
        one is the process's driver for these argument types (parallel_driver.py),
        called with the chunk's address."""
        import numba

        signature = tuple(numba.typeof(a) for a in args)
        if self.grouped:
            driven = (numba.types.intp, *signature)  # (the driver's: the chunk's address first)
            driver = parallel_driver.driver(len(signature), JIT_OPTIONS) if parallel else None
            with self._compile_settings():
                self._compiled_chunk(signature)
                if driver is not None:
                    driver.compile(driven)
            dispatcher, cres = self._chunks[signature]
            if driver is None:
                self._dispatchers[parallel] = (dispatcher, signature)
                return cres.entry_point, cres
            address = cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)
            self._dispatchers[parallel] = (driver, driven)
            run = driver.overloads[driven]
            return functools.partial(run.entry_point, address), run
        module = self._module(parallel)
        with self._compile_settings():
            dispatcher = numba.njit(parallel=parallel, **JIT_OPTIONS)(module._kernel)
            function = dispatcher.compile(signature)
        self._dispatchers[parallel] = (dispatcher, signature)
        return function, dispatcher.overloads[signature]

    def _parallel_chunk(self) -> tuple | None:
        """A grouped kernel's chunk as its parallel variant runs it (``_chunks``' entry)."""
        found = self._dispatchers.get(True)
        if not self.grouped or found is None:
            return None
        return self._chunks.get(found[1][1:])

    @contextlib.contextmanager
    def _compile_settings(self) -> Iterator[None]:
        """Numba's and LLVM's settings for compiling this kernel."""
        from numba.core import config as numba_config

        # Numba leaves LLVM's SLP vectoriser off by default; lane loops that LLVM fully
        # unrolls (a 16-lane row) only vectorise with it. Numba's compiler re-reads every
        # setting from the NUMBA_* environment when that has changed since it last looked
        # (``import tessera`` sets NUMBA_NUM_THREADS), which would put the vectoriser back
        # off for this compile: the environment is taken in first, then the setting made.
        numba_config.reload_config()
        saved, numba_config.SLP_VECTORIZE = numba_config.SLP_VECTORIZE, 1
        try:
            with vector_width.preferring(self.vector_bits()):
                yield
        finally:
            numba_config.SLP_VECTORIZE = saved

    def _module(self, parallel: bool) -> types.ModuleType:
        """A new module holding the generated source, for one variant."""
        import numba

        module = types.ModuleType(f"tessera_cpu_{self.name}_{id(self):x}")
        module.__dict__.update(runtime.namespace())
        module._prange = numba.prange if parallel else range
        for name, (shape, dtype) in self.stack_arrays.items():
            setattr(module, name, runtime.stack_array(shape, dtype))
        for name, key in self.block_copies.items():
            setattr(module, name, block_copies.function(*key))
        exec(compile(self.source, self.filename, "exec"), module.__dict__)  # noqa: S102 - our codegen
        return module

    def _compiled_chunk(self, signature: tuple) -> None:
        """Compile this kernel's ``_chunk`` for the variants' ``signature`` (once; kept
        in ``_chunks`` with its result, for the disk-cache image)."""
        import numba

        if signature not in self._chunks:
            argtypes = (numba.types.intp, *signature)
            dispatcher = numba.njit(**JIT_OPTIONS)(self._module(False)._chunk)
            dispatcher.compile(argtypes)
            self._chunks[signature] = (dispatcher, dispatcher.overloads[argtypes])

    def vector_bits(self) -> int | None:
        """The vector width to ask LLVM for (vector_width.py), None for its own choice."""
        return vector_width.preferred_bits(self.arithmetic_bound)

    def inspect(self, stage: str, args: tuple, grid: tuple[int, ...]) -> str:
        """LLVM IR ("llvm") or assembly ("asm") of the parallel variant, compiled for
        these arguments (always by Numba: the disk cache holds machine code only); for a
        grouped kernel its chunk's first, then the parallel loop calling it."""
        if True not in self._dispatchers:
            self._compile(True, self._call_args(args, grid, True))
        dispatcher, signature = self._dispatchers[True]
        chunk = self._parallel_chunk()  # a grouped kernel's body, called by it
        if stage == "llvm":
            text = dispatcher.inspect_llvm(signature)
            return text if chunk is None else chunk[1].library.get_llvm_str() + "\n" + text
        text = dispatcher.inspect_asm(signature)
        return text if chunk is None else chunk[1].library.get_asm_str() + "\n" + text

    def _disk_entry(self, parallel: bool, args: tuple) -> disk_cache.Entry | None:
        """The disk-cache file of one variant, keyed on all that shapes its machine code."""
        if self.key is None or not disk_cache.enabled() or not native.numba_tested():
            return None
        kir = self.spec.kir
        parts = (
            "cpu",
            kir.source_hash,
            self.key,
            "parallel" if parallel else "serial",
            argument_types(args),
            hashlib.sha256(self.source.encode()).hexdigest(),
            tuple(sorted(JIT_OPTIONS.items())),
            ("SLP_VECTORIZE", 1),
            ("vector bits", self.vector_bits()),
            _runtime_digest(),
        )
        meta = {"variant": "parallel" if parallel else "serial", "defined": str(kir.loc)}
        return disk_cache.Entry("cpu", kir.name, parts, meta)

    def _call_args(self, args: tuple, grid: tuple[int, ...], parallel: bool) -> tuple:
        if not self.grouped:
            return args + grid
        if not parallel:  # the one-core variant is the chunk function: chunk 0 of 1
            return (0, *args, *grid, 1)
        groups = math.prod(grid)
        return args + grid + (max(min(groups, cpu_threads() * 4), 1),)

    def run(self, args: tuple, grid: tuple[int, ...], parallel: bool) -> None:
        if self.prints or self.heavy_groups:
            parallel = self.variant(grid, parallel)
        if self._watch_shape:
            groups = math.prod(grid)
            if groups < _CORES and self._entries.get(parallel) is not None:
                start = time.perf_counter()
                self.run_variant(args, grid, parallel)
                seconds = time.perf_counter() - start
                if seconds >= STARVED_SECONDS:  # (the thread count is read only then)
                    self._starved(groups, seconds)
                return
        self.run_variant(args, grid, parallel)

    def variant(self, grid: tuple[int, ...], parallel: bool) -> bool:
        """Whether a launch over ``grid`` runs the parallel variant, given whether its lane
        count alone asks for it (``parallel``)."""
        if self.prints:  # one core, groups in order: the lines come out in order
            return False
        if self.heavy_groups and not parallel:
            return math.prod(grid) > 1
        return parallel

    def _starved(self, groups: int, seconds: float) -> None:
        """Warn (once per kernel) about a long launch on fewer groups than threads.

        A group runs on one core here, its lanes one after another, so a GPU-shaped launch
        (one big group for the whole input, or a few groups that grid-stride over it)
        leaves the other cores idle and is many times slower than it need be. Short
        launches are not reported: they cost little either way. Neither is a launch that
        compiles or loads its code (only launches of code already at hand are timed)."""
        threads = cpu_threads()
        if groups >= threads:
            return
        kir = self.spec.kir
        self._watch_shape = False
        key = (kir.name, str(kir.loc))
        if key in _warned_starved:
            return
        _warned_starved.add(key)
        log.warning(
            "kernel '%s' (%s) launched %d group(s) of %d lanes on a CPU with %d threads: "
            "a group runs on one core, so %d of them sat idle for this %.1f ms launch. "
            "Launch at least %d groups, e.g. one group per block of elements instead of "
            "a grid-stride loop over a few groups (docs/targets.md, 'Launch shapes for the "
            "CPU'); this is reported once per kernel",
            kir.name,
            kir.loc,
            groups,
            self.lanes,
            threads,
            threads - groups,
            seconds * 1e3,
            threads,
        )

    def run_variant(self, args: tuple, grid: tuple[int, ...], parallel: bool) -> None:
        """Run the parallel or the serial variant (compiled or loaded on first use)."""
        entry = self._entries.get(parallel)
        if entry is None:  # the chunk count's value does not matter to the build
            entry = self._build(parallel, args + grid + ((1,) if self.grouped else ()))
        entry(*self._call_args(args, grid, parallel))


class CheckedProgram(CpuProgram):
    """A bounds-checked CPU program (``TESSERA_BOUNDSCHECK``; one core): an index out of
    range raises an error naming the kernel, the array, the index and the line, and the
    launch changes nothing (it runs on copies of the ``mut`` arrays)."""

    def run(self, args: tuple, grid: tuple[int, ...], parallel: bool) -> None:
        kir = self.spec.kir
        arrays = [p for p in kir.params if p.kind == "array"]
        work = [a.copy() if p.mutable else a for p, a in zip(arrays, args)]
        try:
            self.run_variant(tuple(work) + args[len(arrays) :], grid, False)
        except AssertionError as exc:  # raised by a checked assert: (site, *ids)
            site, *ids = exc.args
            message, loc = self.assert_sites[site]
            raise printing.assertion_failed(kir, message, loc, ids, self.grid_ndim) from None
        except IndexError as exc:
            if len(exc.args) != 3:
                raise
            site, index, extent = exc.args
            array, axis, rank, loc = self.check_sites[site]
            where = f" along axis {axis}" if rank > 1 else ""
            kind = "tile" if isinstance(kir.var_types.get(array), TileType) else "array"
            raise OutOfBoundsError(
                kir.name,
                f"index {index} is out of bounds for {kind} '{ir.user_name(array)}'{where} "
                f"of extent {extent} (TESSERA_BOUNDSCHECK)",
                (("", loc),),
            ) from None
        for p, original, copy in zip(arrays, args, work):
            if p.mutable:
                original[...] = copy


def cpu_threads() -> int:
    """The threads a parallel launch spreads over: the threading layer's current count
    (``numba.set_num_threads`` changes it), whether Numba or ``native`` started the layer."""
    count = native.threads()
    if count is None:
        import numba

        count = numba.get_num_threads()
    return count


def argument_types(args: tuple) -> tuple[str, ...]:
    """The arguments' types as exactly as ``numba.typeof`` distinguishes them (dtype, rank,
    layout, writability and alignment of arrays; the type of scalars), without Numba: the
    key of a disk-cache entry, which must be computable in a process that has not imported
    it. Finer than Numba's types would only cost extra entries; never coarser."""
    out = []
    for a in args:
        if isinstance(a, np.ndarray):
            flags = a.flags
            layout = "C" if flags.c_contiguous else "F" if flags.f_contiguous else "A"
            access = "w" if flags.writeable else "r"
            aligned = "aligned" if flags.aligned else "unaligned"
            out.append(f"array({a.dtype.str}, {a.ndim}, {layout}, {access}, {aligned})")
        elif isinstance(a, np.generic):
            out.append(f"scalar({a.dtype.str})")
        elif isinstance(a, bool):
            out.append("bool")
        elif isinstance(a, int):  # Numba types an int by its value's range
            out.append("int64" if -(2**63) <= a < 2**63 else "uint64")
        else:
            out.append(type(a).__name__)
    return tuple(out)


# The sources the compiled code depends on besides the generated text: this driver, the
# runtime namespace and the Tessera modules whose functions it lends to the generated code
# (tests/test_disk_cache.py checks that this list covers cpu_runtime.namespace()).
RUNTIME_SOURCES = ("program.py", "runtime.py", "atomics.py", "native.py", "microkernel.py")
RUNTIME_SOURCES += ("vector_width.py", "block_copies.py", "parallel_driver.py")
RUNTIME_SOURCES += ("../semantics.py", "../integers.py", "../own_math.py")


@functools.cache
def _runtime_digest() -> str:
    """A hash of :data:`RUNTIME_SOURCES`, read as files (importing them would import Numba)."""
    digest = hashlib.sha256()
    for name in RUNTIME_SOURCES:
        digest.update(name.encode())
        digest.update((Path(__file__).parent / name).read_bytes())
    return digest.hexdigest()
