"""NVTX ranges around GPU launches and collectives, for Nsight Systems.

Each range is named after the kernel (or collective) and sits in one of five phases, the
NVTX *categories* of the domain "tessera": ``copy`` (kernels that only move or map
elements), ``mma`` (kernels with ``tile.dot``), ``reduce`` (reductions, scans, atomics),
``comm`` (collectives) and ``host`` (compile stages, autotune trials, graph modules). It
goes through the ``nvtx`` package (``pip install nvtx``) when that is installed, and
does nothing otherwise. Written against that package's documented API
(``nvtx.push_range(message, color, domain, category)`` / ``nvtx.pop_range(domain)``);
the GPU tests passed on an H100 with the package installed, though the ranges have not
yet been looked at in Nsight Systems (docs/observability.md).
"""

from __future__ import annotations

import importlib.util
import threading

from .observers import Observer, attach

PHASES = ("copy", "mma", "reduce", "comm", "host")
COLORS = {"copy": "blue", "mma": "green", "reduce": "orange", "comm": "red", "host": "grey"}
DOMAIN = "tessera"
MMA = frozenset({"tile.dot"})
REDUCE = frozenset(
    {
        "reduce_sum", "reduce_max", "reduce_min", "tile.sum", "tile.max", "tile.min",
        "t.sum", "t.max", "t.min", "tile.prefix_sum", "tile.atomic_add", "tile.atomic_max",
        "tile.atomic_min", "tile.atomic_and", "tile.atomic_or", "tile.atomic_xor",
        "tile.atomic_xchg", "tile.atomic_cas",
    }
)  # fmt: skip


def phase(kind: str, primitives: frozenset[str]) -> str:
    """The NVTX phase of something observed: a collective is ``comm``; a launch is
    ``mma`` if its kernel calls ``tile.dot``, else ``reduce`` if it reduces, scans or updates
    atomically, else ``copy``; anything else (compiling, tuning, a graph module's host
    work) is ``host``."""
    if kind == "collective":
        return "comm"
    if kind != "launch":
        return "host"
    if primitives & MMA:
        return "mma"
    if primitives & REDUCE:
        return "reduce"
    return "copy"


class NvtxRanges(Observer):
    """Pushes an NVTX range when a GPU launch, a collective or a host stage starts and
    pops it when it ends (launches on host targets get none)."""

    def __init__(self, nvtx_module) -> None:
        self.nvtx = nvtx_module
        self._local = threading.local()  # .open: per entered thing, whether a range was pushed

    @property
    def _open(self) -> list[bool]:
        stack = getattr(self._local, "open", None)
        if stack is None:
            stack = self._local.open = []
        return stack

    def enter(self, kind: str, name: str, primitives: frozenset[str], target: object) -> None:
        if kind == "launch" and not getattr(target, "device_arrays", False):
            self._open.append(False)  # a host target's launch: no GPU timeline to mark
            return
        p = phase(kind, primitives)
        self.nvtx.push_range(message=name, color=COLORS[p], domain=DOMAIN, category=p)
        self._open.append(True)

    def leave(self) -> None:
        if self._open and self._open.pop():
            self.nvtx.pop_range(domain=DOMAIN)


def install() -> NvtxRanges | None:
    """Attach NVTX ranges if the ``nvtx`` package is installed (at ``import tessera``)."""
    if importlib.util.find_spec("nvtx") is None:
        return None
    import nvtx

    ranges = NvtxRanges(nvtx)
    attach(ranges)
    return ranges
