"""CUDA-target launches with device arrays (run under the simulator, or on a real GPU)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from classic_kernels import axpy, block_reduce_tree

import tessera as ts
from tessera import graph, op
from tessera.kernel.targets.cuda.streams import collective_stream

pytestmark = pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") != "1", reason="runs in the simulator process"
)


def test_device_arrays_pick_the_cuda_target_and_compute(rng):
    from numba import cuda

    x = rng.random(300, dtype=np.float32)
    y = rng.random(300, dtype=np.float32)
    dx, dy = cuda.to_device(x), cuda.to_device(y)
    axpy[300](dx, dy, 2.0)  # target "auto": device arrays run on CUDA
    np.testing.assert_array_equal(dy.copy_to_host(), np.float32(2.0) * x + y)


def test_mixing_host_and_device_arrays_names_the_parameters(rng):
    from numba import cuda

    x = rng.random(300, dtype=np.float32)
    y = np.zeros(300, np.float32)
    with pytest.raises(ts.LaunchError, match=r"GPU arrays \(x\).*host arrays \(y\)"):
        axpy[300](cuda.to_device(x), y, 2.0)


def test_device_array_on_the_cpu_target_is_refused(rng):
    from numba import cuda

    dx = cuda.to_device(rng.random(300, dtype=np.float32))
    with ts.config(target="cpu"), pytest.raises(ts.LaunchError, match="is a GPU array"):
        axpy[300](dx, dx, 2.0)


def test_cuda_and_cpu_reductions_agree_bitwise(rng):
    x = rng.standard_normal(2000).astype(np.float32)
    on_cpu, on_cuda = np.zeros(8, np.float32), np.zeros(8, np.float32)
    with ts.config(target="cpu"):
        block_reduce_tree[8](x, on_cpu)
    with ts.config(target="cuda"):
        block_reduce_tree[8](x, on_cuda)
    assert on_cpu.tobytes() == on_cuda.tobytes()


def test_launches_inside_a_named_stream_block_run_on_that_stream(rng):
    from numba import cuda

    x = rng.random(300, dtype=np.float32)
    dy = cuda.to_device(np.zeros(300, np.float32))
    with ts.stream("compute") as s:
        axpy[300](cuda.to_device(x), dy, 1.0)
        start = ts.event().record()
        end = ts.event().record()
    with ts.stream("compute") as again:
        assert again is s  # one stream per name
    end.synchronize()
    ts.synchronize()
    np.testing.assert_array_equal(dy.copy_to_host(), x)
    assert isinstance(start.elapsed_ms(end), float)  # the simulator's clock says -1


def test_collectives_inside_graph_stream_are_enqueued_on_its_named_stream():
    with graph.stream("comm"):
        inside = collective_stream()
        with ts.stream("compute") as compute:
            assert collective_stream() is compute  # an explicit tessera.stream wins
    with ts.stream("comm") as comm:
        assert inside is comm
    assert collective_stream() == 0  # outside: the default stream


def test_shared_memory_above_48_kib_runs_and_matches_the_cpu():
    from test_cuda_compile import big_tiles

    x = np.arange(128, dtype=np.float32)
    on_cpu, on_cuda = np.zeros(128, np.float32), np.zeros(128, np.float32)
    with ts.config(target="cpu"):
        big_tiles[1](x, on_cpu)
    with ts.config(target="cuda"):
        big_tiles[1](x, on_cuda)
    assert on_cpu.tobytes() == on_cuda.tobytes()


def test_ops_on_device_arrays_return_device_arrays(rng):
    from numba import cuda

    a = rng.standard_normal((40, 30)).astype(np.float32)
    b = rng.standard_normal((30, 20)).astype(np.float32)
    bias = rng.standard_normal(20).astype(np.float32)

    @graph.module("device_linear")
    def linear(a, b, bias):
        return op.relu(op.matmul(a, b) + bias)

    out = linear(cuda.to_device(a), cuda.to_device(b), cuda.to_device(bias))
    assert not isinstance(out, np.ndarray)
    np.testing.assert_allclose(
        out.copy_to_host(), np.maximum(a @ b + bias, 0), rtol=1e-5, atol=1e-5
    )
    w = op.layernorm(cuda.to_device(a), cuda.to_device(a[0]), cuda.to_device(a[1]))
    np.testing.assert_array_equal(w.copy_to_host(), op.layernorm(a, a[0], a[1]))


def test_a_graph_kernel_writes_into_a_device_array(rng):
    from numba import cuda

    a = rng.standard_normal((8, 6)).astype(np.float32)
    out = cuda.device_array((8, 6), np.float32)

    @graph.kernel
    def doubled(a, out):
        out[:] = a * 2.0

    doubled(cuda.to_device(a), out)
    np.testing.assert_array_equal(out.copy_to_host(), a * np.float32(2.0))


def test_ops_refuse_a_mix_of_host_and_device_arrays(rng):
    from numba import cuda

    a = rng.standard_normal(5).astype(np.float32)
    with pytest.raises(ts.TesseraError, match="mix host and device arrays"):
        op.add(cuda.to_device(a), a)


def test_a_read_on_one_named_stream_of_what_another_wrote_waits_for_it_by_an_event(rng):
    from numba import cuda

    x = cuda.to_device(rng.random(256, dtype=np.float32))
    y = cuda.device_array(256, np.float32)
    z = cuda.device_array(256, np.float32)
    with ts.stream("fence-producer"):
        axpy[256](x, y, 2.0)  # writes y
    before = ts.stats()["stream_waits"]
    with ts.stream("fence-consumer"):
        axpy[256](y, z, 1.0)  # reads y: waits for the producer's stream
        after_first = ts.stats()["stream_waits"]
        axpy[256](y, z, 1.0)  # the same stream again: nothing more to wait for
    ts.synchronize()
    assert after_first >= before + 1  # (z's memory may have been used on a stream before)
    assert ts.stats()["stream_waits"] == after_first


def test_the_default_stream_needs_no_event_fence(rng):
    from numba import cuda

    x = cuda.to_device(rng.random(256, dtype=np.float32))
    y = cuda.device_array(256, np.float32)
    with ts.stream("fence-default-producer"):
        axpy[256](x, y, 2.0)
    before = ts.stats()["stream_waits"]
    axpy[256](y, x, 1.0)  # the default stream: CUDA orders it with blocking streams
    ts.synchronize()
    assert ts.stats()["stream_waits"] == before
