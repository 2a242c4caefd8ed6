"""Products rounded on their own, so a GPU gives the same bits as the other targets.

NVVM contracts ``a * b + c`` into one fused multiply-add by default (its ``-fma=1``),
which rounds once where the language rounds twice (docs/language.md: elementwise results
are the same bits on every target). numba-cuda passes no NVVM option to turn that off,
so the CUDA target writes every f32/f64 product of kernel code, and of the language's
own math functions, as libdevice's ``fmul_rn``/``dmul_rn``: a product CUDA documents as
never merged into a multiply-add (``mul.rn.f32`` in the PTX). ``tile.dot`` is exempt
(TILES.md leaves its rounding to the backend) and keeps its FMAs.
"""

from __future__ import annotations

import ast
import inspect
import textwrap

from .... import dtypes as D

PRODUCTS = {D.f32: "_fmul_rn", D.f64: "_dmul_rn"}  # the generated code's names


def functions() -> dict:
    """The names :data:`PRODUCTS` refers to (libdevice; needs numba-cuda)."""
    from numba.cuda import libdevice

    return {"_fmul_rn": libdevice.fmul_rn, "_dmul_rn": libdevice.dmul_rn}


class _Products(ast.NodeTransformer):
    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.Mult):
            call = ast.Call(ast.Name("_mul", ast.Load()), [node.left, node.right], [])
            return ast.copy_location(call, node)
        return node


def separate_products(fn, mul):
    """``fn`` with each ``a * b`` written ``mul(a, b)`` (its source rewritten, its globals
    and closure kept): for the own math functions, whose products are all f32."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    tree = ast.fix_missing_locations(_Products().visit(tree))
    namespace = dict(fn.__globals__)
    cells = fn.__closure__ or ()
    namespace.update({n: c.cell_contents for n, c in zip(fn.__code__.co_freevars, cells)})
    namespace["_mul"] = mul
    exec(compile(tree, inspect.getsourcefile(fn) or "<own math>", "exec"), namespace)  # noqa: S102
    return namespace[fn.__name__]
