"""Run under ``mpiexec -n N``: every check below on every rank, in order; each rank writes
``<folder>/<check>.rank<r>.txt`` holding ``ok`` or the failure. test_dist_checks.py runs
this once per rank count and asserts each check in its own test."""

from __future__ import annotations

import sys

import ml_dtypes
import numpy as np
from classic_kernels import tp_gemm
from mpi_run import report_outcome

import tessera
from tessera import dist, f32, kernel, mut, tile

CHECKS = {}


def check(fn):
    CHECKS[fn.__name__] = fn
    return fn


def line() -> dist.Mesh:
    return dist.Mesh(axes=("x",), shape=(dist.size(),))


def data(rank: int, dtype=np.float64, n: int = 6) -> np.ndarray:
    return (np.arange(n) % 5 + rank * 3 + 1).astype(dtype)


@check
def every_op_matches_numpy():
    mesh = line()
    everyone = [data(r) for r in range(mesh.size("x"))]
    for op, fold in (
        ("sum", np.add),
        ("max", np.maximum),
        ("min", np.minimum),
        ("prod", np.multiply),
    ):
        for dtype in (np.float64, np.float32, np.int32, np.int64):
            expected = everyone[0].astype(dtype)
            for other in everyone[1:]:
                expected = fold(expected, other.astype(dtype))
            got = dist.all_reduce(data(mesh.rank).astype(dtype), axis="x", op=op)
            assert got.dtype == dtype and np.array_equal(got, expected), (op, dtype, got)


@check
def all_gather_takes_uneven_blocks():
    mesh = line()
    mine = np.full((mesh.rank + 1, 3), mesh.rank, np.int16)
    got = dist.all_gather(mine, axis="x")
    expected = np.concatenate([np.full((r + 1, 3), r, np.int16) for r in range(dist.size())])
    assert np.array_equal(got, expected)


@check
def reduce_scatter_gives_array_split_blocks():
    mesh = line()
    x = np.arange(7 * 2, dtype=np.float64).reshape(7, 2) * (mesh.rank + 1)
    total = np.arange(14.0).reshape(7, 2) * sum(r + 1 for r in range(dist.size()))
    got = dist.reduce_scatter(x, axis="x")
    assert np.array_equal(got, np.array_split(total, dist.size())[mesh.rank])


@check
def reduce_scatter_sums_each_block_in_rank_order():
    """The checked host reduce_scatter (pairwise, on up to 8 ranks) adds the members'
    blocks left to right: values whose sum depends on the order give the rank-order bits."""
    mesh = line()
    n = dist.size()
    rng = np.random.default_rng(7)
    everyone = [rng.standard_normal((n * 3, 5)).astype(np.float32) * 10.0**r for r in range(n)]
    got = dist.reduce_scatter(everyone[mesh.rank], axis="x")
    total = everyone[0].copy()
    for part in everyone[1:]:
        total += part
    assert got.tobytes() == total[mesh.rank * 3 : (mesh.rank + 1) * 3].tobytes()


@check
def gather_and_scatter_along_dim_1():
    mesh = line()
    mine = np.full((2, mesh.rank + 1), float(mesh.rank))
    got = dist.all_gather(mine, axis="x", dim=1)
    expected = np.concatenate([np.full((2, r + 1), float(r)) for r in range(dist.size())], 1)
    assert np.array_equal(got, expected)
    ones = np.ones((3, 5))
    part = dist.reduce_scatter(ones, axis="x", dim=1)
    block = np.array_split(np.arange(5), dist.size())[mesh.rank]
    assert part.shape == (3, len(block)) and np.all(part == dist.size())


@check
def half_floats_reduce_in_f32_and_travel_as_bits():
    mesh = line()
    for dtype in (ml_dtypes.bfloat16, np.float16):
        x = np.array([1.5, -2.0, 0.25, 3.0], dtype) * (mesh.rank + 1)
        got = dist.all_reduce(x, axis="x")
        scale = sum(r + 1 for r in range(dist.size()))
        assert got.dtype == np.dtype(dtype)
        expected = (np.array([1.5, -2.0, 0.25, 3.0], np.float32) * scale).astype(dtype)
        assert got.view(np.uint16).tolist() == expected.view(np.uint16).tolist()
        gathered = dist.all_gather(x, axis="x")
        parts = [np.array([1.5, -2.0, 0.25, 3.0], dtype) * (r + 1) for r in range(dist.size())]
        assert gathered.view(np.uint16).tolist() == np.concatenate(parts).view(np.uint16).tolist()
        root = dist.broadcast(x, axis="x", root=dist.size() - 1)
        assert root.view(np.uint16).tolist() == parts[-1].view(np.uint16).tolist()


@check
def bools_reduce_as_any_and_all():
    mesh = line()
    mine = np.array([True, mesh.rank == 0, False])
    assert dist.all_reduce(mine, axis="x", op="max").tolist() == [True, True, False]
    assert dist.all_reduce(mine, axis="x", op="min").tolist() == [True, dist.size() == 1, False]


@check
def deterministic_sum_is_the_rank_order_sum_every_time():
    mesh = line()
    rng = np.random.default_rng(7)
    everyone = [rng.standard_normal(1000).astype(np.float32) * 10**r for r in range(dist.size())]
    in_order = everyone[0].copy()
    for other in everyone[1:]:
        in_order = in_order + other
    runs = {
        dist.all_reduce(everyone[mesh.rank], axis="x", deterministic=True).tobytes()
        for _ in range(5)
    }
    assert runs == {in_order.tobytes()}
    with tessera.config(deterministic="1"):
        again = dist.all_reduce(everyone[mesh.rank], axis="x")
    assert again.tobytes() == in_order.tobytes()


@check
def deterministic_sum_of_large_arrays_is_the_rank_order_sum():
    mesh = line()  # above the one-step size: all-to-all, rank-order reduce, all-gather
    rng = np.random.default_rng(8)
    everyone = [rng.standard_normal(100_003).astype(np.float32) * 10**r for r in range(dist.size())]
    in_order = everyone[0].copy()
    for other in everyone[1:]:
        in_order = in_order + other
    got = dist.all_reduce(everyone[mesh.rank], axis="x", deterministic=True)
    assert got.tobytes() == in_order.tobytes()
    work = dist.all_reduce(everyone[mesh.rank], axis="x", deterministic=True, async_op=True)
    assert work.wait().tobytes() == in_order.tobytes()


@check
def async_handles_complete_on_wait():
    mesh = line()
    first = dist.all_reduce(np.ones(1000), axis="x", async_op=True)
    second = dist.all_gather(np.full(2, mesh.rank), axis="x", async_op=True)
    assert isinstance(first, dist.Work)
    gathered = second.wait()
    total = first.wait()
    assert first.is_completed() and second.is_completed()
    assert np.all(total == dist.size())
    assert gathered.tolist() == [r for r in range(dist.size()) for _ in range(2)]
    assert first.wait() is total  # waiting again gives the same result


@check
def coalesced_all_reduce_equals_one_call_per_tensor():
    mesh = line()
    rng = np.random.default_rng(3)
    shapes = [tuple(rng.integers(1, 9, size=rng.integers(1, 3))) for _ in range(60)]
    dtypes = [np.float32, np.float64, np.int64]
    tensors = [
        (rng.integers(0, 9, size=s) * (mesh.rank + 1)).astype(dtypes[i % 3])
        for i, s in enumerate(shapes)
    ]
    got = dist.all_reduce_coalesced(tensors, axis="x", bucket_mb=0.0005)  # many buckets
    for t, g in zip(tensors, got):
        one = dist.all_reduce(t, axis="x")
        assert g.dtype == t.dtype and g.shape == t.shape and np.array_equal(g, one)


def in_rank_order(everyone: list, fold=np.add) -> np.ndarray:
    total = everyone[0].copy()
    for other in everyone[1:]:
        total = fold(total, other)
    return total


@check
def coalesced_every_op_and_dtype_equals_all_reduce():
    mesh = line()
    dtypes = [np.float32, np.float64, np.int32, np.int64, np.uint8, np.complex64]
    dtypes += [np.float16, ml_dtypes.bfloat16, np.bool_]  # these go through MPI
    for op in ("sum", "max", "min", "prod"):
        kinds = [d for d in dtypes if not (d is np.complex64 and op in ("max", "min"))]
        tensors = [
            ((np.arange(7) + i) % 3 + mesh.rank + 1).astype(d).reshape(shape)
            for d in kinds
            for i, shape in enumerate(((7,), (1, 7)))
        ]
        got = dist.all_reduce_coalesced(tensors, axis="x", op=op)
        for t, g in zip(tensors, got):
            one = dist.all_reduce(t, axis="x", op=op)
            assert g.dtype == t.dtype and g.shape == t.shape, (op, t.dtype, g)
            assert np.array_equal(g, one), (op, t.dtype, g, one)
    assert mesh.channel("x").shared_buckets.regions, "no bucket went through shared memory"


@check
def coalesced_results_in_shared_memory_are_read_only():
    mesh = line()
    got = dist.all_reduce_coalesced([np.ones(5, np.float32)], axis="x")
    assert mesh.channel("x").shared_buckets.regions  # it did go through shared memory
    assert not got[0].flags.writeable
    mine = np.array(got[0])
    mine /= 2  # a copy is the rank's own
    dist.barrier(axis="x")
    assert np.array_equal(got[0], np.full(5, dist.size(), np.float32))


@check
def coalesced_results_held_survive_later_calls():
    mesh = line()
    n = dist.size()
    held = [
        dist.all_reduce_coalesced(
            [np.full(5, k + mesh.rank, np.float32), np.full(3, k, np.int64)], axis="x"
        )
        for k in range(12)  # more calls than result regions: the later ones go through MPI
    ]
    for k, (a, b) in enumerate(held):
        assert np.array_equal(a, np.full(5, n * k + n * (n - 1) // 2, np.float32)), (k, a)
        assert np.array_equal(b, np.full(3, n * k)), (k, b)


@check
def coalesced_sum_is_the_rank_order_sum_bit_for_bit():
    mesh = line()
    n = dist.size()
    rng = np.random.default_rng(11)
    everyone = [
        [rng.standard_normal(size).astype(np.float32) * 10**r for size in (1000, 37, 4099)]
        for r in range(n)
    ]
    want = [in_rank_order([mine[i] for mine in everyone]).tobytes() for i in range(3)]
    for shared_memory in ("on", "on", "off"):  # "off": MPI's deterministic all_reduce
        with tessera.config(dist_shared_memory=shared_memory):
            got = dist.all_reduce_coalesced(everyone[mesh.rank], axis="x", deterministic=True)
        assert [g.tobytes() for g in got] == want, shared_memory


@check
def coalesced_replaces_a_free_region_that_is_too_small():
    mesh = line()
    n = dist.size()
    for size in (10, 1000, 100_000):  # each call's results are dropped before the next
        got = dist.all_reduce_coalesced([np.full(size, mesh.rank + 1.0)], axis="x")
        assert np.array_equal(got[0], np.full(size, n * (n + 1) / 2)), size
        del got
    arena = mesh.channel("x").shared_buckets
    assert len(arena.regions) == 1 and arena.regions[0].nbytes >= 800_000


@check
def coalesced_goes_through_mpi_when_shared_memory_is_short():
    from tessera.mesh import shared_buckets

    mesh = line()
    room = shared_buckets._shm_room
    if mesh.rank == 1:  # one rank short of room: every rank must take the MPI path
        shared_buckets._shm_room = lambda: 0
    try:
        got = dist.all_reduce_coalesced([np.full(4, mesh.rank + 1.0)], axis="x")
    finally:
        shared_buckets._shm_room = room
    n = dist.size()
    assert np.array_equal(got[0], np.full(4, n * (n + 1) / 2))
    assert mesh.channel("x").shared_buckets.regions == []


@check
def sub_communicators_of_a_2d_mesh_reduce_along_their_axis():
    n = dist.size()
    mesh = dist.Mesh(axes=("dp", "tp"), shape=(2, n // 2))
    tp = mesh.size("tp")
    r = mesh.rank
    along_tp = dist.all_reduce(np.array([r]), axis="tp")
    along_dp = dist.all_reduce(np.array([r]), axis="dp")
    row = mesh.coords[0]
    assert along_tp.tolist() == [sum(row * tp + j for j in range(tp))]
    assert along_dp.tolist() == [sum(i * tp + mesh.coords[1] for i in range(2))]


@check
def collectives_on_sharded_tensors_keep_layouts_right():
    mesh = line()
    full = np.arange(5 * 4, dtype=np.float64).reshape(5, 4)
    rows = dist.from_global(full, dist.ShardSpec(("row",), ("x",)), mesh)
    whole = dist.all_gather(rows, axis="x")
    assert whole.layout == dist.ShardSpec() and np.array_equal(whole.local, full)
    summed = dist.all_reduce(whole, axis="x")
    assert np.array_equal(summed.local, full * dist.size())
    cols = dist.reduce_scatter(whole, axis="x", dim=1)
    assert cols.layout == dist.ShardSpec((1,), ("x",))
    assert np.array_equal(cols.gather(), full * dist.size())
    try:
        dist.all_reduce(rows, axis="x")
    except dist.DistError:
        raise
    except tessera.TesseraError as exc:
        assert "split over it" in str(exc)
    else:
        raise AssertionError("all_reduce of a tensor split over the axis must fail")


def _gemm_operands(mesh):
    rng = np.random.default_rng(11)
    a = rng.random((9, 13), dtype=np.float32)  # K = 13: uneven over 2 and 4 ranks
    b = rng.random((13, 7), dtype=np.float32)
    A = dist.from_global(a, dist.ShardSpec(("col",), ("tp",)), mesh)
    B = dist.from_global(b, dist.ShardSpec(("row",), ("tp",)), mesh)
    return a, b, A, B


@check
def index_launch_gemm_all_reduces_a_replicated_c():
    mesh = dist.Mesh(axes=("tp",), shape=(dist.size(),))
    a, b, A, B = _gemm_operands(mesh)
    C = dist.zeros((9, 7), dist.ShardSpec(), mesh)
    launch = tessera.index_launch(axis="tp")(tp_gemm)
    plan = launch.plan(A.parts("tp"), B.parts("tp"), C.parts("tp"))
    assert plan.collectives == ["all_reduce C"], plan  # C is the parameter's name
    launch(A.parts("tp"), B.parts("tp"), C.parts("tp"))
    np.testing.assert_allclose(C.local, a @ b, rtol=1e-5)


@check
def index_launch_gemm_reduce_scatters_a_column_split_c():
    mesh = dist.Mesh(axes=("tp",), shape=(dist.size(),))
    a, b, A, B = _gemm_operands(mesh)
    C = dist.zeros((9, 7), dist.ShardSpec(("col",), ("tp",)), mesh)
    launch = tessera.index_launch(axis="tp")(tp_gemm)
    assert launch.plan(A.parts("tp"), B.parts("tp"), C.parts("tp")).collectives == [
        "reduce_scatter C"
    ]
    launch(A.parts("tp"), B.parts("tp"), C.parts("tp"))
    np.testing.assert_allclose(C.gather(), a @ b, rtol=1e-5)


@kernel
def scale_rows(x: f32[n / tp], y: mut[f32[n / tp]], s: f32):
    i = tile.linear_id()
    y[i] = x[i] * s


@kernel
def shift(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    y[i] = x[(i + 1) % n]


@check
def index_launch_gathers_what_the_kernel_wants_whole():
    mesh = dist.Mesh(axes=("tp",), shape=(dist.size(),))
    full = np.arange(10, dtype=np.float32)
    X = dist.from_global(full, dist.ShardSpec(("row",), ("tp",)), mesh)
    Y = dist.zeros((10,), dist.ShardSpec(("row",), ("tp",)), mesh)
    launch = tessera.index_launch(axis="tp")(shift)
    plan = launch.plan(X.parts("tp"), Y.parts("tp"))
    assert plan.collectives == ["all_gather x", "all_gather y"], plan
    launch(X.parts("tp"), Y.parts("tp"))
    assert np.array_equal(Y.gather(), np.roll(full, -1))


@check
def index_launch_splits_a_replicated_output_and_gathers_it_back():
    mesh = dist.Mesh(axes=("tp",), shape=(dist.size(),))
    full = np.arange(10, dtype=np.float32)
    X = dist.from_global(full, dist.ShardSpec(), mesh)
    Y = dist.zeros((10,), dist.ShardSpec(), mesh)
    launch = tessera.index_launch(axis="tp")(scale_rows)
    plan = launch.plan(X.parts("tp"), Y.parts("tp"), 2.0)
    assert [s.action for s in plan.steps] == ["take_block", "take_block", "all_gather"], plan
    launch(X.parts("tp"), Y.parts("tp"), 2.0)
    assert np.array_equal(Y.local, full * 2)


if __name__ == "__main__":
    folder = sys.argv[1]
    for name in sys.argv[2:] or list(CHECKS):
        report_outcome(CHECKS[name], f"{folder}/{name}.rank{dist.rank()}.txt")
