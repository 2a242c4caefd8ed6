"""The seeds' spellings run as written (in a world of one rank, no MPI needed):
``dist.Mesh(axes=[...], devices=...)`` without ``shape=`` takes an N-d device array as
JAX's Mesh does and asks for ``shape=`` (at the user's line) when the devices are flat;
``op.matmul(A, B, tile_shape=(128, 128, 64))`` (a block at the 32,768-element bound) and
``dist.all_reduce(op.matmul(A, B), axis="dp", op="sum")`` work."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import tessera
from tessera import dist, op

FILE = inspect.getsourcefile(inspect.currentframe())


def test_mesh_takes_its_shape_from_an_nd_device_array():
    mesh = dist.Mesh(axes=("tp", "pp", "dp"), devices=np.arange(1).reshape(1, 1, 1))
    assert mesh.shape == (1, 1, 1) and mesh.devices == [0]


def test_mesh_takes_nested_lists_of_devices():
    mesh = dist.Mesh(axes=["tp", "dp"], devices=[["cpu"]])
    assert mesh.shape == (1, 1) and mesh.devices == ["cpu"]


def test_a_one_axis_mesh_takes_a_flat_range():
    mesh = dist.Mesh(axes=["dp"], devices=range(1))
    assert mesh.shape == (1,) and mesh.size("dp") == 1


def test_flat_devices_over_several_axes_ask_for_shape_at_the_call():
    with pytest.raises(tessera.TesseraError) as info:
        dist.Mesh(axes=["tp", "pp", "dp"], devices=range(72))  # the seed's spelling
    msg = str(info.value)
    assert "72 devices in a flat sequence needs shape=" in msg
    assert "3-d array" in msg and "jax.sharding.Mesh" in msg
    line = next(k for k, text in enumerate(open(FILE), 1) if "# the seed's spelling" in text)
    assert f"{FILE}:{line}:" in msg
    assert not isinstance(info.value, TypeError)


def test_flat_devices_with_shape_still_work_as_the_spec_writes_them():
    with pytest.raises(tessera.TesseraError, match="needs 72 ranks but this world has 1"):
        dist.Mesh(axes=["tp", "pp", "dp"], shape=(9, 2, 4), devices=range(72))


def test_a_device_array_whose_shape_disagrees_with_shape_is_refused():
    with pytest.raises(tessera.TesseraError, match=r"devices is an array of shape \(1, 1\)"):
        dist.Mesh(axes=["tp", "dp"], shape=(1, 2), devices=[[0]])


def test_no_shape_and_no_devices_asks_for_shape():
    with pytest.raises(tessera.TesseraError, match="needs shape=: one size per axis"):
        dist.Mesh(axes=["dp"])


def test_matmul_with_the_seeds_tile_shape(target, rng):
    a = rng.standard_normal((100, 70)).astype(np.float32)  # one block: its tile shape counts
    b = rng.standard_normal((70, 90)).astype(np.float32)
    c = op.matmul(a, b, tile_shape=(128, 128, 64))  # 128*64 + 64*128 + 128*128 = 32768
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_all_reduce_of_a_matmul_as_the_seed_writes_it(rng):
    dist.Mesh(axes=["tp", "pp", "dp"], shape=(1, 1, 1))
    a = rng.standard_normal((32, 16)).astype(np.float32)
    b = rng.standard_normal((16, 8)).astype(np.float32)
    total = dist.all_reduce(op.matmul(a, b), axis="dp", op="sum")
    np.testing.assert_allclose(total, a @ b, rtol=1e-5, atol=1e-5)
