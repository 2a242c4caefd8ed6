"""JAX arrays as kernel arguments and as collective operands (docs/targets.md, "PyTorch
and JAX"): host arrays reach a kernel as read-only NumPy views, bf16 included; they are
immutable, so a ``mut`` parameter refuses them; collectives give JAX arrays back.

Skipped where JAX is not installed (it is no test dependency).
"""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera import bf16, dist, f32, kernel, mut, tile

jnp = pytest.importorskip("jax.numpy")


@kernel
def axpy(x: f32[n], y: mut[f32[n]], alpha: f32):
    i = tile.linear_id()
    if i < n:
        y[i] = alpha * x[i] + y[i]


@kernel
def widen(x: bf16[n], y: mut[f32[n]]):
    i = tile.linear_id()
    if i < n:
        y[i] = x[i]


def test_a_kernel_reads_a_jax_array(target):
    y = np.ones(5, np.float32)
    axpy[5](jnp.arange(5.0, dtype=jnp.float32), y, 2.0)
    np.testing.assert_array_equal(y, 2 * np.arange(5.0) + 1)


def test_a_kernel_reads_a_bf16_jax_array(target):
    y = np.zeros(3, np.float32)
    widen[3](jnp.array([1.5, -2.0, 0.25], jnp.bfloat16), y)
    np.testing.assert_array_equal(y, [1.5, -2.0, 0.25])


def test_a_jax_array_for_a_mut_parameter_is_refused_as_immutable(target):
    y = jnp.zeros(3, jnp.float32)
    with pytest.raises(tessera.LaunchError) as info:
        axpy[3](np.ones(3, np.float32), y, 1.0)
    message = str(info.value)
    assert "kernel 'axpy'" in message and "parameter 'y'" in message
    assert "immutable" in message


@pytest.fixture
def mesh():
    return dist.Mesh(axes=("x",), shape=(1,))


@pytest.mark.parametrize(
    "collective", [dist.all_reduce, dist.all_gather, dist.reduce_scatter, dist.broadcast]
)
def test_a_collective_on_a_jax_array_returns_a_jax_array(mesh, collective):
    got = collective(jnp.arange(4.0, dtype=jnp.float32))
    assert not isinstance(got, np.ndarray) and got.dtype == jnp.float32
    assert got.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_a_collective_keeps_bf16_jax_arrays(mesh):
    got = dist.all_reduce(jnp.ones(2, jnp.bfloat16))
    assert got.dtype == jnp.bfloat16 and got.tolist() == [1.0, 1.0]


def test_a_collective_refuses_a_jax_array_as_out(mesh):
    with pytest.raises(tessera.TesseraError, match="out= is a JAX array, which is immutable"):
        dist.all_reduce(jnp.ones(2), out=jnp.zeros(2))
