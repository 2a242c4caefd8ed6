"""The compiler's passes, in order, in one place.

``front`` runs when the decorator runs and raises every error that does not depend on the
arguments. ``specialise`` runs once per specialisation key, at the first launch on a
target that needs it: the shared passes (:data:`SHARED_PASSES`), then the target's own
(``target.passes``: strip-mining and region formation run only for the CPU). Every pass
has a name; ``k.inspect(name, ...)`` and ``TESSERA_DUMP=name`` show the IR after it.

    front:      lower → returns → checks → uniformity (errors) [→ types, without constexprs]
    specialise: constexprs → shared_memory → types → webs → uniformity → prefetch → target's
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import hashlib

from ..dtypes import DTypeVar
from ..errors import KernelError, SourceLoc
from . import ir
from .frontend import Frontend
from .ir_print import format_kernel, format_schedule
from .passes import Pass, checks, uniformity
from .passes.copies import propagate_copies
from .passes.fold import constant_shapes, fold_constants
from .passes.hoist_shared import hoist_divergent_allocs
from .passes.prefetch import mark_prefetch_waits
from .passes.regions import Schedule, form_regions
from .passes.returns import eliminate_returns
from .passes.strip_mine import strip_mine
from .passes.tile_indexing import lower_tile_indexing
from .passes.webs import split_webs
from .signature import ParamSpec, complex_storage, resolve_dtypes, symbols_of
from .source import SourceInfo
from .typer import TypeConflict, Typer, fold_int


@dataclasses.dataclass
class KernelOptions:
    tile: tuple[int, ...] | None
    shared: int | None
    num_warps: int | None = None  # the CUDA block's warps for a tile-only kernel


@dataclasses.dataclass
class Specialised:
    """A kernel's IR after the passes, with what they found."""

    kir: ir.KernelIR
    schedule: Schedule | None = None  # region formation's result (the CPU target)
    shared_bytes: int = 0
    uniformity: uniformity.Uniformity | None = None
    dumps: dict[str, str] = dataclasses.field(default_factory=dict)  # pass → text after it


def front(
    name: str, info: SourceInfo, params: list[ParamSpec], options: KernelOptions
) -> ir.KernelIR:
    """Source → checked, untyped IR (types too when the kernel has no constexpr)."""
    grouped = options.tile is not None
    symbols = symbols_of(params)
    fe = Frontend(name, params, grouped, symbols)
    body = eliminate_returns(fe.lower_function(info), "_returned")
    loc = SourceLoc(info.filename, info.fn_node.lineno + info.line_offset, info.fn_node.col_offset)
    kir = ir.KernelIR(
        name=name,
        params=[complex_storage(p) for p in params],
        body=body,
        grouped=grouped,
        tile_shape=tuple(options.tile or ()),
        shared_budget=options.shared,
        num_warps=options.num_warps,
        loc=loc,
        allocs=fe.allocs,
        symbols=symbols,
        user_vars=fe.user_vars,
    )
    kir.source_hash = _source_hash(info, fe.helpers_used, fe.global_constants, options, params)
    fold_constants(kir)  # strings from module constants or a factory: one branch stays
    if grouped:  # ``if lane < n: s = tshared.alloc[...]``: bound at the top, as in CUDA
        hoist_divergent_allocs(kir)
    kir.allocs = [s for s in ir.walk_stmts(kir.body) if isinstance(s, ir.SharedAlloc)]
    checks.check_nesting(kir)
    checks.check_mut_writes(kir)
    checks.check_assigned_before_use(kir)
    if not any(p.kind == "constexpr" for p in params):
        type_kernel(kir)  # type errors surface at decoration (specialise types a copy again)
        if grouped:
            checks.check_tile_sizes(kir)
    if grouped:
        checks.check_subgroups(kir)
        uniformity.check_collectives(kir, uniformity.analyse(kir))
        checks.check_shared_budget(kir, require_constant=False)
    return kir


def type_kernel(kir: ir.KernelIR) -> None:
    """Type ``kir``. A name rebound to a tile or array of another type (``acc =
    acc.astype(f32)``) has its independent webs split apart (passes/webs.py) and typed on
    their own; a conflict within one web stays the error it is. ``tile.load``/``tile.store``
    at a tile of indices become the gathers and scatters they are typed as
    (passes/tile_indexing.py), and the kernel is typed again with them."""
    split: set[str] = set()
    while True:
        try:
            Typer(kir).run()
            if not lower_tile_indexing(kir):
                return
        except TypeConflict as conflict:
            name = conflict.name
            if name in split or not split_webs(kir, {name}):
                raise KernelError(conflict.kernel, conflict.message, conflict.loc) from None
            split.add(name)


# ----------------------------------------------------------------------------- passes


def _bind_constexprs(spec: Specialised, constexprs: dict) -> None:
    if constexprs:
        _substitute(spec.kir, constexprs)
        spec.kir.params = resolve_dtypes(spec.kir.params, constexprs)
        fold_constants(spec.kir)
    kir = spec.kir
    constant_shapes(kir)
    # the deep copy duplicated the allocations; the body's copies are the ones to keep
    kir.allocs = [s for s in ir.walk_stmts(kir.body) if isinstance(s, ir.SharedAlloc)]
    for a in kir.allocs:
        if not a.dynamic:  # (a dynamic array's size is read at launch)
            a.shape = tuple(fold_int(d) if isinstance(d, ir.Expr) else d for d in a.shape)
    for s in ir.walk_stmts(kir.body):
        if isinstance(s, ir.For) and isinstance(s.prefetch, ir.Expr):
            depth = fold_int(s.prefetch)
            if depth is None or depth < 1:
                raise KernelError(
                    kir.name, "prefetch must be a positive integer constant", s.prefetch.loc
                )
            s.prefetch = depth


def _shared_memory(spec: Specialised, constexprs: dict) -> None:
    if spec.kir.grouped:
        spec.shared_bytes = checks.check_shared_budget(spec.kir, require_constant=True)


def _uniformity(spec: Specialised, constexprs: dict) -> None:
    if spec.kir.grouped:
        spec.uniformity = uniformity.analyse(spec.kir)
        uniformity.check_collectives(spec.kir, spec.uniformity)


def _types(spec: Specialised, constexprs: dict) -> None:
    type_kernel(spec.kir)
    if spec.kir.grouped:
        checks.check_tile_sizes(spec.kir)


def _webs(spec: Specialised, constexprs: dict) -> None:
    # after typing (a web keeps its variable's type), before the analyses that are per
    # name: an unrelated uniform loop counter must not look varying
    if spec.kir.grouped:
        split_webs(spec.kir)


def _copies(spec: Specialised, constexprs: dict) -> None:
    propagate_copies(spec.kir)


def _prefetch(spec: Specialised, constexprs: dict) -> None:
    if spec.kir.grouped:
        mark_prefetch_waits(spec.kir)


def _strip_mine(spec: Specialised, constexprs: dict) -> None:
    if spec.kir.grouped:
        strip_mine(spec.kir, spec.uniformity)


def _regions(spec: Specialised, constexprs: dict) -> None:
    if spec.kir.grouped:
        spec.schedule = form_regions(spec.kir, spec.uniformity)


SHARED_PASSES = (
    Pass("constexprs", _bind_constexprs, "constexpr parameters become constants"),
    Pass("shared_memory", _shared_memory, "shared-array shapes folded, budget checked"),
    Pass("types", _types, "every expression and variable typed"),
    Pass("webs", _webs, "unrelated uses of one variable name become variables of their own"),
    Pass("copies", _copies, "copies of tiles into temporaries removed"),
    Pass("uniformity", _uniformity, "which values vary by lane; collectives checked"),
    Pass("prefetch", _prefetch, "waits that may leave copies in flight (tile.range)"),
)
# passes a target may list as its own (docs/targets.md)
STRIP_MINE = Pass("strip_mine", _strip_mine, "lane-strided loops become uniform loops")
REGIONS = Pass("regions", _regions, "grouped kernels cut into lane regions at collectives")
PASS_NAMES = tuple(p.name for p in SHARED_PASSES) + (STRIP_MINE.name, REGIONS.name)


def specialise(
    kir: ir.KernelIR,
    constexprs: dict[str, object],
    passes: tuple[Pass, ...] = (),
    boundscheck: bool = False,
    dump: frozenset[str] = frozenset(),
) -> Specialised:
    """Run the shared passes, then ``passes`` (a target's own), on a copy of ``kir``;
    keep the text after each pass named in ``dump``."""
    kir = copy.deepcopy(kir)
    kir.boundscheck = boundscheck
    spec = Specialised(kir)
    for p in SHARED_PASSES + tuple(passes):
        p.run(spec, constexprs)
        if p.name in dump:
            spec.dumps[p.name] = pass_text(spec, p.name)
    return spec


def pass_text(spec: Specialised, name: str) -> str:
    """The IR after pass ``name`` (the region schedule after ``regions``)."""
    if name != "regions":
        return format_kernel(spec.kir)
    if spec.schedule is None:
        return "flat kernel: one region, run once per tile\n"
    return format_schedule(spec.schedule)


def _source_hash(
    info: SourceInfo, helpers: list, constants: dict, options: KernelOptions, params: list
) -> str:
    digest = hashlib.sha256()
    digest.update(repr([p.describe() for p in params]).encode())  # a factory's dtypes
    digest.update(repr(sorted(constants.items())).encode())
    digest.update(ast.unparse(info.fn_node).encode())
    for helper in helpers:
        digest.update(ast.unparse(helper.source_info().fn_node).encode())
    digest.update(repr((options.tile, options.shared, options.num_warps)).encode())
    return digest.hexdigest()


def _substitute(kir: ir.KernelIR, values: dict[str, object]) -> None:
    """Replace every read of a constexpr parameter by its value."""

    def fix(node: object) -> object:
        if isinstance(node, ir.Name) and node.name in values:
            return ir.Const(node.loc, values[node.name])
        if isinstance(node, DTypeVar):  # T of ``T: dtype_constexpr``, in a cast or alloc
            return values[node.name]
        if isinstance(node, (ir.Expr, ir.Stmt)):
            for f in dataclasses.fields(node):
                value = getattr(node, f.name)
                if isinstance(value, DTypeVar):
                    setattr(node, f.name, values[value.name])
                elif isinstance(value, list):
                    setattr(node, f.name, [fix(v) for v in value])
                elif isinstance(value, tuple) and f.name == "shape":
                    setattr(node, f.name, tuple(fix(v) for v in value))
                elif isinstance(value, (ir.Expr, ir.Stmt)):
                    setattr(node, f.name, fix(value))
        return node

    kir.body = [fix(s) for s in kir.body]
