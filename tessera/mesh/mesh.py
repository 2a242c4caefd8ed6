"""Device meshes: ranks laid out row-major over named axes, one communicator per axis.

    mesh = dist.Mesh(axes=("dp", "tp"), shape=(2, 2))     # needs 4 ranks
    mesh.coords, mesh.index("tp"), mesh.size("dp")

Each axis's communicator groups the ranks that differ only along that axis (ordered by
their index on it); it is made once, collectively, when the mesh is created, and wrapped
in a :class:`~tessera.mesh.channel.Channel` (sequence numbers, timeouts, debug checks).
Creating a mesh under MPI also picks this rank's GPU, if the node has any, and divides the
node's cores among its ranks (tessera.runtime.threads).
"""

from __future__ import annotations

import contextlib
import math
import sys
import threading

import numpy as np

from ..errors import SourceLoc, TesseraError
from ..observe.tracebacks import entry_point, internal_frame
from ..runtime import threads
from ..runtime.world import world
from . import faults, liveness
from .advice import advise
from .channel import Channel
from .devices import gpu_view, ranks_on_node, select_device

_state = threading.local()
_latest: list = []


class Mesh:
    @entry_point
    def __init__(self, axes, shape=None, devices=None, fault: str | None = None):
        self.axes = tuple(axes)
        self.fault = faults.policy(fault)
        shape, devices = _shape_of(self.axes, shape, devices)
        self.shape = tuple(int(s) for s in shape)
        if len(self.axes) != len(self.shape) or len(set(self.axes)) != len(self.axes):
            raise TesseraError(
                f"mesh axes {self.axes} and shape {self.shape} must pair up "
                "one to one, with distinct names"
            )
        self.devices = list(devices) if devices is not None else None
        comm = world()
        needed, have = math.prod(self.shape), comm.Get_size()
        if needed != have:
            launch = f"mpiexec -n {needed} python script.py (or tessera run -n {needed} script.py)"
            raise TesseraError(
                f"Mesh(axes={self.axes}, shape={self.shape}) needs {needed} ranks but this world "
                f"has {have}; start the script with {launch}"
            )
        if self.devices is not None and len(self.devices) != needed:
            raise TesseraError(
                f"Mesh(devices=...) names {len(self.devices)} devices for {needed} ranks"
            )
        faults.check_policy(self.fault, comm)  # the same on every rank; shrink only with ULFM
        faults.injections()  # a malformed TESSERA_DIST_FAULT_INJECT fails here, not mid-job
        self.rank = comm.Get_rank()
        self.coords = _unravel(self.rank, self.shape)
        self._channels: dict[str, Channel] = {}
        for k, axis in enumerate(self.axes):  # collective: every rank splits every axis
            others = self.coords[:k] + self.coords[k + 1 :]
            color = _ravel(others, self.shape[:k] + self.shape[k + 1 :])
            self._channels[axis] = Channel(axis, comm.Split(color, self.coords[k]), self.rank)
            self._channels[axis].policy = self.fault
        self.device = select_device(comm)
        # a 'tp' axis across hosts or NVLink islands: one warning
        gpu = gpu_view(self.device) if self.device != "cpu" and "tp" in self.axes else None
        advise(self.axes, self.shape, comm, liveness.identity()[0], gpu)
        if have > 1:  # the node's cores shared among its ranks, as MPI counts them
            threads.set_default(ranks_on_node(comm))
        _latest[:] = [self]

    def __repr__(self) -> str:
        return f"Mesh(axes={self.axes}, shape={self.shape}, rank={self.rank}, coords={self.coords})"

    def axis_name(self, axis: str | None) -> str:
        """``axis``, or the mesh's only axis when ``axis`` is None: on a one-axis mesh the
        collectives need not name it, on a larger one leaving it out is ambiguous."""
        if axis is not None:
            return axis
        if len(self.axes) == 1:
            return self.axes[0]
        raise TesseraError(
            f"this mesh has {len(self.axes)} axes {self.axes}: name the one the collective "
            f"runs over (axis={self.axes[0]!r}, ...)"
        )

    def _axis(self, axis: str) -> int:
        try:
            return self.axes.index(axis)
        except ValueError:
            raise TesseraError(f"mesh has no axis {axis!r}; its axes are {self.axes}") from None

    def health(self) -> dict[str, dict]:
        """Each axis's fault state: ``policy``; ``path``: ``"library"``, ``"degraded"``
        (a transport failure that ``retry`` ran again: Tessera's own algorithms from then
        on) or ``"broken"`` (a failure that some members had completed the collective of);
        ``failures`` (transport failures met) and ``last_failure`` (the latest, or None)."""
        return {axis: faults.health(channel) for axis, channel in self._channels.items()}

    def size(self, axis: str) -> int:
        return self.shape[self._axis(axis)]

    def index(self, axis: str) -> int:
        return self.coords[self._axis(axis)]

    def comm(self, axis: str):
        """The communicator of the ranks that differ from this one only along ``axis``."""
        return self.channel(axis).comm

    def channel(self, axis: str | None = None) -> Channel:
        """The axis's channel: its communicator with sequence numbers and timeouts (the only
        axis's when ``axis`` is None)."""
        axis = self.axis_name(axis)
        self._axis(axis)
        return self._channels[axis]

    def __enter__(self) -> Mesh:
        _state.__dict__.setdefault("stack", []).append(self)
        return self

    def __exit__(self, *exc) -> None:
        _state.stack.pop()


_world_channel: list[Channel] = []


def world_channel() -> Channel:
    """The channel of all ranks (for ``barrier()`` with no axis), made on first use."""
    if not _world_channel:
        comm = world()
        channel = Channel("world", comm, comm.Get_rank())
        faults.check_policy(channel.policy, comm)  # TESSERA_DIST_FAULT, as a mesh's
        _world_channel.append(channel)
    return _world_channel[0]


def current_mesh(mesh: Mesh | None = None) -> Mesh:
    """``mesh``, else the innermost ``with mesh:``, else the most recently created mesh."""
    if mesh is not None:
        return mesh
    stack = getattr(_state, "stack", None)
    if stack:
        return stack[-1]
    if _latest:
        return _latest[0]
    raise TesseraError("no mesh: create one with dist.Mesh(axes=..., shape=...) first")


def _shape_of(axes: tuple, shape, devices) -> tuple[tuple, list | None]:
    """The mesh shape and its devices in row-major order. ``devices`` may be an N-d array
    (NumPy's, nested lists: one dim per axis), whose shape is the mesh's when ``shape`` is
    left out, as ``jax.sharding.Mesh`` takes it; a flat sequence gives the shape only to a
    mesh of one axis."""
    if devices is None:
        if shape is None:
            raise _located(f"Mesh(axes={list(axes)}) needs shape=: one size per axis")
        return shape, None
    grid = np.asarray(devices, dtype=object)  # a range, a list, nested lists, an array
    given = None if shape is None else tuple(int(s) for s in shape)
    if grid.ndim == 1 and given is not None:  # devices listed in row-major order
        return given, list(grid)
    if grid.ndim == len(axes):  # one dim per axis: the shape, as JAX's Mesh reads it
        if given is not None and given != grid.shape:
            raise _located(
                f"Mesh(shape={given}) but devices is an array of shape {grid.shape}; give "
                "one of them, or the same shape"
            )
        return grid.shape, list(grid.ravel())
    if grid.ndim == 1:
        n = grid.size
        raise _located(
            f"Mesh(axes={list(axes)}, devices=...) with {n} devices in a flat sequence needs "
            f"shape=: {len(axes)} axes could split {n} devices many ways; write "
            f"Mesh(axes={list(axes)}, shape=(...), devices=...) with sizes whose product is "
            f"{n}, or pass devices as a {len(axes)}-d array (np.asarray(devices).reshape(...)), "
            "as jax.sharding.Mesh takes them"
        )
    raise _located(
        f"Mesh(axes={list(axes)}) has {len(axes)} axes but devices is a {grid.ndim}-d array "
        f"of shape {grid.shape}; give one dim per axis, or a flat sequence and shape="
    )


def _located(message: str) -> TesseraError:
    """An error about the user's ``Mesh(...)`` call, with its ``file:line``, the line and a
    caret (the first frame outside Tessera)."""
    frame = sys._getframe(1)
    while frame is not None and internal_frame(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return TesseraError(message)
    col = 0
    with contextlib.suppress(Exception):  # the call's column (CPython 3.11+)
        col = list(frame.f_code.co_positions())[frame.f_lasti // 2][2] or 0
    loc = SourceLoc(frame.f_code.co_filename, frame.f_lineno, col)
    return TesseraError(f"{message}\n{loc.render()}")


def _unravel(index: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    coords = []
    for extent in reversed(shape):
        coords.append(index % extent)
        index //= extent
    return tuple(reversed(coords))


def _ravel(coords: tuple[int, ...], shape: tuple[int, ...]) -> int:
    index = 0
    for c, extent in zip(coords, shape):
        index = index * extent + c
    return index
