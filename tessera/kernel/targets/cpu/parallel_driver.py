"""The parallel variant of grouped kernels: one driver per argument types, not per kernel.

A grouped kernel's body is compiled once as ``_chunk(_c, args..., grid..., _nchunks)``
(program.py); its parallel variant only runs the chunks over the cores:

    for _c in prange(_nchunks):
        chunk(_c, args..., grid..., _nchunks)

Numba's parfor passes make that loop a gufunc and a call into the threading layer, about
0.5-1 s of compile whatever the loop does. Every grouped kernel's loop is the same but for
the chunk it calls, so the chunk is an argument here: the driver receives the chunk's
address and calls it through that pointer (Numba's internal calling convention,
``runtime.call_pointer``). The driver of ``n`` arguments is compiled once per process for
each list of argument types (Numba's dispatcher keeps the compiles), and every kernel with
those argument types runs on it: the second such kernel's parallel variant costs nothing
to compile. Its disk-cache image holds the driver's code and the chunk's, and binds the
chunk's address when loaded (``native.Image.bound``).
"""

from __future__ import annotations

import functools
import threading

from . import runtime

_lock = threading.Lock()


@functools.cache
def _driver_source(n: int) -> str:
    names = ", ".join(f"a{i}" for i in range(n))
    return (
        f"def _drive(_chunk, {names}):\n"
        f"    for _c in numba.prange(a{n - 1}):  # the last argument: the chunk count\n"
        f"        _call_pointer(_chunk, (_c, {names}))\n"
    )


_drivers: dict[tuple, object] = {}  # (n, Numba's options) → the driver


def driver(n: int, options: dict):
    """The process's driver of ``n`` arguments compiled with Numba's ``options`` (a
    dispatcher, ``parallel=True``): ``driver(chunk_address, args..., grid..., nchunks)``."""
    key = (n, tuple(sorted(options.items())))
    with _lock:
        found = _drivers.get(key)
        if found is None:
            import numba

            namespace = {"numba": numba, "_call_pointer": runtime.call_pointer()}
            exec(compile(_driver_source(n), f"<tessera parallel driver {n}>", "exec"), namespace)  # noqa: S102 - our codegen
            found = _drivers[key] = numba.njit(parallel=True, **options)(namespace["_drive"])
    return found
