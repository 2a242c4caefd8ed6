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
* Every collective is checked: the members exchange a fingerprint of the call (kind, op,
  dtype, shape, dim, root, ...: fingerprint.py) and a mismatch raises
  :class:`CollectiveMismatch` on every rank, naming what each one called, before any
  result is delivered. By default the 16-byte exchange is started together with the
  collective (no round trip of its own: :meth:`Channel.check`); with
  ``TESSERA_DIST_DEBUG=1`` it completes before the collective starts (:meth:`begin`), so
  no data moves between ranks that disagree. An all_gather always exchanges first: it
  needs the block lengths anyway, and the fingerprint rides along.
* The timeout measures arrival: at the deadline a rank asks the members how far they
  are; when every member has arrived the wait goes on (MPI completes what every member
  has started; a member that stops answering ends it), except on the GPU path, where a
  collective that every member has reached and that has not completed is a transport
  failure, and the error says so.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from .. import timed
from ..config import get as setting
from ..errors import CollectiveMismatch, CollectiveTimeout
from . import fingerprint

QUERY, REPLY = 7301, 7302  # tags on the control channel
ANSWER_WINDOW_S = 1.0  # at most this long a timed-out rank waits for the members' answers

ALWAYS_CHECK = True  # the default check (Channel.check); bench/dist_check.py turns it off
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
        self.abandoned: list = []  # the transfers of collectives that failed (their buffers
        # must outlive them: a late peer may still complete them)
        _channels.append(self)

    def begin(self, kind: str, x, op: str | None = None, **extra) -> int:
        """Number the next collective; with the fingerprint check on (TESSERA_DIST_DEBUG),
        check that every member calls the same one: on ``x``'s shape and dtype, ``op`` and
        ``extra`` (see fingerprint.py). Call with ISSUE_LOCK held."""
        self.started += 1
        seq = self.started
        if self.size > 1 and checking():
            self._agree(kind, seq, x, op, extra, 0)
        return seq

    def check(self, kind: str, seq: int, x, op: str | None = None, **extra):
        """The always-on check of collective ``seq`` (started with :meth:`begin`): the
        members' fingerprints, gathered on the axis's communicator by a request started
        now, just before the collective itself, so that the two travel together. None on
        one rank, or when :meth:`begin` compared fingerprints already (TESSERA_DIST_DEBUG).
        Call with ISSUE_LOCK held; :meth:`verify` before delivering the result."""
        if self.size == 1 or not ALWAYS_CHECK or checking():
            return None
        mine = np.array((fingerprint.code(kind, x, op, extra), seq), np.int64)
        everyone = np.empty((self.size, 2), np.int64)
        request = self.comm.Iallgather(mine, everyone)
        return (request, everyone, kind, seq, x, op, extra)

    def verify(self, check) -> None:
        """Wait for a :meth:`check`'s exchange; CollectiveMismatch if the fingerprints
        differ (every member sees the same ones, so every member raises)."""
        request, everyone, kind, seq, x, op, extra = check
        self.wait([request], kind, seq)
        codes = everyone[:, 0]
        if (codes != codes[0]).any():
            raise self._mismatch(kind, seq, fingerprint.describe(kind, x, op, **extra))

    def begin_gather(self, x, dim: int, **extra) -> tuple[int, list[int]]:
        """:meth:`begin` for an all_gather along ``dim``, also returning every member's
        length along it. The lengths travel with the fingerprint, in one exchange, whatever
        TESSERA_DIST_DEBUG says: the gather cannot start without them, so checking its
        dtype and the other dims costs nothing, and a difference there is an error
        instead of a gather of the wrong number of bytes."""
        self.started += 1
        seq = self.started
        if self.size == 1:
            return seq, [x.shape[dim]]
        return seq, self._agree("all_gather", seq, x, None, dict(dim=dim, **extra), x.shape[dim])

    def _agree(self, kind: str, seq: int, x, op, extra: dict, payload: int) -> list[int]:
        """Every member's ``payload``, once every member is known to call what this one
        does; else CollectiveMismatch, on every member, naming what each called."""
        records = timed.exchange(
            self.comm,
            self.size,
            fingerprint.code(kind, x, op, extra),
            payload,
            lambda: f"{kind} #{seq} on axis '{self.axis}'",
            lambda timeout: self._timeout(kind, seq, timeout),
        )
        first = records[0][0]
        if any(r[0] != first for r in records):
            raise self._mismatch(kind, seq, fingerprint.describe(kind, x, op, **extra))
        return [r[1] for r in records]

    def _mismatch(self, kind: str, seq: int, call: str) -> CollectiveMismatch:
        calls = timed.texts(  # on the control communicator: the axis's may hold the
            self.control,  # mismatched collective (started with its check)
            self.size,
            call,
            lambda: f"{kind} #{seq} on axis '{self.axis}' (naming a mismatch)",
            lambda timeout: self._timeout(kind, seq, timeout),
        )
        lines = "\n".join(
            f"  rank {self.world_ranks[i]} (index {i} on axis '{self.axis}'): {call}"
            for i, call in enumerate(calls)
        )
        return CollectiveMismatch(
            f"collective #{seq} on axis '{self.axis}': the ranks called different "
            f"collectives:\n{lines}\nEvery rank of an axis must call the axis's collectives "
            "in the same order, with the same kind, op, dtype, shape, dim, root and "
            "deterministic setting (an all_gather's blocks may differ in length)."
        )

    def wait(self, requests: list, kind: str, seq: int, extra_test=None) -> None:
        """Poll ``requests`` (and ``extra_test()``, for GPU work) until all are complete,
        answering other ranks' queries meanwhile; raise CollectiveTimeout at the deadline."""
        timed.wait(
            requests,
            lambda: f"{kind} #{seq} on axis '{self.axis}'",
            lambda timeout: self._timeout(kind, seq, timeout, extra_test is not None),
            extra_test,
        )

    def _timeout(
        self, kind: str, seq: int, timeout: float, gpu: bool = False
    ) -> CollectiveTimeout | None:
        """The error at the deadline of collective ``seq``, or None when every member has
        arrived (the wait goes on: the timeout is on arrival), but on the GPU path
        (``gpu``), where that is a transport failure and the error says so."""
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
        me = self.world_ranks[self.index]
        head = f"{kind} #{seq} on axis '{self.axis}' timed out after {timeout:g} s"
        if not missing:
            if not gpu:
                return None
            return CollectiveTimeout(
                f"{head} (TESSERA_COLLECTIVE_TIMEOUT) on rank {me}: every member has "
                "arrived, but the device's transport has not completed it",
                kind,
                seq,
                self.axis,
                [],
            )
        return CollectiveTimeout(
            f"{head} (TESSERA_COLLECTIVE_TIMEOUT) on rank {me}: ranks {missing} did not "
            f"arrive ({'; '.join(notes)})",
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


def checking() -> bool:
    """Whether collectives compare fingerprints first (TESSERA_DIST_DEBUG=1)."""
    return setting("dist_debug") == "1"


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
