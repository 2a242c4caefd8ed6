"""Profile a script: time a kernel, profile it, write its trace and its metrics.

Run: python examples/profile_matmul.py [OUTPUT_DIR]
Then open OUTPUT_DIR/trace.json in https://ui.perfetto.dev and run
``tessera metrics summary OUTPUT_DIR/metrics.jsonl`` (docs/observability.md).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

import tessera as ts
from tessera import f32, kernel, mut, tile


@kernel(flops=lambda M, N, K: 2 * M * N * K)
def matmul(a: f32[M, K], b: f32[K, N], c: mut[f32[M, N]]):
    i, j = tile.id(0), tile.id(1)
    acc = 0.0
    for k in range(K):
        acc += a[i, k] * b[k, j]
    c[i, j] = acc


def main(out: Path) -> None:
    rng = np.random.default_rng(0)
    a = rng.random((128, 64), dtype=np.float32)
    b = rng.random((64, 96), dtype=np.float32)
    c = np.zeros((128, 96), np.float32)

    timing = ts.bench(matmul[128, 96], a, b, c, warmup=2, reps=10)
    print(f"bench: {timing}")

    with ts.profile() as p, ts.trace(out / "trace.json"), ts.metrics(out / "metrics.jsonl"):
        for _ in range(5):
            matmul[128, 96](a, b, c)
    print(p.table())

    np.testing.assert_allclose(c, a @ b, rtol=1e-5)
    print(f"wrote {out / 'trace.json'} and {out / 'metrics.jsonl'}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()))
