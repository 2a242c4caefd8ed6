"""The declarations of the in-kernel primitives: one entry per primitive, and the only one.

A declaration says what a primitive is called, what arguments it takes (each with a
*kind* the frontend parses and the typer checks), the rule that gives its result type,
whether it is *collective* (every lane of a group must reach it together), whether its
result differs between lanes, whether it needs a grouped kernel, and what it does. The
frontend turns every call of a declared primitive into one generic IR node, the typer and
the analyses read these fields, and the docs table is checked against ``doc``. No backend
code lives here: each target registers one lowering per primitive.

Adding a primitive is its declaration here plus one lowering per target.

Outside a kernel the primitives cannot run; calling one raises a clear error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import dtypes
from ..dtypes import ArrayAnnotation, ReductionAnnotation
from ..errors import TesseraError

# Argument kinds (what the frontend accepts and the typer checks):
#   axis    a constant 0, 1 or 2          flag    a constant bool
#   value   a scalar of any type          number  a scalar, not bool
#   int     an integer scalar             index   one integer or a tuple of them
#   array   a parameter or shared array   shared  a shared array
#   tile    a tile value (docs/language.md, "Tile values")
#   operand a tile value or a scalar (broadcast)
#   shape   a constant shape: one int or a tuple of them
#   dtype   a dtype (f32, f16, ...)
#   axisopt a constant axis of a tile, or None
#   tiles   one integer tile (or value) per dim of an array: a gather's or scatter's index
ARG_KINDS = ARG_KINDS_SCALAR = ("axis", "flag", "value", "number", "int", "index", "array")
ARG_KINDS += ("shared", "tile", "operand", "shape", "dtype", "axisopt", "tiles")
# Result rules (what the typer gives the call): i64; ``value``: the type of the first
# value/number argument; ``element``: the element type of the array argument; ``rule``:
# the declaration's own ``rule`` function (tile values); None: a statement, no value.
RESULT_RULES = ("i64", "value", "element", "rule", None)


class RuleError(TesseraError):
    """A type rule refused a call's arguments; the typer adds the kernel and the line."""


SUBGROUP = 32  # lanes of a sub-group (a CUDA warp), for the shuffles


REQUIRED = object()  # the default of an argument that must be given


@dataclass(frozen=True)
class Arg:
    name: str
    kind: str
    default: object = REQUIRED  # the constant used when the argument is left out

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def __post_init__(self) -> None:
        assert self.kind in ARG_KINDS, self.kind


@dataclass(frozen=True, eq=False)
class Primitive:
    """A kernel-language primitive. ``name`` is its spelling in kernel source."""

    name: str
    args: tuple[Arg, ...]
    result: str | None
    doc: str
    collective: bool = False  # every lane of the group must reach it together
    varying: bool = False  # its result differs between the lanes of a group
    grouped_only: bool = False  # needs a grouped kernel (@kernel(tile=...))
    writes: bool = False  # writes the array given as its first argument
    subgroups: bool = False  # works within sub-groups of SUBGROUP lanes
    op: str | None = None  # reductions and scans: "sum", "max" or "min" (docs/language.md)
    tile: bool = False  # takes or makes tile values: runs once per group, on uniform input
    method: bool = False  # spelled ``t.name(...)`` on a tile ``t`` (its first argument)
    rule: object = None  # result "rule": f(described arguments) -> result (tessera/tile/blocks.py)
    statement: bool = False  # gives no value (with a rule that only checks its arguments)
    atomic: str | None = None  # atomics: the update, one of ATOMIC_OPS

    @property
    def signature(self) -> str:
        args = self.args[1:] if self.method else self.args
        parts = [a.name if a.required else f"{a.name}={a.default!r}" for a in args]
        if self.name.endswith(".T"):  # an attribute, not a call
            return ""
        return f"({', '.join(parts)})"

    @property
    def is_statement(self) -> bool:
        """Used as a statement only: it gives no value."""
        return self.result is None or self.statement

    @property
    def pure(self) -> bool:
        """Whether a call may be recomputed freely (no effect, no group exchange)."""
        return not (self.collective or self.writes)

    def __call__(self, *args: object, **kwargs: object) -> Any:  # (a value in a kernel)
        raise TesseraError(
            f"{self.name}{self.signature} can only be used inside a @tessera.kernel function"
        )

    def __getitem__(self, item: object) -> object:
        # ``reduce_sum[f32[M, N]]`` in a signature: an output of partial sums
        # (docs/distributed.md)
        if self.name == "reduce_sum" and isinstance(item, ArrayAnnotation):
            return ReductionAnnotation(item, "sum")
        return self

    def __repr__(self) -> str:
        return f"<tessera primitive {self.name}>"

    def __deepcopy__(self, memo: dict) -> Primitive:
        return self  # a declaration is unique: IR copies share it, and ``is`` compares it


REGISTRY: dict[str, Primitive] = {}
__all__ = ["REGISTRY", "Primitive", "SUBGROUP", "subgroup_width", "tshared", "cp_async"]


def declare(name: str, args: str, result: str | None, doc: str, **flags: object) -> Primitive:
    """Declare a primitive; ``args`` is ``"name:kind name:kind=default ..."``."""
    assert result in RESULT_RULES, result
    parsed = []
    for spec in args.split():
        arg, _, rest = spec.partition(":")
        kind, _, default = rest.partition("=")
        constants = {"": REQUIRED, "False": False, "True": True, "None": None, "0": 0}
        constants["f32"] = dtypes.f32
        parsed.append(Arg(arg, kind, constants[default]))
    prim = Primitive(name, tuple(parsed), result, doc, **flags)
    REGISTRY[name] = prim
    return prim


def subgroup_width(lanes: int) -> int | None:
    """The width of a group's sub-groups: SUBGROUP lanes, or the whole group when it is
    smaller and a power of two; None when the group cannot be cut into sub-groups."""
    if lanes >= SUBGROUP:
        return SUBGROUP if lanes % SUBGROUP == 0 else None
    return lanes if lanes & (lanes - 1) == 0 else None


# ----------------------------------------------------------------------------- ids
linear_id = declare(
    "tile.linear_id",
    "",
    "i64",
    "Flat kernels: the tile index in [0, N). Grouped kernels: the lane in the group.",
    varying=True,
)
id = declare(  # noqa: A001 - the language's name for it
    "tile.id",
    "axis:axis",
    "i64",
    "The tile's (flat) or lane's (grouped) index along `axis` of the grid or group shape.",
    varying=True,
)
group_id = declare(
    "group_id",
    "axis:axis",
    "i64",
    "The group's index along `axis` of the launch grid.",
    grouped_only=True,
)
group_linear_id = declare(
    "group_linear_id",
    "",
    "i64",
    "The group's index in [0, grid_groups).",
    grouped_only=True,
)
group_count = declare(
    "group_count",
    "axis:axis",
    "i64",
    "The number of groups along `axis` of the launch grid (CUDA's gridDim); 1 past its dims.",
    grouped_only=True,
)
group_tile_count = declare(
    "group_tile_count",
    "",
    "i64",
    "The number of lanes in a group (product of `tile=`).",
    grouped_only=True,
)
# ----------------------------------------------------------------------------- synchronisation
tbarrier = declare(
    "tbarrier",
    "",
    None,
    "All lanes of the group wait here; shared writes before are visible after; completes "
    "outstanding cp_async copies.",
    collective=True,
    grouped_only=True,
)
copy_wait = declare(
    "cp_async.wait",
    "",
    None,
    "Waits for this group's outstanding copies (no lane barrier).",
    collective=True,
    grouped_only=True,
)
# ----------------------------------------------------------------------------- memory
# The atomic updates: ``old = a[i]; a[i] = update(old, value)`` as one indivisible step,
# the old value returned (docs/language.md, "Atomics"). "and", "or" and "xor" take
# integers; "cas" stores ``new`` only where the element's bits equal ``expected``'s.
ATOMIC_OPS = ("add", "max", "min", "and", "or", "xor", "xchg", "cas")
BITWISE_ATOMICS = ("and", "or", "xor")


def _atomic(op: str, doc: str, args: str = "a:array index:index value:number") -> Primitive:
    return declare(f"tile.atomic_{op}", args, "element", doc, varying=True, writes=True, atomic=op)


atomic_add = _atomic(
    "add", "Atomic read-modify-write on global or shared memory; returns the old value."
)
atomic_max = _atomic("max", "Atomic `a[i] = max(a[i], value)` (a NaN wins); returns the old value.")
atomic_min = _atomic("min", "Atomic `a[i] = min(a[i], value)` (a NaN wins); returns the old value.")
atomic_and = _atomic(
    "and",
    "Atomic bitwise and into `a[i]` (integers); returns the old value.",
    "a:array index:index value:int",
)
atomic_or = _atomic(
    "or",
    "Atomic bitwise or into `a[i]` (integers); returns the old value.",
    "a:array index:index value:int",
)
atomic_xor = _atomic(
    "xor",
    "Atomic bitwise xor into `a[i]` (integers); returns the old value.",
    "a:array index:index value:int",
)
atomic_xchg = _atomic("xchg", "Atomic exchange: `a[i] = value`; returns the old value.")
atomic_cas = _atomic(
    "cas",
    "Atomic compare-and-swap: `a[i] = new` if `a[i]` has the bits of `expected`; returns the "
    "old value.",
    "a:array index:index expected:number new:number",
)
ATOMICS = (atomic_add, atomic_max, atomic_min, atomic_and, atomic_or, atomic_xor, atomic_xchg)
ATOMICS += (atomic_cas,)
# ----------------------------------------------------------------------------- reductions
reduce_sum = declare(
    "reduce_sum",
    "shared_array:shared",
    "element",
    "Sum of a whole shared array, to every lane.",
    collective=True,
    grouped_only=True,
    op="sum",
)
reduce_max = declare(
    "reduce_max",
    "shared_array:shared",
    "element",
    "Maximum of a whole shared array, to every lane.",
    collective=True,
    grouped_only=True,
    op="max",
)
reduce_min = declare(
    "reduce_min",
    "shared_array:shared",
    "element",
    "Minimum of a whole shared array, to every lane.",
    collective=True,
    grouped_only=True,
    op="min",
)
sum = declare(  # noqa: A001 - tile.sum
    "tile.sum",
    "value:number",
    "value",
    "Sum over the lanes of each lane's value, to every lane; of a tile, the tile's "
    "sum (`t.sum()`; with `axis=`, `t.sum(axis)`: Triton's `tl.sum`).",
    collective=True,
    grouped_only=True,
    op="sum",
)
max = declare(  # noqa: A001 - tile.max
    "tile.max",
    "value:number",
    "value",
    "Maximum over the lanes of each lane's value, to every lane; of a tile, the tile's "
    "max (`t.max()`; with `axis=`, `t.max(axis)`: Triton's `tl.max`).",
    collective=True,
    grouped_only=True,
    op="max",
)
min = declare(  # noqa: A001 - tile.min
    "tile.min",
    "value:number",
    "value",
    "Minimum over the lanes of each lane's value, to every lane; of a tile, the tile's "
    "min (`t.min()`; with `axis=`, `t.min(axis)`: Triton's `tl.min`).",
    collective=True,
    grouped_only=True,
    op="min",
)
# ----------------------------------------------------------------------------- scans, shuffles
prefix_sum = declare(
    "tile.prefix_sum",
    "value:number exclusive:flag=False",
    "value",
    "Each lane gets the sum of the values of the lanes before it (exclusive) or up to and "
    "including it, added one lane after another in lane order.",
    collective=True,
    varying=True,
    grouped_only=True,
    op="sum",
)
shuffle = declare(
    "tile.shuffle",
    "value:value src_lane:int",
    "value",
    "The value of lane `src_lane` (taken modulo the width) of the lane's sub-group.",
    collective=True,
    varying=True,
    grouped_only=True,
    subgroups=True,
)
shuffle_xor = declare(
    "tile.shuffle_xor",
    "value:value mask:int",
    "value",
    "The value of the sub-group lane `lane ^ mask`; the lane's own value where that is "
    "outside the sub-group.",
    collective=True,
    varying=True,
    grouped_only=True,
    subgroups=True,
)
shuffle_down = declare(
    "tile.shuffle_down",
    "value:value delta:int",
    "value",
    "The value of the sub-group lane `lane + delta`; the lane's own value past the end.",
    collective=True,
    varying=True,
    grouped_only=True,
    subgroups=True,
)
shuffle_up = declare(
    "tile.shuffle_up",
    "value:value delta:int",
    "value",
    "The value of the sub-group lane `lane - delta`; the lane's own value before the start.",
    collective=True,
    varying=True,
    grouped_only=True,
    subgroups=True,
)
# spelled out, not gathered at run time, so that type checkers see every primitive (a test
# keeps this list equal to the declarations above)
__all__ += ["linear_id", "id", "group_id", "group_linear_id", "group_count", "group_tile_count"]
__all__ += ["tbarrier", "copy_wait", "reduce_sum", "reduce_max", "reduce_min"]
__all__ += ["atomic_add", "atomic_max", "atomic_min", "atomic_and", "atomic_or", "atomic_xor"]
__all__ += ["atomic_xchg", "atomic_cas", "ATOMICS", "ATOMIC_OPS"]
__all__ += ["sum", "max", "min", "prefix_sum", "shuffle", "shuffle_xor", "shuffle_down"]
__all__ += ["shuffle_up"]

# ----------------------------------------------------------------------------- syntax forms
# These have syntax of their own (a dtype subscript, slices, a loop, masks), or expand to
# kernel-language code (``tile.rand``: a Philox helper, the same on every target): the
# frontend handles them directly and they have no generic IR node. They are declared for errors
# outside kernels and for the docs.


@dataclass(frozen=True, eq=False)
class SyntaxForm:
    name: str
    signature: str
    doc: str
    collective: bool = False
    grouped_only: bool = False

    __call__ = Primitive.__call__
    __repr__ = Primitive.__repr__

    def __getitem__(self, item: object) -> SyntaxForm:
        return self  # ``tshared.alloc[f32]`` is resolved by the frontend


SYNTAX_FORMS: dict[str, SyntaxForm] = {}


def _form(name: str, signature: str, doc: str, **flags: bool) -> SyntaxForm:
    form = SyntaxForm(name, signature, doc, **flags)
    SYNTAX_FORMS[name] = form
    return form


alloc = _form(
    "tshared.alloc",
    "[dtype](shape)",
    "A group-shared array of constant shape; contents undefined at group start.",
    grouped_only=True,
)
dynamic = _form(
    "tshared.dynamic",
    "[dtype](n)",
    "A group-shared 1-D array of n elements, n a scalar parameter or a size symbol: sized at "
    "launch (CUDA's extern __shared__), checked against shared= then.",
    grouped_only=True,
)
copy_async = _form(
    "cp_async.shared.global_",
    "(dst, src)",
    "Group-collective copy of a global slice into a shared array, complete after the next "
    "tbarrier() or cp_async.wait(); a short source zero-fills the tail.",
    collective=True,
    grouped_only=True,
)
range = _form(  # noqa: A001 - tile.range
    "tile.range",
    "(start, stop=None, step=1, prefetch=None)",
    "Group-uniform loop over chunk starts, the values of range(); prefetch is the pipeline "
    "depth hint.",
    collective=True,
    grouped_only=True,
)
load = _form(
    "tile.load",
    "(a, index, mask=None, other=0)",
    "Explicit load; a masked-off lane reads `other` (converted to a's dtype). At a tile "
    "of indices it reads a tile, as tile.gather, each element not masked off inside `a` "
    "(checked on debug and in bounds-checked launches).",
)
store = _form(
    "tile.store",
    "(a, index, value, mask=None)",
    "Explicit store; a masked-off lane writes nothing. At a tile of indices it writes the "
    "tile `value`, as tile.scatter, each element not masked off inside `a` (checked as "
    "tile.load's).",
)
# Python's own print and assert, given kernel meanings (docs/language.md, "Printing and
# asserting"): the frontend recognises the builtin and the statement, and these entries
# give them their rows in the docs table.
kernel_print = _form(
    "print",
    "(*values)",
    "Prints constant strings and scalar values as Python does, after the lane's "
    "`[group (g,) lane (l,)]` prefix; ordered by group then lane on cpu and debug.",
)
kernel_assert = _form(
    "assert",
    " cond, message",
    "Checked on the debug target and in bounds-checked launches (a KernelAssertionError "
    "naming group, lane and line); compiled out otherwise.",
)
rand = _form(
    "tile.rand",
    "(seed, offset)",
    "A uniform f32 in [0, 1) from Philox 4x32-10: a pure function of (seed, offset), the "
    "same on every target and the same stream as op.dropout.",
)
__all__ += ["alloc", "dynamic", "copy_async", "range", "load", "store", "rand", "SyntaxForm"]
__all__ += ["SYNTAX_FORMS", "kernel_print", "kernel_assert"]


def table() -> str:
    """The primitive table of docs/language.md, made from the declarations (a test keeps
    the two the same: paste this function's output there after changing a declaration)."""
    rows = [
        "| primitive | group collective | grouped kernels only | meaning |",
        "| --- | --- | --- | --- |",
    ]
    entries = [*REGISTRY.values(), *SYNTAX_FORMS.values()]
    for prim in sorted(entries, key=lambda p: (p.name.startswith("tile."), p.name)):
        yes = {True: "yes", False: ""}
        rows.append(
            f"| `{prim.name}{prim.signature}` | {yes[prim.collective]} | "
            f"{yes[prim.grouped_only]} | {prim.doc} |"
        )
    return "\n".join(rows) + "\n"


class _Namespace:
    """A dotted group of primitives (``tshared``, ``cp_async``, ``cp_async.shared``)."""

    def __init__(self, name: str, **members: object):
        self._name = name
        for key, value in members.items():
            setattr(self, key, value)

    def __repr__(self) -> str:
        return f"<tessera namespace {self._name}>"


class _SharedMemory(_Namespace):
    alloc: SyntaxForm  # (annotated for type checkers: the members are set at run time)
    dynamic: SyntaxForm


class _AsyncCopyShared(_Namespace):
    global_: SyntaxForm


class _AsyncCopy(_Namespace):
    shared: _AsyncCopyShared
    wait: Primitive


tshared = _SharedMemory("tshared", alloc=alloc, dynamic=dynamic)
cp_async = _AsyncCopy(
    "cp_async", shared=_AsyncCopyShared("cp_async.shared", global_=copy_async), wait=copy_wait
)
