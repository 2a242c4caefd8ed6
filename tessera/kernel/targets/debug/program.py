"""Debug programs: the reference executor, with sanitizers.

Groups run one after another; inside a group every lane is a generator (see
codegen.py) that runs until its next collective. The scheduler then checks that all
lanes stopped at the *same* collective with the same arguments (a divergent collective
is reported with the lanes and lines involved), performs it once for the group, and
resumes the lanes. Barriers close a race-detection epoch and complete asynchronous
copies; tile statements close one too. Memory is checked on every access (runtime.py,
and races.py for the races on ``mut`` arguments).

The kernel runs on copies of the ``mut`` arrays, written back only when it finishes, so
a launch that reports a bug leaves every argument untouched. Slow by design.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from .... import dtypes as D
from ....config import get as setting
from ....errors import DivergenceError
from ... import ir
from ...pipeline import Specialised
from ..target import Target
from .codegen import Compiler, Frame
from .races import Clock, GlobalArray
from .runtime import CheckedArray, SharedArray, Who

_STORAGE = {d.name: d.np_dtype.type for d in D.COMPUTED_IN_F32}


class DebugProgram:
    """One specialisation of a kernel for the debug target."""

    def __init__(self, spec: Specialised, grid_ndim: int, target: Target):
        self.spec = spec
        self.kir = spec.kir
        self.grid_ndim = grid_ndim
        self.compiler = Compiler(self.kir, target)
        self.generator, self.body = self.compiler.block(self.kir.body)

    def run(self, args: tuple, grid: tuple[int, ...], parallel: bool) -> None:
        del parallel  # the debug target always runs one group at a time
        kir = self.kir
        self.compiler.check_nan = setting("debug_nan") == "1"
        arrays = [p for p in kir.params if p.kind == "array"]
        scalars = [p for p in kir.params if p.kind == "scalar"]
        env: dict[str, object] = {}
        written_back = []
        clock = Clock()  # race-detection epochs of the mut arrays (races.py)
        for p, a in zip(arrays, args):
            if p.dtype.name in _STORAGE:
                a = a.view(_STORAGE[p.dtype.name])
            work = a.copy() if p.mutable else a
            if p.mutable:
                written_back.append((a, work))
            if p.mutable:
                env[p.name] = GlobalArray(p.name, work, clock)
            else:
                env[p.name] = CheckedArray(p.name, work, "global")
        for p, v in zip(scalars, args[len(arrays) :]):
            env[p.name] = v
        for s, v in zip(kir.symbols, args[len(arrays) + len(scalars) :]):
            env[s] = np.int64(v)
        if kir.grouped:
            env["grid_groups"] = np.int64(math.prod(grid))
            env["__grid__"] = tuple(np.int64(g) for g in grid)
            self._run_groups(env, grid, clock)
        else:
            self._run_flat(env, grid)
        for original, work in written_back:
            original[...] = work

    def _run_flat(self, env: dict, grid: tuple[int, ...]) -> None:
        for linear, ids in enumerate(itertools.product(*(range(g) for g in grid))):
            frame = Frame(self.kir.name, dict(env), linear, ids, 0, (0,))
            self.body(frame)

    def _run_groups(self, env: dict, grid: tuple[int, ...], clock: Clock) -> None:
        tile = self.kir.tile_shape
        lane_ids = list(itertools.product(*(range(t) for t in tile)))
        for group, group_ids in enumerate(itertools.product(*(range(g) for g in grid))):
            shared = [
                SharedArray(
                    a.target,
                    tuple(int(env[d.name] if a.dynamic else d) for d in a.shape),
                    _STORAGE.get(a.dtype.name, a.dtype.np_dtype),
                )
                for a in self.kir.allocs
            ]
            frames = []
            for lane, ids in enumerate(lane_ids):
                variables = dict(env)
                variables["__shared__"] = shared
                frames.append(Frame(self.kir.name, variables, lane, ids, group, group_ids))
            clock.tick()  # a new group: no lane of it has touched anything yet
            _GroupRun(self, frames, shared, clock).run()
            for s in shared:
                s.check_uninitialised_reads()


class _GroupRun:
    """Drives the lanes of one group from collective to collective."""

    def __init__(self, program: DebugProgram, frames: list[Frame], shared: list, clock: Clock):
        self.program = program
        self.clock = clock  # moved on by tbarrier() and tile statements
        self.frames = frames
        self.shared = shared
        self.kernel = program.kir.name

    def run(self) -> None:
        if not self.program.generator:  # no collective at all: lanes run one by one
            for frame in self.frames:
                self.program.body(frame)
            return
        lanes = [self.program.body(f) for f in self.frames]
        events = [self._advance(g, None) for g in lanes]
        while True:
            if all(ev is None for ev in events):
                return
            self._check_same(events)
            kind, stmt, _ = events[0]
            results = self._perform(kind, stmt, [ev[2] for ev in events])
            events = [self._advance(g, r) for g, r in zip(lanes, results)]

    @staticmethod
    def _advance(lane, value):
        try:
            return lane.send(value)
        except StopIteration:
            return None

    def group_who(self, loc) -> Who:
        return Who(self.kernel, self.frames[0].group_ids, None, loc)

    def _check_same(self, events: list) -> None:
        first = events[0]
        for frame, ev in zip(self.frames, events):
            same = ev is not None and first is not None and ev[1] is first[1]
            if same and ev[0] in ("copy", "range") and not _same_args(ev[2], first[2]):
                raise DivergenceError(
                    self.kernel,
                    f"lanes {self.frames[0].lane_ids} and {frame.lane_ids} of group "
                    f"{frame.group_ids} reach the same collective with different "
                    "arguments; a group collective needs the same arguments in every lane",
                    (("", ev[1].loc),),
                )
            if not same:
                raise self._divergence(events)

    def _divergence(self, events: list) -> DivergenceError:
        """Which lanes are where: grouped by the collective they stopped at."""
        places: dict[int, tuple[ir.Stmt | None, list]] = {}
        for frame, ev in zip(self.frames, events):
            stmt = None if ev is None else ev[1]
            places.setdefault(id(stmt), (stmt, []))[1].append(frame.lane_ids)
        where = []
        for stmt, lanes in places.values():
            who = f"lane {lanes[0]}" + (f" and {len(lanes) - 1} more" if len(lanes) > 1 else "")
            if stmt is None:
                where.append((f"{who} finished the kernel", self.program.kir.loc))
            else:
                where.append((f"{who} wait here", stmt.loc))
        return DivergenceError(
            self.kernel,
            f"collective divergence in group {self.frames[0].group_ids}: some lanes reach "
            "a group collective that others do not",
            tuple(where),
        )

    def _perform(self, kind: str, stmt: ir.Stmt, payloads: list) -> list:
        if kind == "prim":
            results = self.program.compiler.performers[stmt](self, stmt, payloads)
            if ir.is_tile_statement(stmt):  # the group waits after a tile statement
                self.clock.tick()  # (CUDA: a syncthreads), so later accesses are ordered
            return results
        if kind == "copy":
            self._copy(stmt, payloads[0])
        return [None] * len(self.frames)

    def _copy(self, stmt: ir.CopyAsync, args) -> None:
        dst, src, starts, stops, lead = args
        who = self.group_who(stmt.loc)
        sliced = stmt.sliced or [True] * src.data.ndim
        starts = starts or (0,) * src.data.ndim
        stops = stops or (None,) * src.data.ndim
        for q in np.ndindex(*dst.shape[len(lead) :]):
            index, inside, k = [], True, 0
            for axis, is_slice in enumerate(sliced):
                end = src.shape[axis] if stops[axis] is None else min(stops[axis], src.shape[axis])
                i = starts[axis] + (q[k] if is_slice else 0)
                k += is_slice
                inside = inside and 0 <= i < end
                index.append(i)
            value = src.load(tuple(index), who) if inside else 0  # race-checked
            dst.copy_in(lead + q, value, who)  # a sub-array's copy: its fixed indices first


def _same_args(a, b) -> bool:
    return all((x is y) if isinstance(x, CheckedArray) else (x == y) for x, y in zip(a, b))
