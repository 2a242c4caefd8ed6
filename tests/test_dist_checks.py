"""The distributed layer on 2 and 4 real MPI ranks: tests/mpi_dist_script.py runs every
check once per rank count (one ``mpiexec`` each); each test here asserts one check on
every rank."""

from __future__ import annotations

import os

import pytest
from mpi_run import mpi_missing, run_mpi

HERE = os.path.dirname(os.path.abspath(__file__))
pytestmark = pytest.mark.skipif(mpi_missing(), reason="needs mpi4py and mpiexec")


@pytest.fixture(scope="module", params=[2, 4], ids=["2ranks", "4ranks"])
def checked(request, tmp_path_factory):
    ranks = request.param
    folder = tmp_path_factory.mktemp(f"dist{ranks}")
    env = dict(os.environ, TESSERA_COLLECTIVE_TIMEOUT="60")  # a broken check fails, not hangs
    result = run_mpi("mpi_dist_script.py", ranks, folder, env=env, timeout=300)
    return ranks, folder, result


def assert_check(checked, name: str) -> None:
    ranks, folder, result = checked
    reports = {}
    for r in range(ranks):
        path = folder / f"{name}.rank{r}.txt"
        reports[r] = path.read_text() if path.exists() else f"no report\n{result.stderr[-2000:]}"
    assert reports == {r: "ok" for r in range(ranks)}, reports


def test_every_op_matches_numpy(checked):
    assert_check(checked, "every_op_matches_numpy")


def test_all_gather_takes_uneven_blocks(checked):
    assert_check(checked, "all_gather_takes_uneven_blocks")


def test_reduce_scatter_gives_array_split_blocks(checked):
    assert_check(checked, "reduce_scatter_gives_array_split_blocks")


def test_reduce_scatter_sums_each_block_in_rank_order(checked):
    assert_check(checked, "reduce_scatter_sums_each_block_in_rank_order")


def test_gather_and_scatter_along_dim_1(checked):
    assert_check(checked, "gather_and_scatter_along_dim_1")


def test_half_floats_reduce_in_f32_and_travel_as_bits(checked):
    assert_check(checked, "half_floats_reduce_in_f32_and_travel_as_bits")


def test_bools_reduce_as_any_and_all(checked):
    assert_check(checked, "bools_reduce_as_any_and_all")


def test_deterministic_sum_is_the_rank_order_sum_every_time(checked):
    assert_check(checked, "deterministic_sum_is_the_rank_order_sum_every_time")


def test_deterministic_sum_of_large_arrays_is_the_rank_order_sum(checked):
    assert_check(checked, "deterministic_sum_of_large_arrays_is_the_rank_order_sum")


def test_async_handles_complete_on_wait(checked):
    assert_check(checked, "async_handles_complete_on_wait")


def test_coalesced_all_reduce_equals_one_call_per_tensor(checked):
    assert_check(checked, "coalesced_all_reduce_equals_one_call_per_tensor")


def test_coalesced_every_op_and_dtype_equals_all_reduce(checked):
    assert_check(checked, "coalesced_every_op_and_dtype_equals_all_reduce")


def test_coalesced_results_in_shared_memory_are_read_only(checked):
    assert_check(checked, "coalesced_results_in_shared_memory_are_read_only")


def test_coalesced_results_held_survive_later_calls(checked):
    assert_check(checked, "coalesced_results_held_survive_later_calls")


def test_coalesced_sum_is_the_rank_order_sum_bit_for_bit(checked):
    assert_check(checked, "coalesced_sum_is_the_rank_order_sum_bit_for_bit")


def test_coalesced_replaces_a_free_region_that_is_too_small(checked):
    assert_check(checked, "coalesced_replaces_a_free_region_that_is_too_small")


def test_coalesced_goes_through_mpi_when_shared_memory_is_short(checked):
    assert_check(checked, "coalesced_goes_through_mpi_when_shared_memory_is_short")


def test_sub_communicators_of_a_2d_mesh_reduce_along_their_axis(checked):
    assert_check(checked, "sub_communicators_of_a_2d_mesh_reduce_along_their_axis")


def test_collectives_on_sharded_tensors_keep_layouts_right(checked):
    assert_check(checked, "collectives_on_sharded_tensors_keep_layouts_right")


def test_index_launch_gemm_all_reduces_a_replicated_c(checked):
    assert_check(checked, "index_launch_gemm_all_reduces_a_replicated_c")


def test_index_launch_gemm_reduce_scatters_a_column_split_c(checked):
    assert_check(checked, "index_launch_gemm_reduce_scatters_a_column_split_c")


def test_index_launch_gathers_what_the_kernel_wants_whole(checked):
    assert_check(checked, "index_launch_gathers_what_the_kernel_wants_whole")


def test_index_launch_splits_a_replicated_output_and_gathers_it_back(checked):
    assert_check(checked, "index_launch_splits_a_replicated_output_and_gathers_it_back")
