"""``dist.topology`` (tessera/mesh/fabric.py): the table of ranks and their links, in a
world of one and on 2 real ranks (against MPI's shared-memory split); sysfs and NVML
answers parsed from recorded fixtures."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from mpi_run import mpi_missing, run_mpi

from tessera import dist
from tessera.mesh import fabric as topo


def test_a_world_of_one_is_one_rank_linked_to_itself():
    t = dist.topology(dist.Mesh(axes=("x",), shape=(1,)))
    (me,) = t.members
    assert (me.rank, me.node, me.local_rank, me.device) == (0, 0, 0, "cpu")
    assert t.link(0, 0) == "self"
    assert json.loads(t.to_json())["links"] == [["self"]]
    assert str(t).startswith("1 ranks on 1 host(s)")


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_network_interfaces_and_numa_nodes_from_sysfs(tmp_path):
    _write(tmp_path / "class/net/eth0/speed", "25000\n")
    _write(tmp_path / "class/net/lo/speed", "")
    _write(tmp_path / "class/net/veth1/speed", "-1\n")  # a virtual device: no speed
    _write(tmp_path / "class/infiniband/mlx5_0/ports/1/rate", "200 Gb/sec (4X HDR)\n")
    _write(tmp_path / "devices/system/node/node0/cpulist", "0-4095\n")
    _write(tmp_path / "devices/system/node/node1/cpulist", "100000-100003\n")
    nics = topo.network_interfaces(str(tmp_path))
    assert nics == (("eth0", "25Gb/s"), ("veth1", "?"), ("mlx5_0/1", "200Gb/s"))
    assert topo.numa_nodes(str(tmp_path)) == (0,)  # this process's CPUs are all on node 0


class RecordedNvml:
    """nvidia-ml-py's answers on one H100 of an HGX node (recorded): 18 NVLink lanes, to
    the NVSwitch fabric's peer bus ids (two peers here, 9 lanes each)."""

    NVML_NVLINK_MAX_LINKS = 18

    class NVMLError(Exception):
        pass

    class _Pci:
        def __init__(self, bus):
            self.busId = bus

    def nvmlInit(self):
        pass

    def nvmlDeviceGetHandleByIndex(self, index):
        return ("handle", index)

    def nvmlDeviceGetName(self, handle):
        return b"NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetPciInfo(self, handle):
        return self._Pci(b"00000000:19:00.0")

    def nvmlDeviceGetNvLinkState(self, handle, link):
        return 1

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle, link):
        return self._Pci(b"00000000:3B:00.0" if link % 2 else b"00000000:4C:00.0")


def test_a_gpu_and_its_nvlink_peers_from_nvml_answers():
    view = topo.gpu_view("cuda:0", RecordedNvml())
    assert view["gpu"] == "NVIDIA H100 80GB HBM3" and view["bus_id"] == "00000000:19:00.0"
    assert view["nvlinks"] == (("00000000:3B:00.0", 9), ("00000000:4C:00.0", 9))
    a = topo.Member(0, "h", 0, 0, "cuda:0", **view)
    b = topo.Member(1, "h", 0, 1, "cuda:1", "NVIDIA H100", "00000000:3B:00.0")
    c = topo.Member(2, "h", 0, 2, "cuda:2", "NVIDIA H100", "00000000:5D:00.0")
    d = topo.Member(3, "other", 1, 0, "cuda:0", "NVIDIA H100", "00000000:19:00.0")
    t = topo.Topology((a, b, c, d))
    assert [t.link(0, k) for k in range(4)] == ["self", "nvlink(9)", "pcie", "net"]
    assert topo.gpu_view("cpu") == {"gpu": "", "bus_id": "", "nvlinks": ()}


@pytest.mark.skipif(mpi_missing(), reason="needs mpi4py and mpiexec")
def test_two_ranks_agree_with_mpis_shared_memory_split(tmp_path):
    result = run_mpi("mpi_topology_script.py", 2, tmp_path, timeout=120)
    outcomes = [(tmp_path / f"rank{r}.txt").read_text() for r in range(2)]
    assert outcomes == ["ok", "ok"], (outcomes, result.stderr[-2000:])


def test_tessera_topo_prints_the_table():
    done = subprocess.run(
        [sys.executable, "-m", "tessera.cli", "topo", "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["links"] == [["self"]]
