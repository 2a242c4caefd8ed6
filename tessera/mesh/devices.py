"""Which device a rank computes on: one GPU per process, ``local_rank % gpus_on_node``
(docs/distributed.md), or the CPU on a node without GPUs.

The local rank comes from the launcher's environment (MPICH/Hydra, Open MPI, Slurm) or,
failing that, from MPI's shared-memory split of the world. The GPU is made current for
numba-cuda and, when installed, CuPy, so kernels and collectives use the same one.
"""

from __future__ import annotations

import os

LOCAL_RANK_VARIABLES = (
    "MPI_LOCALRANKID",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "SLURM_LOCALID",
    "PMI_LOCAL_RANK",
)


def local_rank(comm) -> int:
    """This process's rank among the processes on its node."""
    for name in LOCAL_RANK_VARIABLES:
        value = os.environ.get(name)
        if value is not None and value.isdigit():
            return int(value)
    if comm.Get_size() == 1:
        return 0
    from mpi4py import MPI

    return comm.Split_type(MPI.COMM_TYPE_SHARED).Get_rank()


_node_ranks: list[int] = []


def ranks_on_node(comm) -> int:
    """How many of ``comm``'s processes share this node: MPI's shared-memory split, made
    once (collectively: the first mesh, which every rank creates, asks)."""
    if not _node_ranks:
        if comm.Get_size() == 1:
            return 1
        from mpi4py import MPI

        _node_ranks.append(comm.Split_type(MPI.COMM_TYPE_SHARED).Get_size())
    return _node_ranks[0]


def gpus_on_node() -> int:
    """How many GPUs this process can see (0 without a driver, or under the simulator)."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return 0
    if os.name == "posix" and not os.path.exists("/dev/nvidiactl"):
        return 0  # no NVIDIA driver: skip importing numba.cuda
    from numba import cuda

    return len(cuda.gpus) if cuda.is_available() else 0


def select_device(comm) -> str:
    """Make this rank's GPU current and return ``"cuda:N"``, or ``"cpu"`` without GPUs."""
    if comm.Get_size() == 1:
        return "cpu" if gpus_on_node() == 0 else "cuda:0"
    count = gpus_on_node()
    if count == 0:
        return "cpu"
    index = local_rank(comm) % count
    from numba import cuda

    cuda.select_device(index)
    try:
        import cupy
    except ImportError:
        pass
    else:
        cupy.cuda.runtime.setDevice(index)
    return f"cuda:{index}"


def gpu_view(device: str, nvml=None) -> dict:
    """The GPU of ``device`` as NVML describes it: name, bus id, NVLink peers (bus id,
    lanes). ``nvml``: the ``pynvml`` module (imported when None; absent: "unknown")."""
    if device == "cpu":
        return {"gpu": "", "bus_id": "", "nvlinks": ()}
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            return {"gpu": "unknown", "bus_id": "", "nvlinks": ()}
    try:
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(int(device.split(":")[1]))
        name = _text(nvml.nvmlDeviceGetName(handle))
        bus = _text(nvml.nvmlDeviceGetPciInfo(handle).busId)
        lanes: dict[str, int] = {}
        for link in range(nvml.NVML_NVLINK_MAX_LINKS):
            try:
                if not nvml.nvmlDeviceGetNvLinkState(handle, link):
                    continue
                peer = _text(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)
            except nvml.NVMLError:
                continue  # a link the device does not have
            lanes[peer] = lanes.get(peer, 0) + 1
        return {"gpu": name, "bus_id": bus, "nvlinks": tuple(sorted(lanes.items()))}
    except Exception:  # noqa: BLE001 - a library that fails leaves the GPU undescribed
        return {"gpu": "unknown", "bus_id": "", "nvlinks": ()}


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
