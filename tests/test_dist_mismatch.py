"""Ranks that pass one collective different arguments get CollectiveMismatch on every
rank, naming what each passed — never a wrong result, uninitialised memory or an
assertion inside MPI. Real ``mpiexec -n 2`` runs of tests/mpi_mismatch_script.py (every
case in one job); each test asserts one case on both ranks."""

from __future__ import annotations

import os

import pytest
from mpi_run import mpi_missing, run_mpi

pytestmark = pytest.mark.skipif(mpi_missing(), reason="needs mpi4py and mpiexec")


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mismatch")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TESSERA_DIST")}
    result = run_mpi("mpi_mismatch_script.py", 2, folder, env=env, timeout=120)

    def read(case: str) -> list[str]:
        paths = [folder / f"{case}.rank{r}.txt" for r in range(2)]
        return [
            p.read_text() if p.exists() else f"no report\n{result.stderr[-2000:]}" for p in paths
        ]

    return read


def assert_named_on_every_rank(texts: list[str], calls: tuple[str, str]) -> None:
    """Both ranks raised CollectiveMismatch, each naming both ranks' calls: the line of
    rank r holds ``calls[r]``."""
    for text in texts:
        assert text.startswith("CollectiveMismatch"), text
        for r, call in enumerate(calls):
            head = f"  rank {r} (index {r} on axis 'x'): "
            line = next((x for x in text.splitlines() if x.startswith(head)), "")
            assert call in line, text


# ------------------------------------------------- always: all_gather checks its metadata


def test_all_gather_blocks_with_different_trailing_dims_are_a_mismatch(reports):
    assert_named_on_every_rank(
        reports("all_gather_trailing_dims"),
        ("all_gather(shape=('*', 2), dtype=float64", "all_gather(shape=('*', 3), dtype=float64"),
    )


def test_all_gather_blocks_of_different_dtypes_are_a_mismatch(reports):
    assert_named_on_every_rank(
        reports("all_gather_dtypes"),
        ("all_gather(shape=('*', 2), dtype=float32", "all_gather(shape=('*', 2), dtype=float64"),
    )


def test_all_gather_along_different_dims_is_a_mismatch(reports):
    assert_named_on_every_rank(
        reports("all_gather_dims"),
        (
            "all_gather(shape=('*', 2), dtype=float64, dim=0",
            "all_gather(shape=(2, '*'), dtype=float64, dim=1",
        ),
    )


# --------------------------------- under TESSERA_DIST_DEBUG=1: every argument on the wire


def test_different_collectives_are_a_mismatch_under_dist_debug(reports):
    assert_named_on_every_rank(
        reports("kind"),
        (
            "all_reduce(shape=(3,), dtype=float32, op=sum",
            "all_gather(shape=('*', 2), dtype=float64",
        ),
    )


def test_different_ops_are_a_mismatch_under_dist_debug(reports):
    assert_named_on_every_rank(reports("op"), ("op=sum", "op=max"))


def test_different_dtypes_are_a_mismatch_under_dist_debug(reports):
    assert_named_on_every_rank(reports("dtype"), ("dtype=float32", "dtype=float64"))


def test_different_shapes_are_a_mismatch_under_dist_debug(reports):
    assert_named_on_every_rank(reports("shape"), ("shape=(3,)", "shape=(4,)"))


def test_different_broadcast_roots_are_a_mismatch_under_dist_debug(reports):
    assert_named_on_every_rank(reports("root"), ("root=0", "root=1"))


def test_reduce_scatter_along_different_dims_is_a_mismatch_under_dist_debug(reports):
    assert_named_on_every_rank(
        reports("reduce_scatter_dim"),
        (
            "reduce_scatter(shape=(4, 4), dtype=float64, op=sum, dim=0",
            "reduce_scatter(shape=(4, 4), dtype=float64, op=sum, dim=1",
        ),
    )


def test_deterministic_on_one_rank_only_is_a_mismatch_under_dist_debug(reports):
    assert_named_on_every_rank(
        reports("deterministic"), ("deterministic=True", "deterministic=False")
    )
