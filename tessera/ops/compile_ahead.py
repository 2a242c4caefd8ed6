"""A lowered graph's kernels compiled side by side before its first run (docs/autotune.md).

A graph module, or an op that generates several kernels (a split attention's
``attention_split`` and ``attention_combine``), launches its kernels one after another,
and each compiles at its first launch. Before the first run of a lowered graph, the
kernels it launches are asked what they would compile (``Kernel.compile_jobs``) and the
jobs run side by side in compile workers (``kernel/compile_pool.py``). Only a head start:
each launch then finds its code in the disk cache, through the checks of a warm start; a
kernel that cannot be prepared, or fails to compile, compiles at its launch as without
workers and raises there what it would raise.

The launches' arguments do not exist yet (each kernel's buffers are made as it runs):
stand-ins of the same shapes, dtypes and layout take their place, NumPy arrays made with
``np.empty`` (no memory is touched), where the graph runs on host arrays its own
arguments themselves (a read-only argument types differently). On a GPU target all are
stand-ins, which that target takes for device arrays of the same shapes.
"""

from __future__ import annotations

import logging

import numpy as np

from ..kernel import compile_pool

log = logging.getLogger("tessera")


def compile_ahead(lowered, calls: list, env: dict, target, arch: str | None = None) -> dict | None:
    """Compile the kernels of ``calls`` (plan._calls: per group, its kernel, its launch and
    for each argument the value it reads and its shape) side by side, where two or more
    of them have code to compile and two compilers or more are allowed. ``env`` holds the
    graph's arguments by value id; ``target`` is the GPU target the graph runs on, or None
    (host arrays); ``arch`` the GPU architecture to compile for (None: the current GPU's;
    naming one makes cubins where there is no GPU). compile_pool.compile_all's summary, or
    None where nothing was compiled ahead."""
    if compile_pool.workers() < 2:
        return None
    launches = [
        (source, call)
        for source, call in zip(lowered.sources, calls)
        if call is not None and not callable(source.grid)  # (autotuned: its sweep compiles)
    ]
    if len(launches) < 2:
        return None
    jobs = []
    for source, (kernel, _, shapes) in launches:
        try:  # (a stand-in too large to map is left to the launch, as any other problem)
            args = tuple(
                _stand_in(env, key, shape, a.value.dtype.np_dtype, target is None)
                for a, (key, shape) in zip(source.args, shapes)
            )
            jobs += kernel.compile_jobs(
                source.grid, args, target=None if target is None else target.name, arch=arch
            )
        except Exception as exc:  # noqa: BLE001 - its launch meets it again, and raises it
            log.debug("kernel '%s' not compiled ahead: %s", kernel.name, exc)
    if len(jobs) < 2:
        return None
    return compile_pool.compile_all(jobs, f"graph '{lowered.graph.name}'")


def _stand_in(env: dict, key: int, shape: tuple, dtype: np.dtype, host: bool):
    """The array a launch will pass, or one that types as it does."""
    found = env.get(key) if host else None
    if isinstance(found, np.ndarray) and found.size == int(np.prod(shape)):
        return found.reshape(shape)
    return np.empty(shape, dtype)
