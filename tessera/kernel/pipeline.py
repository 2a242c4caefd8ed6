"""The compiler's stages, in order, in one place.

``front`` runs when the decorator runs and raises every error that does not depend on
the arguments; ``specialise`` runs once per specialisation key at the first launch that
needs it. Each stage has a name (``STAGES``) so later tools can dump or inspect it.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import hashlib

from ..errors import SourceLoc
from . import ir
from .analysis import checks, uniformity
from .analysis.prefetch import mark_prefetch_waits
from .analysis.regions import Schedule, form_regions
from .analysis.strip_mine import strip_mine
from .analysis.webs import split_webs
from .frontend import Frontend, SourceInfo
from .returns import eliminate_returns
from .signature import ParamSpec, symbols_of
from .typer import Typer, fold_int

STAGES = ("ir", "regions", "cpu")


@dataclasses.dataclass
class KernelOptions:
    tile: tuple[int, ...] | None
    shared: int | None


def front(
    name: str, info: SourceInfo, params: list[ParamSpec], options: KernelOptions
) -> ir.KernelIR:
    """Source → checked, untyped IR (types too when the kernel has no constexpr)."""
    grouped = options.tile is not None
    symbols = symbols_of(params)
    fe = Frontend(name, params, grouped, symbols)
    body = fe.lower_function(info)
    body = eliminate_returns(body, "_returned")
    loc = SourceLoc(info.filename, info.fn_node.lineno + info.line_offset, info.fn_node.col_offset)
    kir = ir.KernelIR(
        name=name,
        params=params,
        body=body,
        grouped=grouped,
        tile_shape=tuple(options.tile or ()),
        shared_budget=options.shared,
        loc=loc,
        allocs=fe.allocs,
        symbols=symbols,
    )
    kir.source_hash = _source_hash(info, fe.helpers_used, fe.global_constants, options)
    checks.check_mut_writes(kir)
    if grouped:
        u = uniformity.analyse(kir)
        uniformity.check_collectives(kir, u)
        checks.check_shared_budget(kir, require_constant=False)
    if not any(p.kind == "constexpr" for p in params):
        Typer(copy.deepcopy(kir)).run()  # type errors surface at decoration
    return kir


@dataclasses.dataclass
class Specialised:
    kir: ir.KernelIR
    schedule: Schedule | None
    shared_bytes: int


def specialise(
    kir: ir.KernelIR, constexprs: dict[str, object], boundscheck: bool = False
) -> Specialised:
    """Bind constexpr values, type, check the shared budget and form regions."""
    kir = copy.deepcopy(kir)
    kir.boundscheck = boundscheck
    if constexprs:
        _substitute(kir, constexprs)
    # the deep copy duplicated the allocations; the body's copies are the ones to keep
    kir.allocs = [s for s in ir.walk_stmts(kir.body) if isinstance(s, ir.SharedAlloc)]
    for a in kir.allocs:
        a.shape = tuple(fold_int(d) if isinstance(d, ir.Expr) else d for d in a.shape)
    shared_bytes = 0
    schedule = None
    if kir.grouped:
        shared_bytes = checks.check_shared_budget(kir, require_constant=True)
        strip_mine(kir, uniformity.analyse(kir))
    Typer(kir).run()
    if kir.grouped:
        # after typing (a web keeps its variable's type), before the analyses that are
        # per name: an unrelated uniform loop counter must not look varying
        split_webs(kir)
        u = uniformity.analyse(kir)
        uniformity.check_collectives(kir, u)
        mark_prefetch_waits(kir)
        schedule = form_regions(kir, u)
    return Specialised(kir, schedule, shared_bytes)


def _source_hash(info: SourceInfo, helpers: list, constants: dict, options: KernelOptions) -> str:
    digest = hashlib.sha256()
    digest.update(repr(sorted(constants.items())).encode())
    digest.update(ast.unparse(info.fn_node).encode())
    for helper in helpers:
        digest.update(ast.unparse(helper.source_info().fn_node).encode())
    digest.update(repr((options.tile, options.shared)).encode())
    return digest.hexdigest()


def _substitute(kir: ir.KernelIR, values: dict[str, object]) -> None:
    """Replace every read of a constexpr parameter by its value."""

    def fix(node: object) -> object:
        if isinstance(node, ir.Name) and node.name in values:
            return ir.Const(node.loc, values[node.name])
        if isinstance(node, (ir.Expr, ir.Stmt)):
            for f in dataclasses.fields(node):
                value = getattr(node, f.name)
                if isinstance(value, list):
                    setattr(node, f.name, [fix(v) for v in value])
                elif isinstance(value, tuple) and f.name == "shape":
                    setattr(node, f.name, tuple(fix(v) for v in value))
                elif isinstance(value, (ir.Expr, ir.Stmt)):
                    setattr(node, f.name, fix(value))
        return node

    kir.body = [fix(s) for s in kir.body]
