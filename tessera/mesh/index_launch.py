"""Index launches: every rank of a mesh axis launches one kernel on its own shards, with
the collectives that make each shard look the way the kernel's signature asks.

    tessera.index_launch(axis="tp")(tp_gemm)(A.parts("tp"), B.parts("tp"), C.parts("tp"))

For each array parameter given a sharded tensor, dim by dim, the signature's dim
(``K/tp``: split over ``tp``; ``K`` or a literal: whole) is compared with the tensor's
layout:

* the kernel wants a dim whole that the tensor has split over axis X → ``all_gather``
  over X first (and, for a ``mut`` parameter, each rank keeps its block afterwards);
* the kernel wants a dim split over X that the tensor holds whole → each rank takes its
  block (no communication; for ``mut``, an ``all_gather`` afterwards restores the whole);
* a ``reduce_sum[...]`` output gets a zeroed buffer that is whole along the launch axis;
  afterwards ``all_reduce`` over the axis if the tensor is replicated on it, else
  ``reduce_scatter`` along the dim it is split on.

``plan(*args)`` returns these steps without running anything; printing it shows them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..dtypes import ShardedDim
from ..errors import LaunchError
from ..kernel import launch as kernel_launch
from ..observe.tracebacks import entry_point
from .collectives import all_gather, all_reduce, reduce_scatter
from .layout import block
from .mesh import Mesh, current_mesh
from .mpi_transport import array_module
from .tensor import Parts, ShardedTensor


@dataclass(frozen=True)
class Step:
    """One thing done to one argument before or after the local launch."""

    action: str  # all_gather | take_block | keep_block | zeros | all_reduce | reduce_scatter
    param: str
    dim: int | None
    axis: str
    shape: tuple[int, ...]  # the local shape after the step

    def __str__(self) -> str:
        where = f" dim {self.dim}" if self.dim is not None else ""
        over = f" over '{self.axis}'" if self.axis else ""
        return f"{self.param}: {self.action}{where}{over} -> local {self.shape}"


@dataclass
class ArgPlan:
    """How one argument reaches the kernel and, for outputs, goes back to its tensor."""

    param: str
    value: object  # the tensor, or the argument as given
    before: list[Step] = field(default_factory=list)
    after: list[Step] = field(default_factory=list)

    def prepare(self, mesh: Mesh):
        if not isinstance(self.value, ShardedTensor):
            return self.value
        data = self.value.local
        for step in self.before:
            data = _apply(step, data, self.value, mesh)
        return data

    def finish(self, data, mesh: Mesh) -> None:
        if not self.after:
            return
        for step in self.after:
            data = _apply(step, data, self.value, mesh)
        self.value.local[...] = data


def _apply(step: Step, data, tensor: ShardedTensor, mesh: Mesh):
    if step.action == "all_gather":
        return all_gather(data, step.axis, mesh=mesh, dim=step.dim)
    if step.action in ("take_block", "keep_block"):
        start, stop = block(data.shape[step.dim], mesh.size(step.axis), mesh.index(step.axis))
        index = (slice(None),) * step.dim + (slice(start, stop),)
        return array_module(data).ascontiguousarray(data[index])
    if step.action == "zeros":
        return array_module(data).zeros(step.shape, data.dtype)
    if step.action == "all_reduce":
        return all_reduce(data, step.axis, "sum", mesh=mesh)
    return reduce_scatter(data, step.axis, "sum", mesh=mesh, dim=step.dim)


class Plan:
    """What an index launch does on this rank; ``str(plan)`` shows it, ``run()`` does it."""

    def __init__(self, kernel, axis: str, mesh: Mesh, grid: tuple, args: list[ArgPlan], sizes):
        self.kernel, self.axis, self.mesh, self.grid = kernel, axis, mesh, grid
        self.args, self.global_extents = args, sizes

    @property
    def steps(self) -> list[Step]:
        """Every step in order: those before the launch, then those after."""
        return [s for a in self.args for s in a.before] + [s for a in self.args for s in a.after]

    @property
    def collectives(self) -> list[str]:
        """The inserted collectives, in order (e.g. ``["all_gather A", "all_reduce C"]``)."""
        kinds = ("all_gather", "all_reduce", "reduce_scatter")
        return [f"{s.action} {s.param}" for s in self.steps if s.action in kinds]

    def __str__(self) -> str:
        m = self.mesh
        lines = [
            f"index launch of {self.kernel.name} over axis '{self.axis}' on rank {m.rank} "
            f"(index {m.index(self.axis)} of {m.size(self.axis)}), grid {self.grid}"
        ]
        lines += [f"  before: {s}" for a in self.args for s in a.before]
        shapes = ", ".join(
            f"{a.param}{_local_shape(a)}" for a in self.args if _local_shape(a) is not None
        )
        lines.append(f"  launch: {self.kernel.name}[{self.grid}]({shapes})")
        lines += [f"  after:  {s}" for a in self.args for s in a.after]
        return "\n".join(lines)

    __repr__ = __str__

    def run(self) -> None:
        data = [a.prepare(self.mesh) for a in self.args]
        with kernel_launch.global_extents(self.global_extents):
            self.kernel[self.grid](*data)
        for a, d in zip(self.args, data):
            a.finish(d, self.mesh)


def _local_shape(a: ArgPlan):
    if a.before:
        return a.before[-1].shape
    shape = getattr(a.value, "local_shape", None) or getattr(a.value, "shape", None)
    return tuple(shape) if shape is not None else None


class IndexLaunch:
    """``index_launch(axis=..., grid=...)(kernel)``: call it with the arguments to launch
    on every rank of the axis, or ``.plan(...)`` them to see what it would do."""

    def __init__(self, kernel, axis: str, grid=None, mesh: Mesh | None = None):
        self.kernel, self.axis, self.grid, self.mesh = kernel, axis, grid, mesh

    @entry_point
    def __call__(self, *args) -> None:
        self.plan(*args).run()

    @entry_point
    def plan(self, *args) -> Plan:
        k = self.kernel
        if len(args) != len(k.params):
            names = ", ".join(p.name for p in k.params)
            raise LaunchError(
                k.name, f"takes {len(k.params)} arguments ({names}) but {len(args)} were given"
            )
        mesh = self._mesh(args)
        mesh.size(self.axis)  # an unknown axis is an error naming the mesh's axes
        plans, extents = [], {}
        for p, a in zip(k.params, args):
            if isinstance(a, Parts):
                if a.axis != self.axis:
                    raise LaunchError(
                        k.name,
                        f"parameter '{p.name}' is {a.tensor.shape} .parts('{a.axis}') but the "
                        f"launch is over axis '{self.axis}'",
                    )
                a = a.tensor
            if isinstance(a, ShardedTensor) and p.kind == "array":
                plans.append(self._arg_plan(p, a, mesh, extents))
            else:
                if p.kind == "array" and hasattr(a, "shape"):
                    for dim, extent in zip(p.dims, a.shape):
                        if isinstance(dim, ShardedDim):
                            extents.setdefault(dim.symbol.name, extent * mesh.size(dim.axis))
                plans.append(ArgPlan(p.name, a))
        grid = self._grid(plans)
        return Plan(k, self.axis, mesh, grid, plans, extents)

    def _mesh(self, args) -> Mesh:
        for a in args:
            t = a.tensor if isinstance(a, Parts) else a
            if isinstance(t, ShardedTensor):
                return t.mesh
        return current_mesh(self.mesh)

    def _arg_plan(self, p, t: ShardedTensor, mesh: Mesh, extents: dict) -> ArgPlan:
        name, axis = self.kernel.name, self.axis
        if t.mesh is not mesh:
            raise LaunchError(name, f"parameter '{p.name}' is a tensor of another mesh")
        if len(p.dims) != len(t.shape):
            raise LaunchError(
                name,
                f"parameter '{p.name}' expects {len(p.dims)} dims ({p.describe()}), got a "
                f"tensor of shape {t.shape}",
            )
        plan = ArgPlan(p.name, t)
        shape = list(t.local_shape)
        reduce_dim = None
        for i, dim in enumerate(p.dims):
            wanted = dim.axis if isinstance(dim, ShardedDim) else None
            have = t.layout.axis_of(i)
            if isinstance(dim, ShardedDim):
                extents[dim.symbol.name] = t.shape[i]
            if p.reduction:
                if wanted == axis:
                    raise LaunchError(
                        name,
                        f"parameter '{p.name}' ({p.describe()}) holds partial sums over axis "
                        f"'{axis}', so its dim {i} cannot be split over '{axis}' as well",
                    )
                if have == axis:
                    shape[i], reduce_dim = t.shape[i], i
                elif wanted is not None and wanted != have:
                    raise self._mismatch(p, t, i, wanted, have)
                continue
            if wanted == have:
                continue
            if wanted is None:
                before = tuple(shape)
                shape[i] = t.shape[i]
                plan.before.append(Step("all_gather", p.name, i, have, tuple(shape)))
                if p.mutable:
                    plan.after.insert(0, Step("keep_block", p.name, i, have, before))
            elif have is None:
                start, stop = block(t.shape[i], mesh.size(wanted), mesh.index(wanted))
                before = tuple(shape)
                shape[i] = stop - start
                plan.before.append(Step("take_block", p.name, i, wanted, tuple(shape)))
                if p.mutable:
                    plan.after.insert(0, Step("all_gather", p.name, i, wanted, before))
            else:
                raise self._mismatch(p, t, i, wanted, have)
        if p.reduction:
            plan.before = [Step("zeros", p.name, None, "", tuple(shape))]
            if reduce_dim is None:
                plan.after = [Step("all_reduce", p.name, None, axis, t.local_shape)]
            else:
                plan.after = [Step("reduce_scatter", p.name, reduce_dim, axis, t.local_shape)]
        return plan

    def _mismatch(self, p, t, i, wanted, have) -> LaunchError:
        return LaunchError(
            self.kernel.name,
            f"parameter '{p.name}' ({p.describe()}) wants dim {i} split over '{wanted}' but "
            f"the tensor splits it over '{have}'; re-shard it first (all_gather over "
            f"'{have}')",
        )

    def _grid(self, plans: list[ArgPlan]) -> tuple[int, ...]:
        k = self.kernel
        if self.grid is not None:
            return kernel_launch.normalise_grid(k.name, self.grid)
        if k.grouped:
            raise LaunchError(
                k.name, "a grouped kernel's index launch needs grid=: index_launch(axis, grid=G)"
            )
        for p, a in zip(k.params, plans):
            if p.kind == "array" and p.mutable:
                shape = _local_shape(a)
                if shape is not None:
                    return kernel_launch.normalise_grid(k.name, shape)
        raise LaunchError(k.name, "give index_launch a grid=: the kernel has no mut argument")


def index_launch(axis: str, grid=None, *, mesh: Mesh | None = None):
    """``index_launch(axis="tp", grid=...)(kernel)(*args)``: launch ``kernel`` on every
    rank of ``axis`` with its own shards (docs/distributed.md); the grid of a flat kernel
    defaults to the local shape of its first ``mut`` argument."""

    def wrap(kernel) -> IndexLaunch:
        return IndexLaunch(kernel, axis, grid, mesh)

    return wrap
