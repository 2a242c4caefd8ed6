"""One axis's communication channel: the MPI communicator of the ranks along a mesh axis,
with what makes collectives on it safe for batch jobs.

* Every collective gets a sequence number on its axis (1, 2, ...). Collectives are started
  in program order under one process-wide lock, so a process issues them in one global
  order across all its axes (which NCCL requires and MPI assumes).
* Waiting never blocks inside MPI: collectives are started non-blocking and polled
  (``tessera.timed``), so a wait can end at ``TESSERA_COLLECTIVE_TIMEOUT`` with
  :class:`CollectiveTimeout`.
* To name the ranks that did not arrive, a timed-out rank asks every member over a
  second communicator (the *control* channel, a duplicate of the axis's) what it is
  doing. Ranks answer such questions whenever they are waiting on a collective
  themselves; a rank that is computing, hung or dead does not answer and is reported so.
* Under ``TESSERA_DIST_DEBUG=1`` the members first exchange a fingerprint of the call
  (kind, shape, dtype, op); a mismatch raises :class:`CollectiveMismatch` on every rank,
  naming what each one called.
"""

from __future__ import annotations

import hashlib
import threading
import time

import numpy as np

from .. import timed
from ..config import get as setting
from ..errors import CollectiveMismatch, CollectiveTimeout

QUERY, REPLY = 7301, 7302  # tags on the control channel
ANSWER_WINDOW_S = 1.0  # at most this long a timed-out rank waits for the members' answers

ISSUE_LOCK = threading.RLock()  # one global order of collectives per process
_channels: list[Channel] = []  # every channel of this process, to answer queries on


class Channel:
    """The collectives' view of one mesh axis (made collectively, with the mesh)."""

    def __init__(self, axis: str, comm, world_rank: int):
        timed.timeout_seconds()  # a bad TESSERA_COLLECTIVE_TIMEOUT fails here, on every rank
        self.axis = axis
        self.comm = comm
        self.size = comm.Get_size()
        self.index = comm.Get_rank()
        self.control = comm.Dup() if self.size > 1 else comm
        self.world_ranks = list(comm.allgather(world_rank))
        self.node = _one_node(comm, self.index) if self.size > 1 else None
        self.started = 0  # sequence number of the latest collective started here
        self.nccl = None  # the NCCL communicator, made on the first GPU collective
        self.shared_buckets = None  # shared-memory windows, made on the first coalesced bucket
        _channels.append(self)

    def begin(self, kind: str, x, op: str | None = None, **extra) -> int:
        """Number the next collective; under TESSERA_DIST_DEBUG, check that every member
        calls the same one (on ``x``'s shape and dtype, ``op`` and ``extra``). Call with
        ISSUE_LOCK held."""
        self.started += 1
        seq = self.started
        if self.size > 1 and setting("dist_debug") == "1":
            self._check_fingerprints(kind, seq, fingerprint(kind, x, op, **extra))
        return seq

    def _check_fingerprints(self, kind: str, seq: int, fingerprint: str) -> None:
        digest = np.frombuffer(hashlib.sha256(fingerprint.encode()).digest()[:8], np.int64)
        everyone = np.empty(self.size, np.int64)
        self.wait([self.comm.Iallgather(digest, everyone)], kind, seq)
        if len(set(everyone.tolist())) == 1:
            return
        calls = self.comm.allgather(fingerprint)  # every member got here: no timeout needed
        lines = "\n".join(
            f"  rank {self.world_ranks[i]} (index {i} on axis '{self.axis}'): {call}"
            for i, call in enumerate(calls)
        )
        raise CollectiveMismatch(
            f"collective #{seq} on axis '{self.axis}': the ranks called different "
            f"collectives (TESSERA_DIST_DEBUG):\n{lines}"
        )

    def wait(self, requests: list, kind: str, seq: int, extra_test=None) -> None:
        """Poll ``requests`` (and ``extra_test()``, for GPU work) until all are complete,
        answering other ranks' queries meanwhile; raise CollectiveTimeout at the deadline."""
        timed.wait(
            requests,
            lambda: f"{kind} #{seq} on axis '{self.axis}'",
            lambda timeout: self._timeout(kind, seq, timeout),
            extra_test,
        )

    def _timeout(self, kind: str, seq: int, timeout: float) -> CollectiveTimeout:
        answers = self._ask_members(seq, min(ANSWER_WINDOW_S, max(0.2, timeout / 10)))
        missing, notes = [], []
        for i, answer in enumerate(answers):
            if i == self.index:
                continue
            rank = self.world_ranks[i]
            if answer is None:
                missing.append(rank)
                notes.append(f"rank {rank}: no answer (computing, hung or dead)")
            elif answer[0] < seq:
                missing.append(rank)
                doing = answer[1] or "not in a collective"
                notes.append(f"rank {rank}: at collective #{answer[0]} on this axis, {doing}")
        detail = "; ".join(notes) if notes else "every member answered that it had arrived"
        return CollectiveTimeout(
            f"{kind} #{seq} on axis '{self.axis}' timed out after {timeout:g} s "
            f"(TESSERA_COLLECTIVE_TIMEOUT) on rank {self.world_ranks[self.index]}: "
            f"ranks {missing} did not arrive ({detail})",
            kind,
            seq,
            self.axis,
            missing,
        )

    def _ask_members(self, seq: int, window: float) -> list:
        """Each member's (latest sequence number here, what it waits on), or None for a
        member that did not answer within ``window`` seconds (ranks waiting on a
        collective answer within a millisecond or so)."""
        from mpi4py import MPI

        answers: list = [None] * self.size
        for i in range(self.size):
            if i != self.index:
                self.control.isend(seq, dest=i, tag=QUERY)
        deadline = time.monotonic() + window
        status = MPI.Status()
        while time.monotonic() < deadline and any(
            a is None for i, a in enumerate(answers) if i != self.index
        ):
            answer_queries()
            while self.control.Iprobe(source=MPI.ANY_SOURCE, tag=REPLY, status=status):
                source = status.Get_source()
                answers[source] = self.control.recv(source=source, tag=REPLY)
            time.sleep(0.002)
        return answers


def _one_node(comm, index: int):
    """The members again, in axis order, on a communicator that can map shared memory
    (``MPI.Win.Allocate_shared``) when they all run on one node; else None (on every
    member alike). Collective."""
    from mpi4py import MPI

    node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=index)
    if node.Get_size() == comm.Get_size():
        return node
    node.Free()
    return None


@timed.while_waiting
def answer_queries() -> None:
    """Tell every rank that asked (on any of this process's channels) how far we are."""
    if all(channel.size == 1 for channel in _channels):
        return  # a world of one: nobody can ask
    from mpi4py import MPI

    status = MPI.Status()
    doing = timed.waiting_on[-1] if timed.waiting_on else None
    for channel in _channels:
        if channel.size == 1:
            continue
        while channel.control.Iprobe(source=MPI.ANY_SOURCE, tag=QUERY, status=status):
            source = status.Get_source()
            channel.control.recv(source=source, tag=QUERY)
            channel.control.isend((channel.started, doing), dest=source, tag=REPLY)


def fingerprint(kind: str, x, op: str | None = None, **extra) -> str:
    """What TESSERA_DIST_DEBUG compares: the collective, the array's shape and dtype (for
    all_gather, without dim 0, which may differ between ranks) and the op."""
    if x is None:
        return f"{kind}()"
    shape = tuple(x.shape)
    if kind == "all_gather":
        shape = ("*",) + shape[1:]
    parts = [f"shape={shape}", f"dtype={x.dtype}"]
    parts += [f"op={op}"] if op else []
    parts += [f"{k}={v}" for k, v in extra.items()]
    return f"{kind}({', '.join(parts)})"


class Transfer:
    """A started collective: the requests to poll, an optional test for GPU work (an
    event on the stream), and ``finish()``, which turns the received data into the result
    — or starts the collective's next step and returns its Transfer.
    """

    __slots__ = ("requests", "finish", "gpu_done")

    def __init__(self, requests: list, finish, gpu_done=None):
        self.requests, self.finish, self.gpu_done = requests, finish, gpu_done


def then(transfer: Transfer, fn) -> Transfer:
    """``transfer`` (and any steps it continues with), then ``fn`` on its result."""

    def finish():
        result = transfer.finish()
        return then(result, fn) if isinstance(result, Transfer) else fn(result)

    return Transfer(transfer.requests, finish, transfer.gpu_done)
