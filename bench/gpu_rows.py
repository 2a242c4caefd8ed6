"""Row-wise ops on a GPU (GPU.md §3, §7): ``op.softmax`` over the last axis of f32
matrices, one group per row, side by side with ``torch.softmax`` in the same process;
a layer norm written as tiles (bench/kernels.py ``layernorm_rows``: its tiles in
registers) and ``op.layernorm`` (the operator layer's row kernel) beside
``torch.nn.functional.layer_norm``.
Both read device arrays and write new ones; each timed run is ``calls`` calls followed by
one synchronisation, reported per call, checked against float64. Without a GPU (or
PyTorch) it records nothing and says so."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np

import tessera
from tessera import op
from tessera.kernel.targets.cuda.streams import gpu_usable

from .common import Case, Record, measure, standalone
from .kernels import LAYERNORM_COLS, layernorm_rows

NAME = "gpu_rows"
SHAPES = ((1024, 1024), (4096, 4096), (16384, 1024), (4096, 8192))


def run(quick: bool) -> list[Record]:
    if not gpu_usable() or importlib.util.find_spec("torch") is None:
        print("gpu_rows: no GPU (or no PyTorch) here, nothing measured", file=sys.stderr)
        return []
    import torch
    from numba import cuda

    calls = 5 if quick else 20
    records = []
    for rows, cols in SHAPES[:2] if quick else SHAPES:
        x = np.random.default_rng(0).standard_normal((rows, cols), dtype=np.float32) * 4
        x64 = x.astype(np.float64)
        e = np.exp(x64 - x64.max(axis=1, keepdims=True))
        want = e / e.sum(axis=1, keepdims=True)
        dx, tx = cuda.to_device(x), torch.from_numpy(x).cuda()

        def ours(dx=dx):
            out = None
            for _ in range(calls):
                out = op.softmax(dx)
            tessera.synchronize()
            return out

        def theirs(tx=tx):
            out = None
            for _ in range(calls):
                out = torch.softmax(tx, -1)
            torch.cuda.synchronize()
            return out

        cases = [
            Case("tessera", ours, lambda: ours().copy_to_host(), want, 1e-5, 1e-7, inner=calls),
            Case("torch", theirs, lambda: theirs().cpu().numpy(), want, 1e-5, 1e-7, inner=calls),
        ]
        records += measure(NAME, "softmax f32", f"{rows}x{cols}", cases, quick, nbytes=8 * x.size)
    return records + _layernorm(calls, quick)


def _layernorm(calls: int, quick: bool) -> list[Record]:
    import torch
    from numba import cuda

    rows, cols = 4096, LAYERNORM_COLS
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, cols), dtype=np.float32)
    w, b = (rng.standard_normal(cols, dtype=np.float32) for _ in range(2))
    x64 = x.astype(np.float64)
    want = (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + 1e-5) * w + b
    dx, dw, db, dy = (cuda.to_device(a) for a in (x, w, b, np.zeros_like(x)))
    tx, tw, tb = (torch.from_numpy(a).cuda() for a in (x, w, b))

    def ours():
        for _ in range(calls):
            layernorm_rows[rows](dx, dw, db, dy, 1e-5)
        tessera.synchronize()
        return dy

    def operator():  # the operator layer's row kernel (one group a row)
        out = None
        for _ in range(calls):
            out = op.layernorm(dx, dw, db, 1e-5)
        tessera.synchronize()
        return out

    def theirs():
        out = None
        for _ in range(calls):
            out = torch.nn.functional.layer_norm(tx, (cols,), tw, tb, 1e-5)
        torch.cuda.synchronize()
        return out

    cases = [
        Case("tessera", ours, lambda: ours().copy_to_host(), want, 1e-4, 1e-5, inner=calls),
        Case(
            "tessera op.layernorm",
            operator,
            lambda: operator().copy_to_host(),
            want,
            1e-4,
            1e-5,
            inner=calls,
        ),
        Case("torch", theirs, lambda: theirs().cpu().numpy(), want, 1e-4, 1e-5, inner=calls),
    ]
    return measure(NAME, "layernorm tiles f32", f"{rows}x{cols}", cases, quick, nbytes=8 * x.size)


if __name__ == "__main__":
    standalone(NAME, run)
