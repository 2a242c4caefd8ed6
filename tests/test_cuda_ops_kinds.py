"""Ops on CUDA arrays of every kind (docs/ops.md, "Array kinds"), under numba-cuda's
simulator: any ``__cuda_array_interface__`` object runs as a device array on its own
memory (bf16 included), and no op raises a raw exception on a device array (the
simulator's shape object takes no negative index).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import tessera as ts
from tessera import graph, op
from tessera.arrays import BF16

pytestmark = pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") != "1", reason="runs in the simulator process"
)


class InterfaceOnly:
    """A CUDA array that has nothing but ``__cuda_array_interface__`` (under the
    simulator device memory is host memory, so it points at a NumPy array's buffer)."""

    def __init__(self, host: np.ndarray, typestr: str | None = None):
        self.host = host
        self.__cuda_array_interface__ = {
            "shape": host.shape,
            "typestr": typestr or host.dtype.str,
            "data": (host.ctypes.data, False),
            "strides": None,
            "version": 3,
        }


def _host(a) -> np.ndarray:
    return a.copy_to_host()


def test_an_op_runs_on_a_cuda_array_interface_object(rng):
    x = rng.standard_normal(7).astype(np.float32)
    out = op.relu(InterfaceOnly(x))
    assert not isinstance(out, np.ndarray)
    np.testing.assert_array_equal(_host(out), np.maximum(x, 0))


def test_a_bf16_cuda_array_interface_object_keeps_bf16(rng):
    x = np.array([1.5, -2.0, 0.25], BF16)
    out = op.add(InterfaceOnly(x, typestr="<V2"), 1.0)
    assert out.dtype == BF16
    np.testing.assert_array_equal(_host(out).astype(np.float32), [2.5, -1.0, 1.25])


def test_a_graph_kernel_writes_a_cuda_array_interface_object_in_place(rng):
    @graph.kernel
    def doubled(a, out):
        out[:] = a * 2.0

    a = rng.standard_normal((3, 4)).astype(np.float32)
    out = np.zeros((3, 4), np.float32)
    doubled(InterfaceOnly(a), InterfaceOnly(out))
    np.testing.assert_array_equal(out, a * np.float32(2.0))


def test_flash_attention_runs_on_simulator_device_arrays(rng):
    from numba import cuda

    q, k, v = (rng.standard_normal((6, 8)).astype(np.float32) for _ in range(3))
    out = op.flash_attention(cuda.to_device(q), cuda.to_device(k), cuda.to_device(v))
    np.testing.assert_allclose(_host(out), op.flash_attention(q, k, v), rtol=1e-5, atol=1e-6)


def test_an_op_on_an_empty_device_view_gives_an_empty_result(rng):
    from numba import cuda

    x = cuda.to_device(rng.standard_normal((4, 8)).astype(np.float32))
    out = op.relu(x[:, :0])
    assert tuple(out.shape) == (4, 0)


def test_bad_device_operands_are_tessera_errors_not_raw_exceptions(rng):
    from numba import cuda

    q = cuda.to_device(rng.standard_normal((4, 8)).astype(np.float32))
    calls = [
        lambda: op.flash_attention(q[0], q, q),
        lambda: op.layernorm(cuda.to_device(np.float32(1.0)), q[0], q[0]),
        lambda: op.softmax(cuda.to_device(np.float32(1.0))),
        lambda: op.matmul(q[0], q),
        lambda: op.transpose(q[0]),
        lambda: op.reshape(q, (-1, 5)),
        lambda: op.sum(q, axis=-3),
        lambda: op.max(q[:0]),
    ]
    for call in calls:
        with pytest.raises(ts.TesseraError):
            call()


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_a_softmax_of_gpu_arrays_holding_rows_in_registers_has_the_cpus_bits(rng, dtype):
    from numba import cuda

    x = (rng.standard_normal((3, 512)) * 3).astype(dtype)  # 64 lanes, 8 elements each
    on_gpu = op.softmax(cuda.to_device(x)).copy_to_host()
    assert on_gpu.tobytes() == op.softmax(x).tobytes()


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_a_norm_of_gpu_arrays_holding_rows_in_registers_has_the_cpus_bits(rng, norm):
    from numba import cuda

    x = rng.standard_normal((3, 512)).astype(np.float32)  # 64 lanes, 8 elements each
    w, b = rng.standard_normal((2, 512)).astype(np.float32)
    params = (w, b) if norm == "layernorm" else (w,)
    fn = getattr(op, norm)
    on_gpu = fn(cuda.to_device(x), *(cuda.to_device(p) for p in params)).copy_to_host()
    assert on_gpu.tobytes() == fn(x, *params).tobytes()


def test_a_cross_entropy_of_gpu_arrays_holding_rows_in_registers_has_the_cpus_bits(rng):
    from numba import cuda

    logits = (rng.standard_normal((3, 512)) * 3).astype(np.float32)
    targets = np.array([5, 511, 0], np.int64)

    def loss_and_grad(x, t):
        fn = graph.value_and_grad(lambda x, t: op.cross_entropy(x, t, reduction="sum"), 0)
        return fn(x, t)

    loss, grad = loss_and_grad(cuda.to_device(logits), cuda.to_device(targets))
    want_loss, want_grad = loss_and_grad(logits, targets)
    assert _host(grad).tobytes() == want_grad.tobytes()
    assert np.asarray(_host(loss)).tobytes() == np.asarray(want_loss).tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_a_log_softmax_of_gpu_arrays_holding_rows_in_registers_has_the_cpus_bits(rng, dtype):
    from numba import cuda

    x = (rng.standard_normal((3, 512)) * 3).astype(dtype)  # 64 lanes, 8 elements each
    on_gpu = op.log_softmax(cuda.to_device(x)).copy_to_host()
    assert on_gpu.tobytes() == op.log_softmax(x).tobytes()


def test_a_gradient_through_transforms_of_gpu_arrays_has_the_cpus_bits(rng):
    from numba import cuda

    x = rng.standard_normal((3, 12)).astype(np.float32)  # 12: Bluestein's path
    h = rng.standard_normal(12).astype(np.float32)
    step = graph.grad(lambda x: op.sum(op.irfft(op.rfft(x) * op.rfft(h), n=12) * x))
    on_gpu = _host(step(cuda.to_device(x)))
    assert on_gpu.tobytes() == step(x).tobytes()
