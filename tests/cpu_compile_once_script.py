"""One process of tests/test_cpu_compile_once.py: wait until all its sibling processes
are ready (files in the folder given), launch a CPU kernel, print this process's compiles
and disk-cache hits. The processes share TESSERA_CACHE_DIR."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

import tessera as ts
from tessera import f32, kernel, mut, tile


@kernel
def node_once(x: f32[n], y: mut[f32[n]], alpha: f32):
    i = tile.linear_id()
    if i < n:
        y[i] = alpha * x[i] + 1.0


if __name__ == "__main__":
    ready, count = Path(sys.argv[1]), int(sys.argv[2])
    (ready / str(time.time_ns())).touch()
    deadline = time.monotonic() + 120
    while len(list(ready.iterdir())) < count and time.monotonic() < deadline:
        time.sleep(0.01)  # all start compiling at once, as the ranks of a node do
    x = np.arange(64, dtype=np.float32)
    y = np.zeros_like(x)
    with ts.config(target="cpu"):
        node_once[64](x, y, 2.0)
    assert np.array_equal(y, 2.0 * x + 1.0)
    print(ts.stats()["compiles"], ts.stats()["disk_cache_hits"])
