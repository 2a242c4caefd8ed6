"""Run under ``mpiexec -n 2`` with a mode and a folder; each rank writes what it saw to
``<folder>/rank<r>.txt`` (ranks' standard outputs interleave).

* ``world`` / ``rank`` (the autotune scope): each rank's injected timings favour a
  different config; each rank writes the config it launched.
* ``unmatched``: rank 1 launches an autotuned kernel that rank 0 never launches; rank 1
  writes the error it got (TESSERA_COLLECTIVE_TIMEOUT decides when), rank 0 waits for
  that report and ends.
* ``different_keys``: the ranks launch one autotuned kernel with different values of its
  key ``n``; each writes the error it got.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
from mpi4py import MPI

import tessera as ts
from tessera import dist, f32, group_linear_id, mut, tile

RANK = MPI.COMM_WORLD.Get_rank()


def injected(run, config):
    """Rank 0 measures BM=64 as faster, rank 1 measures BM=128 as faster."""
    run()
    fast = 64 if RANK == 0 else 128
    return [0.001 if config.BM == fast else 0.002]


def add(x: f32[n], y: mut[f32[n]]):
    i = group_linear_id() * BM + tile.linear_id()
    if i < n:
        y[i] += x[i]


def tuned(scope: str = "world", key=None):
    return ts.kernel.autotune(
        space=dict(BM=[64, 128]), key=key, tile=lambda c: (c.BM,), measure=injected, scope=scope
    )(add)


def launch(kernel, n: int) -> tuple:
    x = np.arange(n, dtype=np.float32)
    y = np.zeros(n, np.float32)
    kernel[lambda c: -(-n // c.BM)](x, y)
    assert np.array_equal(y, x)
    return x, y


def report(folder: str, text: str) -> None:
    path = f"{folder}/rank{RANK}.txt"
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)  # whole, or not at all: the other rank polls for it


def main(mode: str, folder: str) -> None:
    if mode in ("world", "rank"):
        kernel = tuned(mode)
        x, y = launch(kernel, 500)
        report(folder, f"BM={kernel.best_config(x, y)['BM']}")
        return
    if mode == "unmatched" and RANK == 0:  # never launches it: waits for rank 1's report
        deadline = time.monotonic() + 60
        while not os.path.exists(f"{folder}/rank1.txt") and time.monotonic() < deadline:
            time.sleep(0.05)
        return
    started = time.monotonic()
    try:
        launch(tuned(key=["n"]), 500 + 100 * RANK)
        report(folder, "no error")
    except (dist.CollectiveTimeout, dist.CollectiveMismatch) as exc:
        report(folder, f"{type(exc).__name__} {time.monotonic() - started:.1f}\n{exc}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
