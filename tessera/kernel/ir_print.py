"""Readable text for the kernel IR and for region schedules (``k.inspect``)."""

from __future__ import annotations

from . import ir
from .passes.regions import GroupIf, GroupLoop, LaneRegion, Schedule

_PREC = {
    "or": 1,
    "and": 2,
    "not": 3,
    "cmp": 4,
    "|": 5,
    "^": 6,
    "&": 7,
    "<<": 8,
    ">>": 8,
    "+": 9,
    "-": 9,
    "*": 10,
    "/": 10,
    "//": 10,
    "%": 10,
    "**": 12,
}


def format_expr(e: ir.Expr) -> str:
    t = f":{e.type}" if getattr(e, "type", None) is not None and isinstance(e, ir.Name) else ""
    if isinstance(e, ir.Const):
        return repr(e.value)
    if isinstance(e, ir.Name):
        return e.name + t
    if isinstance(e, ir.BinOp):
        return f"({format_expr(e.left)} {e.op} {format_expr(e.right)})"
    if isinstance(e, ir.UnaryOp):
        sep = " " if e.op == "not" else ""
        return f"({e.op}{sep}{format_expr(e.operand)})"
    if isinstance(e, ir.Compare):
        return f"({format_expr(e.left)} {e.op} {format_expr(e.right)})"
    if isinstance(e, ir.BoolOp):
        return "(" + f" {e.op} ".join(format_expr(v) for v in e.values) + ")"
    if isinstance(e, ir.IfExp):
        return f"({format_expr(e.then)} if {format_expr(e.cond)} else {format_expr(e.orelse)})"
    if isinstance(e, ir.Cast):
        return f"{e.dtype.name}({format_expr(e.value)})"
    if isinstance(e, ir.MathCall):
        return f"{e.func}({', '.join(format_expr(a) for a in e.args)})"
    if isinstance(e, ir.Load):
        text = f"{e.array.name}[{', '.join(format_expr(i) for i in e.indices)}]"
        if e.mask is not None:
            text += f" if {format_expr(e.mask)} else {format_expr(e.other)}"
        return text
    if isinstance(e, ir.Shape):
        return f"{e.array.name}.shape[{e.axis}]"
    if isinstance(e, ir.Tuple):
        return f"({', '.join(format_expr(i) for i in e.items)})"
    if isinstance(e, ir.PrimCall):
        args = [format_expr(a) for a in e.args]
        args += [f"{k}={v!r}" for k, v in sorted(e.attrs.items())]
        return f"{e.prim.name}({', '.join(args)})"
    return f"<{type(e).__name__}>"


def format_stmt(s: ir.Stmt, indent: int) -> list[str]:
    pad = "  " * indent
    line = f"  # {s.loc.line}"
    if isinstance(s, ir.Assign):
        return [f"{pad}{s.target} = {format_expr(s.value)}{line}"]
    if isinstance(s, ir.Store):
        idx = ", ".join(format_expr(i) for i in s.indices)
        mask = f" if {format_expr(s.mask)}" if s.mask is not None else ""
        return [f"{pad}{s.array.name}[{idx}] = {format_expr(s.value)}{mask}{line}"]
    if isinstance(s, ir.ExprStmt):
        return [f"{pad}{format_expr(s.value)}{line}"]
    if isinstance(s, ir.If):
        out = [f"{pad}if {format_expr(s.cond)}:{line}"] + format_body(s.body, indent + 1)
        if s.orelse:
            out += [f"{pad}else:"] + format_body(s.orelse, indent + 1)
        return out
    if isinstance(s, ir.For):
        kind = "tile.range" if s.tile_range else "range"
        prefetch = format_expr(s.prefetch) if isinstance(s.prefetch, ir.Expr) else s.prefetch
        depth = f", prefetch={prefetch}" if s.prefetch else ""
        head = (
            f"{kind}({format_expr(s.start)}, {format_expr(s.stop)}, {format_expr(s.step)}{depth})"
        )
        return [f"{pad}for {s.var} in {head}:{line}"] + format_body(s.body, indent + 1)
    if isinstance(s, ir.While):
        return [f"{pad}while {format_expr(s.cond)}:{line}"] + format_body(s.body, indent + 1)
    if isinstance(s, ir.SharedAlloc):
        if s.dynamic:
            size = format_expr(s.shape[0])
            return [f"{pad}{s.target} = tshared.dynamic[{s.dtype.name}]({size}){line}"]
        return [f"{pad}{s.target} = tshared.alloc[{s.dtype.name}]({s.shape}){line}"]
    if isinstance(s, ir.CopyAsync):
        return [f"{pad}cp_async({s.dst.name} <- {s.src.name}){line}"]
    if isinstance(s, ir.Print):
        items = ", ".join(repr(i) if isinstance(i, str) else format_expr(i) for i in s.items)
        return [f"{pad}print({items}){line}"]
    if isinstance(s, ir.Assert):
        return [f"{pad}assert {format_expr(s.cond)}, {s.message!r}{line}"]
    names = {
        ir.Break: "break",
        ir.Continue: "continue",
        ir.Return: "return",
    }
    return [f"{pad}{names.get(type(s), type(s).__name__)}{line}"]


def format_body(body: list[ir.Stmt], indent: int) -> list[str]:
    if not body:
        return ["  " * indent + "pass"]
    return [line for s in body for line in format_stmt(s, indent)]


def format_kernel(kir: ir.KernelIR) -> str:
    params = ", ".join(f"{p.name}: {p.describe()}" for p in kir.params)
    head = f"kernel {kir.name}({params})"
    if kir.grouped:
        head += f" tile={kir.tile_shape} shared={kir.shared_budget}"
    return "\n".join([head + ":"] + format_body(kir.body, 1)) + "\n"


def format_schedule(schedule: Schedule) -> str:
    lines = [f"lane arrays: {sorted(schedule.lane_arrays) or 'none'}"]

    def items(its: list, indent: int) -> None:
        pad = "  " * indent
        for it in its:
            if isinstance(it, LaneRegion):
                lines.append(f"{pad}region {it.index} (per lane):")
                lines.extend(format_body(it.stmts, indent + 1))
            elif isinstance(it, GroupIf):
                lines.append(f"{pad}group if {format_expr(it.stmt.cond)}:")
                items(it.body, indent + 1)
                if it.orelse:
                    lines.append(f"{pad}group else:")
                    items(it.orelse, indent + 1)
            elif isinstance(it, GroupLoop):
                lines.extend(format_stmt(it.stmt, indent)[:1])
                items(it.body, indent + 1)
            else:
                lines.extend(f"{pad}group: {x.strip()}" for x in format_stmt(it, 0))

    items(schedule.items, 0)
    return "\n".join(lines) + "\n"
