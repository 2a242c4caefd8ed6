"""Kernel metadata with the keys of seed 004 §11.2 (ABI.md §4): what ``k.metadata()``
reports for CUDA and what an ahead-of-time image records (``tsrKernelGetInfo``'s JSON).

``name``; ``group`` (the ``tile=`` lanes); ``tile`` {M, N, K, stages} when the kernel
multiplies tile values (``tile.dot``: the block of its product, its depth and, on CUDA's
register path, the staging ring's depth); ``fragments`` {mma, dtype_in, dtype_acc} when
that product runs on tensor cores; ``resources`` {regs_per_thread, smem_per_cta,
spill_bytes}; ``launch`` {grid, block}; ``epilogue``: the operations applied after the
last product.
"""

from __future__ import annotations

from . import ir

_MMA_INPUTS = ("f16", "bf16")  # what the sm_80 tensor-core path multiplies (m16n8k16)
# primitives that move data rather than compute (not listed in an epilogue)
_DATA_MOVEMENT = ("load_block", "store_block", "expand_dims", "broadcast", "gather")


def _is_dot(e: ir.Expr) -> bool:
    return isinstance(e, ir.PrimCall) and e.prim.name == "tile.dot"


def _dots(kir: ir.KernelIR) -> list[ir.PrimCall]:
    return [e for s in ir.walk_stmts(kir.body) for e in ir.stmt_exprs(s) if _is_dot(e)]


def epilogue(kir: ir.KernelIR) -> list[str]:
    """The operations applied to values after the last ``tile.dot`` statement, in order."""
    statements = list(ir.walk_stmts(kir.body))
    products = [i for i, s in enumerate(statements) if any(map(_is_dot, ir.stmt_exprs(s)))]
    if not products:
        return []
    ops: list[str] = []
    for stmt in statements[products[-1] + 1 :]:
        for e in ir.stmt_exprs(stmt):
            name = None
            if isinstance(e, ir.BinOp):
                name = e.op
            elif isinstance(e, ir.MathCall):
                name = e.func
            elif isinstance(e, ir.PrimCall) and not e.prim.name.endswith(_DATA_MOVEMENT):
                name = e.prim.name
            if name and name not in ops:
                ops.append(name)
    return ops


def seed_keys(
    kir: ir.KernelIR,
    group: list[int] | None,
    resources: dict,
    stages: int | None = None,
    tensor_cores: bool = False,
) -> dict:
    """The §11.2 keys but ``name`` and ``launch``: ``group``, ``resources``, ``epilogue`` and,
    for a kernel with a ``tile.dot``, ``tile`` (``stages`` when given) and ``fragments``
    (when ``tensor_cores`` multiply its f16 or bf16 inputs)."""
    meta: dict = {"group": group, "resources": resources, "epilogue": epilogue(kir)}
    dots = _dots(kir)
    if dots:
        a, b = dots[0].args[0].type, dots[0].args[1].type
        meta["tile"] = {"M": a.shape[0], "N": b.shape[1], "K": a.shape[1]}
        if stages is not None:
            meta["tile"]["stages"] = stages
        if tensor_cores and a.dtype.name in _MMA_INPUTS:
            meta["fragments"] = {"mma": "m16n8k16", "dtype_in": a.dtype.name, "dtype_acc": "f32"}
    return meta
