"""Heartbeats: whether the members a rank waits on are alive, on any node (MESH.md,
"Fault policy": health).

A wait on a collective learns little from a member that does not answer its query: the
member may be computing (it answers when it next waits on Tessera), hung in a loop, stopped,
dead on another node, or cut off from the network. So every process with a channel of two
or more members runs one daemon thread that, every ``TESSERA_DIST_HEARTBEAT`` seconds (10;
``off`` stops them), sends one byte to each other member of each of its channels, on a
communicator of the channel's own, and receives theirs (on an axis of more than
``ALL_PEERS_UP_TO`` members only to and from its two neighbours along the axis: each
rank's messages, and the connections the MPI library makes for them, stay few on a large
job; a wait then tells only its neighbours' liveness). A member whose heartbeats stopped
for ``LOST_AFTER`` intervals is **lost**: its process is stopped, dead, hung with the
interpreter's lock held, or cut off. A wait ends as soon as a member it waits on is lost
(``RankLost``, at the wait's next check of the members: after 1 s, 4 s, 16 s, ...) instead
of at ``TESSERA_COLLECTIVE_TIMEOUT``; a member that sends heartbeats but does not answer is
alive (computing, or hung in code that does not wait on Tessera), and the timeout says so.

The thread needs an MPI library that takes calls from several threads
(``MPI_THREAD_MULTIPLE``, what mpi4py asks for); without one there are no heartbeats and
``mesh.health()`` says why. Receiving uses matched probes (``MPI_Improbe``/``MPI_Mrecv``),
so a wait's own check may drain the queue while the thread does. Nothing the thread meets
is raised or printed: a channel whose heartbeats fail stops sending them and reports why
(``status``).
"""

from __future__ import annotations

import atexit
import math
import threading
import time

from ..config import get as setting
from ..errors import SettingError

TAG = 7306  # on a channel's heartbeat communicator
LOST_AFTER = 3.0  # intervals without a heartbeat that make a member lost
ALL_PEERS_UP_TO = 64  # members of an axis that all exchange heartbeats; above, neighbours
NEVER = "off"


def interval() -> float | None:
    """``TESSERA_DIST_HEARTBEAT`` in seconds, or None (``off`` or ``0``: no heartbeats).
    Anything but a finite number > 0, ``0`` or ``off`` is a SettingError."""
    value = setting("dist_heartbeat").strip().lower()
    wanted = f"a finite number of seconds > 0, or 0 or {NEVER!r} for no heartbeats"
    if value == NEVER:
        return None
    try:
        seconds = float(value)
    except ValueError:
        raise SettingError(
            f"TESSERA_DIST_HEARTBEAT={value!r} is not a number; it must be {wanted}"
        ) from None
    if seconds == 0:
        return None
    if not math.isfinite(seconds) or seconds < 0:
        raise SettingError(f"TESSERA_DIST_HEARTBEAT={value!r}: it must be {wanted}")
    return seconds


class Beats:
    """One channel's heartbeats: its communicator (a duplicate of the channel's, made with
    it), when each member's last heartbeat came, and the sends still in flight."""

    def __init__(self, comm, size: int, index: int, every: float | None, why_not: str | None):
        self.comm, self.size, self.index = comm, size, index
        self.every = every  # seconds between heartbeats, None when there are none
        now = time.monotonic()
        self.last = [now] * size  # the mesh's creation heard from everyone
        self.peers = peers(size, index)  # the members heartbeats go to and come from
        self._out = [bytearray(1) for _ in range(size)]  # a send's buffer outlives it
        self._sending: list = [None] * size  # per member, the send in flight (or None)
        self.status = why_not or "running"  # "running", or why there are none

    def send(self) -> None:
        """One heartbeat to each other member, unless its last one is still in flight (a
        member that receives nothing gets no pile of them)."""
        from mpi4py import MPI

        for i in self.peers:
            pending = self._sending[i]
            if pending is not None and not pending.Test():
                continue
            self._sending[i] = self.comm.Isend([self._out[i], MPI.BYTE], dest=i, tag=TAG)

    def drain(self) -> None:
        """Receive the heartbeats that came, noting when (thread-safe: matched probes)."""
        from mpi4py import MPI

        status = MPI.Status()
        buffer = bytearray(1)
        while True:
            message = self.comm.Improbe(source=MPI.ANY_SOURCE, tag=TAG, status=status)
            if message is None:
                return
            source = status.Get_source()
            message.Recv([buffer, MPI.BYTE])
            self.last[source] = time.monotonic()

    def silent_for(self, i: int) -> float:
        """Seconds since member ``i``'s last heartbeat (0 for this rank)."""
        return 0.0 if i == self.index else max(0.0, time.monotonic() - self.last[i])

    def lost(self) -> list[int]:
        """The members (indices) whose heartbeats stopped for LOST_AFTER intervals; none
        where there are no heartbeats."""
        if self.every is None or self.status != "running":
            return []
        try:
            self.drain()  # what came since the thread last looked
        except Exception as exc:  # noqa: BLE001 - reported through status, never raised
            self.status = f"stopped: {exc}"
            return []
        limit = LOST_AFTER * self.every
        return [i for i in self.peers if self.silent_for(i) > limit]

    def describe(self, i: int) -> str | None:
        """Member ``i``'s heartbeats in words, for a timeout's message (None: none run, or
        none with ``i``)."""
        if self.every is None or self.status != "running" or i not in self.peers:
            return None
        silent = self.silent_for(i)
        if silent > LOST_AFTER * self.every:
            return f"no heartbeat for {silent:.1f} s (lost: stopped, dead, hung or cut off)"
        return (
            f"its last heartbeat {silent:.1f} s ago (alive: computing, or hung in code that "
            "does not wait on Tessera)"
        )


def peers(size: int, index: int) -> tuple[int, ...]:
    """The members (indices) that member ``index`` of an axis of ``size`` exchanges
    heartbeats with: every other one up to ALL_PEERS_UP_TO members, else its two
    neighbours along the axis (a ring)."""
    if size <= ALL_PEERS_UP_TO:
        return tuple(i for i in range(size) if i != index)
    return tuple(sorted({(index - 1) % size, (index + 1) % size}))


_beats: list[Beats] = []
_lock = threading.Lock()
_stop = threading.Event()
_thread: list[threading.Thread] = []


def attach(comm, size: int, index: int) -> Beats:
    """The heartbeats of a channel being made on ``comm`` (collective: every member calls
    it as the channel is made, with the same TESSERA_DIST_HEARTBEAT, else a SettingError
    on every member); starts this process's heartbeat thread on first use."""
    every = interval()
    if size == 1:
        return Beats(comm, size, index, None, "a single member")
    from mpi4py import MPI

    threads = MPI.Query_thread() >= MPI.THREAD_MULTIPLE
    everyone = comm.allgather((every, threads))  # one setting on every member, checked
    if len({e for e, _ in everyone}) > 1:
        values = "; ".join(f"index {i}: {e or 'off'}" for i, (e, _) in enumerate(everyone))
        raise SettingError(
            f"the members of a mesh axis have different TESSERA_DIST_HEARTBEAT values "
            f"({values}): give every rank the same (a member that sends none would be taken "
            "for lost)"
        )
    why_not = None
    if every is None:
        why_not = "off (TESSERA_DIST_HEARTBEAT)"
    elif not all(t for _, t in everyone):  # (a member that cannot send them: none at all)
        why_not = "off: the MPI library was not started with MPI_THREAD_MULTIPLE"
    beats = Beats(comm.Dup(), size, index, None if why_not else every, why_not)
    if why_not is None:
        with _lock:
            _beats.append(beats)
            if not _thread:
                thread = threading.Thread(target=_run, name="tessera-heartbeat", daemon=True)
                _thread.append(thread)
                atexit.register(stop)  # before MPI_Finalize: mpi4py registered it earlier
                thread.start()
    return beats


def _run() -> None:
    """The thread: every channel's heartbeats out and in, at the shortest interval."""
    from mpi4py import MPI

    while not _stop.is_set():
        with _lock:
            running = [b for b in _beats if b.status == "running"]
        if MPI.Is_finalized():
            return
        for beats in running:
            try:
                beats.send()
                beats.drain()
            except Exception as exc:  # noqa: BLE001 - a thread has no caller: reported
                beats.status = f"stopped: {exc}"
        _stop.wait(min((b.every for b in running), default=1.0))


def stop() -> None:
    """End the heartbeat thread (at exit, before MPI is finalized)."""
    _stop.set()
    for thread in _thread:
        thread.join(timeout=2.0)
