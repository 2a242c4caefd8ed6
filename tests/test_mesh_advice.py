"""The advice at mesh creation (tessera/mesh/advice.py): a 'tp' axis across hosts while
another axis order would keep its groups on one host."""

from __future__ import annotations

import logging

from tessera import dist
from tessera.mesh.advice import advice, islands


def test_a_tp_axis_across_hosts_names_the_order_that_keeps_it_on_one():
    nodes = ["a", "a", "b", "b"]  # ranks 0, 1 on host a; 2, 3 on host b
    text = advice(("tp", "dp"), (2, 2), nodes)
    assert text is not None
    assert "mesh axes ('tp', 'dp') put the ranks of each 'tp' group on different hosts" in text
    assert "axes=('dp', 'tp')" in text


def test_a_tp_axis_on_one_host_needs_no_advice():
    assert advice(("dp", "tp"), (2, 2), ["a", "a", "b", "b"]) is None


def test_no_order_can_help_when_tp_is_wider_than_a_host():
    assert advice(("dp", "tp"), (1, 4), ["a", "a", "b", "b"]) is None


def test_meshes_without_tp_or_on_one_host_are_left_alone():
    assert advice(("dp", "pp"), (2, 2), ["a", "b", "a", "b"]) is None
    assert advice(("tp", "dp"), (2, 2), ["a"] * 4) is None


def test_a_three_axis_mesh_finds_an_order():
    nodes = [r // 4 for r in range(8)]  # two hosts of four ranks
    text = advice(("tp", "pp", "dp"), (2, 2, 2), nodes)
    assert text is not None and "'tp')" in text  # tp last keeps it on a host


def test_a_mesh_in_a_world_of_one_says_nothing(caplog):
    with caplog.at_level(logging.WARNING, logger="tessera"):
        dist.Mesh(axes=("tp",), shape=(1,))
    assert "on different hosts" not in caplog.text


# NVLink islands: per rank (host, its GPU's bus id, its NVLink peers' bus ids), as NVML
# reports them (tessera.mesh.devices.gpu_view)
PAIRS = [  # host a: GPUs 0-1 joined by NVLink, GPUs 2-3 joined, no link between the pairs
    ("a", "0:19", ("0:3B",)),
    ("a", "0:3B", ("0:19",)),
    ("a", "0:5D", ("0:8E",)),
    ("a", "0:8E", ("0:5D",)),
]


def test_gpus_joined_by_nvlink_directly_or_through_each_other_are_one_island():
    assert islands(PAIRS) == [("a", "0:19"), ("a", "0:19"), ("a", "0:5D"), ("a", "0:5D")]
    chain = [("a", "x1", ("x2",)), ("a", "x2", ("x3",)), ("a", "x3", ())]
    assert len(set(islands(chain))) == 1


def test_gpus_nvml_did_not_describe_are_their_hosts_island():
    assert islands([("a", "", ()), ("b", "", ())]) == [("a", ""), ("b", "")]


def test_a_tp_axis_across_nvlink_islands_names_the_order_that_keeps_it_in_one():
    nodes = ["a"] * 4
    text = advice(("tp", "dp"), (2, 2), nodes, islands(PAIRS))
    assert text is not None and "different NVLink islands" in text
    assert "axes=('dp', 'tp')" in text
    assert advice(("dp", "tp"), (2, 2), nodes, islands(PAIRS)) is None
