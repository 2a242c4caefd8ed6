"""The declarations of the in-kernel primitives: one entry per primitive.

A declaration says what a primitive is called, whether it is *collective* (every lane of
a group must reach it together), whether it needs a grouped kernel, and what it does.
The frontend types calls from these declarations, the analyses read ``collective`` and
``grouped_only``, and the docs table is generated from ``doc``. No backend code lives
here: the backends lower primitives by name.

Outside a kernel the primitives cannot run; calling one raises a clear error.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..dtypes import ArrayAnnotation, ReductionAnnotation
from ..errors import TesseraError


@dataclass(frozen=True)
class Primitive:
    """A kernel-language primitive. ``name`` is its spelling in kernel source."""

    name: str
    signature: str
    collective: bool
    grouped_only: bool
    doc: str

    def __call__(self, *args: object, **kwargs: object) -> object:
        raise TesseraError(
            f"{self.name}{self.signature} can only be used inside a @tessera.kernel function"
        )

    def __getitem__(self, item: object) -> object:
        # ``reduce_sum[f32[M, N]]`` in a signature: an output of partial sums (MESH.md)
        if self.name == "reduce_sum" and isinstance(item, ArrayAnnotation):
            return ReductionAnnotation(item, "sum")
        # ``tshared.alloc[f32]`` is resolved by the frontend; outside a kernel it is inert.
        return self

    def __repr__(self) -> str:
        return f"<tessera primitive {self.name}>"


REGISTRY: dict[str, Primitive] = {}


def declare(
    name: str, signature: str, doc: str, *, collective: bool = False, grouped_only: bool = False
) -> Primitive:
    prim = Primitive(name, signature, collective, grouped_only, doc)
    REGISTRY[name] = prim
    return prim


linear_id = declare(
    "tile.linear_id",
    "()",
    "Flat kernels: the tile index in [0, N). Grouped kernels: the lane in the group.",
)
id = declare(  # noqa: A001 - the language's name for it
    "tile.id",
    "(axis)",
    "The tile's (flat) or lane's (grouped) index along `axis` of the grid or group shape.",
)
group_id = declare(
    "group_id",
    "(axis)",
    "The group's index along `axis` of the launch grid.",
    grouped_only=True,
)
group_linear_id = declare(
    "group_linear_id", "()", "The group's index in [0, grid_groups).", grouped_only=True
)
group_tile_count = declare(
    "group_tile_count",
    "()",
    "The number of lanes in a group (product of `tile=`).",
    grouped_only=True,
)
alloc = declare(
    "tshared.alloc",
    "[dtype](shape)",
    "A group-shared array of constant shape; contents undefined at group start.",
    grouped_only=True,
)
barrier = declare(
    "tbarrier",
    "()",
    "All lanes of the group wait here; shared writes before are visible after; completes "
    "outstanding cp_async copies.",
    collective=True,
    grouped_only=True,
)
copy_async = declare(
    "cp_async.shared.global_",
    "(dst, src)",
    "Group-collective copy of a global slice into a shared array, complete after the next "
    "tbarrier() or cp_async.wait(); a short source zero-fills the tail.",
    collective=True,
    grouped_only=True,
)
copy_wait = declare(
    "cp_async.wait",
    "()",
    "Waits for this group's outstanding copies (no lane barrier).",
    collective=True,
    grouped_only=True,
)
range_ = declare(
    "tile.range",
    "(start, stop=None, step=1, prefetch=None)",
    "Group-uniform loop over chunk starts, the values of range(); prefetch is the pipeline "
    "depth hint.",
    collective=True,
    grouped_only=True,
)
load = declare(
    "tile.load",
    "(a, index, mask=None, other=0)",
    "Explicit load; a masked-off lane reads `other` (converted to a's dtype).",
)
store = declare(
    "tile.store",
    "(a, index, value, mask=None)",
    "Explicit store; a masked-off lane writes nothing.",
)
reduce_sum = declare(
    "reduce_sum",
    "(shared_array)",
    "Sum of a whole shared array, to every lane.",
    collective=True,
    grouped_only=True,
)
reduce_max = declare(
    "reduce_max",
    "(shared_array)",
    "Maximum of a whole shared array, to every lane.",
    collective=True,
    grouped_only=True,
)
reduce_min = declare(
    "reduce_min",
    "(shared_array)",
    "Minimum of a whole shared array, to every lane.",
    collective=True,
    grouped_only=True,
)
sum_ = declare(
    "tile.sum",
    "(value)",
    "Sum over the lanes of each lane's value, to every lane.",
    collective=True,
    grouped_only=True,
)
max_ = declare(
    "tile.max",
    "(value)",
    "Maximum over the lanes of each lane's value, to every lane.",
    collective=True,
    grouped_only=True,
)
min_ = declare(
    "tile.min",
    "(value)",
    "Minimum over the lanes of each lane's value, to every lane.",
    collective=True,
    grouped_only=True,
)
atomic_add = declare(
    "tile.atomic_add",
    "(a, index, value)",
    "Atomic read-modify-write on global or shared memory; returns the old value.",
)


class _Namespace:
    """A dotted group of primitives (``tshared``, ``cp_async``, ``cp_async.shared``)."""

    def __init__(self, name: str, **members: object):
        self._name = name
        for key, value in members.items():
            setattr(self, key, value)

    def __repr__(self) -> str:
        return f"<tessera namespace {self._name}>"


tshared = _Namespace("tshared", alloc=alloc)
cp_async = _Namespace(
    "cp_async", shared=_Namespace("cp_async.shared", global_=copy_async), wait=copy_wait
)
