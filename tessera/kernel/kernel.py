"""``@kernel``, the :class:`Kernel` object and ``k[grid](...)`` launches.

The decorator parses and checks the kernel at once (errors that do not depend on the
arguments surface when the decorator runs, docs/language.md). A launch picks the target
(``targets/``: the setting, or ``auto`` from the arguments), binds and checks the
arguments, looks the program up in ONE cache keyed by (target, options, specialisation
key), builds it on a miss, and runs it. Nothing here depends on which target runs.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
import math
import time
from collections.abc import Callable

import numpy as np

from ..arrays import host_arrays
from ..config import get as setting
from ..config import launch_settings
from ..errors import InternalError, KernelError, LaunchError, TesseraError, internal_errors
from ..observe import failures, stats
from ..observe.observers import OBSERVERS, run_launch
from ..observe.observers import stage as observed_stage
from ..observe.tracebacks import entry_point, user_frames
from . import launch, stages
from .cache import SpecialisationCache, explain_recompile
from .ir import CopyAsync, PrimCall, stmt_exprs, walk_stmts
from .pipeline import PASS_NAMES, KernelOptions, front, pass_text, specialise
from .signature import parse_params
from .source import SourceInfo, SourceText, enclosing_names, source_info_of, source_text_of
from .targets import DEVICE_CHOICE, HOST_CHOICE, TARGETS, resolve, stage_owner
from .targets.target import BuildOptions, Target

_UNCHECKED, _CHECKED = BuildOptions(False), BuildOptions(True)
_CHECK_GRID_FROM = 2**31  # grids with fewer lanes in all are within every target's limits
MAX_GROUP_LANES = 2**16  # lanes of a group (docs/language.md); CUDA allows 1024 of them
log = logging.getLogger("tessera")


class Launchable:
    """``k[grid](*args)``: what every kernel object shares (a grid first, then a launch)."""

    name: str

    def __getitem__(self, grid: object) -> Callable[..., None]:
        try:
            return functools.partial(self.launch, launch.normalise_grid(self.name, grid))
        except TesseraError as error:
            user_frames(error)
            raise

    def __call__(self, *args: object) -> None:
        raise TesseraError(
            f"kernel '{self.name}' must be launched with a grid: {self.name}[grid](...)"
        )


class Kernel(Launchable):
    """A compiled-on-demand kernel. Launch it with ``k[grid](*args)``."""

    @entry_point
    def __init__(
        self,
        fn: Callable,
        tile: tuple[int, ...] | int | None = None,
        shared: int | None = None,
        target: str | None = None,
        boundscheck: bool | None = None,
        constants: dict[str, object] | None = None,
        flops: Callable[..., float] | None = None,
        num_warps: int | None = None,
        enclosing: dict | None = None,
        source: SourceText | None = None,
    ):
        """``enclosing``: the names of the factory that defines ``fn``, when they were read
        earlier (source.enclosing_names); by default they are read now. ``source``: its
        text as read when its decorator ran (source.source_text_of); by default read now."""
        if not inspect.isfunction(fn):
            raise TesseraError(f"@kernel decorates a function, not {type(fn).__name__}")
        self.fn = fn
        self.constants = dict(constants or {})
        self.boundscheck = boundscheck
        self.name = fn.__name__
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn
        self.source = source_text_of(fn, "kernel") if source is None else source
        names = enclosing_names(fn) if enclosing is None else enclosing
        info = source_info_of(fn, "kernel", names, self.source)
        names = info.globals  # a factory's names too, for annotations
        self.target = _checked_target(self.name, target, info)
        tile = _checked_tile(self.name, tile, info)
        if boundscheck not in (None, True, False):
            raise KernelError(
                self.name, f"boundscheck={boundscheck!r} must be True or False", info.decorator_loc
            )
        if shared is not None and (type(shared) is not int or shared < 0):
            raise KernelError(
                self.name, f"shared={shared!r} must be a number of bytes", info.decorator_loc
            )
        _check_num_warps(self.name, num_warps, tile, info)
        if self.constants:  # names the body reads as compile-time constants (autotuning)
            info = dataclasses.replace(info, globals={**info.globals, **self.constants})
        self.options = KernelOptions(tile, shared, num_warps)
        with internal_errors(self.name, info.decorator_loc):  # (or the statement's)
            self.params = parse_params(
                self.name, info.fn_node, names, info.filename, info.line_offset
            )
            self.ir = front(self.name, info, self.params, self.options)
        self.flops = _checked_flops(self.name, flops, self.params, self.ir.symbols, info)
        self.primitives = _primitives(self.ir.body)  # by name: what a profile's phase reads
        self.grouped = tile is not None
        self.lanes = math.prod(tile) if tile else 1
        self._dynamic_shared = self.ir.dynamic_alloc is not None
        self._on_device = False  # whether the last launch took the GPU arrays' lean check
        self._cache = SpecialisationCache()
        self._programs = self._cache.programs  # read directly on the launch path
        self._used = self._cache.used
        self._binders = {
            t: launch.Binder(self.name, self.params, self.ir.symbols, self.grouped, t)
            for t in TARGETS.values()
        }
        # per setting that takes GPU arrays, the binder of the target that runs them
        self._device_binders = {n: self._binders[t] for n, t in DEVICE_CHOICE.items()}

    def __repr__(self) -> str:
        sig = ", ".join(f"{p.name}: {p.describe()}" for p in self.params)
        kind = f"tile={self.options.tile}" if self.grouped else "flat"
        return f"<tessera.kernel {self.name}({sig}) {kind}>"

    def launch(self, grid: tuple[int, ...], *args: object) -> None:
        """Run the kernel over ``grid`` (what ``k[grid](*args)`` calls).

        This is the hot path of every launch, so it is written for speed: one lean pass
        over the arguments, one dictionary lookup for the compiled code, one call. An
        error leaves with the caller's frames only (tessera/tracebacks.py).
        """
        try:
            name, boundscheck, threshold = launch_settings()
            name = self.target or name
            checked = boundscheck if self.boundscheck is None else self.boundscheck
            bound = None
            if self._on_device:  # the last launch had GPU arrays: try their lean check first
                binder = self._device_binders.get(name)
                if binder is not None:
                    target = binder.target
                    bound = binder.fast_device(args, grid)
            if bound is None:
                target = HOST_CHOICE.get(name)  # the target when every array is NumPy's
                bound = self._binders[target].fast(args, grid) if target is not None else None
                if bound is None and name in DEVICE_CHOICE:  # GPU arrays: their lean check
                    target = DEVICE_CHOICE[name]
                    bound = self._binders[target].fast_device(args, grid)
                    self._on_device = bound is not None
            if bound is None:  # something unusual: the full checks find it
                if launch.TRACED_LAUNCHES and launch.traced(self, grid, args):
                    return  # recorded into the graph being traced
                args = host_arrays(self.name, self.params, args)
                target = resolve(name, args, self.name)
                bound = self.bind(target, args, grid)
            lanes = self.lanes
            for extent in grid:
                lanes *= extent
            if lanes >= _CHECK_GRID_FROM:  # rare: ask the target whether it can run it at all
                target.check_grid(self.name, grid, self.lanes, self.grouped)
            key = (target, checked, bound.key)
            program = self._programs.get(key)
            built = program is None
            if built:
                options = _CHECKED if checked else _UNCHECKED
                program = self._build(target, key, grid, bound, options)
            else:
                self._used(key)
            if self._dynamic_shared:  # tshared.dynamic: sized by this launch's arguments
                spec = program.spec
                launch.check_dynamic_shared(spec.kir, spec.shared_bytes, bound.call_args)
            stats.count_launch()
            if lanes:
                try:
                    if OBSERVERS:  # a profile, trace, metrics file or NVTX: the one check
                        run_launch(
                            self, target, program, bound.call_args, grid, lanes >= threshold, built
                        )
                    else:
                        program.run(bound.call_args, grid, lanes >= threshold)
                except TesseraError:
                    raise
                except Exception as exc:  # internal_errors(), inline: the hot path
                    raise InternalError(self.name, exc, self.ir.loc) from exc
        except TesseraError as error:
            user_frames(error)
            failures.report(error, kernel=self, grid=grid, args=args)  # crash capture
            raise

    @entry_point
    def bind(self, target: Target, args: tuple, grid: tuple[int, ...]) -> launch.Bound:
        """Check every argument for a launch on ``target`` (a LaunchError names the first
        problem); the specialisation key and the values the program is called with."""
        target.check_arrays(self.name, self.params, args)
        return self._binders[target].bind(args, grid)

    def compile_jobs(
        self, grid: object, args: tuple, target: str | None = None, arch: str | None = None
    ) -> list:
        """What the launch ``k[grid](*args)`` would compile, as jobs for compile workers
        (``compile_pool.py``; a TesseraError where that launch would raise one). Its
        program is specialised and kept, as the launch would; nothing runs. ``target``
        names the target where the arguments alone do not (host arrays standing in for
        device arrays of the same shapes and dtypes: ``"cuda"``); ``arch``, the GPU
        architecture the cubins are for where there is no GPU to ask (``"sm_90"``; the
        program is the launch's, made for this machine's GPU, or without one for the
        newest architecture)."""
        grid = launch.normalise_grid(self.name, grid)
        name, boundscheck, threshold = launch_settings()
        args = host_arrays(self.name, self.params, args)
        target = resolve(target or self.target or name, args, self.name)
        bound = self.bind(target, args, grid)
        checked = boundscheck if self.boundscheck is None else self.boundscheck
        key = (target, checked, bound.key)
        program = self._programs.get(key)
        if program is None:
            program = self._build(target, key, grid, bound, _CHECKED if checked else _UNCHECKED)
        lanes = self.lanes * math.prod(grid)
        return target.compile_jobs(program, bound.call_args, grid, lanes >= threshold, arch)

    @entry_point
    def target_for(self, args: tuple) -> Target:
        """The target a launch with these arguments runs on now."""
        name = self.target or launch_settings()[0]
        return resolve(name, host_arrays(self.name, self.params, args), self.name)

    def _build(
        self,
        target: Target,
        key: tuple,
        grid: tuple[int, ...],
        bound: launch.Bound,
        options: BuildOptions,
        dump: frozenset[str] = frozenset(),
        inspecting: bool = False,
    ):
        """Specialise and build on ``target``; cache it under ``key`` (None: don't)."""
        same_target = [k[2] for k in self._programs if k[0] is target]
        if key is not None and same_target and setting("explain_recompile") == "1":
            level = logging.DEBUG if inspecting else logging.WARNING
            explain_recompile(self.name, self.params, key[2], same_target, level)
        requested = stages.requested_dumps(self.dumpable()) if key is not None else []
        start = time.perf_counter()
        with (
            internal_errors(self.name, self.ir.loc),  # (the typer's: the statement's)
            observed_stage(
                "compile", self.name, step="specialise and generate", target=target.name
            ),
        ):
            spec = specialise(
                self.ir,
                bound.constexprs,
                target.passes,
                boundscheck=options.checked,
                dump=dump | {s for s in requested if s in PASS_NAMES},
            )
            program = target.build(spec, len(grid), bound.key, options, bound.call_args)
        log.debug(
            "specialised kernel '%s' for %s in %.3f s (key %s)",
            self.name,
            target.name,
            time.perf_counter() - start,
            bound.key,
        )
        if key is not None:
            self._cache.put(key, program)
            self._dump(target, program, spec, requested, bound, grid, options)
        return program

    def _dump(self, target, program, spec, requested, bound, grid, options) -> None:
        number = len(self._cache)
        for stage in requested:
            if stage == "ir":
                text: object = pass_text(spec, "ir")
            elif stage in spec.dumps:
                text = spec.dumps[stage]
            elif stage in target.dump_stages and target.dumpable(program, stage):
                text = target.stage(program, stage, bound.call_args, grid, options)
            else:
                continue
            stages.write(self.name, number, stage, text)

    @staticmethod
    def dumpable() -> tuple[str, ...]:
        return ("ir",) + PASS_NAMES + tuple(s for t in TARGETS.values() for s in t.dump_stages)

    @entry_point
    def inspect(self, stage: str, *args: object, grid: object = 1, arch: str = "sm_90"):
        """The text of a compiler stage for these arguments and grid: "ir" (the typed IR
        after every pass), the IR after any pass by name ("strip_mine", "regions", ...),
        or a target's stage: "cpu" (the generated Python), "llvm", "asm", "cuda" (the
        generated numba-cuda source), "ptx" or "cubin" (bytes) for CUDA architecture
        ``arch``, "meta" (a dict) — no stage needs a GPU (docs/debugging.md)."""
        target = stage_owner(stage)
        if target is None:
            known = ("ir",) + PASS_NAMES + tuple(s for t in TARGETS.values() for s in t.stages)
            choices = ", ".join(known)
            raise TesseraError(f"unknown stage {stage!r}; choose one of {choices}")
        grid_t = launch.normalise_grid(self.name, grid)
        args = host_arrays(self.name, self.params, args)
        bound = self.bind(target, args, grid_t)
        options = BuildOptions(False, arch)
        if stage == "ir" or stage in PASS_NAMES:
            spec = specialise(self.ir, bound.constexprs, target.passes, dump=frozenset([stage]))
            return spec.dumps.get(stage) or pass_text(spec, stage)
        key = (target, options, bound.key)
        program = self._programs.get(key) or self._build(
            target, key, grid_t, bound, options, inspecting=True
        )
        return target.stage(program, stage, bound.call_args, grid_t, options)

    @entry_point
    def metadata(self, *args: object, grid: object = 1, arch: str = "sm_90") -> dict:
        """Kernel metadata for CUDA architecture ``arch`` (no GPU needed): name, tile,
        grid, shared_bytes, registers_per_thread, spill_bytes, occupancy and the launch
        spec."""
        return self.inspect("meta", *args, grid=grid, arch=arch)


OPTIONS = ("tile", "shared", "target", "boundscheck", "flops", "num_warps")


@entry_point
def _check_num_warps(name: str, num_warps, tile, info) -> None:
    """``num_warps=``: a power of two from 1 to 32, of a grouped kernel."""
    if num_warps is None:
        return
    if type(num_warps) is not int or num_warps not in (1, 2, 4, 8, 16, 32):
        raise KernelError(
            name, f"num_warps={num_warps!r} must be 1, 2, 4, 8, 16 or 32", info.decorator_loc
        )
    if tile is None:
        raise KernelError(
            name,
            "num_warps= is an option of grouped kernels (@kernel(tile=...))",
            info.decorator_loc,
        )


def kernel(*args: object, **options: object):
    """Declare a kernel: ``@kernel`` (flat) or ``@kernel(tile=(128,), shared=8 * KiB)``.

    See docs/language.md for the language. ``target`` forces a target ("cpu", "debug",
    "cuda" or "auto"); ``boundscheck=True`` checks every index on the CPU target (default:
    the TESSERA_BOUNDSCHECK setting). ``flops=lambda M, N, K: 2 * M * N * K`` declares the
    floating-point operations a launch does, for profiles and metrics (GFLOP/s): the
    function's parameters are named after what a launch knows: the kernel's size symbols
    (``M``), scalar parameters (their values), array parameters (their shapes, tuples)
    and ``grid`` (the launch grid, a tuple); docs/observability.md. Options are checked
    when the function arrives, so an unknown one is a KernelError that names the kernel
    and points at the decorator.
    """
    fn = args[0] if args and inspect.isfunction(args[0]) else None
    positional = args[1:] if fn is not None else args
    problem = None
    if positional:
        problem = (
            f"@kernel takes its options by name ({', '.join(f'{o}=...' for o in OPTIONS)}), "
            f"not {positional[0]!r}"
        )
    elif any(name not in OPTIONS for name in options):
        unknown = next(name for name in options if name not in OPTIONS)
        problem = f"@kernel has no option {unknown!r}; its options are {', '.join(OPTIONS)}"
    if fn is not None:
        return _declare(fn, problem, options)
    return entry_point(functools.partial(_declare, problem=problem, options=options))


def _declare(fn: Callable, problem: str | None, options: dict) -> Kernel | ShapedKernel:
    if problem is not None and inspect.isfunction(fn):
        raise KernelError(fn.__name__, problem, source_info_of(fn, "kernel").decorator_loc)
    tile = options.get("tile")
    if isinstance(tile, str) or (isinstance(tile, tuple) and any(isinstance(t, str) for t in tile)):
        return ShapedKernel(fn, **options)
    return Kernel(fn, **options)


class ShapedKernel(Launchable):
    """``@kernel(tile=("BLOCK",))``: a group shape named by constexpr parameters. Each
    value of them compiles a :class:`Kernel` of its own with that shape, as a factory
    (``def make(BLOCK): @kernel(tile=(BLOCK,)) ...``) would; launched like any kernel.
    With defaults for the names, the default shape compiles when the decorator runs, so
    its errors surface there; otherwise at the first launch."""

    @entry_point
    def __init__(self, fn: Callable, tile: tuple | str, **options: object):
        self.fn, self.name, self.options = fn, fn.__name__, options
        self._enclosing = enclosing_names(fn)
        self.source = source_text_of(fn, "kernel")  # every shape compiles this text
        info = source_info_of(fn, "kernel", self._enclosing, self.source)
        self.params = parse_params(
            self.name, info.fn_node, info.globals, info.filename, info.line_offset
        )
        self.tile = (tile,) if isinstance(tile, str) else tuple(tile)
        by_name = {p.name: (k, p) for k, p in enumerate(self.params)}
        for t in self.tile:
            if not isinstance(t, str):
                continue
            k, p = by_name.get(t, (None, None))
            if p is None or p.kind != "constexpr" or p.of_dtype:
                raise KernelError(
                    self.name,
                    f"tile={tile!r} names {t!r}, which is not a constexpr parameter of "
                    f"'{self.name}'; a group shape is ints or names of constexpr parameters",
                    info.decorator_loc,
                )
        self._slots = {t: by_name[t][0] for t in self.tile if isinstance(t, str)}
        self._kernels: dict[tuple[int, ...], Kernel] = {}
        defaults = [self.params[k].default for k in self._slots.values()]
        if all(defaults):  # compile the default shape now: its errors surface here
            values = {t: d[0] for t, d in zip(self._slots, defaults)}
            self._kernel(tuple(values.get(t, t) for t in self.tile))

    def __repr__(self) -> str:
        return f"<tessera.kernel {self.name} tile={self.tile}>"

    def _kernel(self, shape: tuple) -> Kernel:
        if shape not in self._kernels:
            self._kernels[shape] = Kernel(
                self.fn, tile=shape, enclosing=self._enclosing, source=self.source, **self.options
            )
        return self._kernels[shape]

    def kernel_for(self, args: tuple) -> Kernel:
        """The kernel of the group shape these launch arguments give."""
        shape = []
        for t in self.tile:
            if not isinstance(t, str):
                shape.append(t)
                continue
            k = self._slots[t]
            p = self.params[k]
            value = args[k] if k < len(args) else p.default[0] if p.default else None
            if isinstance(value, np.integer):
                value = int(value)
            if type(value) is not int or value <= 0:
                raise LaunchError(
                    self.name,
                    f"constexpr parameter '{t}' gives the group shape (tile={self.tile!r}), "
                    f"so it must be a positive int, got {value!r}",
                )
            shape.append(value)
        return self._kernel(tuple(shape))

    def launch(self, grid: tuple[int, ...], *args: object) -> None:
        try:
            kernel = self.kernel_for(args)
        except TesseraError as error:
            user_frames(error)
            raise
        kernel.launch(grid, *args)

    @entry_point
    def inspect(self, stage: str, *args: object, grid: object = 1, arch: str = "sm_90"):
        """:meth:`Kernel.inspect` of the kernel these arguments' group shape selects."""
        return self.kernel_for(args).inspect(stage, *args, grid=grid, arch=arch)

    @entry_point
    def metadata(self, *args: object, grid: object = 1, arch: str = "sm_90") -> dict:
        return self.kernel_for(args).metadata(*args, grid=grid, arch=arch)


def _checked_target(kernel: str, target: object, info: SourceInfo) -> str | None:
    if target is None or target == "auto" or target in TARGETS:
        return target
    choices = ", ".join(("auto", *TARGETS))
    raise KernelError(
        kernel, f"unknown target {target!r}; choose one of {choices}", info.decorator_loc
    )


def _checked_flops(kernel: str, flops, params, symbols, info: SourceInfo):
    """``flops=``: a function whose parameters are all names a launch can give it."""
    if flops is None:
        return None
    if not callable(flops):
        raise KernelError(kernel, f"flops={flops!r} must be a function", info.decorator_loc)
    known = {p.name for p in params if p.kind != "constexpr"} | set(symbols) | {"grid"}
    try:
        names = list(inspect.signature(flops).parameters)
    except (TypeError, ValueError):
        raise KernelError(kernel, "flops= has no signature to read", info.decorator_loc) from None
    unknown = [n for n in names if n not in known]
    if unknown:
        raise KernelError(
            kernel,
            f"flops= takes {', '.join(map(repr, unknown))}, which a launch does not know; "
            f"it may take any of {', '.join(sorted(known))}",
            info.decorator_loc,
        )
    return flops


def _primitives(body: list) -> frozenset[str]:
    """The names of the primitives a kernel body calls (``cp_async`` for async copies)."""
    names = set()
    for stmt in walk_stmts(body):
        if isinstance(stmt, CopyAsync):
            names.add("cp_async")
        names.update(e.prim.name for e in stmt_exprs(stmt) if isinstance(e, PrimCall))
    return frozenset(names)


def _checked_tile(kernel: str, tile: object, info: SourceInfo) -> tuple[int, ...] | None:
    """``tile=``: 1 to 3 positive ints (an int alone is a 1-D shape), at most
    :data:`MAX_GROUP_LANES` lanes in all."""
    if tile is None:
        return None
    dims = (tile,) if type(tile) is int else tile
    if (
        not isinstance(dims, (tuple, list))
        or not 1 <= len(dims) <= 3
        or not all(type(t) is int and t > 0 for t in dims)
    ):
        raise KernelError(kernel, f"tile={tile!r} must be 1 to 3 positive ints", info.decorator_loc)
    if math.prod(dims) > MAX_GROUP_LANES:
        raise KernelError(
            kernel,
            f"tile={tile!r} has {math.prod(dims)} lanes; a group has at most {MAX_GROUP_LANES}",
            info.decorator_loc,
        )
    return tuple(dims)
