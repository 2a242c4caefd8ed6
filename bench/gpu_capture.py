"""A step of small kernels through ``tessera.jit`` on a GPU (CAPTURE.md §8): captured and
replayed as one CUDA graph against the same step run eagerly (``capture_graph=False``),
per kernel of the step, side by side with the same layers in PyTorch eagerly and replayed
from a ``torch.cuda.CUDAGraph`` where PyTorch is installed. Each timed run is ``calls``
steps followed by one synchronisation. Without a GPU it records nothing and says so."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np

import tessera
from tessera import jit, op
from tessera.kernel.targets.cuda.streams import gpu_usable

from .common import Case, Record, measure, standalone

NAME = "gpu_capture"
LAYERS = 20  # each a small matmul with its relu as epilogue: 20 kernels a step


def _step(capture: bool):
    @jit(capture_graph=capture)
    def step(x, w):
        for _ in range(LAYERS):
            x = op.relu(op.matmul(x, w))
        return x

    return step


def _loop(fn, calls: int, sync):
    def run():
        for _ in range(calls):
            fn()
        sync()

    return run


def _torch_cases(xh, wh, calls: int, kernels: int) -> list[Case]:
    if importlib.util.find_spec("torch") is None:
        return []
    import torch

    if not torch.cuda.is_available():
        return []
    x, w = torch.from_numpy(xh).cuda(), torch.from_numpy(wh).cuda()

    def eager():
        y = x
        for _ in range(LAYERS):
            y = torch.relu(y @ w)
        return y

    static_out = [None]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up on a side stream, as PyTorch asks
        for _ in range(3):
            eager()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out[0] = eager()
    sync = torch.cuda.synchronize
    return [
        Case("torch eager", _loop(eager, calls, sync), inner=calls * kernels),
        Case("torch CUDA graph", _loop(graph.replay, calls, sync), inner=calls * kernels),
    ]


def run(quick: bool) -> list[Record]:
    if not gpu_usable():
        print("gpu_capture: no GPU here, nothing measured", file=sys.stderr)
        return []
    from numba import cuda

    calls = 20 if quick else 200
    xh = np.full((8, 16), 0.5, np.float32)
    wh = np.full((16, 16), 0.0625, np.float32)
    x, w = cuda.to_device(xh), cuda.to_device(wh)
    want = xh
    for _ in range(LAYERS):
        want = np.maximum(want @ wh, 0)
    replayed, eager = _step(True), _step(False)
    for step in (replayed, eager):  # warm-up, the capture and a replay, checked
        for _ in range(3):
            np.testing.assert_allclose(step(x, w).copy_to_host(), want, rtol=1e-6)
    (info,) = replayed.graphs.values()
    kernels = len(info["kernels"])
    if not info["device_graph"]:
        print("gpu_capture: the step did not become a CUDA graph", file=sys.stderr)
    sync = tessera.synchronize
    cases = [
        Case("tessera replayed", _loop(lambda: replayed(x, w), calls, sync), inner=calls * kernels),
        Case("tessera eager", _loop(lambda: eager(x, w), calls, sync), inner=calls * kernels),
    ]
    cases += _torch_cases(xh, wh, calls, kernels)
    return measure(NAME, f"step of {kernels} kernels, per kernel", f"{calls} steps", cases, quick)


if __name__ == "__main__":
    standalone(NAME, run)
