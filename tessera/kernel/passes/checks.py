"""Checks that need no argument values: statements nested deeper than generated code can
hold, writes to read-only parameters, variables read where they may be unassigned, the
shared-memory budget of a group, and group shapes the sub-group primitives can use.
"""

from __future__ import annotations

from ...dtypes import DTypeVar
from ...errors import KernelError
from ...tile.primitives import SUBGROUP, subgroup_width
from .. import ir
from ..typer import fold_int
from . import gemm_loops

DEFAULT_SHARED_BUDGET = 48 * 1024  # what CUDA gives a block without opting in


MAX_BLOCK_DEPTH = 40  # statements nested in statements (Python's parser takes 99 levels)
MAX_LOOP_DEPTH = 8  # loops nested in loops: Python compiles 20, a target's frame adds 9


def check_nesting(kir: ir.KernelIR) -> None:
    """Refuse statements nested past what every target's generated code can hold: the
    CPU wraps the body in loops over chunks, groups and lanes (up to 5) and lowers a
    shared-array reduction or copy to a loop per dim (up to 4); Python compiles at most
    20 nested loops and 99 levels of indentation. Helpers count where they are called."""

    def visit(body: list[ir.Stmt], blocks: int, loops: int) -> None:
        for s in body:
            inner = loops + isinstance(s, (ir.For, ir.While))
            if inner > MAX_LOOP_DEPTH:
                raise KernelError(kir.name, f"loops nested more than {MAX_LOOP_DEPTH} deep", s.loc)
            for b in s.bodies():
                if b and blocks + 1 > MAX_BLOCK_DEPTH:
                    raise KernelError(
                        kir.name, f"statements nested more than {MAX_BLOCK_DEPTH} deep", b[0].loc
                    )
                visit(b, blocks + 1, inner)

    visit(kir.body, 0, 0)


def check_mut_writes(kir: ir.KernelIR) -> None:
    """Stores and atomics into a parameter must target a ``mut[...]`` parameter."""
    readonly = {p.name for p in kir.params if p.kind == "array" and not p.mutable}
    for s in ir.walk_stmts(kir.body):
        targets = []
        if isinstance(s, ir.Store):
            targets.append((s.array, s))
        for e in ir.stmt_exprs(s):
            if isinstance(e, ir.PrimCall) and e.prim.writes:
                targets.append((e.args[0], e))
        for array, node in targets:
            if array.name in readonly:
                raise KernelError(
                    kir.name,
                    f"cannot write to parameter '{array.name}': it is not declared mut[...] "
                    f"(write '{array.name}: mut[...]' in the signature)",
                    node.loc,
                )


def shared_sizes(kir: ir.KernelIR) -> list[tuple[ir.SharedAlloc, int | None]]:
    """Each allocation with its size in bytes (None while a dim is not yet constant)."""
    out = []
    for a in kir.allocs:
        if a.dynamic:  # sized at launch (launch.check_dynamic_shared)
            continue
        dims = [fold_int(d) if isinstance(d, ir.Expr) else d for d in a.shape]
        if any(d is None for d in dims) or isinstance(a.dtype, DTypeVar):  # T: bound per launch
            out.append((a, None))
            continue
        for d, e in zip(dims, a.shape):
            if d <= 0:
                raise KernelError(
                    kir.name, f"shared array size {d} must be positive", getattr(e, "loc", a.loc)
                )
        n = 1
        for d in dims:
            n *= d
        out.append((a, n * a.dtype.itemsize))
    return out


def check_shared_budget(kir: ir.KernelIR, require_constant: bool) -> int:
    """Raise if the allocations exceed ``shared=``; returns the bytes used."""
    sizes = shared_sizes(kir)
    for a, size in sizes:
        if size is None and require_constant:
            raise KernelError(
                kir.name,
                "a shared array's size must be a compile-time constant (a literal, a "
                "constexpr parameter or an autotune parameter)",
                a.loc,
            )
    total = sum(size for _, size in sizes if size is not None)
    budget = DEFAULT_SHARED_BUDGET if kir.shared_budget is None else kir.shared_budget
    if total > budget:
        biggest = max(sizes, key=lambda p: p[1] or 0)[0]
        detail = ", ".join(f"{a.target}: {size} B" for a, size in sizes if size is not None)
        raise KernelError(
            kir.name,
            f"shared memory over budget: the allocations need {total} bytes ({detail}) but "
            f"the kernel declares shared={budget} bytes",
            biggest.loc,
        )
    return total


def check_subgroups(kir: ir.KernelIR) -> None:
    """Shuffles work within sub-groups of SUBGROUP lanes: the group must be a multiple of
    that, or one sub-group of a power-of-two number of lanes."""
    lanes = 1
    for t in kir.tile_shape:
        lanes *= t
    if subgroup_width(lanes) is not None:
        return
    for s in ir.walk_stmts(kir.body):
        call = ir.prim_call(s)
        if call is not None and call.prim.subgroups:
            raise KernelError(
                kir.name,
                f"{call.prim.name} works within sub-groups of {SUBGROUP} lanes; a group of "
                f"{lanes} lanes is neither a multiple of {SUBGROUP} nor a power of two below it",
                call.loc,
            )


def check_assigned_before_use(kir: ir.KernelIR) -> None:
    """A variable must be assigned on every path that reaches a read of it (a loop's
    body may run zero times; a branch may not be taken). Each lane has its own variables,
    so a value assigned on some lanes only would be garbage on the others."""
    _assigned_walk(kir, kir.body, set())


def _assigned_walk(kir: ir.KernelIR, body: list[ir.Stmt], defined: set[str]) -> None:
    """Check ``body``; ``defined`` (the surely assigned names) is updated in place."""
    for s in body:
        for e in ir.stmt_exprs(s):
            if isinstance(e, ir.Name) and e.name in kir.user_vars and e.name not in defined:
                source = kir.user_vars[e.name]
                raise KernelError(
                    kir.name,
                    f"'{source}' may be read before it is assigned: it is not assigned on "
                    "every path to this line (assign it before the if or loop)",
                    e.loc,
                )
        if isinstance(s, ir.Assign):
            defined.add(s.target)
        elif isinstance(s, ir.If):
            then, orelse = set(defined), set(defined)
            _assigned_walk(kir, s.body, then)
            _assigned_walk(kir, s.orelse, orelse)
            defined |= then & orelse
        elif isinstance(s, ir.For):
            _assigned_walk(kir, s.body, set(defined) | {s.var})
        elif isinstance(s, ir.While):
            _assigned_walk(kir, s.body, set(defined))
        elif isinstance(s, ir.SharedAlloc):
            defined.add(s.target)


def check_tile_sizes(kir: ir.KernelIR, exempt: set[str] | None = None) -> None:
    """A tile is held by the group (in shared memory on CUDA): one larger than the
    group's shared-memory budget cannot be, and is a compile error at its assignment.
    ``exempt``: tiles not held in shared memory (None: a GEMM loop's accumulator and
    epilogue tiles, which a target may keep in registers; a target that does not checks
    them itself)."""
    budget = DEFAULT_SHARED_BUDGET if kir.shared_budget is None else kir.shared_budget
    if exempt is None:
        exempt = gemm_loops.register_tiles(kir)
    for s in ir.walk_stmts(kir.body):
        t = kir.var_types.get(s.target) if isinstance(s, ir.Assign) else None
        if isinstance(t, ir.TileType) and s.target not in exempt:
            nbytes = t.size * (4 if t.dtype.itemsize < 4 else t.dtype.itemsize)
            if nbytes > budget:
                raise KernelError(
                    kir.name,
                    f"tile '{ir.user_name(s.target)}' ({t}) needs {nbytes} bytes but the "
                    f"group's budget is {budget} bytes (shared=); use smaller blocks",
                    s.loc,
                )
