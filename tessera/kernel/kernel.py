"""``@kernel``, the :class:`Kernel` object and ``k[grid](...)`` launches.

The decorator parses and checks the kernel at once (LANGUAGE.md §8: errors that do not
depend on the arguments surface when the decorator runs). A launch binds and checks the
arguments, looks the specialisation up in the in-memory cache, compiles on a miss, and
runs on the CPU target.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable

from ..config import get as setting
from ..config import launch_settings
from ..errors import KernelError, LaunchError, OutOfBoundsError, TesseraError
from ..stats import _counters
from . import launch
from .backend.cpu import CpuProgram
from .backend.cpu_codegen import CpuCodegen
from .backend.cuda import CUDA_STAGES, CudaProgram, async_copies_for, cuda_signature
from .cache import SpecialisationCache, explain_recompile
from .pipeline import KernelOptions, front, specialise
from .signature import parse_params
from .source import source_info_of
from .stages import STAGES, dump, dump_metadata, stage_text
from .streams import current_stream

TARGETS = ("auto", "cpu", "debug", "cuda")


class Kernel:
    """A compiled-on-demand kernel. Launch it with ``k[grid](*args)``."""

    def __init__(
        self,
        fn: Callable,
        tile: tuple[int, ...] | int | None = None,
        shared: int | None = None,
        target: str | None = None,
        boundscheck: bool | None = None,
        constants: dict[str, object] | None = None,
    ):
        self.fn = fn
        self.constants = dict(constants or {})
        self.boundscheck = boundscheck
        self.name = fn.__name__
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn
        if target is not None and target not in TARGETS:
            raise TesseraError(
                f"kernel '{self.name}': unknown target {target!r}; choose one of {TARGETS}"
            )
        self.target = target
        tile = (tile,) if isinstance(tile, int) else tile
        info = source_info_of(fn, "kernel")
        if self.constants:  # names the body reads as compile-time constants (autotuning)
            info = dataclasses.replace(info, globals={**info.globals, **self.constants})
        if tile is not None:
            tile = tuple(tile)
            if not 1 <= len(tile) <= 3 or not all(isinstance(t, int) and t > 0 for t in tile):
                raise KernelError(self.name, f"tile={tile!r} must be 1 to 3 positive ints", None)
        if shared is not None and (not isinstance(shared, int) or shared < 0):
            raise KernelError(self.name, f"shared={shared!r} must be a number of bytes", None)
        self.params = parse_params(
            self.name, info.fn_node, fn.__globals__, info.filename, info.line_offset
        )
        self.options = KernelOptions(tile, shared)
        self.ir = front(self.name, info, self.params, self.options)
        self.grouped = tile is not None
        self.lanes = math.prod(tile) if tile else 1
        self._cache = SpecialisationCache()
        self._programs = self._cache.programs  # read directly on the launch path
        self._debug_programs: dict[tuple, object] = {}
        self._checked_programs: dict[tuple, CpuProgram] = {}
        self._cuda_programs: dict[tuple, CudaProgram] = {}
        self._binder = launch.Binder(self.name, self.params, self.ir.symbols, self.grouped)

    def __repr__(self) -> str:
        sig = ", ".join(f"{p.name}: {p.describe()}" for p in self.params)
        kind = f"tile={self.options.tile}" if self.grouped else "flat"
        return f"<tessera.kernel {self.name}({sig}) {kind}>"

    def __getitem__(self, grid: object) -> Callable[..., None]:
        return functools.partial(self.launch, launch.normalise_grid(self.name, grid))

    def __call__(self, *args: object) -> None:
        raise TesseraError(
            f"kernel '{self.name}' must be launched with a grid: {self.name}[grid](...)"
        )

    def launch(self, grid: tuple[int, ...], *args: object) -> None:
        """Run the kernel over ``grid`` (what ``k[grid](*args)`` calls).

        This is the hot path of every launch, so it is written for speed: one lean pass
        over the arguments, one dictionary lookup for the compiled code, one call.
        """
        target, boundscheck, threshold = launch_settings()
        target = self.target or target
        if target == "cuda":
            return self._cuda_launch(grid, args)
        bound = self._binder.fast(args, grid)
        if bound is None:  # something unusual: the full checks find it, or a GPU array
            unwrapped = launch.unwrap_dlpack(self.name, self.params, args)
            if any(u is not a for u, a in zip(unwrapped, args)):
                return self.launch(grid, *unwrapped)
            if target == "auto" and any(launch.is_device_array(a) for a in args):
                return self._cuda_launch(grid, args)
            if target not in TARGETS:
                raise LaunchError(self.name, f"unknown target {target!r} (TESSERA_TARGET)")
            bound = self._binder.bind(args, grid)
        key, call_args, constexprs = bound
        if target == "debug":
            program = self._debug_program(key, len(grid), constexprs)
        elif self.boundscheck or (self.boundscheck is None and boundscheck):
            self._checked_launch(key, grid, constexprs, call_args)
            return
        else:
            program = self._programs.get(key)
            if program is None:
                program = self._compile(key, len(grid), constexprs)
        _counters["launches"] += 1
        lanes = self.lanes
        for extent in grid:
            lanes *= extent
        if lanes:
            program.run(call_args, grid, lanes >= threshold)

    def _cuda_launch(self, grid: tuple[int, ...], args: tuple) -> None:
        """A launch on the CUDA target: device arrays (or NumPy arrays, copied over)."""
        _, call_args, constexprs = self._bind_cuda(grid, args)
        program = self._cuda_program(grid, constexprs, args)
        _counters["launches"] += 1
        if math.prod(grid):
            program.run(call_args, grid, True, current_stream())

    def _bind_cuda(self, grid: tuple[int, ...], args: tuple) -> launch.Bound:
        args = launch.unwrap_dlpack(self.name, self.params, args)
        bound = launch.bind(
            self.name, self.params, self.ir.symbols, args, grid, self.grouped, target="cuda"
        )
        arrays = [
            (p.name, launch.is_device_array(a))
            for p, a in zip(self.params, args)
            if p.kind == "array"
        ]
        on_device = {name for name, device in arrays if device}
        if on_device and len(on_device) != len(arrays):
            on_host = [name for name, device in arrays if not device]
            raise LaunchError(
                self.name,
                f"mixes GPU arrays ({', '.join(sorted(on_device))}) with host arrays "
                f"({', '.join(on_host)}); move them all to the GPU or all to the host",
            )
        return bound

    def _cuda_program(
        self,
        grid: tuple[int, ...],
        constexprs: dict,
        args: tuple | None = None,
        arch: str | None = None,
    ) -> CudaProgram:
        """The program for launches on this machine's GPU, or for architecture ``arch``
        (hardware async copies from sm_80 on; plain copies before)."""
        copies = async_copies_for(arch)
        key = (len(grid), tuple(sorted(constexprs.items())), copies)
        program = self._cuda_programs.get(key)
        if program is None:
            program = CudaProgram(specialise(self.ir, constexprs), len(grid), copies)
            self._cuda_programs[key] = program
            if args is not None and not program.simulated:
                signature = cuda_signature(
                    self._bind_cuda(grid, args).call_args, len(grid), len(program.align_params)
                )
                dump_metadata(
                    self.name,
                    len(self._cuda_programs),
                    lambda: program.metadata(signature, program.device_arch(), grid),
                )
        return program

    def _compile(self, key: tuple, grid_ndim: int, constexprs: dict) -> CpuProgram:
        if self._programs and setting("explain_recompile") == "1":
            explain_recompile(self.name, self.params, key, list(self._programs))
        spec = specialise(self.ir, constexprs)
        program = CpuProgram(spec, grid_ndim, key)  # with its key: it can use the disk cache
        self._cache.put(key, program)
        dump(self.name, len(self._cache), program)
        return program

    def _debug_program(self, key: tuple, grid_ndim: int, constexprs: dict):
        """The debug target's program for ``key`` (interpreted: built, never compiled)."""
        program = self._debug_programs.get(key)
        if program is None:
            from .backend.debug import DebugProgram  # the debug target loads on demand

            program = DebugProgram(specialise(self.ir, constexprs), grid_ndim)
            self._debug_programs[key] = program
            _counters["compiles"] += 1
        return program

    def _checked_launch(self, key: tuple, grid: tuple, constexprs: dict, args: tuple) -> None:
        """A bounds-checked CPU launch (one core): an index out of range raises an error
        naming the kernel, the array, the index and the line."""
        program = self._checked_programs.get(key)
        if program is None:
            program = CpuProgram(specialise(self.ir, constexprs, boundscheck=True), len(grid))
            self._checked_programs[key] = program
        _counters["launches"] += 1
        if not math.prod(grid) * self.lanes:
            return
        # run on copies of the mut arrays, so a launch that fails a check changes nothing
        arrays = [p for p in self.params if p.kind == "array"]
        work = [a.copy() if p.mutable else a for p, a in zip(arrays, args)]
        try:
            program.run(tuple(work) + args[len(arrays) :], grid, False)
            for p, original, copy in zip(arrays, args, work):
                if p.mutable:
                    original[...] = copy
        except IndexError as exc:
            if len(exc.args) != 3:
                raise
            site, index, extent = exc.args
            codegen = CpuCodegen(program.spec.kir, program.spec.schedule, len(grid))
            codegen.generate()
            array, axis, rank, loc = codegen.check_sites[site]
            where = f" along axis {axis}" if rank > 1 else ""
            raise OutOfBoundsError(
                self.name,
                f"index {index} is out of bounds for array '{array}'{where} of extent "
                f"{extent} (TESSERA_BOUNDSCHECK)",
                (("", loc),),
            ) from None

    def inspect(self, stage: str, *args: object, grid: object = 1, arch: str = "sm_90"):
        """The text of a compiler stage for these arguments and grid: "ir", "regions",
        "cpu" (the generated Python), "llvm", "asm", "cuda" (the generated numba-cuda
        source), "ptx" or "cubin" (bytes) for CUDA architecture ``arch`` — the CUDA
        stages need no GPU (docs/debugging.md)."""
        if stage not in STAGES + CUDA_STAGES:
            choices = ", ".join(STAGES + CUDA_STAGES)
            raise TesseraError(f"unknown stage {stage!r}; choose one of {choices}")
        grid_t = launch.normalise_grid(self.name, grid)
        if stage in CUDA_STAGES:
            _, call_args, constexprs = self._bind_cuda(grid_t, args)
            program = self._cuda_program(grid_t, constexprs, arch=arch)
            if stage == "cuda":
                return program.source
            signature = cuda_signature(call_args, len(grid_t), len(program.align_params))
            if stage == "ptx":
                return program.ptx(signature, arch)
            return program.cubin(signature, arch)[0]
        key, call_args, constexprs = self._binder.bind(args, grid_t)
        if stage in ("llvm", "asm"):  # compiled afresh: code loaded from disk has no IR
            program = CpuProgram(specialise(self.ir, constexprs), len(grid_t))
            return program.inspect(stage, call_args, grid_t)
        program = self._cache.get(key) or self._compile(key, len(grid_t), constexprs)
        return stage_text(program, stage)

    def metadata(self, *args: object, grid: object = 1, arch: str = "sm_90") -> dict:
        """Kernel metadata for CUDA architecture ``arch`` (no GPU needed): name, tile,
        grid, shared_bytes, registers_per_thread, spill_bytes and the launch spec."""
        grid_t = launch.normalise_grid(self.name, grid)
        _, call_args, constexprs = self._bind_cuda(grid_t, args)
        program = self._cuda_program(grid_t, constexprs, arch=arch)
        signature = cuda_signature(call_args, len(grid_t), len(program.align_params))
        return program.metadata(signature, arch, grid_t)


def kernel(
    fn: Callable | None = None,
    *,
    tile: tuple[int, ...] | int | None = None,
    shared: int | None = None,
    target: str | None = None,
    boundscheck: bool | None = None,
):
    """Declare a kernel: ``@kernel`` (flat) or ``@kernel(tile=(128,), shared=8 * KiB)``.

    See docs/language.md for the language. ``target`` forces a target ("cpu", "debug",
    "auto"); ``boundscheck=True`` checks every index on the CPU target (default: the
    TESSERA_BOUNDSCHECK setting).
    """
    if fn is not None:
        return Kernel(fn)
    return lambda f: Kernel(f, tile=tile, shared=shared, target=target, boundscheck=boundscheck)
