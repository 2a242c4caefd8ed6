"""What a target is: the one interface ``kernel.py`` launches through.

A target turns a specialised kernel (:class:`~tessera.kernel.pipeline.Specialised`) into a
*program* that runs a launch. It says which launches it accepts under ``target="auto"``,
how array elements travel to its compiled code, which passes of its own run after the
shared ones, how it lowers each primitive, which extra inspection stages it has, and how
to wait for its work. Everything target-specific lives behind this interface, in
``targets/<name>/``; ``kernel.py`` never names a target.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from ... import dtypes as D
from ...errors import KernelError, LaunchError, TesseraError
from ...tile.primitives import Primitive
from ..passes import Pass


class Program(Protocol):
    """One compiled specialisation on one target."""

    def run(self, args: tuple, grid: tuple[int, ...], parallel: bool) -> None: ...


I64_MAX = 2**63 - 1


@dataclass(frozen=True)
class BuildOptions:
    """What besides the specialisation key shapes a program: bounds checks (targets that
    have them) and the GPU architecture to generate code for (None: this machine's)."""

    checked: bool = False
    arch: str | None = None


@dataclass(eq=False)
class Target:
    """A compilation target. Subclasses fill in the hooks; instances are registered in
    ``targets/__init__.py``."""

    name: str
    doc: str
    passes: tuple[Pass, ...] = ()  # run after the shared passes, for this target only
    lowerings: dict[Primitive, Callable] = field(default_factory=dict)
    stages: tuple[str, ...] = ()  # inspection stages beyond the pass dumps
    dump_stages: tuple[str, ...] = ()  # the stages TESSERA_DUMP can write (cheap ones)
    device_arrays: bool = False  # accepts GPU arrays as arguments
    replays: bool = True  # tessera.jit may replay recorded launches (docs/capture.md)

    # ------------------------------------------------------------------ hooks
    def accepts(self, args: tuple) -> bool:
        """Whether ``target="auto"`` picks this target for these arguments."""
        return False

    def storage(self, dtype: D.DType) -> np.dtype | None:
        """The element type arrays of ``dtype`` are viewed as when passed to compiled
        code (None: as they are). Decided here, once, for binding and code generation."""
        return None

    def check_arrays(self, kernel: str, params: list, args: tuple) -> None:
        """Refuse argument combinations the target cannot run (before anything runs)."""

    def check_grid(self, kernel: str, grid: tuple, lanes_per_group: int, grouped: bool) -> None:
        """Refuse a grid the target cannot index (before anything runs). The CPU and debug
        targets number lanes with i64: the grid's lanes in all must stay below 2**63."""
        total = lanes_per_group
        for extent in grid:
            total *= extent
        if total > I64_MAX:
            raise LaunchError(
                kernel,
                f"grid {grid} has {total} lanes in all; the {self.name} target numbers lanes "
                f"with i64, so a launch may have at most {I64_MAX}",
            )

    def build(self, spec, grid_ndim: int, key: tuple, options: BuildOptions, call_args: tuple):
        """A program for ``spec`` (``key``: the specialisation key, for disk caches)."""
        raise TesseraError(f"target {self.name} cannot build programs")

    def compile_jobs(
        self, program, call_args: tuple, grid: tuple, parallel: bool, arch: str | None = None
    ) -> list:
        """What launching ``program`` with these arguments would compile, as jobs that a
        compile worker can run (``kernel/compile_pool.py``: picklable, each with ``run()``
        and ``title``, writing its disk-cache entry); none where this target compiles in
        the launching process only, or nothing is left to compile. ``arch``: the GPU
        architecture to compile for (GPU targets; None: this machine's GPU's)."""
        return []

    def stage(self, program, name: str, call_args: tuple, grid: tuple, options: BuildOptions):
        """The text (or bytes, or dict) of inspection stage ``name`` of ``program``."""
        raise TesseraError(f"target {self.name} has no stage {name!r}")

    def dumpable(self, program, stage: str) -> bool:
        """Whether ``TESSERA_DUMP`` can write ``stage`` of ``program`` here."""
        return True

    def timed_with_events(self) -> bool:
        """Whether launches are asynchronous, so timing needs events (the autotuner)."""
        return False

    def synchronize(self) -> None:
        """Wait until this target's queued work is done (synchronous targets: nothing)."""

    def empty(self, shape: tuple[int, ...], dtype: np.dtype):
        """A new array in the memory this target's device arrays live in (the operator
        layer's buffers when its arguments are device arrays); host targets: NumPy's."""
        return np.empty(shape, dtype)

    def copy(self, dst, src) -> None:
        """``dst[...] = src`` for two arrays of that memory of one shape and dtype (host
        targets: NumPy's assignment; a device array copies itself)."""
        if isinstance(dst, np.ndarray) or not hasattr(dst, "copy_to_device"):
            dst[...] = src
        else:
            dst.copy_to_device(src)

    def from_host(self, array: np.ndarray):
        """``array`` copied into that memory (host targets: ``array`` itself)."""
        return array

    def device_graph(self, name: str, launches: list):
        """The recorded launches of a captured step (``tessera.jit``) as one graph of the
        device's own, replayed with one call (CUDA graphs), or None: replays call the
        recorded programs one by one."""
        return None

    def stream_scope(self, name: str):
        """A context in which this thread's launches go to the stream called ``name``
        (``tessera.graph.stream``); a synchronous target's launches are ordered anyway."""
        return contextlib.nullcontext()

    def availability(self) -> list[tuple[str, str]]:
        """(what, state) lines for ``tessera info``."""
        return [(self.name, "usable")]

    def device_name(self) -> str:
        """What runs the launches, for autotune cache keys."""
        import platform

        return platform.processor() or platform.machine()

    def semantic_tests(self, simulator: bool) -> bool:
        """Whether the target-parametrised tests run on this target in a test process
        with (or without) numba-cuda's simulator switched on."""
        return not simulator

    # ------------------------------------------------------------------ lowerings
    def lowering(self, kernel: str, call) -> Callable:
        """This target's lowering of a primitive call (a compile error if it has none)."""
        fn = self.lowerings.get(call.prim)
        if fn is None:
            raise KernelError(
                kernel, f"{call.prim.name} is not available on the {self.name} target", call.loc
            )
        return fn


def lowerings_table() -> tuple[dict, Callable]:
    """A fresh lowering table and the decorator that fills it::

    LOWERINGS, lowering = lowerings_table()

    @lowering(P.linear_id)
    def _(codegen, call, site): ...
    """
    table: dict[Primitive, Callable] = {}

    def register(*prims: Primitive) -> Callable:
        def add(fn: Callable) -> Callable:
            for prim in prims:
                table[prim] = fn
            return fn

        return add

    return table, register
