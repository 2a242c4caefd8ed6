"""Index launches, their plans and their errors in a world of one (no MPI needed: the
collectives of a one-rank axis are copies). Multi-rank runs are in test_dist_checks.py."""

from __future__ import annotations

import numpy as np
import pytest
from classic_kernels import tp_gemm

import tessera
from tessera import dist, f32, kernel, mut, tile


@kernel
def k_extent(a: f32[K / tp], out: mut[f32[1]]):
    out[0] = f32(K)


@kernel(tile=(4,))
def grouped_copy(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    y[i] = x[i]


@pytest.fixture
def mesh():
    return dist.Mesh(axes=("dp", "tp"), shape=(1, 1))


def gemm_operands(mesh):
    rng = np.random.default_rng(0)
    a, b = rng.random((5, 6), dtype=np.float32), rng.random((6, 3), dtype=np.float32)
    A = dist.from_global(a, dist.ShardSpec(("col",), ("tp",)), mesh)
    B = dist.from_global(b, dist.ShardSpec(("row",), ("tp",)), mesh)
    return a, b, A, B


def test_plan_prints_the_launch_and_the_inserted_all_reduce(mesh):
    _, _, A, B = gemm_operands(mesh)
    C = dist.zeros((5, 3), dist.ShardSpec(), mesh)
    plan = tessera.index_launch(axis="tp")(tp_gemm).plan(
        A.parts("tp"), B.parts("tp"), C.parts("tp")
    )
    text = str(plan)
    assert "index launch of tp_gemm over axis 'tp'" in text
    assert "launch: tp_gemm[(5, 3)](A(5, 6), B(6, 3), C(5, 3))" in text
    assert "after:  C: all_reduce over 'tp'" in text
    assert plan.grid == (5, 3) and plan.collectives == ["all_reduce C"]


def test_planning_runs_nothing(mesh):
    _, _, A, B = gemm_operands(mesh)
    C = dist.zeros((5, 3), dist.ShardSpec(), mesh)
    tessera.index_launch(axis="tp")(tp_gemm).plan(A.parts("tp"), B.parts("tp"), C.parts("tp"))
    assert not C.local.any()


def test_index_launch_gemm_matches_numpy_in_a_world_of_one(mesh):
    a, b, A, B = gemm_operands(mesh)
    C = dist.zeros((5, 3), dist.ShardSpec(("col",), ("tp",)), mesh)
    tessera.index_launch(axis="tp")(tp_gemm)(A.parts("tp"), B.parts("tp"), C.parts("tp"))
    np.testing.assert_allclose(C.gather(), a @ b, rtol=1e-5)


def test_a_sharded_dim_binds_its_symbol_to_the_global_extent(mesh):
    x = dist.from_global(np.ones(7, np.float32), dist.ShardSpec(("row",), ("tp",)), mesh)
    out = dist.zeros((1,), dist.ShardSpec(), mesh)
    tessera.index_launch(axis="tp", grid=1)(k_extent)(x.parts("tp"), out.parts("tp"))
    assert out.local[0] == 7


def test_parts_of_another_axis_are_a_launch_error(mesh):
    _, _, A, B = gemm_operands(mesh)
    C = dist.zeros((5, 3), dist.ShardSpec(), mesh)
    with pytest.raises(
        tessera.LaunchError, match=r"\.parts\('dp'\) but the launch is over axis 'tp'"
    ):
        tessera.index_launch(axis="tp")(tp_gemm)(A.parts("tp"), B.parts("tp"), C.parts("dp"))


def test_a_tensor_split_over_the_wrong_axis_is_a_launch_error(mesh):
    a = np.ones((5, 6), np.float32)
    A = dist.from_global(a, dist.ShardSpec(("col",), ("dp",)), mesh)
    _, _, _, B = gemm_operands(mesh)
    C = dist.zeros((5, 3), dist.ShardSpec(), mesh)
    with pytest.raises(
        tessera.LaunchError, match="wants dim 1 split over 'tp' but the tensor splits it over 'dp'"
    ):
        tessera.index_launch(axis="tp")(tp_gemm).plan(A.parts("tp"), B.parts("tp"), C.parts("tp"))


def test_a_grouped_kernel_needs_a_grid(mesh):
    x = dist.zeros((8,), dist.ShardSpec(), mesh)
    with pytest.raises(tessera.LaunchError, match="grouped kernel's index launch needs grid="):
        tessera.index_launch(axis="tp")(grouped_copy)(x.parts("tp"), x.parts("tp"))


def test_wrong_argument_count_names_the_parameters(mesh):
    with pytest.raises(tessera.LaunchError, match=r"takes 3 arguments \(A, B, C\) but 1"):
        tessera.index_launch(axis="tp")(tp_gemm)(np.zeros(1))


def test_an_unknown_launch_axis_names_the_mesh_axes(mesh):
    _, _, A, B = gemm_operands(mesh)
    with pytest.raises(tessera.TesseraError, match="no axis 'pp'"):
        tessera.index_launch(axis="pp")(tp_gemm).plan(A, B, A)


def test_reduce_sum_annotation_describes_itself():
    assert repr(tp_gemm).endswith("C: reduce_sum[f32[M, N]]) flat>")


def test_a_direct_launch_writes_the_partial_sums_like_mut():
    a, b = np.ones((2, 3), np.float32), np.ones((3, 2), np.float32)
    c = np.zeros((2, 2), np.float32)
    tp_gemm[(2, 2)](a, b, c)
    assert np.array_equal(c, np.full((2, 2), 3.0, np.float32))
