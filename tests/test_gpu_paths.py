"""GPU code paths beyond the kernels themselves, on a real GPU: shared memory sized at
launch above 48 KiB (the opt-in), named streams and events, graph.stream with ops on
device arrays, PyTorch CUDA tensors (f32 and bf16, without a copy). Skipped without an
NVIDIA GPU (never under the simulator)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import tessera as ts
from tessera import KiB, bf16, f32, graph, group_id, i64, kernel, mut, op, tbarrier, tile, tshared
from tessera.kernel.targets.cuda.streams import gpu_usable

pytestmark = pytest.mark.skipif(not gpu_usable(), reason="needs an NVIDIA GPU")


@kernel(tile=(256,), shared=100 * KiB)
def reverse_big_chunks(x: f32[n], y: mut[f32[n]], chunk: i64):
    s = tshared.dynamic[f32](chunk)
    base = group_id(0) * chunk
    for k in range(tile.linear_id(), chunk, 256):
        s[k] = x[base + k]
    tbarrier()
    for k in range(tile.linear_id(), chunk, 256):
        y[base + k] = s[chunk - 1 - k]


def test_dynamic_shared_memory_above_48_kib_is_opted_in_and_works():
    chunk = 20_000  # 80,000 bytes a group
    x = np.arange(4 * chunk, dtype=np.float32)
    y = np.zeros_like(x)
    with ts.config(target="cuda"):
        reverse_big_chunks[4](x, y, chunk)
    want = np.concatenate([c[::-1] for c in np.split(x, 4)])
    np.testing.assert_array_equal(y, want)


@kernel
def scale(x: f32[n], y: mut[f32[n]], alpha: f32):
    i = tile.linear_id()
    if i < n:
        y[i] = alpha * x[i]


def test_launches_on_a_named_stream_are_timed_by_events():
    from numba import cuda

    x = cuda.to_device(np.arange(1 << 20, dtype=np.float32))
    y = cuda.device_array(1 << 20, np.float32)
    with ts.config(target="cuda"), ts.stream("compute") as s:
        start = ts.event().record()
        for _ in range(10):
            scale[1 << 20](x, y, 3.0)
        end = ts.event().record()
    end.synchronize()
    assert start.elapsed_ms(end) > 0.0
    assert s is not cuda.default_stream()
    ts.synchronize()
    np.testing.assert_array_equal(y.copy_to_host(), 3.0 * np.arange(1 << 20, dtype=np.float32))


@graph.module("scaled_relu")
def scaled_relu(a, b):
    return op.relu(a * 2.0 - b)


def test_a_graph_module_on_device_arrays_runs_on_its_stream():
    from numba import cuda

    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(4096).astype(np.float32) for _ in range(2))
    with ts.config(target="cuda"), graph.stream("side"):
        out = scaled_relu(cuda.to_device(a), cuda.to_device(b))
    ts.synchronize()
    np.testing.assert_array_equal(out.copy_to_host(), np.maximum(a * np.float32(2) - b, 0))


@kernel
def twice_bf16(x: bf16[n], y: mut[bf16[n]]):
    i = tile.linear_id()
    if i < n:
        y[i] = x[i] + x[i]


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs PyTorch")
def test_cuda_torch_tensors_launch_on_the_gpu_in_place_f32_and_bf16():
    import torch

    x = torch.arange(1000, dtype=torch.float32, device="cuda")
    y = torch.zeros(1000, device="cuda")
    memory = y.data_ptr()
    scale[1000](x, y, 2.0)  # target "auto": a CUDA tensor runs on the cuda target
    ts.synchronize()
    assert y.data_ptr() == memory and torch.equal(y, 2 * x)
    xb = torch.tensor([1.5, -2.0, 3.25], dtype=torch.bfloat16, device="cuda")
    yb = torch.zeros(3, dtype=torch.bfloat16, device="cuda")
    twice_bf16[3](xb, yb)
    ts.synchronize()
    assert yb.tolist() == [3.0, -4.0, 6.5]


def test_device_memory_of_a_dropped_op_result_is_reused():
    import gc

    from tessera.kernel.targets.cuda.memory import POOL

    a = POOL.empty((1000,), np.float32)
    pointer = a.device_ctypes_pointer.value
    del a
    gc.collect()
    b = POOL.empty((999,), np.float32)  # the same size class
    assert b.device_ctypes_pointer.value == pointer


def test_a_live_view_keeps_its_memory_from_being_reused():
    import gc

    from tessera.kernel.targets.cuda.memory import POOL

    a = POOL.empty((1000,), np.float32)
    pointer = a.device_ctypes_pointer.value
    view = a[10:]
    del a
    gc.collect()
    b = POOL.empty((1000,), np.float32)
    assert b.device_ctypes_pointer.value != pointer
    del view


def test_op_results_on_pooled_memory_are_right_call_after_call():
    from numba import cuda

    x = np.random.default_rng(2).standard_normal((64, 300), dtype=np.float32)
    dx = cuda.to_device(x)
    want = op.softmax(dx).copy_to_host()
    for _ in range(50):
        y = op.softmax(dx)
    np.testing.assert_array_equal(y.copy_to_host(), want)


@kernel
def slow_fill(y: mut[f32[n]], value: f32, rounds: i64):
    """y[i] = value, after ``rounds`` dependent steps per element (a slow producer)."""
    i = tile.linear_id()
    if i < n:
        v = value
        for _ in range(rounds):
            v = v * 1.0000001 + 0.0
        y[i] = value + (v - v)


@kernel
def copy_into(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    if i < n:
        y[i] = x[i]


def test_a_consumer_stream_waits_for_a_slow_producer_stream_every_time():
    """The seeds' compute/comm pattern: what "consume" reads, "produce" wrote just before
    on another stream; without the fence the copy would often see the old values."""
    from numba import cuda

    n = 1 << 16
    y = cuda.to_device(np.zeros(n, np.float32))
    out = cuda.device_array(n, np.float32)
    before = ts.stats()["stream_waits"]
    for k in range(1, 21):
        with ts.stream("produce"):
            slow_fill[n](y, float(k), 20_000)
        with ts.stream("consume"):
            copy_into[n](y, out)
        ts.synchronize()
        assert np.all(out.copy_to_host() == k), k
    assert ts.stats()["stream_waits"] - before >= 20


def test_a_captured_step_replays_as_one_cuda_graph_with_the_eager_results():
    from numba import cuda

    rng = np.random.default_rng(5)
    xh = rng.standard_normal((64, 32)).astype(np.float32)
    wh = rng.standard_normal((32, 48)).astype(np.float32)

    @ts.jit(capture_graph=True)
    def step(x, w):
        return op.relu(op.matmul(x, w)) * 2.0

    x, w = cuda.to_device(xh), cuda.to_device(wh)
    before = ts.stats()["graph_replays"]
    results = [step(x, w).copy_to_host() for _ in range(4)]  # warm-up, capture, replays
    (info,) = step.graphs.values()
    assert info["device_graph"] and ts.stats()["graph_replays"] - before >= 2
    want = np.maximum(xh @ wh, 0) * 2
    for got in results:
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    x.copy_to_device(-xh)  # a replay reads the arguments of its own call
    np.testing.assert_allclose(
        step(x, w).copy_to_host(), np.maximum(-xh @ wh, 0) * 2, rtol=1e-4, atol=1e-4
    )
