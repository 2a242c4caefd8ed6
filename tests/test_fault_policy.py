"""The fault policy of a mesh's axes (tessera/mesh/faults.py; docs/distributed.md, "Fault
policy"): its setting and checks in a world of one, and, with faults injected through
TESSERA_DIST_FAULT_INJECT, real ``mpiexec`` runs of tests/mpi_fault_policy_script.py (side
by side: each takes a few seconds): a transport failure retried on 2 and 4 ranks, raised
under the default policy, a second failure raised under ``retry``, and a rank that exits
told apart from one that stalls."""

from __future__ import annotations

import os

import numpy as np
import pytest
from mpi_run import hydra_missing, mpi_missing, start_mpi

import tessera
from tessera import dist
from tessera.errors import SettingError
from tessera.mesh import faults, heartbeat

RUNS = {  # name: (mode, ranks, injected faults, other settings, launcher)
    "retry_all": ("retry", 2, "transport@seq=2", {}, ()),
    "retry_one": ("retry", 2, "transport@seq=2,rank=1", {}, ()),
    "retry_4": ("retry", 4, "transport@seq=2,rank=2", {}, ()),
    "raise": ("raise", 2, "transport@seq=2,rank=1", {}, ()),
    "twice": ("twice", 2, "transport@seq=2;transport@seq=5,rank=0", {}, ()),
    "exit": ("lost", 2, "rank=1@seq=2:exit", {}, ("-disable-auto-cleanup",)),
    "stall": ("lost", 2, "rank=1@seq=2:stall", {"TESSERA_COLLECTIVE_TIMEOUT": "3"}, ()),
    "freeze": ("lost", 2, "rank=1@seq=2:freeze", {"TESSERA_DIST_HEARTBEAT": "0.25"}, ()),
    "mismatch": ("mismatch", 2, "", {}, ()),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every run of RUNS, started side by side; name -> (each rank's lines, stderr)."""
    if mpi_missing():
        pytest.skip("needs mpi4py and mpiexec")
    base = {k: v for k, v in os.environ.items() if not k.startswith("TESSERA_DIST")}
    base["TESSERA_COLLECTIVE_TIMEOUT"] = "60"
    started = {}
    for name, (mode, ranks, inject, settings, launcher) in RUNS.items():
        if launcher and hydra_missing():
            continue
        folder = tmp_path_factory.mktemp(name)
        env = dict(base, TESSERA_DIST_FAULT_INJECT=inject, **settings)
        process = start_mpi(
            "mpi_fault_policy_script.py", ranks, mode, folder, env=env, launcher=launcher
        )
        started[name] = (process, folder, mode, ranks)
    found = {}
    for name, (process, folder, mode, ranks) in started.items():
        try:
            _, err = process.communicate(timeout=240)
        except BaseException:
            process.kill()
            raise
        texts = []
        for r in range(ranks):
            path = folder / f"{mode}.rank{r}.txt"
            texts.append(path.read_text().splitlines() if path.exists() else ["no report"])
        found[name] = (texts, err)
    return found


def _lines(runs, name: str):
    if name not in runs:
        pytest.skip("needs MPICH's mpiexec (hydra) for -disable-auto-cleanup")
    return runs[name]


RETRIED = [
    "first True",
    "again True",
    "warnings 1",
    "health degraded 1",
    "reduce_scatter True",
    "all_gather True",
    "broadcast True",
    "async True ring",
    "done",
]


@pytest.mark.parametrize("name", ["retry_all", "retry_one", "retry_4"])
def test_a_transport_failure_under_retry_runs_again_on_tesseras_own_algorithms(runs, name):
    """The failed all_reduce's result equals NumPy's, one FaultWarning a rank, and every
    later collective (on the degraded path) too, whether the failure was met on every
    rank, on one of two or on one of four."""
    texts, err = _lines(runs, name)
    assert texts == [RETRIED] * len(texts), err[-3000:]


def test_a_transport_failure_under_raise_is_a_transport_error_on_every_rank(runs):
    texts, err = _lines(runs, "raise")
    for lines in texts:
        assert lines[:2] == ["TransportError all_reduce 2 x 1", "fast True"], (lines, err[-2000:])
        assert "failed in its transport on rank 1" in lines[2]
        assert "It was not run again: the fault policy is 'raise'" in lines[2]
        assert "fault='retry'" in lines[2]  # says what would run it again


def test_an_axis_goes_on_after_a_transport_error_that_every_rank_raised(runs):
    texts, err = _lines(runs, "raise")
    for lines in texts:
        assert lines[3:] == ["health library 1", "after True"], (lines, err[-2000:])


def test_retry_runs_once_an_axis_and_a_second_failure_raises(runs):
    texts, err = _lines(runs, "twice")
    for lines in texts:
        assert lines[0] == "TransportError 5", (lines, err[-2000:])
        assert "the axis had failed before (retry runs once per axis)" in lines[1]


def test_a_rank_that_exits_and_one_that_stalls_get_different_diagnoses(runs):
    exited, err = _lines(runs, "exit")
    assert exited[0][0] == "RankExited [1]", err[-2000:]
    stalled, err = _lines(runs, "stall")
    assert stalled[0][0] == "CollectiveTimeout [1]", err[-2000:]
    assert "rank 1: no answer; its last heartbeat" in stalled[0][1]
    assert "(alive: computing, or hung in code that does not wait on Tessera)" in stalled[0][1]


def test_a_rank_whose_heartbeats_stop_is_lost_long_before_the_timeout(runs):
    """Rank 1's process is stopped (SIGSTOP) at collective #2: no heartbeats (every 0.25 s
    here), so rank 0's wait ends with RankLost at its first check of the members (after
    1 s), not at the 60 s collective timeout."""
    frozen, err = _lines(runs, "freeze")
    lines = frozen[0]
    assert lines[0] == "RankLost [1]", (lines, err[-2000:])
    assert "ranks [1] sent no heartbeat for 3 intervals of 0.25 s" in lines[1]
    assert "rank 1: no heartbeat for" in lines[1] and "(lost: stopped, dead" in lines[1]
    assert float(lines[2].split()[1]) < 10, lines


def test_ranks_with_different_heartbeat_intervals_are_an_error_on_every_rank(runs):
    texts, err = _lines(runs, "mismatch")
    said = (
        "SettingError the members of a mesh axis have different TESSERA_DIST_HEARTBEAT "
        "values (index 0: 10.0; index 1: 5.0)"
    )
    for lines in texts:
        assert lines[0].startswith(said), (lines, err[-2000:])


def test_health_shows_how_long_each_member_has_been_silent(runs):
    frozen, err = _lines(runs, "freeze")
    health = frozen[0][3]
    assert health.startswith("health {'status': 'running', 'every': 0.25, 'silent': {1: "), health
    silent = float(health.rsplit(": ", 1)[1].rstrip("}"))
    assert silent > 0.75, health  # 3 intervals: lost


# ------------------------------------------------------------------ a world of one
@pytest.mark.parametrize("value", ["soon", "-1", "nan", "inf"])
def test_a_bad_heartbeat_interval_is_an_error_when_a_mesh_is_made(value):
    with tessera.config(dist_heartbeat=value), pytest.raises(SettingError) as e:
        dist.Mesh(axes=("x",), shape=(1,))
    assert "TESSERA_DIST_HEARTBEAT" in str(e.value) and "'off'" in str(e.value)


@pytest.mark.parametrize(
    "value, seconds", [("10", 10.0), ("0.25", 0.25), ("0", None), ("off", None)]
)
def test_the_heartbeat_interval_is_seconds_or_off(value, seconds):
    with tessera.config(dist_heartbeat=value):
        assert heartbeat.interval() == seconds


def test_heartbeats_go_to_every_member_of_a_small_axis_and_to_the_neighbours_of_a_large_one():
    assert heartbeat.peers(4, 1) == (0, 2, 3)
    assert heartbeat.peers(heartbeat.ALL_PEERS_UP_TO, 0) == tuple(range(1, 64))
    assert heartbeat.peers(1024, 0) == (1, 1023)
    assert heartbeat.peers(1024, 500) == (499, 501)


def test_a_mesh_takes_its_fault_policy_from_the_setting_or_its_argument():
    assert dist.Mesh(axes=("x",), shape=(1,)).health()["x"]["policy"] == "raise"
    with tessera.config(dist_fault="retry"):
        mesh = dist.Mesh(axes=("x",), shape=(1,))
    assert mesh.health() == {
        "x": {
            "policy": "retry",
            "path": "library",
            "failures": 0,
            "last_failure": None,
            "heartbeats": {"status": "a single member", "every": None, "silent": {}},
        }
    }
    assert dist.Mesh(axes=("x",), shape=(1,), fault="retry").fault == "retry"


def test_an_unknown_fault_policy_is_an_error_naming_the_policies():
    with pytest.raises(
        SettingError,
        match="fault='again' is not a fault policy; it must be one of raise, retry, shrink",
    ):
        dist.Mesh(axes=("x",), shape=(1,), fault="again")


@pytest.mark.skipif(mpi_missing(), reason="needs mpi4py")
def test_shrink_without_ulfm_is_an_error_at_mesh_creation_saying_what_is_missing():
    missing = faults.shrink_missing()
    with pytest.raises(dist.DistError) as caught:
        dist.Mesh(axes=("x",), shape=(1,), fault="shrink")
    assert str(caught.value) == missing
    assert "ULFM" in missing and "fault='raise'" in missing


@pytest.mark.parametrize(
    "text, parsed",
    [
        ("transport@seq=3", [faults.Injection("transport", 3, None, None)]),
        ("transport@seq=2,rank=1,axis=dp", [faults.Injection("transport", 2, 1, "dp")]),
        ("rank=1@seq=3:exit", [faults.Injection("exit", 3, 1, None)]),
        ("rank=1@seq=2:freeze", [faults.Injection("freeze", 2, 1, None)]),
        (
            "rank=0@seq=1:stall; transport@seq=4",
            [faults.Injection("stall", 1, 0, None), faults.Injection("transport", 4, None, None)],
        ),
    ],
)
def test_injected_faults_are_parsed_from_the_setting(text, parsed):
    with tessera.config(dist_fault_inject=text):
        assert list(faults.injections()) == parsed


@pytest.mark.parametrize(
    "text",
    [
        "transport",
        "transport@seq=x",
        "rank=1@seq=3",
        "rank=1@seq=3:crash",
        "link@seq=1",
        "transport@seq=0",
        "transport@seq=1,when=2",
    ],
)
def test_a_malformed_injection_is_an_error_showing_the_forms(text):
    with (
        tessera.config(dist_fault_inject=text),
        pytest.raises(SettingError, match="TESSERA_DIST_FAULT_INJECT takes"),
    ):
        faults.injections()


def test_a_malformed_injection_is_an_error_when_the_mesh_is_made():
    with tessera.config(dist_fault_inject="transport@seq=two"):
        with pytest.raises(SettingError, match="seq= \\(and rank=\\) must be integers"):
            dist.Mesh(axes=("x",), shape=(1,))


def test_an_injected_transport_failure_on_one_rank_is_raised_by_default():
    """A world of one: the failure is agreed on at once and raised; the axis goes on."""
    mesh = dist.Mesh(axes=("x",), shape=(1,))
    with tessera.config(dist_fault_inject="transport@seq=1"):
        with pytest.raises(
            dist.TransportError, match="all_reduce #1 on axis 'x' failed in its transport on rank 0"
        ):
            dist.all_reduce(np.ones(3), axis="x")
    np.testing.assert_array_equal(dist.all_reduce(np.ones(3), axis="x"), np.ones(3))
    assert mesh.health()["x"]["failures"] == 1
