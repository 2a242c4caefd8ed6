"""The distributed layer's checks and settings in a world of one (no MPI needed)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tessera
from tessera import dist
from tessera.runtime.timed import timeout_seconds


@pytest.fixture
def mesh():
    return dist.Mesh(axes=("x",), shape=(1,))


def test_async_op_returns_a_work_handle(mesh):
    work = dist.all_reduce(np.arange(3.0), axis="x", async_op=True)
    assert isinstance(work, dist.Work) and "all_reduce #" in repr(work)
    assert np.array_equal(work.wait(), np.arange(3.0)) and work.is_completed()


def test_collectives_number_their_calls_per_axis(mesh):
    channel = mesh.channel("x")
    before = channel.started
    dist.all_reduce(np.ones(2), axis="x")
    dist.broadcast(np.ones(2), axis="x")
    assert channel.started == before + 2


def test_coalesced_bucket_size_must_be_positive(mesh):
    with pytest.raises(tessera.TesseraError, match="bucket_mb=0"):
        dist.all_reduce_coalesced([np.ones(2)], axis="x", bucket_mb=0)


def test_coalesced_keeps_order_shapes_and_dtypes(mesh):
    tensors = [np.ones((2, 3), np.float32), np.arange(4), np.full(1, 2.5)]
    got = dist.all_reduce_coalesced(tensors, axis="x")
    for t, g in zip(tensors, got):
        assert g.dtype == t.dtype and np.array_equal(g, t)


def test_coalesced_results_held_are_not_overwritten_by_later_calls(mesh):
    first = dist.all_reduce_coalesced([np.ones(4), np.ones(3)], axis="x")
    for k in range(2, 8):
        dist.all_reduce_coalesced([np.full(4, k), np.full(3, k)], axis="x")
    assert all(np.array_equal(g, np.ones(g.size)) for g in first)


def test_coalesced_results_are_read_only(mesh):
    got = dist.all_reduce_coalesced([np.ones(4), np.ones((2, 2))], axis="x")
    assert not any(g.flags.writeable for g in got)
    with pytest.raises(ValueError, match="read-only"):
        got[1] /= 2


def test_coalesced_reuses_a_bucket_once_its_results_are_gone(mesh):
    from tessera.mesh.coalesced import _buckets

    _buckets.drop()  # no free buckets left by other tests
    first = dist.all_reduce_coalesced([np.ones(4), np.ones(3)], axis="x")
    address = first[0].ctypes.data
    held = dist.all_reduce_coalesced([np.ones(4), np.ones(3)], axis="x")
    assert held[0].ctypes.data != address
    del first
    again = dist.all_reduce_coalesced([np.full(4, 2.0), np.full(3, 2.0)], axis="x")
    assert again[0].ctypes.data == address and np.array_equal(again[1], np.full(3, 2.0))


def test_bucket_pool_replaces_a_small_free_buffer_when_full():
    from tessera.mesh.coalesced import BucketPool

    pool, f8 = BucketPool(), np.dtype(np.float64)
    held = [pool.take(f8, np, 10) for _ in range(BucketPool.KEEP - 1)]
    small = pool.take(f8, np, 5)
    del small  # free, but too small for the next request
    big = pool.take(f8, np, 100)
    assert big.size == 100 and all(h.size == 10 for h in held)
    assert all(pool.take(f8, np, 10).ctypes.data != h.ctypes.data for h in held)


@pytest.mark.parametrize("op", ["max", "min"])
def test_an_order_op_on_complex_arrays_is_refused(mesh, op):
    z = np.ones(3, np.complex64)
    with pytest.raises(tessera.TesseraError, match=f"op='{op}' is not defined on complex"):
        dist.all_reduce(z, axis="x", op=op)
    with pytest.raises(tessera.TesseraError, match=f"op='{op}' is not defined on complex"):
        dist.all_reduce_coalesced([np.ones(2), z], axis="x", op=op)


def test_coalesced_names_an_unknown_op(mesh):
    with pytest.raises(tessera.TesseraError, match="op='mean' must be one of sum, max"):
        dist.all_reduce_coalesced([np.ones(2)], axis="x", op="mean")


def test_nccl_backend_refuses_host_arrays(mesh):
    with (
        tessera.config(dist_backend="nccl"),
        pytest.raises(tessera.TesseraError, match="GPU arrays only"),
    ):
        dist.all_reduce(np.ones(2), axis="x")


def test_a_bad_collective_timeout_setting_is_named():
    with (
        tessera.config(collective_timeout="soon"),
        pytest.raises(tessera.TesseraError, match="TESSERA_COLLECTIVE_TIMEOUT='soon'"),
    ):
        timeout_seconds()


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e999", "-5"])
def test_a_collective_timeout_that_is_not_finite_and_positive_is_refused(value):
    with (
        tessera.config(collective_timeout=value),
        pytest.raises(tessera.TesseraError, match="finite number of seconds > 0"),
    ):
        timeout_seconds()


def test_a_non_finite_collective_timeout_fails_when_a_mesh_is_made():
    with (
        tessera.config(collective_timeout="nan"),
        pytest.raises(tessera.TesseraError, match="TESSERA_COLLECTIVE_TIMEOUT='nan'"),
    ):
        dist.Mesh(axes=("x",), shape=(1,))


@pytest.mark.parametrize("value", ["0", "off", "OFF"])
def test_a_collective_timeout_of_0_or_off_waits_for_ever(value):
    with tessera.config(collective_timeout=value):
        assert timeout_seconds() == math.inf


def test_a_sharded_collective_needs_a_sharded_out(mesh):
    t = dist.zeros((4,), dist.ShardSpec(), mesh)
    with pytest.raises(tessera.TesseraError, match="out= of a collective on a sharded tensor"):
        dist.all_reduce(t, axis="x", out=np.zeros(4))


def test_all_gather_of_a_tensor_whole_on_the_axis_is_an_error(mesh):
    t = dist.zeros((4,), dist.ShardSpec(), mesh)
    with pytest.raises(tessera.TesseraError, match="not split over axis 'x'"):
        dist.all_gather(t, axis="x")


def test_a_mesh_without_gpus_computes_on_the_cpu(mesh):
    from tessera.mesh.devices import gpus_on_node

    assert mesh.device == ("cpu" if gpus_on_node() == 0 else "cuda:0")


def test_mesh_devices_must_name_one_device_per_rank():
    with pytest.raises(tessera.TesseraError, match="names 2 devices for 1 ranks"):
        dist.Mesh(axes=("x",), shape=(1,), devices=range(2))


def test_coalesced_without_an_axis_uses_the_only_axis(mesh):
    got = dist.all_reduce_coalesced([np.ones(3), np.arange(2.0)], bucket_mb=16)
    assert np.array_equal(got[0], np.ones(3)) and np.array_equal(got[1], np.arange(2.0))
    assert mesh.channel("x").started >= 1


@pytest.mark.parametrize("collective", ["all_reduce", "all_gather", "reduce_scatter", "broadcast"])
def test_every_collective_defaults_to_the_only_axis(mesh, collective):
    before = mesh.channel("x").started
    got = getattr(dist, collective)(np.arange(4.0))
    assert np.array_equal(got, np.arange(4.0)) and mesh.channel("x").started == before + 1


@pytest.mark.parametrize("collective", ["all_reduce", "all_gather", "reduce_scatter", "broadcast"])
def test_a_missing_axis_on_a_two_axis_mesh_lists_the_axes(collective):
    dist.Mesh(axes=("dp", "tp"), shape=(1, 1))
    with pytest.raises(tessera.TesseraError, match=r"2 axes \('dp', 'tp'\): name the one"):
        getattr(dist, collective)(np.arange(4.0))


def test_coalesced_without_an_axis_on_a_two_axis_mesh_lists_the_axes():
    dist.Mesh(axes=("dp", "tp"), shape=(1, 1))
    with pytest.raises(tessera.TesseraError, match=r"\('dp', 'tp'\)"):
        dist.all_reduce_coalesced([np.ones(2)])
