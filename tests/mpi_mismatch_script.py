"""Run under ``mpiexec -n 2`` with a folder (and optionally case names): in each case the
two ranks pass one collective arguments that differ in one respect. Each rank writes
``<folder>/<case>.rank<r>.txt``: the error's class name and message, or ``no error`` and
what the call returned. test_dist_mismatch.py runs every case in one job and asserts each
in its own test.

Cases marked ``debug`` run under ``TESSERA_DIST_DEBUG=1``; the others with the defaults,
where only all_gather (which exchanges its block lengths anyway) checks.
"""

from __future__ import annotations

import sys

import numpy as np

import tessera
from tessera import dist

F32_OR_F64 = (np.float32, np.float64)

# case -> (under TESSERA_DIST_DEBUG=1?, the call, given the rank)
CASES = {
    "all_gather_trailing_dims": (False, lambda r: dist.all_gather(np.ones((2, 2 + r)), "x")),
    "all_gather_dtypes": (False, lambda r: dist.all_gather(np.ones((2, 2), F32_OR_F64[r]), "x")),
    "all_gather_dims": (False, lambda r: dist.all_gather(np.ones((2, 2)), "x", dim=r)),
    "kind": (
        True,
        lambda r: (
            dist.all_reduce(np.ones(3, np.float32), "x")
            if r == 0
            else dist.all_gather(np.ones((2, 2)), "x")
        ),
    ),
    "op": (True, lambda r: dist.all_reduce(np.ones(3), "x", op=("sum", "max")[r])),
    "dtype": (True, lambda r: dist.all_reduce(np.ones(3, F32_OR_F64[r]), "x")),
    "shape": (True, lambda r: dist.all_reduce(np.ones(3 + r), "x")),
    "root": (True, lambda r: dist.broadcast(np.ones(3), "x", root=r)),
    "reduce_scatter_dim": (True, lambda r: dist.reduce_scatter(np.ones((4, 4)), "x", dim=r)),
    "deterministic": (True, lambda r: dist.all_reduce(np.ones(3), "x", deterministic=r == 0)),
}


def run(case: str, folder: str, rank: int) -> None:
    debug, call = CASES[case]
    try:
        with tessera.config(dist_debug="1" if debug else "0", collective_timeout="30"):
            got = call(rank)
        text = f"no error\n{got!r}"
    except dist.CollectiveMismatch as exc:
        text = f"{type(exc).__name__}\n{exc}"
    with open(f"{folder}/{case}.rank{rank}.txt", "w") as f:
        f.write(text)
    dist.barrier()  # the next case starts together, whatever this one did


if __name__ == "__main__":
    dist.Mesh(axes=("x",), shape=(dist.size(),))
    for name in sys.argv[2:] or list(CASES):
        run(name, sys.argv[1], dist.rank())
