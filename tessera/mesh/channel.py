"""One axis's communication channel: the MPI communicator of the ranks along a mesh axis,
with what makes collectives on it safe for batch jobs.

* Every collective gets a sequence number on its axis (1, 2, ...). Collectives are started
  in program order under one process-wide lock, so a process issues them in one global
  order across all its axes (which NCCL requires and MPI assumes).
* Waiting never blocks inside MPI: collectives are started non-blocking and polled
  (``tessera.runtime.timed``), so a wait can end at ``TESSERA_COLLECTIVE_TIMEOUT`` with
  :class:`CollectiveTimeout`.
* To name the ranks that did not arrive, a timed-out rank asks every member over a
  second communicator (the *control* channel, a duplicate of the axis's) what it is
  doing. Ranks answer such questions whenever they are waiting on a collective
  themselves; a rank that is computing, hung or dead does not answer and is reported so.
* Every collective is checked against a fingerprint of the call (kind, op, dtype, shape,
  dim, root, ...: fingerprint.py); a mismatch raises :class:`CollectiveMismatch` on
  every rank, naming what each one called, before any result is delivered. A host
  all_reduce carries a *stamp* after its data, on a communicator of its own
  (:meth:`Channel.stamp`: no message of its own); a host reduce_scatter on up to 8
  members carries it in its messages' tags (:meth:`Channel.tag`), on a larger axis a
  stamp after each block; the other collectives exchange the
  16-byte fingerprint together with the collective (:meth:`Channel.check`); with
  ``TESSERA_DIST_DEBUG=1`` the exchange completes before the collective starts
  (:meth:`begin`), so no data moves between ranks that disagree. An all_gather always
  exchanges first: it needs the block lengths anyway, and the fingerprint rides along.
  A host broadcast of 64 KB or more carries the root's call in a header in front of its
  data (:meth:`Channel.header`), which the receivers compare with their own.
  A wait longer than a second asks the members what they wait on (:meth:`_probe`): one
  that waits on another call with the same number is a mismatch too (an all_reduce
  against a broadcast never completes: they travel on different communicators), and so
  is one that has not started this call and waits on a call of another axis that this
  rank has not started (:meth:`_crossed`: each waits for the other).
* The timeout measures arrival: at the deadline a rank asks the members how far they
  are; when every member has arrived the wait goes on (MPI completes what every member
  has started; a member that stops answering ends it), except on the GPU path, where a
  collective that every member has reached and that has not completed is a transport
  failure, and the error says so.
"""

from __future__ import annotations

import struct
import threading
import time

import numpy as np

from ..config import get as setting
from ..errors import CollectiveMismatch, CollectiveTimeout, RankExited, RankLost
from ..observe import failures
from ..runtime import timed
from . import faults, fingerprint, heartbeat, link_cost, liveness

QUERY, REPLY, NOTICE = 7301, 7302, 7303  # tags on the control channel
ANSWER_WINDOW_S = 1.0  # at most this long a timed-out rank waits for the members' answers
PROBE_WINDOW_S = 0.3  # at most this long a probe of a long wait waits for the answers

ALWAYS_CHECK = True  # the default check (Channel.check); bench/dist_check.py turns it off
STAMP_FREE_BYTES = 256  # a stamp this small is carried whatever the message's size
SCRATCH_BYTES = 64 * 2**20  # a reduce_scatter's send buffer up to this size is kept
STAMPED = {"deterministic": False, "backend": "mpi"}  # the stamped all_reduce's settings
ISSUE_LOCK = threading.RLock()  # one global order of collectives per process
_channels: list[Channel] = []  # every channel of this process, to answer queries on
_SEQ_AND_ROOTS = struct.Struct("<qq")  # words 1 and 2 of a broadcast's header
_waiting: list[tuple] = []  # (channel ident, axis, seq, members) of the waits, innermost last


class Channel:
    """The collectives' view of one mesh axis (made collectively, with the mesh)."""

    def __init__(self, axis: str, comm, world_rank: int):
        timed.timeout_seconds()  # a bad TESSERA_COLLECTIVE_TIMEOUT fails here, on every rank
        self.axis = axis
        self.comm = comm
        self.size = comm.Get_size()
        self.index = comm.Get_rank()
        self.control = comm.Dup() if self.size > 1 else comm
        # stamped all_reduces and reduce_scatters travel on communicators of their own:
        # a rank that calls one while another calls a different collective never pairs
        # the two in MPI (both wait, and the probe of a long wait names the mismatch)
        self.reductions = comm.Dup() if self.size > 1 else comm
        self.scatters = comm.Dup() if self.size > 1 else comm
        self.broadcasts = comm.Dup() if self.size > 1 else comm  # those with a header
        self.p2p = comm.Dup() if self.size > 1 else comm  # send / recv (exchange.py)
        self.steps = comm.Dup() if self.size > 1 else comm  # Tessera's algorithms' messages
        self.p2p_started = 0  # point-to-point waits so far (their errors' numbers)
        self.heartbeats = heartbeat.attach(comm, self.size, self.index)  # (collective)
        members = comm.allgather((world_rank, liveness.identity()))
        self.world_ranks = [rank for rank, _ in members]
        self.members = tuple(self.world_ranks)
        # the same number on every member: every process makes its channels in one order
        # (a mesh's, and the world's, collectively); what a wait names to other ranks
        self.ident = len(_channels)
        self.roots = 0  # a digest of the roots of the axis's broadcasts so far
        self._headers: dict = {}  # (shape, dtype, root) -> a broadcast's header
        self._scratch: dict = {}  # (shape, dtype) -> send buffers not in use (scratch)
        self.processes = [process for _, process in members]  # to see who has exited
        self.node = _one_node(comm, self.index) if self.size > 1 else None
        self.started = 0  # sequence number of the latest collective started here
        self.nccl = None  # the NCCL communicator, made on the first GPU collective
        self._stamps: dict = {}  # (shape, dtype, op) -> an all_reduce's stamp (or False)
        self._tags: dict = {}  # (shape, dtype, op, dim) -> a reduce_scatter's tag (Channel.tag)
        self._tag_limit = 0  # MPI's TAG_UB, read on the first tag
        self.shared_buckets = None  # shared-memory windows, made on the first coalesced bucket
        self.abandoned: list = []  # the transfers of collectives that failed (their buffers
        # must outlive them: a late peer may still complete them)
        self.policy = faults.policy()  # the fault policy (a mesh's fault= sets its own)
        self.failed: dict = {}  # seq -> a transport failure known before its wait (faults.py)
        self.in_flight: set[int] = set()  # collectives started and not yet done
        self.recovered: set[int] = set()  # failed collectives the members agreed on
        self.degraded: str | None = None  # why the axis runs on Tessera's own algorithms
        self.broken: str | None = None  # why the axis cannot be used again
        self.failures = 0  # transport failures met on the axis
        self.last_failure: str | None = None  # the latest, in words (mesh.health())
        _channels.append(self)

    def link_class(self) -> str:
        """The class of the axis's slowest link (link_cost.axis_link): "self", "shm" when
        its members share a node, "net" otherwise."""
        found = getattr(self, "_link", None)
        if found is None:
            found = self._link = link_cost.axis_link(self.processes)
        return found

    def begin(self, kind: str, x, op: str | None = None, **extra) -> int:
        """Number the next collective; with the fingerprint check on (TESSERA_DIST_DEBUG),
        check that every member calls the same one: on ``x``'s shape and dtype, ``op`` and
        ``extra`` (see fingerprint.py). Call with ISSUE_LOCK held."""
        self.started += 1
        seq = self.started
        faults.at_begin(self, seq)
        if self.size > 1 and checking() and seq not in self.failed:
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

    def stamp(self, kind: str, x, op: str, wire_dtype, dim: int | None = None):
        """The always-on check of a reduction (an all_reduce, or a reduce_scatter along
        ``dim`` in even blocks: MPI, not deterministic) carried inside its message
        (fingerprint.stamp; after each block of a reduce_scatter): ``(mine,
        expected)``, what this member writes after the data and the bytes the reduced
        stamp must be. None where :meth:`check` is the way: one rank,
        TESSERA_DIST_DEBUG, a dtype without a stamp, or a stamp adding more than 1/32 to
        the message on a large axis."""
        if self.size == 1 or not ALWAYS_CHECK or checking():
            return None
        key = (kind, x.shape, x.dtype, op, dim)
        found = self._stamps.get(key)
        if found is None:
            found = self._stamps[key] = self._make_stamp(kind, x, op, wire_dtype, dim)
            if len(self._stamps) > 1024:  # many shapes: forget the oldest
                del self._stamps[next(iter(self._stamps))]
        return found or None

    def tag(self, x, op: str, dim: int):
        """The always-on check of a reduce_scatter exchanged pairwise
        (mpi_transport.tagged_reduce_scatter) carried in its messages' tags: the call's
        fingerprint modulo the MPI library's largest tag (2**29 - 1 in MPICH). None where
        :meth:`check` is the way: one rank, TESSERA_DIST_DEBUG."""
        if self.size == 1 or not ALWAYS_CHECK or checking():
            return None
        key = (x.shape, x.dtype, op, dim)
        found = self._tags.get(key)
        if found is None:
            if not self._tag_limit:
                from mpi4py import MPI

                self._tag_limit = self.scatters.Get_attr(MPI.TAG_UB)
            code = fingerprint.code("reduce_scatter", x, op, _stamped(dim))
            found = self._tags[key] = code % self._tag_limit
            if len(self._tags) > 1024:  # many shapes: forget the oldest
                del self._tags[next(iter(self._tags))]
        return found

    def _make_stamp(self, kind: str, x, op: str, wire_dtype, dim: int | None):
        items = x.size if dim is None else x.size // self.size
        length = fingerprint.stamp_length(wire_dtype, self.size, items)
        nbytes = length * wire_dtype.itemsize
        if not length or (nbytes > STAMP_FREE_BYTES and nbytes * 32 > items * x.itemsize):
            return False
        value = fingerprint.code(kind, x, op, _stamped(dim))
        return fingerprint.stamp(value, wire_dtype, op, self.size, self.index, items)

    def stamp_mismatch(self, kind: str, op: str, seq: int, x, dim: int | None):
        """The error of stamped collective ``seq`` whose reduced stamp was not the
        expected one (every member reduced the same stamp: all of them raise it)."""
        call = fingerprint.describe(kind, x, op, **_stamped(dim))
        return self._mismatch(kind, seq, call)

    def scratch(self, shape: tuple, dtype):
        """A send buffer of ``shape`` and ``dtype`` that no collective in flight uses (one
        given back with :meth:`scratch_back`, else a new one). A new send buffer each
        call made a 256 KB reduce_scatter 6-7x as long (most likely MPI over UCX
        registering its memory the first time it sends from it)."""
        free = self._scratch.get((shape, dtype))
        return free.pop() if free else np.empty(shape, dtype)

    def scratch_back(self, buffer) -> None:
        """``buffer`` (from :meth:`scratch`) is free again; kept unless it is large or
        the channel keeps many."""
        if buffer.nbytes > SCRATCH_BYTES:
            return
        free = self._scratch.setdefault((buffer.shape, buffer.dtype), [])
        if len(free) < 2:
            free.append(buffer)
        if len(self._scratch) > 16:  # many shapes: forget the oldest
            del self._scratch[next(iter(self._scratch))]

    def header(self, x, root: int, seq: int, roots: int):
        """The always-on check of a host broadcast of HEADER_MIN_BYTES or more, carried in
        front of its data (fingerprint.header): this call's header as bytes, with
        sequence number ``seq`` and ``roots`` (the digest of the axis's broadcasts before
        it); the root sends it, a receiver compares the received one with it. None where
        :meth:`check` is the way: one rank, TESSERA_DIST_DEBUG, a smaller message."""
        if self.size == 1 or not ALWAYS_CHECK or x.nbytes < fingerprint.HEADER_MIN_BYTES:
            return None
        if checking():
            return None
        key = (x.shape, x.dtype, root)
        found = self._headers.get(key)
        if found is None:
            value = fingerprint.code("broadcast", x, None, {"root": root, "backend": "mpi"})
            found = self._headers[key] = fingerprint.header(value, root, x).tobytes()
            if len(self._headers) > 1024:  # many shapes: forget the oldest
                del self._headers[next(iter(self._headers))]
        return found[:8] + _SEQ_AND_ROOTS.pack(seq, roots) + found[24:]

    def header_mismatch(self, seq: int, x, root: int, received, mine) -> CollectiveMismatch:
        """The error of a receiver of broadcast ``seq`` whose received header (int64
        words) is not ``mine`` (bytes), its own call's. Found by the receivers alone
        (every one of them got the same header); the root, which a broadcast sends
        nothing, has returned its own array."""
        sender = int(received[4]) if int(received[0]) == fingerprint.MAGIC else root
        sender = sender if 0 <= sender < self.size and sender != self.index else root
        call = fingerprint.describe("broadcast", x, root=root, backend="mpi")
        calls = {sender: fingerprint.describe_header(received), self.index: f"{call} as its #{seq}"}
        lines = "\n".join(
            f"  rank {self.world_ranks[i]} (index {i} on axis '{self.axis}'): {call}"
            for i, call in sorted(calls.items())
        )
        if (
            int(received[0]) == fingerprint.MAGIC
            and received[2] != _SEQ_AND_ROOTS.unpack(mine[8:24])[1]
        ):
            lines += (
                "\n  (and an earlier broadcast on the axis had another root on some ranks: "
                "two ranks that both took themselves for its root)"
            )
        return CollectiveMismatch(
            f"collective #{seq} on axis '{self.axis}': the ranks called different "
            f"collectives (found by rank {self.world_ranks[self.index]}, a receiver of "
            f"the broadcast; the root has returned its own array):\n{lines}\nEvery rank "
            "of an axis must call the axis's collectives in the same order, with the same "
            "kind, dtype, shape and root."
        )

    def verify(self, check) -> None:
        """Wait for a :meth:`check`'s exchange; CollectiveMismatch if the fingerprints
        differ (every member sees the same ones, so every member raises)."""
        request, everyone, kind, seq, x, op, extra = check
        self.wait([request], kind, seq, describe=lambda: fingerprint.describe(kind, x, op, **extra))
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
        faults.at_begin(self, seq)
        if self.size == 1 or seq in self.failed:  # (failed: an injected failure)
            return seq, [x.shape[dim]]
        return seq, self._agree("all_gather", seq, x, None, dict(dim=dim, **extra), x.shape[dim])

    def _agree(self, kind: str, seq: int, x, op, extra: dict, payload: int) -> list[int]:
        """Every member's ``payload``, once every member is known to call what this one
        does; else CollectiveMismatch, on every member, naming what each called."""

        def describe() -> str:
            return fingerprint.describe(kind, x, op, **extra)

        what = self._what(kind, seq, describe)
        _waiting.append((self.ident, self.axis, seq, self.members))
        try:
            faults.raise_pending(self, seq)
            records = timed.exchange(
                self.comm,
                self.size,
                fingerprint.code(kind, x, op, extra),
                payload,
                what,
                lambda timeout: self._timeout(kind, seq, timeout, what=what, describe=describe),
                lambda: self._probe(kind, seq, what, describe),
            )
        except (CollectiveMismatch, faults.TransportFailure):  # (the caller's to handle)
            raise
        except Exception as exc:
            if not faults.library_failure(exc):
                raise
            me = self.world_ranks[self.index]
            raise faults.TransportFailure(f"MPI error: {exc}", me, True) from None
        finally:
            _waiting.pop()
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
        self.resynchronise()
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

    def resynchronise(self) -> None:
        """After a mismatch or a transport failure, new communicators for the collectives
        (made on the control one, where every member just named its call or its status):
        the ranks started MPI collectives on the old ones that would pair with the next
        calls there."""
        self.comm = self.control.Dup()
        self.reductions = self.control.Dup()
        self.scatters = self.control.Dup()
        self.broadcasts = self.control.Dup()
        self.steps = self.control.Dup()
        self.roots = 0  # every member named its call: the broadcasts' digests start again

    def wait(self, requests: list, kind: str, seq: int, extra_test=None, describe=None) -> None:
        """Poll ``requests`` (and ``extra_test()``, for GPU work) until all are complete,
        answering other ranks' queries meanwhile; raise CollectiveTimeout at the deadline.
        ``describe()`` spells the call out (fingerprint.describe): with it, a long wait
        probes whether every member waits on the same call, and a member that waits on
        another one at this sequence number (or an MPI error from a message of another
        size) is a CollectiveMismatch."""
        what = self._what(kind, seq, describe)
        probe = lambda: self._probe(kind, seq, what, describe)  # noqa: E731
        _waiting.append((self.ident, self.axis, seq, self.members))
        try:
            timed.wait(
                requests,
                what,
                lambda timeout: self._timeout(
                    kind, seq, timeout, extra_test is not None, what, describe
                ),
                extra_test,
                probe,
            )
        except (CollectiveMismatch, faults.TransportFailure):
            raise
        except Exception as exc:
            if describe is not None and _truncated(exc):
                raise self._mismatch(kind, seq, describe()) from None
            if not faults.library_failure(exc):
                raise
            me = self.world_ranks[self.index]
            raise faults.TransportFailure(f"MPI error: {exc}", me, True) from None
        finally:
            _waiting.pop()

    def _what(self, kind: str, seq: int, describe=None):
        """What a wait on collective ``seq`` says it waits on (timed.waiting_on: the
        answer to other members' queries), with the call when ``describe`` is given."""
        if describe is None:
            return lambda: f"{kind} #{seq} on axis '{self.axis}'"
        return lambda: f"{kind} #{seq} on axis '{self.axis}': {describe()}"

    def _probe(self, kind: str, seq: int, what, describe=None) -> None:
        """RankExited when a member on this node has exited; CollectiveMismatch (with
        ``describe``) when a member waits on another call with number ``seq`` on this
        axis (or names a mismatch of it): then the two never complete."""
        self.check_members(kind, seq)
        answers = self._ask_members(seq, PROBE_WINDOW_S)
        if describe is not None and self._differs(seq, answers, what()):
            raise self._mismatch(kind, seq, describe())
        self._crossed(seq, answers, what())

    def _exited(self) -> list[int]:
        """The indices of the members on this node whose process has ended."""
        mine = self.processes[self.index]
        return [i for i, p in enumerate(self.processes) if liveness.exited(p, mine)]

    def check_members(self, kind: str, seq: int) -> None:
        """RankExited (reported, as a timeout is) when a member on this node has exited,
        RankLost when a member's heartbeats stopped (heartbeat.py): the collective can
        never complete, so the wait ends now, not at the deadline."""
        gone = self._exited()
        if not gone:
            self._check_heartbeats(kind, seq)
            return
        ranks = [self.world_ranks[i] for i in gone]
        pids = ", ".join(f"rank {self.world_ranks[i]}: pid {self.processes[i][1]}" for i in gone)
        self._cannot_complete(
            RankExited,
            kind,
            seq,
            ranks,
            f"have exited ({pids}, on this node) without reaching it",
            " Their own output says why they exited.",
        )

    def _check_heartbeats(self, kind: str, seq: int) -> None:
        lost = self.heartbeats.lost()
        if not lost:
            return
        notes = "; ".join(
            f"rank {self.world_ranks[i]}: {self.heartbeats.describe(i)}" for i in lost
        )
        self._cannot_complete(
            RankLost,
            kind,
            seq,
            [self.world_ranks[i] for i in lost],
            f"sent no heartbeat for {heartbeat.LOST_AFTER:g} intervals of "
            f"{self.heartbeats.every:g} s (TESSERA_DIST_HEARTBEAT) ({notes})",
        )

    def _cannot_complete(self, error_type, kind, seq, ranks, why: str, tail: str = ""):
        """Raise (and report, as a timeout is) ``error_type``: collective ``seq`` cannot
        complete, as members ``ranks`` (world ranks) ``why``."""
        error = error_type(
            f"{kind} #{seq} on axis '{self.axis}' cannot complete on rank "
            f"{self.world_ranks[self.index]}: ranks {ranks} {why}. The job cannot go on: an "
            f"uncaught error ends it (Tessera aborts every rank).{tail}",
            kind,
            seq,
            self.axis,
            ranks,
        )
        timed.log.error("%s", error)
        failures.report(error)
        raise error

    def _differs(self, seq: int, answers: list, mine: str) -> bool:
        marker = f"#{seq} on axis '{self.axis}'"
        return any(
            answer is not None
            and isinstance(answer[1], str)
            and marker in answer[1]
            and answer[1] != mine
            for i, answer in enumerate(answers)
            if i != self.index
        )

    def _crossed(self, seq: int, answers: list, mine: str) -> None:
        """CollectiveMismatch when a member that has not started collective ``seq`` here
        waits on a collective of another channel that this rank belongs to and has not
        started: each waits for the other, for ever (ranks that called collectives over
        different axes, or in different orders). The member is told too (a notice on the
        control channel: it raises the same error in its wait)."""
        me = self.world_ranks[self.index]
        for i, answer in enumerate(answers):
            if i == self.index or answer is None or len(answer) < 3 or answer[0] >= seq:
                continue
            if answer[2] is None:
                continue
            ident, axis, their_seq, members = answer[2]
            if ident == self.ident or me not in members:
                continue
            other = _channels[ident] if ident < len(_channels) else None
            if other is not None and (other.axis != axis or other.started >= their_seq):
                continue  # this rank has started it: it may yet complete
            rank = self.world_ranks[i]
            text = (
                f"collective #{seq} on axis '{self.axis}': the ranks called different "
                "collectives, and each waits for the other:\n"
                f"  rank {me} (index {self.index} on axis '{self.axis}'): {mine}\n"
                f"  rank {rank} (index {i} on axis '{self.axis}'): has not called #{seq} on "
                f"axis '{self.axis}'; waits on {answer[1]}, which rank {me} has not called\n"
                "The ranks called collectives over different axes, or in different orders: "
                "every rank of an axis must call the axis's collectives in the same order."
            )
            self.control.isend((ident, their_seq, text), dest=i, tag=NOTICE)
            timed.log.error("%s", text)
            raise CollectiveMismatch(text)

    def _timeout(
        self, kind: str, seq: int, timeout: float, gpu: bool = False, what=None, describe=None
    ) -> CollectiveTimeout | None:
        """The error at the deadline of collective ``seq``, or None when every member has
        arrived (the wait goes on: the timeout is on arrival), but on the GPU path
        (``gpu``), where that is a transport failure and the error says so. A member
        that waits on another call with this number is a CollectiveMismatch (raised)."""
        answers = self._ask_members(seq, min(ANSWER_WINDOW_S, max(0.2, timeout / 10)))
        if describe is not None and self._differs(seq, answers, what()):
            raise self._mismatch(kind, seq, describe())
        self._crossed(seq, answers, (what or self._what(kind, seq))())
        missing, notes = [], []
        for i, answer in enumerate(answers):
            if i == self.index:
                continue
            rank = self.world_ranks[i]
            if answer is None:
                missing.append(rank)
                beats = self.heartbeats.describe(i)
                if liveness.exited(self.processes[i], self.processes[self.index]):
                    notes.append(f"rank {rank}: exited (pid {self.processes[i][1]})")
                elif beats is not None:
                    notes.append(f"rank {rank}: no answer; {beats}")
                else:
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
    waited = _waiting[-1] if _waiting else None
    for channel in _channels:
        if channel.size == 1:
            continue
        while channel.control.Iprobe(source=MPI.ANY_SOURCE, tag=QUERY, status=status):
            source = status.Get_source()
            channel.control.recv(source=source, tag=QUERY)
            channel.control.isend((channel.started, doing, waited), dest=source, tag=REPLY)
        while channel.control.Iprobe(source=MPI.ANY_SOURCE, tag=faults.FAULT, status=status):
            source = status.Get_source()
            seq, reason = channel.control.recv(source=source, tag=faults.FAULT)
            faults.noticed(channel, source, seq, reason, waited)
        while channel.control.Iprobe(source=MPI.ANY_SOURCE, tag=NOTICE, status=status):
            source = status.Get_source()
            ident, seq, text = channel.control.recv(source=source, tag=NOTICE)
            if waited is not None and waited[0] == ident and waited[2] == seq:
                raise CollectiveMismatch(  # a member found that we wait on each other
                    f"{doing}: cannot complete, as rank {channel.world_ranks[source]} "
                    f"found:\n{text}"
                )


def _stamped(dim: int | None) -> dict:
    """A stamped collective's other arguments, as fingerprint.code and describe take
    them (the stamped ones are never deterministic and always go through MPI)."""
    return STAMPED if dim is None else {"dim": dim, **STAMPED}


def _truncated(exc: BaseException) -> bool:
    """Whether ``exc`` is MPI's error for a message longer than the buffer posted for it
    (what ranks reducing arrays of different sizes can end in)."""
    get_class = getattr(exc, "Get_error_class", None)
    if get_class is None:
        return False
    from mpi4py import MPI

    return get_class() == MPI.ERR_TRUNCATE


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
