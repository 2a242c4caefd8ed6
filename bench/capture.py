"""A step of small kernels through ``tessera.jit``: captured and replayed against the same
step run eagerly (``capture_graph=False``), per kernel of the step, side by side; and
against the same matmuls in NumPy (docs/capture.md, CAPTURE.md §8)."""

from __future__ import annotations

import numpy as np

from tessera import jit, op

from .common import Case, Record, measure, standalone

NAME = "capture"
LAYERS = 20  # each a small matmul and its relu: 20 kernels a step


def _step(capture: bool):
    @jit(capture_graph=capture)
    def step(x, w):
        for _ in range(LAYERS):
            x = op.relu(op.matmul(x, w))
        return x

    return step


def run(quick: bool) -> list[Record]:
    calls = 20 if quick else 200
    x = np.full((8, 16), 0.5, np.float32)
    w = np.full((16, 16), 0.0625, np.float32)
    replayed, eager = _step(True), _step(False)
    want = x
    for _ in range(LAYERS):
        want = np.maximum(want @ w, 0)
    for step in (replayed, eager):  # warm-up (and the capture), checked
        for _ in range(3):
            np.testing.assert_allclose(step(x, w), want, rtol=1e-6)
    kernels = len(next(iter(replayed.graphs.values()))["kernels"])

    def loop(fn):
        def run():
            for _ in range(calls):
                fn(x, w)

        return run

    def numpy_step(x, w):
        for _ in range(LAYERS):
            x = np.maximum(x @ w, 0)
        return x

    cases = [
        Case("tessera replayed", loop(replayed), inner=calls * kernels),
        Case("tessera eager", loop(eager), inner=calls * kernels),
        Case("numpy", loop(numpy_step), inner=calls * kernels),
    ]
    return measure(NAME, f"step of {kernels} kernels, per kernel", f"{calls} steps", cases, quick)


if __name__ == "__main__":
    standalone(NAME, run)
