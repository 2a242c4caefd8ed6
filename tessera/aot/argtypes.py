"""The Numba types of a launch's call arguments, for compiling without arrays at hand."""

from __future__ import annotations

import numpy as np

from .. import dtypes as D


def scalar_numpy_type(dtype) -> np.dtype:
    """The NumPy type a launch passes a scalar of ``dtype`` as (16- and 8-bit floats are
    computed in f32; launch._convert_scalar)."""
    return np.dtype(np.float32) if dtype in D.COMPUTED_IN_F32 else dtype.np_dtype


def numba_argtypes(params, k, layout: str, grid_rank: int, storage) -> tuple:
    """The Numba types of a launch's call arguments (arrays, scalars, symbols, the grid
    extents) for one layout class; ``storage(dtype)`` the target's array element view."""
    import numba
    from numba.np import numpy_support

    arrays, scalars = [], []
    numba_layout = "C" if layout == "contiguous" else "A"
    for p in params:
        if p.kind == "array":
            dtype = storage(p.dtype) or p.dtype.np_dtype
            element = numpy_support.from_dtype(dtype)
            arrays.append(numba.types.Array(element, p.ndim, numba_layout))
        elif p.kind == "scalar":
            scalars.append(numpy_support.from_dtype(scalar_numpy_type(p.dtype)))
    symbols = [numba.int64] * len(k.ir.symbols)
    return tuple(arrays + scalars + symbols + [numba.int64] * grid_rank)
