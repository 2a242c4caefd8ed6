"""Flash attention on a GPU (GPU.md §7): ``op.flash_attention`` on f16 inputs (the CUDA
target's register row loop: both products on tensor cores) side by side with PyTorch's
``scaled_dot_product_attention`` in one process, N=4096 and N=1024, d=64, one head;
checked against float64 on fresh data. Without a GPU (or PyTorch) it records nothing and
says so."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np

import tessera
from tessera import op
from tessera.kernel.targets.cuda.streams import gpu_usable

from .common import Case, Record, measure, repeated, standalone

NAME = "gpu_attention"


def _reference(q, k, v) -> np.ndarray:
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    s = q @ k.T / np.sqrt(q.shape[1])
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return (p / p.sum(axis=1, keepdims=True)) @ v


def _size(n: int, calls: int, quick: bool) -> list[Record]:
    import torch
    from numba import cuda

    rng = np.random.default_rng(n)
    q, k, v = (rng.standard_normal((n, 64)).astype(np.float16) for _ in range(3))
    want = _reference(q, k, v)
    dq, dk, dv = (cuda.to_device(x) for x in (q, k, v))
    tq, tk, tv = (torch.from_numpy(x).cuda().view(1, 1, n, 64) for x in (q, k, v))
    sdpa = torch.nn.functional.scaled_dot_product_attention

    ours = repeated(lambda: op.flash_attention(dq, dk, dv), tessera.synchronize, calls)
    theirs = repeated(lambda: sdpa(tq, tk, tv), torch.cuda.synchronize, calls)
    cases = [
        Case(
            "tessera op.flash_attention",
            ours,
            lambda: ours().copy_to_host(),
            want,
            2e-2,
            5e-3,
            inner=calls,
        ),
        Case(
            "torch sdpa",
            theirs,
            lambda: theirs().cpu().numpy()[0, 0],
            want,
            2e-2,
            5e-3,
            inner=calls,
        ),
    ]
    return measure(NAME, "attention fwd f16, d=64", f"N={n}", cases, quick, flops=4.0 * n * n * 64)


def run(quick: bool) -> list[Record]:
    if not gpu_usable() or importlib.util.find_spec("torch") is None:
        print("gpu_attention: no GPU (or no PyTorch) here, nothing measured", file=sys.stderr)
        return []
    records: list[Record] = []
    for n in (1024,) if quick else (1024, 4096):
        records += _size(n, 3 if quick else 10, quick)
    return records


if __name__ == "__main__":
    standalone(NAME, run)
