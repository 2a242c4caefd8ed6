"""Tessera: an explicit tile/SPMD kernel language for Python, JIT-compiled through Numba.

>>> import numpy as np
>>> import tessera as ts
>>> ts.f32(1.5)
np.float32(1.5)

See README.md for a first kernel and docs/language.md for the language.
"""

from . import dist, graph, observe, op, rng, tile
from .autotune import AutotuneError, autotune
from .capture import jit
from .config import config
from .decorators import kernel
from .dtypes import (
    KiB,
    MiB,
    bf16,
    bool_,
    complex64,
    complex128,
    constexpr,
    dims,
    dtype_constexpr,
    f8e4m3,
    f8e5m2,
    f16,
    f32,
    f64,
    i8,
    i16,
    i32,
    i64,
    mut,
    u8,
    u16,
    u32,
    u64,
)
from .errors import (
    AsyncCopyError,
    CacheWarning,
    CaptureError,
    CaptureWarning,
    CompileWorkerWarning,
    DivergenceError,
    InternalError,
    KernelArithmeticError,
    KernelAssertionError,
    KernelError,
    KernelRuntimeError,
    LaunchError,
    OutOfBoundsError,
    RaceError,
    SanitizerError,
    TesseraError,
    TesseraWarning,
    UninitializedReadError,
)
from .kernel.func import func
from .kernel.kernel import Kernel
from .kernel.targets import Event, event, stream, synchronize
from .mesh import index_launch
from .observe import bench, metrics, profile, trace
from .observe.stats import stats
from .runtime import threads
from .tile import (
    cp_async,
    group_count,
    group_id,
    group_linear_id,
    group_tile_count,
    reduce_max,
    reduce_min,
    reduce_sum,
    tbarrier,
    tshared,
)
from .version import __version__

threads.set_default()  # before Numba's thread pool starts: cores / ranks on this node

__all__ = [
    "AsyncCopyError",
    "AutotuneError",
    "CacheWarning",
    "CaptureError",
    "CaptureWarning",
    "CompileWorkerWarning",
    "DivergenceError",
    "InternalError",
    "KernelArithmeticError",
    "KernelAssertionError",
    "OutOfBoundsError",
    "RaceError",
    "SanitizerError",
    "UninitializedReadError",
    "Event",
    "Kernel",
    "KernelError",
    "KernelRuntimeError",
    "KiB",
    "LaunchError",
    "MiB",
    "TesseraError",
    "TesseraWarning",
    "autotune",
    "bench",
    "bf16",
    "dims",
    "dist",
    "bool_",
    "config",
    "complex64",
    "complex128",
    "constexpr",
    "dtype_constexpr",
    "cp_async",
    "f16",
    "f32",
    "f64",
    "f8e4m3",
    "f8e5m2",
    "func",
    "graph",
    "group_count",
    "group_id",
    "group_linear_id",
    "group_tile_count",
    "i8",
    "i16",
    "i32",
    "i64",
    "index_launch",
    "jit",
    "kernel",
    "metrics",
    "mut",
    "observe",
    "op",
    "rng",
    "profile",
    "reduce_max",
    "reduce_min",
    "reduce_sum",
    "event",
    "stats",
    "stream",
    "synchronize",
    "tbarrier",
    "tile",
    "trace",
    "__version__",
    "tshared",
    "u8",
    "u16",
    "u32",
    "u64",
]
