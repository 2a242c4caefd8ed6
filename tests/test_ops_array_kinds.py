"""Ops and graph modules on every array kind a kernel takes (docs/ops.md, "Array kinds"):
PyTorch tensors, JAX arrays and DLPack objects on the host are read as NumPy views of
their memory, bf16 included; results come back as the caller's kind; tensors that
require grad are refused. PyTorch and JAX cases are skipped where they are not
installed; the device cases are in tests/test_cuda_launch.py (simulator).
"""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera import graph, op


class DLPackOnly:
    """An array that speaks DLPack only (no NumPy, PyTorch or JAX type)."""

    def __init__(self, array: np.ndarray):
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def test_an_op_reads_a_dlpack_object_and_returns_numpy():
    x = np.array([-1.0, 2.0, -3.0], np.float32)
    out = op.relu(DLPackOnly(x))
    assert isinstance(out, np.ndarray)
    np.testing.assert_array_equal(out, [0.0, 2.0, 0.0])


def test_an_unknown_object_is_refused_naming_the_kinds_taken():
    with pytest.raises(tessera.TesseraError, match="PyTorch tensors, JAX arrays, DLPack"):
        op.relu(object())


# ----------------------------------------------------------------------------- PyTorch
@pytest.fixture
def torch():
    return pytest.importorskip("torch")


def test_an_op_on_a_torch_tensor_returns_a_torch_tensor(torch):
    out = op.relu(torch.tensor([-1.0, 2.0]))
    assert isinstance(out, torch.Tensor)
    assert out.tolist() == [0.0, 2.0]


def test_an_op_on_bf16_torch_tensors_returns_bf16(torch):
    x = torch.tensor([1.5, -2.0, 0.25], dtype=torch.bfloat16)
    out = op.add(x, x)
    assert out.dtype is torch.bfloat16
    assert out.float().tolist() == [3.0, -4.0, 0.5]


def test_matmul_of_torch_tensors_matches_torch(torch):
    a, b = torch.randn(5, 3, generator=torch.manual_seed(0)), torch.randn(3, 4)
    torch.testing.assert_close(op.matmul(a, b), a @ b, rtol=1e-5, atol=1e-5)


def test_a_graph_module_on_torch_tensors_returns_torch_tensors(torch):
    @graph.module("torch_pair")
    def pair(a, b):
        return op.relu(a @ b), op.sum(a, axis=1)

    a, b = torch.randn(4, 3), torch.randn(3, 2)
    prod, sums = pair(a, b)
    assert isinstance(prod, torch.Tensor) and isinstance(sums, torch.Tensor)
    torch.testing.assert_close(prod, torch.relu(a @ b), rtol=1e-5, atol=1e-5)


def test_a_graph_kernel_writes_into_a_torch_tensor_in_place(torch):
    @graph.kernel
    def doubled(a, out):
        out[:] = a * 2.0

    a, out = torch.arange(6.0).reshape(2, 3), torch.zeros(2, 3)
    memory = out.data_ptr()
    doubled(a, out)
    assert out.data_ptr() == memory and torch.equal(out, a * 2)


def test_graph_grad_on_torch_tensors_returns_a_torch_gradient(torch):
    x = torch.tensor([1.0, -2.0, 3.0])
    g = graph.grad(lambda x: op.sum(x * x))(x)
    assert isinstance(g, torch.Tensor) and g.tolist() == [2.0, -4.0, 6.0]


def test_a_torch_tensor_that_requires_grad_is_refused_naming_op_and_argument(torch):
    with pytest.raises(tessera.TesseraError) as info:
        op.add(torch.ones(2), torch.ones(2, requires_grad=True))
    message = str(info.value)
    assert "op.add" in message and "argument 1" in message and "requires grad" in message


def test_eager_reshape_of_a_torch_tensor_stays_a_view(torch):
    x = torch.zeros(2, 3)
    v = op.reshape(x, (-1,))
    v[0] = 5.0
    assert x[0, 0] == 5.0


# ----------------------------------------------------------------------------- JAX
def test_an_op_on_a_jax_array_returns_a_jax_array():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    out = op.relu(jnp.array([-1.0, 2.0], jnp.float32))
    assert isinstance(out, jax.Array)
    assert out.tolist() == [0.0, 2.0]


def test_an_op_on_a_bf16_jax_array_keeps_bf16():
    jnp = pytest.importorskip("jax.numpy")
    out = op.mul(jnp.array([1.5, -2.0], jnp.bfloat16), 2.0)
    assert out.dtype == jnp.bfloat16
    assert out.astype(jnp.float32).tolist() == [3.0, -4.0]


def test_a_graph_kernel_refuses_to_write_a_jax_array():
    jnp = pytest.importorskip("jax.numpy")

    @graph.kernel
    def doubled(a, out):
        out[:] = a * 2.0

    with pytest.raises(tessera.TesseraError, match="out"):
        doubled(jnp.ones(3, jnp.float32), jnp.zeros(3, jnp.float32))
