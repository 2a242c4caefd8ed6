"""Run under ``mpiexec -n 2``: each rank's injected timings favour a different config;
each rank writes the config it launched to ``<folder>/rank<r>.txt`` (ranks' standard
outputs interleave). Arguments: the autotune scope, the folder."""

from __future__ import annotations

import sys

import numpy as np
from mpi4py import MPI

import tessera as ts
from tessera import f32, group_linear_id, mut, tile

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


tuned = ts.kernel.autotune(
    space=dict(BM=[64, 128]), tile=lambda c: (c.BM,), measure=injected, scope=sys.argv[1]
)(add)
x = np.arange(500, dtype=np.float32)
y = np.zeros(500, np.float32)
tuned[lambda c: -(-500 // c.BM)](x, y)
assert np.array_equal(y, x)
with open(f"{sys.argv[2]}/rank{RANK}.txt", "w") as f:
    f.write(f"BM={tuned.best_config(x, y)['BM']}")
