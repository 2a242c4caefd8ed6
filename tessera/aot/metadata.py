"""Kernel metadata of an image, with the keys of seed 004 §11.2 (ABI.md §4).

``name``; ``group`` (the ``tile=`` lanes); ``tile`` {M, N, K, stages} when the kernel
multiplies tile values (``tile.dot``: the block of its product, its depth, and the staging
ring's depth on CUDA); ``fragments`` {mma, dtype_in, dtype_acc} when that product runs on
tensor cores; ``resources`` {regs_per_thread, smem_per_cta, spill_bytes}; ``launch`` {grid,
block}: a grid counts groups and is given per launch (``"per launch"``), a block is the
group (or a flat kernel's block of lanes); ``epilogue``: the element-wise statements after
the last product, by operation. ``tsrKernelGetInfo`` returns it as JSON.
"""

from __future__ import annotations

from ..kernel import ir

_MMA_INPUTS = ("f16", "bf16")
_DATA_MOVEMENT = (
    "load_block",
    "store_block",
    "expand_dims",
    "broadcast",
    "gather",
)  # what the sm_80 tensor-core path multiplies (m16n8k16)


def _dots(kir: ir.KernelIR) -> list[ir.PrimCall]:
    found = []
    for stmt in ir.walk_stmts(kir.body):
        for e in ir.stmt_exprs(stmt):
            if isinstance(e, ir.PrimCall) and e.prim.name == "tile.dot":
                found.append(e)
    return found


def _epilogue(kir: ir.KernelIR) -> list[str]:
    """The operations applied to tile values after the last ``tile.dot`` statement."""
    statements = list(ir.walk_stmts(kir.body))
    last = max(
        (
            i
            for i, s in enumerate(statements)
            if any(
                isinstance(e, ir.PrimCall) and e.prim.name == "tile.dot" for e in ir.stmt_exprs(s)
            )
        ),
        default=None,
    )
    if last is None:
        return []
    ops: list[str] = []
    for stmt in statements[last + 1 :]:
        for e in ir.stmt_exprs(stmt):
            name = None
            if isinstance(e, ir.BinOp):
                name = e.op
            elif isinstance(e, ir.PrimCall) and not e.prim.name.endswith(_DATA_MOVEMENT):
                name = e.prim.name
            elif isinstance(e, ir.MathCall):
                name = e.func
            if name and name not in ops:
                ops.append(name)
    return ops


def _tile(kir: ir.KernelIR, stages: int | None) -> tuple[dict | None, str | None]:
    """The {M, N, K, stages} of the kernel's first product, and its input dtype."""
    dots = _dots(kir)
    if not dots:
        return None, None
    dot = dots[0]
    a, b = dot.args[0].type, dot.args[1].type
    tile = {"M": a.shape[0], "N": b.shape[1], "K": a.shape[1]}
    if stages is not None:
        tile["stages"] = stages
    return tile, a.dtype.name


def cpu(k, spec, image) -> dict:
    kir = spec.kir
    tile, _ = _tile(kir, None)
    meta = {
        "name": k.name,
        "target": "cpu",
        "group": list(k.options.tile) if k.grouped else None,
        "resources": {
            "regs_per_thread": None,
            "smem_per_cta": spec.shared_bytes,
            "spill_bytes": None,
        },
        "launch": {"grid": "per launch", "block": list(image.tile) if k.grouped else [1, 1, 1]},
        "epilogue": _epilogue(kir),
    }
    if tile is not None:
        meta["tile"] = tile
    return meta


def cuda(k, spec, image, arch: str, threads: int, report: dict, stages: int, ampere: bool):
    """The metadata of a CUDA specialisation; ``report`` what ptxas said (registers,
    spills, shared bytes) for ``arch``."""
    kir = spec.kir
    tile, dtype_in = _tile(kir, stages)
    meta = {
        "name": k.name,
        "target": "cuda",
        "arch": arch,
        "group": list(k.options.tile) if k.grouped else None,
        "resources": {
            "regs_per_thread": report["registers_per_thread"],
            "smem_per_cta": report["shared_bytes"],
            "spill_bytes": report["spill_bytes"],
        },
        "launch": {"grid": "per launch", "block": [threads, 1, 1]},
        "epilogue": _epilogue(kir),
    }
    if tile is not None:
        meta["tile"] = tile
        if ampere and dtype_in in _MMA_INPUTS:
            meta["fragments"] = {"mma": "m16n8k16", "dtype_in": dtype_in, "dtype_acc": "f32"}
    return meta
