"""Measured links kept in the disk cache (tessera/mesh/link_store.py): saved, reused by a
later call, refused when edited or malformed (they steer the auto algorithm choice)."""

from __future__ import annotations

import pytest

import tessera
from tessera.errors import CacheWarning
from tessera.mesh import link_cost, link_store

KEY = link_store.key_of(["node-a", "node-b"], ["cpu", "cpu"], 2)
LINKS = {
    "measured": [["net", 1.2e-05, 1.1e-10]],
    "step": 2.0e-05,
    "gamma": 3.0e-11,
    "fitted": {"ring": [2, [[8, 3.0e-05], [4194304, 6.0e-04]]]},
}


@pytest.fixture
def cache(tmp_path):
    with tessera.config(cache_dir=str(tmp_path / "cache")):
        yield tmp_path / "cache"


def test_a_measurement_round_trips(cache):
    path = link_store.save(KEY, LINKS)
    assert path is not None and path.parent.name == "links"
    assert link_store.load(KEY) == LINKS
    assert link_store.load(link_store.key_of(["node-c"], ["cpu"], 1)) is None  # another key


def test_an_edited_file_is_ignored_with_a_warning(cache):
    path = link_store.save(KEY, LINKS)
    data = bytearray(path.read_bytes())
    data[-5] ^= 1
    path.write_bytes(bytes(data))
    with pytest.warns(CacheWarning, match="ignoring the link measurement"):
        assert link_store.load(KEY) is None


@pytest.mark.parametrize(
    "broken",
    [
        {**LINKS, "measured": [["net", -1.0, 1e-10]]},
        {**LINKS, "measured": [["net", float("inf"), 1e-10]]},
        {**LINKS, "fitted": {"ring": [1, [[8, 1e-5], [16, 2e-5]]]}},
        {**LINKS, "fitted": {"ring": [2, [[8, 1e-5]]]}},
        {**LINKS, "step": "fast"},
    ],
)
def test_malformed_numbers_are_refused(broken):
    assert link_store.valid(LINKS) and not link_store.valid(broken)


def test_a_snapshot_restores_the_choice(monkeypatch):
    for name in ("_measured", "_calibration", "_fitted", "_choices"):
        monkeypatch.setattr(link_cost, name, {})
    link_cost.restore(LINKS)
    assert link_cost.parameters("net") == (1.2e-05, 1.1e-10)
    assert link_cost.step_overhead() == 2.0e-05 and link_cost.gamma() == 3.0e-11
    assert link_cost.snapshot() == LINKS


def test_topology_measures_once_then_reads_the_store(cache, monkeypatch):
    from tessera import dist
    from tessera.mesh import fabric

    for name in ("_measured", "_calibration", "_fitted", "_choices"):
        monkeypatch.setattr(link_cost, name, {})
    monkeypatch.setattr(fabric, "_cache", {})
    mesh = dist.Mesh(axes=("x",), shape=(1,))
    calls = []
    monkeypatch.setattr(fabric, "_measure", lambda topo: calls.append(1) or ())
    fabric.topology(mesh, measure=True)
    fabric._cache.clear()
    fabric.topology(mesh, measure=True)  # a later process: the store answers
    assert calls == [1]
    fabric._cache.clear()
    fabric.topology(mesh, measure="again")
    assert calls == [1, 1]


def test_the_cache_command_lists_and_clears_measurements(cache, capsys):
    from tessera.cli import main

    link_store.save(KEY, LINKS)
    main(["cache", "list"])
    assert "links: 1 measurement" in capsys.readouterr().out
    main(["cache", "clear"])
    assert "1 link measurement" in capsys.readouterr().out
    assert link_store.files() == []
