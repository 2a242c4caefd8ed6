"""The child of ``python -m bench.compile --sweep``: one cold autotune sweep of 8 configs.

An f32 GEMM with a bias + ReLU epilogue through ``tile.dot`` (examples/gemm_tiles.py),
tuned over its block sizes (BM, BN, BK: 2 x 2 x 2 configs), launched once on 256 x 128 x
256. Prints one JSON line: the seconds of the tuned launch (every config's compile, its
trials and the winner's launch), how many configs this process compiled, how many the
compile workers did, and the winner. Run it with an empty ``TESSERA_CACHE_DIR`` (the
parent does) and ``TESSERA_COMPILE_WORKERS`` set.
"""

from __future__ import annotations

import json
import time

import numpy as np

import tessera as ts
from tessera import KiB, f32, group_id, kernel, mut, tile


@kernel.autotune(
    space=dict(BM=[32, 64], BN=[32, 64], BK=[16, 32]),
    key=["M", "N", "K"],
    tile=(64,),
    shared=64 * KiB,
)
def linear_relu(A: f32[M, K], B: f32[K, N], bias: f32[N], C: mut[f32[M, N]]):
    m0 = group_id(0) * BM
    n0 = group_id(1) * BN
    acc = tile.zeros((BM, BN), f32)
    for k0 in tile.range(0, K, BK):
        a = tile.load_block(A, (m0, k0), (BM, BK))
        b = tile.load_block(B, (k0, n0), (BK, BN))
        acc = tile.dot(a, b, acc)
    y = acc + tile.load_block(bias, (n0,), (BN,))[None, :]
    tile.store_block(C, (m0, n0), max(y, 0.0))


def main() -> None:
    rng = np.random.default_rng(0)
    m, k, n = 256, 128, 256
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    c = np.zeros((m, n), np.float32)
    start = time.perf_counter()
    linear_relu[lambda cf: (-(-m // cf.BM), -(-n // cf.BN))](a, b, bias, c)
    seconds = time.perf_counter() - start
    assert np.allclose(c, np.maximum(a @ b + bias, 0), rtol=1e-4, atol=1e-4)
    counters = ts.stats()
    record = {
        "sweep_s": seconds,
        "compiled_here": counters["compiles"],
        "compiled_in_workers": counters["worker_compiles"],
        "winner": linear_relu.best_config(a, b, bias, c),
        "checksum": float(c.astype(np.float64).sum()),
    }
    print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
