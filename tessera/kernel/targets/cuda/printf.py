"""A kernel's ``print`` on CUDA: one ``vprintf`` per line, as numba-cuda's ``print`` makes.

numba-cuda's ``print(a, b)`` puts a space between every two items, so it cannot write the
prefix ``[group (0,) lane (3,)]`` (no space before the ``]``). ``_printf(template,
values)`` takes the whole line as a ``str.format`` template (printing.py) and fills each
``{}`` with the format numba-cuda's print uses for that value's type (its own
``print_item``: ``%lld``, ``%llu``, ``%f``, ``True``/``False``): the same ``vprintf``
call, with our separators. Lines from different threads come out in whatever order the
GPU writes them, as CUDA's printf does.

Under the simulator, which runs kernels as Python, the line is formatted the same way
and written to ``sys.stdout`` in one write.
"""

from __future__ import annotations

import functools
import sys

from .. import printing


def namespace(simulated: bool) -> dict:
    """``_printf`` for generated code: the device intrinsic, or the simulator's."""
    return {"_printf": simulated_printf if simulated else _intrinsic()}


def simulated_printf(template: str, values: tuple) -> None:
    sys.stdout.write(template.format(*(printing.printf_text(v) for v in values)))


@functools.cache
def _intrinsic():
    """``_printf(template, values)``: ``template`` a string literal, ``values`` a tuple."""
    from llvmlite import ir as llir
    from numba.cuda import cgutils, nvvmutils, types
    from numba.cuda.extending import intrinsic
    from numba.cuda.printimpl import print_item

    @intrinsic
    def printf(typingctx, template, values):
        if not isinstance(template, types.StringLiteral):
            return None  # Numba then retries with the literal's type
        text = template.literal_value

        def codegen(context, builder, signature, args):
            formats, flat = [], []
            for k, ty in enumerate(signature.args[1].types):
                fmt, vals = print_item(ty, context, builder, builder.extract_value(args[1], k))
                formats.append(fmt)
                flat.extend(vals)
            raw = text.replace("%", "%%").format(*formats)
            fmt = context.insert_string_const_addrspace(builder, raw)
            struct = cgutils.make_anonymous_struct(builder, flat)
            packed = cgutils.alloca_once_value(builder, struct)
            vprint = nvvmutils.declare_vprint(builder.module)
            voidptr = llir.PointerType(llir.IntType(8))
            builder.call(vprint, (fmt, builder.bitcast(packed, voidptr)))
            return context.get_dummy_value()

        return types.void(template, values), codegen

    return printf
