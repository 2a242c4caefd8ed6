"""The child of ``python -m bench.compile --batch CASE``: one cold batch of compiles.

Cases (each run with an empty ``TESSERA_CACHE_DIR`` and ``TESSERA_COMPILE_WORKERS`` set
by the parent):

* ``mlp``: a ``@graph.module`` of three kernels on the CPU (x @ w1 + b1, ReLU; @ w2;
  softmax), called once on 256 x 128 inputs: its kernels compiled side by side before its
  first run (tessera/ops/compile_ahead.py), then run.
* ``attention``: the split flash attention (``attention_split`` and
  ``attention_combine``, as a GPU runs it on 4096 queries and keys, d = 16) lowered as on a
  GPU and run on the CPU.
* ``gemm_cubins``: the cubins (sm_90, no GPU needed) of the 8 configs of
  bench/autotune_sweep.py's GEMM, as a sweep on a GPU makes them (CUDA compile jobs).
* ``attention_cubins``: the cubins (sm_90) of the split attention's two kernels, as the
  operator layer makes them before the first run on a GPU.

With one compiler the cubin jobs compile one after another in this process (as their
launches would); with more, side by side (kernel/compile_pool.py), and this process then
reads each from the cubin cache (as a launch does). Prints one JSON line: the seconds,
the compiles here and in workers, the cache hits and a checksum of the results.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

import tessera as ts
from tessera import graph, op
from tessera.kernel import compile_pool
from tessera.kernel.targets.cuda import CUDA
from tessera.ops import plan
from tessera.ops.compile_ahead import compile_ahead
from tessera.ops.passes import lower

from .autotune_sweep import linear_relu

ARCH = "sm_90"


@graph.module("mlp")
def mlp(x, w1, b1, w2):
    h = op.relu(op.matmul(x, w1) + b1)
    return op.softmax(op.matmul(h, w2))


@graph.module("split_attention")
def attention(q, k, v):
    return op.flash_attention(q, k, v)


def _attention_inputs() -> list:
    rng = np.random.default_rng(3)
    return [rng.standard_normal((4096, 16)).astype(np.float16) for _ in range(3)]


def _split_lowered(arrays: list):
    lowered = lower(attention._trace(plan.operands(attention.name, arrays)), True)
    assert [g.head.op for g in lowered.groups] == ["attention_split", "attention_combine"]
    return lowered


def run_mlp() -> float:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 128)).astype(np.float32)
    w1 = rng.standard_normal((128, 256)).astype(np.float32)
    b1 = rng.standard_normal(256).astype(np.float32)
    w2 = rng.standard_normal((256, 64)).astype(np.float32)
    return float(mlp(x, w1, b1, w2).astype(np.float64).sum())


def run_attention() -> float:
    arrays = _attention_inputs()
    lowered = _split_lowered(arrays)
    (out,) = plan.run(lowered, plan.operands(attention.name, arrays))
    return float(out.astype(np.float64).sum())


def gemm_jobs() -> list:
    m, k, n = 256, 128, 256
    a, b = np.zeros((m, k), np.float32), np.zeros((k, n), np.float32)
    bias, c = np.zeros(n, np.float32), np.zeros((m, n), np.float32)
    jobs = []
    for cf in linear_relu.configs:
        grid = (-(-m // cf.BM), -(-n // cf.BN))
        kernel = linear_relu.kernel_for(cf)
        jobs += kernel.compile_jobs(grid, (a, b, bias, c), target="cuda", arch=ARCH)
    return jobs


def attention_jobs() -> list:
    lowered = _split_lowered(_attention_inputs())
    jobs = []
    run = compile_pool.compile_all
    compile_pool.compile_all = lambda batch, what: jobs.extend(batch)  # keep, run below
    try:
        with ts.config(compile_workers=2):  # (asked for the jobs whatever the count)
            compile_ahead(lowered, plan._calls(lowered), {}, CUDA, arch=ARCH)
    finally:
        compile_pool.compile_all = run
    return jobs


def run_cubins(jobs: list) -> float:
    compile_pool.compile_all(jobs, "cubins")  # (with one compiler: nothing, they compile below)
    total = 0
    for job in jobs:  # what each launch does: read the cubin, or compile it
        _, cubin = job.here()
        total += len(cubin)
    return float(total > 0 and len(jobs))


CASES = {
    "mlp": run_mlp,
    "attention": run_attention,
    "gemm_cubins": lambda: run_cubins(gemm_jobs()),
    "attention_cubins": lambda: run_cubins(attention_jobs()),
}


def main() -> None:
    case = sys.argv[1]
    start = time.perf_counter()
    checksum = CASES[case]()
    seconds = time.perf_counter() - start
    counters = ts.stats()
    record = {
        "case": case,
        "batch_s": seconds,
        "compiled_here": counters["compiles"],
        "compiled_in_workers": counters["worker_compiles"],
        "cache_hits": counters["disk_cache_hits"],
        "checksum": checksum,
    }
    print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
