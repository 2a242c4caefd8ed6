"""Row reductions and normalisations of the operator layer on the CPU (OPS.md, GPU.md §3):
``op.sum``/``op.max`` over the last axis, ``op.layernorm`` and ``op.rmsnorm`` of f32
matrices, side by side with NumPy in the same process (each checked against float64)."""

from __future__ import annotations

import numpy as np

from tessera import op

from .common import Case, Record, measure, standalone

NAME = "rows"


def _layernorm(x, w, b, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    d = x - mu
    return d / np.sqrt((d * d).mean(axis=-1, keepdims=True) + np.float32(eps)) * w + b


def _rmsnorm(x, w, eps=1e-6):
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + np.float32(eps)) * w


def run(quick: bool) -> list[Record]:
    rows, cols = (256, 1024) if quick else (4096, 1024)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, cols), dtype=np.float32)
    w = rng.standard_normal(cols, dtype=np.float32)
    b = rng.standard_normal(cols, dtype=np.float32)
    x64 = x.astype(np.float64)
    size = f"{rows}x{cols}"
    records: list[Record] = []
    cases = {
        "sum over the last axis": (
            lambda: op.sum(x, axis=-1),
            lambda: x.sum(axis=-1),
            x64.sum(axis=-1),
        ),
        "max over the last axis": (
            lambda: op.max(x, axis=-1),
            lambda: x.max(axis=-1),
            x64.max(axis=-1),
        ),
        "layernorm": (
            lambda: op.layernorm(x, w, b),
            lambda: _layernorm(x, w, b),
            _layernorm(x64, w, b),
        ),
        "rmsnorm": (lambda: op.rmsnorm(x, w), lambda: _rmsnorm(x, w), _rmsnorm(x64, w)),
    }
    for kernel, (ours, numpy, want) in cases.items():
        both = [
            Case("tessera", ours, ours, want, rtol=1e-4, atol=1e-4),
            Case("numpy", numpy, numpy, want, rtol=1e-4, atol=1e-4),
        ]
        records += measure(NAME, kernel, size, both, quick, nbytes=4 * x.size)
    return records


if __name__ == "__main__":
    standalone(NAME, run)
