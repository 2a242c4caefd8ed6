"""``tessera.jit`` on the cuda target under numba-cuda's simulator (which has no CUDA
graphs: the recorded launches replay as on the CPU): device arrays in and out, replays
equal to eager calls, and a host array refused with what to pass instead."""

from __future__ import annotations

import os

import numpy as np
import pytest

import tessera
from tessera import CaptureError, config, jit, op

IN_SIMULATOR = pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") != "1",
    reason="runs in the simulator process (test_cuda_simulator.py starts it)",
)


def _step(capture):
    @jit(capture_graph=capture)
    def step(x, w):
        return op.relu(op.matmul(x, w)) * 2.0

    return step


@IN_SIMULATOR
def test_a_captured_step_on_device_arrays_replays_what_eager_calls_give():
    from numba import cuda

    x = cuda.to_device(np.linspace(-1, 1, 8 * 16, dtype=np.float32).reshape(8, 16))
    w = cuda.to_device(np.full((16, 4), 0.25, np.float32))
    eager = _step(False)(x, w).copy_to_host()
    step = _step(True)
    replays = tessera.stats()["graph_replays"]
    outs = [step(x, w) for _ in range(4)]
    assert all(hasattr(o, "copy_to_host") for o in outs)  # device arrays, one per call
    for o in outs:
        np.testing.assert_array_equal(o.copy_to_host(), eager)
    assert tessera.stats()["graph_replays"] == replays + 2


@IN_SIMULATOR
def test_a_host_array_for_a_captured_cuda_step_is_an_error_saying_what_to_pass():
    step = _step(True)
    x, w = np.ones((8, 16), np.float32), np.ones((16, 4), np.float32)
    with config(target="cuda"):
        step(x, w)  # the warm-up runs eagerly
        with pytest.raises(CaptureError, match=r"parameter 'x' is a host array; a captured CUDA"):
            step(x, w)


@IN_SIMULATOR
def test_under_the_simulator_a_captured_step_replays_its_launches_without_a_cuda_graph():
    from numba import cuda

    x = cuda.to_device(np.ones((8, 16), np.float32))
    w = cuda.to_device(np.full((16, 4), 0.5, np.float32))
    step = _step(True)
    for _ in range(3):  # warm-up, capture, replay
        step(x, w)
    (info,) = step.graphs.values()
    assert info["device_graph"] is False and info["kernels"]
