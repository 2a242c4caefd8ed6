"""One CPU compile as a job for a compile worker (``kernel/compile_pool.py``).

A job holds what the variant's Numba compile needs and nothing of the kernel's front end:
the generated Python source (made in the launching process from the kernel's source as
captured at decoration, so a worker never reads the user's file), the helpers its module
holds, the argument types, and the disk-cache entry to write. The worker compiles it
exactly as the launching process would (``CpuProgram._compile_and_store``: the same
settings, Numba options and vector width) and writes the entry; the launching process then
loads it as a warm start does, through every check of the disk cache (its MAC under this
user's key, its header naming this kernel, key and environment).

The arguments travel as descriptions (dtype, rank, layout, writability, alignment) from
which the worker makes small arrays that Numba types exactly as the real ones: the job is
made only where the rebuilt arguments give the same :func:`argument_types` (the disk-cache
key) as the real ones, and the worker checks again.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field

import numpy as np

from ....config import SETTINGS, config
from ....config import get as setting
from ... import disk_cache
from .program import CpuProgram, argument_types


@dataclass(frozen=True)
class CompileJob:
    """Compile one variant of one CPU program and write its disk-cache entry."""

    kernel: str
    variant: str  # "parallel" or "serial"
    source: str  # the generated Python source
    grouped: bool
    arithmetic_bound: bool
    stack_arrays: dict
    block_copies: dict
    arguments: tuple  # descriptions (describe()) of the build arguments
    argument_types: tuple[str, ...]  # the real arguments' argument_types()
    parts: tuple  # the disk-cache entry's key parts
    meta: dict
    path: str  # the entry's file, as the launching process names it
    settings: dict  # the launching process's settings (its cache directory among them)
    # the same compile in the launching process (its program's _build): not sent to workers
    here: object = field(default=None, compare=False, repr=False)

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "here"}

    @classmethod
    def of(cls, program: CpuProgram, parallel: bool, args: tuple, entry) -> CompileJob | None:
        """The job of ``program``'s variant for ``args``, or None: an argument that cannot
        be described so that a worker types it exactly as this process would."""
        arguments = describe(args)
        wanted = argument_types(args)
        if arguments is None or argument_types(rebuild(arguments)) != wanted:
            return None
        return cls(
            kernel=program.name,
            variant="parallel" if parallel else "serial",
            source=program.source,
            grouped=program.grouped,
            arithmetic_bound=program.arithmetic_bound,
            stack_arrays=dict(program.stack_arrays),
            block_copies=dict(program.block_copies),
            arguments=arguments,
            argument_types=wanted,
            parts=entry.parts,
            meta=dict(entry.meta),
            path=str(entry.path),
            settings={
                **{name: setting(name) for name in SETTINGS},
                "cache_dir": str(disk_cache.directory()),
            },
            here=functools.partial(program._build, parallel, args),
        )

    @property
    def title(self) -> str:
        return f"kernel '{self.kernel}' ({self.meta.get('defined', '?')}, {self.variant} variant)"

    def compile_here(self) -> str:
        """Compile in the launching process instead, keeping the function (and writing the
        entry), as the launch would."""
        start = time.perf_counter()
        self.here()
        return f"compiled in this process in {time.perf_counter() - start:.2f} s"

    def run(self) -> str:
        """Compile and write the entry (in a worker); what was done, in words. Raises when
        the entry cannot be written here as the launching process names it."""
        with config(**self.settings):
            args = rebuild(self.arguments)
            if argument_types(args) != self.argument_types:
                raise RuntimeError(f"the arguments rebuilt here type as {argument_types(args)}")
            entry = disk_cache.Entry("cpu", self.kernel, self.parts, self.meta)
            if str(entry.path) != self.path:
                raise RuntimeError(
                    "this process names the entry differently (another environment: versions, "
                    "NUMBA_* settings or CPU)"
                )
            start = time.perf_counter()
            with disk_cache.compiling(entry) as waited:
                if waited and entry.path.exists():
                    return "written by another process meanwhile"
                program = CpuProgram.compiler(self)
                program._compile_and_store(entry, self.variant == "parallel", args, self.variant)
            if not entry.path.exists():
                raise RuntimeError("compiled, but no disk-cache entry was written")
            return f"compiled in {time.perf_counter() - start:.2f} s"


def jobs_for(program: CpuProgram, args: tuple, grid: tuple[int, ...], parallel: bool) -> list:
    """What a launch of ``program`` with these arguments would compile, as jobs: none when
    the variant is at hand, when its entry is on disk (the launch loads it) or when there
    is no entry to write (the disk cache is off)."""
    parallel = program.variant(grid, parallel)
    if program._entries.get(parallel) is not None:
        return []
    build_args = args + grid + ((1,) if program.grouped else ())  # as run_variant builds them
    entry = program._disk_entry(parallel, build_args)
    if entry is None or entry.path.exists():
        return []
    job = CompileJob.of(program, parallel, build_args, entry)
    return [] if job is None else [job]


def describe(args: tuple) -> tuple | None:
    """Each argument as what Numba's typing sees of it, or None for one this cannot say."""
    out = []
    for a in args:
        if isinstance(a, np.ndarray):
            f = a.flags
            layout = "C" if f.c_contiguous else "F" if f.f_contiguous else "A"
            out.append(("array", a.dtype.str, a.ndim, layout, f.writeable, f.aligned))
        elif isinstance(a, np.generic):
            out.append(("scalar", a.dtype.str))
        elif type(a) in (bool, float, complex):
            out.append((type(a).__name__,))
        elif type(a) is int:
            out.append(("int", 0 if -(2**63) <= a < 2**63 else 2**63))
        else:
            return None
    return tuple(out)


def rebuild(arguments: tuple) -> tuple:
    """Small arguments that Numba types as the ones :func:`describe` described."""
    out = []
    for kind, *rest in arguments:
        if kind == "array":
            out.append(_array(*rest))
        elif kind == "scalar":
            out.append(np.dtype(rest[0]).type(0))
        elif kind == "int":
            out.append(rest[0])
        else:
            out.append({"bool": False, "float": 0.0, "complex": 0j}[kind])
    return tuple(out)


def _array(dtype: str, ndim: int, layout: str, writeable: bool, aligned: bool) -> np.ndarray:
    dt = np.dtype(dtype)
    if layout == "A":  # every other element of each axis: neither C nor F contiguous
        a = np.zeros((4,) * ndim, dt)[(slice(None, None, 2),) * ndim]
    else:
        a = np.zeros((2,) * ndim, dt, order=layout)
    if not aligned:  # the same shape and strides, one byte past an aligned address
        span = a.base.nbytes if a.base is not None else a.nbytes
        a = np.ndarray(a.shape, dt, buffer=bytearray(span + 1), offset=1, strides=a.strides)
    a.flags.writeable = writeable
    return a
