"""How much shared memory a group may use on each GPU architecture, and the check that
names a kernel's largest shared arrays when it asks for more.

Tiles live in shared memory on CUDA (one value per group), so a large ``tile_shape``
can ask for more than a block may have; ptxas would then refuse the kernel with a
report about a mangled function name. The limits are CUDA's "maximum shared memory per
thread block" with the opt-in above 48 KiB (the CUDA C++ Programming Guide's table of
compute capabilities); on a GPU the device's own attribute is used instead.
"""

from __future__ import annotations

from ....errors import KernelError

KIB = 1024
# (major, minor) -> bytes of shared memory one block may use (opted in)
OPT_IN_LIMITS = {
    (7, 0): 96 * KIB,
    (7, 2): 96 * KIB,
    (7, 5): 64 * KIB,
    (8, 0): 163 * KIB,
    (8, 6): 99 * KIB,
    (8, 7): 163 * KIB,
    (8, 9): 99 * KIB,
    (9, 0): 227 * KIB,
    (10, 0): 227 * KIB,
    (12, 0): 99 * KIB,
}


def limit_for(cc: tuple[int, int]) -> int:
    """The opt-in limit of compute capability ``cc`` (an unknown one: its major
    version's smallest known limit, else 48 KiB, which every GPU allows)."""
    if cc in OPT_IN_LIMITS:
        return OPT_IN_LIMITS[cc]
    same_major = [v for (major, _), v in OPT_IN_LIMITS.items() if major == cc[0]]
    return min(same_major) if same_major else 48 * KIB


def check(kernel, arrays: list[tuple[str, int]], limit: int, where: str) -> None:
    """Raise a KernelError naming ``kernel`` (its KIR), the total, the limit of ``where``
    and the largest arrays when ``arrays`` (name, bytes) do not fit in ``limit``."""
    total = sum(n for _, n in arrays)
    if total <= limit:
        return
    largest = sorted(arrays, key=lambda a: -a[1])[:4]
    listed = ", ".join(f"{name} {_kib(n)}" for name, n in largest)
    raise KernelError(
        kernel.name,
        f"a group keeps {_kib(total)} in shared memory ({listed}); {where} allows at most "
        f"{_kib(limit)} per block: use smaller tiles (for op.matmul, a smaller tile_shape)",
        kernel.loc,
    )


def _kib(n: int) -> str:
    return f"{n / KIB:.0f} KiB" if n % KIB == 0 else f"{n / KIB:.1f} KiB"


def shaped_view(simulated: bool):
    """``_shaped(flat, (m, n))``: a C-ordered view of shape ``(m, n)`` (constants) of the
    1-D slice ``flat`` of dynamic shared memory, with no run-time call. numba-cuda's own
    ``reshape`` calls a helper that must be linked and builds the shape in local memory;
    this builds the array value directly, so its shape and strides are constants that
    NVVM folds into the addressing. The simulator runs Python: NumPy's reshape there."""
    if simulated:
        return lambda flat, shape: flat.reshape(shape)
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic

    @intrinsic
    def _shaped(typingctx, flat, shape):
        if not isinstance(flat, types.Array) or not isinstance(shape, types.BaseTuple):
            return None
        result = types.Array(flat.dtype, len(shape), "C")

        def codegen(context, builder, sig, args):
            source = context.make_array(sig.args[0])(context, builder, args[0])
            view = context.make_array(result)(context, builder)
            intp = context.get_value_type(types.intp)
            extents = [
                context.cast(builder, e, t, types.intp)
                for e, t in zip(cgutils.unpack_tuple(builder, args[1]), sig.args[1])
            ]
            itemsize = context.get_abi_sizeof(context.get_data_type(flat.dtype))
            strides, step = [], intp(itemsize)
            for extent in reversed(extents):
                strides.insert(0, step)
                step = builder.mul(step, extent)
            context.populate_array(
                view,
                data=source.data,
                shape=cgutils.pack_array(builder, extents),
                strides=cgutils.pack_array(builder, strides),
                itemsize=intp(itemsize),
                meminfo=None,
            )
            return view._getvalue()

        return result(flat, shape), codegen

    return _shaped
