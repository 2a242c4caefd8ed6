"""What the ranks run on and how they are linked: ``dist.topology(mesh)``.

Each rank describes what it can see — its host and node (the machine and process-id
namespace: what MPI's shared-memory split groups), its local rank, its device, the NUMA
nodes it may run on, its network interfaces (sysfs's ``net`` and ``infiniband`` classes,
with speeds) and, with NVIDIA's management library (``nvidia-ml-py``) installed, its
GPU's name, PCI bus id and NVLink peers — and one all-gather gives every rank the whole
table. ``topo.link(a, b)`` classifies the path between two ranks: ``"self"``, ``"nvlink(n)"``
(n lanes between their GPUs), ``"pcie"`` (GPUs of one node without NVLink), ``"shm"`` (one
node, host memory) or ``"net"``.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from ..runtime.world import world
from . import collectives, link_cost, link_store, liveness
from .devices import gpu_view, local_rank
from .mesh import Mesh, current_mesh


@dataclass(frozen=True)
class Member:
    """One rank as it sees itself."""

    rank: int
    host: str
    node: int  # the node's number (ranks of one machine share it), in order of first rank
    local_rank: int
    device: str  # "cpu" or "cuda:i"
    gpu: str = "unknown"  # its name (NVML), "unknown" without NVML, "" on a CPU rank
    bus_id: str = ""  # the GPU's PCI bus id (NVML)
    numa: tuple[int, ...] = ()  # the NUMA nodes it may run on (() where unknown)
    nics: tuple[tuple[str, str], ...] = ()  # (name, speed) of each network interface
    nvlinks: tuple[tuple[str, int], ...] = field(default=())  # (peer bus id, lanes)


@dataclass(frozen=True)
class Topology:
    members: tuple[Member, ...]
    # (link class, α seconds, β seconds per byte) fitted by ping-pong (measure=True)
    measured: tuple[tuple[str, float, float], ...] = ()

    def link(self, a: int, b: int) -> str:
        """The path between ranks ``a`` and ``b`` (world ranks)."""
        x, y = self.members[a], self.members[b]
        if a == b:
            return "self"
        if x.node != y.node:
            return "net"
        lanes = dict(x.nvlinks).get(y.bus_id, 0) if y.bus_id else 0
        if lanes:
            return f"nvlink({lanes})"
        if x.device != "cpu" and y.device != "cpu" and x.bus_id and y.bus_id:
            return "pcie"
        return "shm"

    @property
    def hosts(self) -> list[str]:
        return list(dict.fromkeys(m.host for m in self.members))

    def to_dict(self) -> dict:
        """A JSON-ready description: the members and the link matrix."""
        n = len(self.members)
        return {
            "members": [asdict(m) for m in self.members],
            "links": [[self.link(a, b) for b in range(n)] for a in range(n)],
            "alpha_beta": {k: {"alpha_s": a, "beta_s_per_byte": b} for k, a, b in self.measured},
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def __str__(self) -> str:
        rows = [f"{len(self.members)} ranks on {len(self.hosts)} host(s)"]
        rows.append("rank  host                  node  local  device   gpu / numa / nics")
        for m in self.members:
            numa = ",".join(map(str, m.numa)) or "?"
            nics = " ".join(f"{name}({speed})" for name, speed in m.nics) or "-"
            gpu = f"{m.gpu} {m.bus_id}".strip() if m.device != "cpu" else "-"
            rows.append(
                f"{m.rank:<5} {m.host[:21]:<21} {m.node:<5} {m.local_rank:<6} {m.device:<8} "
                f"{gpu} / numa {numa} / {nics}"
            )
        n = len(self.members)
        rows.append("links: " + " ".join(f"{b:>9}" for b in range(n)))
        for a in range(n):
            rows.append(f"{a:>5}  " + " ".join(f"{self.link(a, b):>9}" for b in range(n)))
        for klass, alpha, beta in self.measured:
            rows.append(
                f"measured {klass}: alpha {alpha * 1e6:.2f} us, beta {beta * 1e9:.4f} ns/B "
                f"({1 / beta / 1e9 if beta else float('inf'):.1f} GB/s)"
            )
        return "\n".join(rows)


_cache: dict[int, Topology] = {}


def topology(mesh: Mesh | None = None, measure: bool | str = False) -> Topology:
    """The ranks of ``mesh`` (the current one) and the links between them. Collective the
    first time for a mesh (every rank calls it: one all-gather); cached after.
    ``measure=True`` (collective too) fits α and β of every link class present by
    ping-pong between one pair of ranks each (8 B and 4 MB messages) and times the
    all_reduce algorithms; the collectives' ``auto`` algorithm choice uses them from then
    on in this process (link_cost.py). The measurement is kept in the disk cache per set of
    hosts and devices (link_store.py) and reused by later processes; ``measure="again"``
    measures anew."""
    mesh = current_mesh(mesh)
    found = _cache.get(id(mesh))
    if measure and (found is None or not found.measured or measure == "again"):
        base = found or topology(mesh)
        found = _cache[id(mesh)] = replace(base, measured=_measured(mesh, base, measure))
    if found is None:
        comm = world()
        mine = dict(
            host=socket.gethostname(),
            node_key=liveness.identity()[0],
            local_rank=local_rank(comm),
            device=mesh.device,
            numa=numa_nodes(),
            nics=network_interfaces(),
            **gpu_view(mesh.device),
        )
        everyone = comm.allgather(mine)
        nodes: dict[str, int] = {}
        members = []
        for rank, view in enumerate(everyone):
            node = nodes.setdefault(view.pop("node_key"), len(nodes))
            members.append(Member(rank=rank, node=node, **view))
        found = _cache[id(mesh)] = Topology(tuple(members))
    return found


def _measured(mesh: Mesh, topo: Topology, measure) -> tuple[tuple[str, float, float], ...]:
    """The links' fits: stored for these hosts and devices, else measured now (and
    stored); every rank uses rank 0's answer."""
    comm = world()
    devices = [f"{m.device} {m.gpu} {m.bus_id}".strip() for m in topo.members]
    key = link_store.key_of(topo.hosts, devices, mesh.size(mesh.axes[0]))
    stored = None
    if measure != "again":
        stored = comm.bcast(link_store.load(key) if comm.Get_rank() == 0 else None, root=0)
    if stored is not None:
        link_cost.restore(stored)
        return tuple((k, a, b) for k, a, b in stored["measured"])
    measured = _measure(topo)
    gamma = max(comm.allgather(_reduce_rate()))  # one value on every rank
    link_cost.set_measured({k: (a, b) for k, a, b in measured}, _calibrate(mesh), gamma)
    if comm.Get_rank() == 0:
        link_store.save(key, link_cost.snapshot())
    return measured


def _measure(topo: Topology) -> tuple[tuple[str, float, float], ...]:
    """(class, α, β) of each link class between the ranks, by ping-pong (collective)."""
    comm = world()
    n = len(topo.members)
    pairs: dict[str, tuple[int, int]] = {}
    for a in range(n):
        for b in range(a + 1, n):
            pairs.setdefault(link_cost.link_class(topo.link(a, b)), (a, b))
    out = []
    for klass, (a, b) in sorted(pairs.items()):
        small = link_cost.ping_pong(comm, a, b, 8, 200)
        large = link_cost.ping_pong(comm, a, b, 4 << 20, 10)
        fitted = comm.bcast(link_cost.fit(small, large) if comm.Get_rank() == a else None, root=a)
        out.append((klass, *fitted))
    return tuple(out)


def _calibrate(mesh: Mesh) -> float | None:
    """Time every all_reduce algorithm over the mesh's first axis at 8 B, 64 KB, 512 KB, 4 MB
    (collective: every rank times, the slowest counts) for the choice to use instead of
    its formula (link_cost.set_fitted); returns a step's overhead in Tessera's
    algorithms (None on an axis of one)."""
    axis = mesh.axes[0]
    ranks = mesh.size(axis)
    if ranks < 2:
        return None

    def timed(x, algorithm: str) -> float:
        """The best of three batches (the least disturbed), the slowest rank's."""
        reps = max(2, min(20, (1 << 22) // max(x.nbytes, 1)))
        collectives.all_reduce(x, axis, mesh=mesh, algorithm=algorithm)
        batches = []
        for _ in range(3):
            collectives.barrier(axis, mesh=mesh)
            start = time.perf_counter()
            for _ in range(reps):
                collectives.all_reduce(x, axis, mesh=mesh, algorithm=algorithm)
            batches.append((time.perf_counter() - start) / reps)
        mine = np.array([min(batches)])
        return float(collectives.all_reduce(mine, axis, "max", mesh=mesh, algorithm="library")[0])

    sizes = [np.zeros(n // 4, np.float32) for n in (8, 64 << 10, 512 << 10, 4 << 20)]
    for algorithm in ("library", "ring", "rd", "tree"):
        points = [(x.nbytes, timed(x, algorithm)) for x in sizes]
        link_cost.set_fitted(algorithm, ranks, points)
        if algorithm == "ring":
            small = points[0][1]
    alpha = link_cost.parameters(link_cost.axis_link(mesh.channel(axis).processes))[0]
    return max(small / (2 * (ranks - 1)) - alpha, 0.0)


def _reduce_rate() -> float:
    """γ: seconds per byte NumPy takes to add one float32 array into another (4 MB)."""
    a, b = np.ones(1 << 20, np.float32), np.ones(1 << 20, np.float32)
    np.add(a, b, out=a)
    start = time.perf_counter()
    for _ in range(10):
        np.add(a, b, out=a)
    return (time.perf_counter() - start) / 10 / a.nbytes


# ----------------------------------------------------------------------------- this rank


def numa_nodes(sys_root: str = "/sys") -> tuple[int, ...]:
    """The NUMA nodes whose CPUs this process may run on (sysfs), () where unknown."""
    base = os.path.join(sys_root, "devices", "system", "node")
    try:
        names = [n for n in os.listdir(base) if n.startswith("node") and n[4:].isdigit()]
        allowed = os.sched_getaffinity(0)
    except (OSError, AttributeError):
        return ()
    found = []
    for name in sorted(names, key=lambda n: int(n[4:])):
        try:
            with open(os.path.join(base, name, "cpulist")) as f:
                cpus = _cpu_list(f.read())
        except OSError:
            continue
        if cpus & allowed:
            found.append(int(name[4:]))
    return tuple(found)


def _cpu_list(text: str) -> set[int]:
    """``0-3,8-11`` as a set of CPU numbers."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if "-" in part:
            lo, hi = part.split("-")
            cpus.update(range(int(lo), int(hi) + 1))
        elif part:
            cpus.add(int(part))
    return cpus


def network_interfaces(sys_root: str = "/sys") -> tuple[tuple[str, str], ...]:
    """(name, speed) of each network interface but loopback: Ethernet-class devices with
    their link speed (``"25Gb/s"``, ``"?"`` where the device does not say) and InfiniBand
    ports with their rate."""
    found: list[tuple[str, str]] = []
    net = os.path.join(sys_root, "class", "net")
    for name in sorted(_listing(net)):
        if name == "lo":
            continue
        speed = _read(os.path.join(net, name, "speed"))
        mbits = int(speed) if speed and speed.lstrip("-").isdigit() else -1
        found.append((name, _rate(mbits)))
    ib = os.path.join(sys_root, "class", "infiniband")
    for device in sorted(_listing(ib)):
        for port in sorted(_listing(os.path.join(ib, device, "ports"))):
            rate = _read(os.path.join(ib, device, "ports", port, "rate"))
            speed = rate.split(" (")[0].replace(" Gb/sec", "Gb/s") if rate else "?"
            found.append((f"{device}/{port}", speed))
    return tuple(found)


def _rate(mbits: int) -> str:
    if mbits <= 0:
        return "?"
    return f"{mbits // 1000}Gb/s" if mbits % 1000 == 0 else f"{mbits}Mb/s"


def _listing(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""
