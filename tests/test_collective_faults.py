"""A failed collective changes nothing it was given, a timeout fires only for a rank that
did not arrive (and says so truly), and ranks that call different collectives get
CollectiveMismatch by default, without TESSERA_DIST_DEBUG. Real ``mpiexec -n 2`` runs of
tests/mpi_collective_faults_script.py."""

from __future__ import annotations

import os

import pytest
from mpi_collective_faults_script import HEADERS, MISMATCHES
from mpi_run import mpi_missing, run_mpi

pytestmark = pytest.mark.skipif(mpi_missing(), reason="needs mpi4py and mpiexec")


def run(mode: str, folder):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TESSERA_DIST")}
    # a mismatch of kinds ends at the first probe (1 s), at worst at the 20 s timeout
    result = run_mpi("mpi_collective_faults_script.py", 2, mode, folder, env=env, timeout=300)

    def read(name: str, rank: int) -> str:
        path = folder / f"{name}.rank{rank}.txt"
        return path.read_text() if path.exists() else f"no report\n{result.stderr[-3000:]}"

    return result, read


def test_a_collective_that_times_out_leaves_out_untouched(tmp_path):
    result, read = run("out_untouched", tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = read("out_untouched", 0).splitlines()
    assert lines[:3] == ["out=: timed out", "in place: timed out", "reduce_scatter out=: timed out"]
    # also after the late rank arrived and completed what rank 0 had given up on
    assert lines[3] == f"out= {[-7.0] * 6}"
    assert lines[4] == f"in place {[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]}"
    assert lines[5] == f"reduce_scatter out= {[-7.0] * 3}"


def test_a_timeout_never_fires_once_every_member_has_arrived(tmp_path):
    result, read = run("small_timeout", tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert [read("small_timeout", r) for r in range(2)] == ["ok", "ok"]


@pytest.fixture(scope="module")
def mismatches(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mismatch")
    result, read = run("mismatch", folder)
    assert result.returncode == 0, result.stderr[-3000:]
    return read


@pytest.mark.parametrize("case", list(MISMATCHES))
def test_ranks_that_call_different_collectives_get_a_mismatch_by_default(mismatches, case):
    for rank in range(2):
        text = mismatches(case, rank)
        assert text.startswith("CollectiveMismatch"), text
        assert "rank 0 (index 0 on axis 'x'): " in text and "rank 1 (index 1 on axis 'x'): " in text


@pytest.mark.parametrize("case", list(HEADERS))
def test_a_receiver_of_a_64k_broadcast_finds_another_call_in_its_header(mismatches, case):
    """The root's call travels in front of its data; the receiver raises, naming both
    calls; the root, which a broadcast sends nothing, returns its own array."""
    root, receiver = mismatches(case, 0), mismatches(case, 1)
    assert root.startswith("no error"), root
    assert receiver.startswith("CollectiveMismatch"), receiver
    assert "a receiver of the broadcast" in receiver
    lines = receiver.splitlines()
    assert any(x.startswith("  rank 0 (index 0 on axis 'x'): broadcast(") for x in lines), receiver
    assert any(x.startswith("  rank 1 (index 1 on axis 'x'): broadcast(") for x in lines), receiver


def test_a_64k_broadcast_with_its_header_delivers_the_roots_array(mismatches):
    for rank in range(2):
        text = mismatches("broadcast_64k_from_1", rank)
        assert text.startswith("no error"), text
        assert "array([[0.0000e+00, 4.0000e+00, 8.0000e+00," in text, text  # rank 1's: doubled
        assert "6.5532e+04]]" in text, text
        assert "shape=(128, 128), dtype=float32" in text, text


def test_reduce_scatters_in_flight_together_each_deliver_their_own_sum(mismatches):
    for rank in range(2):
        text = mismatches("reduce_scatter_512k_three_in_flight", rank)
        assert text == "no error\n'all three right'", text
