"""What an axis does when a collective's transport fails: the fault policy (MESH.md, "Fault
policy"), the members' agreement on a failure, the retry on a degraded path, and the
faults a test may inject.

* **Policy** (``dist.Mesh(..., fault=...)``, else ``TESSERA_DIST_FAULT``; the same on every
  rank, checked when the mesh is made): ``raise`` (default) ends a failed collective with
  :class:`~tessera.errors.TransportError` on every member; ``retry`` runs it again once, on
  new communicators and Tessera's own algorithms over MPI point-to-point instead of the
  library's collective, and keeps that path for the axis (``mesh.health()``); ``shrink``
  needs an MPI library with ULFM (``MPIX_Comm_revoke``/``shrink``/``agree``): without
  one it is an error when the mesh is made.
* **A transport failure** is an error of the library that moves a collective's data (an
  MPI error other than a message longer than its buffer, which is a mismatch), or one
  injected (``TESSERA_DIST_FAULT_INJECT``). A rank lost (exited, hung) is not one: the
  waits' liveness checks, heartbeats and the timeout report those (``RankExited``, ``RankLost``,
  ``CollectiveTimeout``), whatever the policy.
* **Agreement.** The member that meets the failure sends a notice to the others on the
  axis's control channel. A member waiting on that collective stops waiting; one that has
  not reached it fails it when it does; one that already completed it cannot run it
  again. Then every member sends every other its *status* (``AT``: it can run the
  collective again; ``STUCK``: it cannot, and why; ``PAST``: it completed it), so every
  member decides alike: all ``AT`` under ``retry`` (and no earlier failure on the axis):
  the axis is rebuilt and the collective runs again from its input; anything else:
  ``TransportError`` on every member.
* **Injection** (for tests; documented in docs/distributed.md): ``TESSERA_DIST_FAULT_INJECT``
  holds faults separated by ``;``: ``transport@seq=N`` (collective N of an axis fails in
  its transport; ``,rank=R`` on one rank only, ``,axis=A`` on one axis only),
  ``rank=R@seq=N:exit`` (rank R ends its process at collective N, no MPI_Finalize) and
  ``rank=R@seq=N:stall`` (rank R stops there for ever, its heartbeats going on) and
  ``rank=R@seq=N:freeze`` (rank R's process is stopped, SIGSTOP: no heartbeats).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
import warnings
from dataclasses import dataclass

from ..config import get as setting
from ..errors import CollectiveTimeout, DistError, FaultWarning, SettingError, TransportError
from ..runtime import timed

POLICIES = ("raise", "retry", "shrink")
FAULT, STATUS = 7304, 7305  # tags on the control channel: a failure's notice, a status
AT, STUCK, PAST = "at", "stuck", "past"
EXIT_CODE = 3  # of a rank that an injected fault ends
log = logging.getLogger("tessera")


class TransportFailure(Exception):
    """Inside a wait: the collective ``seq`` failed in its transport, here (``local``:
    this rank tells the others) or on world rank ``rank`` (a notice). Never reaches the
    caller: :func:`recover` turns it into a retry or a TransportError."""

    def __init__(self, reason: str, rank: int, local: bool):
        super().__init__(reason)
        self.reason, self.rank, self.local = reason, rank, local


# ----------------------------------------------------------------------------- policy
def policy(value: str | None = None) -> str:
    """The fault policy ``value`` (None: ``TESSERA_DIST_FAULT``), checked."""
    chosen = setting("dist_fault") if value is None else value
    if chosen not in POLICIES:
        raise SettingError(
            f"fault={chosen!r} is not a fault policy; it must be one of {', '.join(POLICIES)}"
        )
    return chosen


def shrink_missing() -> str | None:
    """Why ``fault="shrink"`` cannot work with this MPI library, or None when it can (ULFM:
    mpi4py reaches ``MPIX_Comm_revoke``, ``MPIX_Comm_shrink`` and ``MPIX_Comm_agree``)."""
    from mpi4py import MPI

    name = " ".join(MPI.Get_library_version().strip().splitlines()[0].split())
    probe = MPI.COMM_SELF.Dup()  # revoked and freed: a communicator no one else uses
    try:
        probe.Revoke()
    except (NotImplementedError, AttributeError, MPI.Exception):
        return (
            f"fault='shrink' needs an MPI library with ULFM fault tolerance "
            f"(MPIX_Comm_revoke, MPIX_Comm_shrink and MPIX_Comm_agree, through mpi4py >= 4), "
            f"and this one ({name}) has none. Use fault='raise' (the default) or "
            "fault='retry', or an MPI built with ULFM (Open MPI 5 has it)."
        )
    finally:
        probe.Free()
    return (
        f"fault='shrink' is not built on ULFM yet: this MPI library ({name}) has it, but "
        "Tessera's shrink has only been written against libraries without it. Use "
        "fault='raise' or fault='retry'."
    )


def check_policy(chosen: str, comm) -> None:
    """The same policy on every rank of ``comm`` (collective), and ``shrink`` only where
    the library can shrink; else the same DistError on every rank."""
    everyone = comm.allgather(chosen) if comm.Get_size() > 1 else [chosen]
    if len(set(everyone)) > 1:
        ranks = "; ".join(f"rank {r}: {p!r}" for r, p in enumerate(everyone))
        raise DistError(
            f"the ranks made a mesh with different fault policies ({ranks}); give every "
            "rank the same fault= (or TESSERA_DIST_FAULT)"
        )
    if chosen == "shrink":
        raise DistError(shrink_missing())


# -------------------------------------------------------------------------- injection
@dataclass(frozen=True)
class Injection:
    kind: str  # "transport", "exit", "stall", "freeze"
    seq: int
    rank: int | None  # world rank; None: every rank
    axis: str | None  # None: every axis


_parsed: dict[str, tuple[Injection, ...]] = {}
RANK_FAULTS = ("exit", "stall", "freeze")


def injections() -> tuple[Injection, ...]:
    """The faults ``TESSERA_DIST_FAULT_INJECT`` asks for (parsed once per value)."""
    text = setting("dist_fault_inject")
    found = _parsed.get(text)
    if found is None:
        found = _parsed[text] = tuple(_parse(p.strip()) for p in text.split(";") if p.strip())
    return found


def _parse(part: str) -> Injection:
    wanted = (
        "TESSERA_DIST_FAULT_INJECT takes faults separated by ';', each "
        "'transport@seq=N[,rank=R][,axis=A]' or 'rank=R@seq=N:exit|stall|freeze'"
    )
    what, at, where = part.partition("@")
    kind = "transport"
    if what.startswith("rank="):
        where, _, kind = where.partition(":")
        where = f"{where},{what}"
        if kind not in RANK_FAULTS:
            raise SettingError(
                f"{part!r}: a rank's fault ends in :exit, :stall or :freeze; {wanted}"
            )
    elif what != "transport":
        raise SettingError(f"{part!r}: {wanted}")
    fields: dict[str, str] = {}
    for item in where.split(",") if at else ():
        key, eq, value = item.strip().partition("=")
        if not eq or key not in ("seq", "rank", "axis") or key in fields:
            raise SettingError(f"{part!r}: {wanted}")
        fields[key] = value.strip()
    try:
        seq = int(fields["seq"])
        rank = int(fields["rank"]) if "rank" in fields else None
    except (KeyError, ValueError):
        raise SettingError(f"{part!r}: seq= (and rank=) must be integers; {wanted}") from None
    if seq < 1 or (rank is not None and rank < 0):
        raise SettingError(f"{part!r}: seq= counts from 1 and rank= from 0; {wanted}")
    return Injection(kind, seq, rank, fields.get("axis"))


def at_begin(channel, seq: int) -> None:
    """Collective ``seq`` of ``channel`` is starting: act out an injected fault aimed at
    it (an exit or a stall happen here; a transport failure waits for its wait)."""
    if not setting("dist_fault_inject"):
        return
    me = channel.world_ranks[channel.index]
    for f in injections():
        if f.seq != seq or f.rank not in (None, me) or f.axis not in (None, channel.axis):
            continue
        if f.kind == "exit":
            log.error(
                "rank %d exits at collective #%d on axis '%s' (injected)", me, seq, channel.axis
            )
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(EXIT_CODE)
        if f.kind == "stall":
            log.error(
                "rank %d stalls at collective #%d on axis '%s' (injected)", me, seq, channel.axis
            )
            while True:
                time.sleep(3600)
        if f.kind == "freeze":
            log.error(
                "rank %d freezes at collective #%d on axis '%s' (injected)", me, seq, channel.axis
            )
            sys.stdout.flush()
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGSTOP)  # the whole process, its threads too
        channel.failed[seq] = TransportFailure(
            "a transport failure injected by TESSERA_DIST_FAULT_INJECT", me, True
        )


# ---------------------------------------------------------------------------- failures
def library_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is an error of the MPI library (what a transport failure is),
    other than a message longer than its buffer (a mismatch: channel.py)."""
    get_class = getattr(exc, "Get_error_class", None)
    if get_class is None:
        return False
    from mpi4py import MPI

    return get_class() != MPI.ERR_TRUNCATE


def raise_pending(channel, seq: int) -> None:
    """Raise the failure known for collective ``seq`` (injected, or a member's notice
    that arrived before this rank waited on it), if any; TransportError if the axis is
    broken (a failure this rank had completed the collective of)."""
    failure = channel.failed.pop(seq, None)
    if failure is not None:
        raise failure
    if channel.broken is not None:
        raise TransportError(channel.broken, "collective", seq, channel.axis, None)


def noticed(channel, source: int, seq: int, reason: str, waited) -> None:
    """Member ``source`` says collective ``seq`` failed in its transport (a notice read
    while answering queries): the wait on it ends (raised here), a collective not yet
    waited on fails when it is, and one completed here is a PAST status at once."""
    if seq in channel.recovered or (channel.ident, seq) in _recovering:
        return  # already agreed on
    failure = TransportFailure(reason, channel.world_ranks[source], False)
    if waited is not None and waited[0] == channel.ident and waited[2] == seq:
        raise failure
    if seq > channel.started or seq in channel.in_flight:
        channel.failed[seq] = failure
        return
    channel.recovered.add(seq)
    _send_status(channel, seq, PAST, "it had completed the collective")
    channel.broken = (
        f"collective #{seq} on axis '{channel.axis}' failed in its transport on rank "
        f"{failure.rank} ({reason}) after this rank had completed it: the axis's members "
        "gave up on it, so the axis cannot be used again"
    )


def unretried(channel, kind: str, run):
    """``run()``, which starts a collective that cannot run again (an all_to_all, a
    shared-memory bucket) and may wait on it: a transport failure in it is agreed on with
    the members and raised as TransportError."""
    try:
        return run()
    except TransportFailure as failure:
        recover(channel, kind, channel.started, failure, False)


def issued(channel, kind: str, issue):
    """``issue()``, which starts a collective (collectives.py): a transport failure met
    while starting it (in a fingerprint exchange that comes first) is agreed on, and under
    ``retry`` it starts again."""
    try:
        return issue()
    except TransportFailure as failure:
        recover(channel, kind, channel.started, failure, True)
    try:
        return issue(True)
    except TransportFailure as failure:  # a second failure: raised (retry runs once)
        recover(channel, kind, channel.started, failure, True)


_recovering: set[tuple[int, int]] = set()  # (channel ident, seq) being agreed on here


def recover(channel, kind: str, seq: int, failure: TransportFailure, can_rerun: bool) -> None:
    """Agree with the members on failed collective ``seq``. Returns when every member
    can run it again under ``retry`` (the axis is rebuilt on its degraded path: run it
    again); raises TransportError (every member alike) otherwise."""
    me = channel.world_ranks[channel.index]
    if failure.local:
        for i in range(channel.size):
            if i != channel.index:
                channel.control.isend((seq, failure.reason), dest=i, tag=FAULT)
    if channel.policy != "retry":
        mine, why = STUCK, f"the fault policy is {channel.policy!r}"
    elif channel.degraded is not None:
        mine, why = STUCK, "the axis had failed before (retry runs once per axis)"
    elif not can_rerun:
        mine, why = STUCK, "this call cannot run again"
    else:
        mine, why = AT, ""
    key = (channel.ident, seq)
    _recovering.add(key)
    try:
        statuses = _statuses(channel, kind, seq, mine, why)
    finally:
        _recovering.discard(key)
        channel.recovered.add(seq)
    where = f"{kind} #{seq} on axis '{channel.axis}'"
    failed_on = f"rank {failure.rank}" + (" (this rank)" if failure.rank == me else "")
    cause = f"failed in its transport on {failed_on}: {failure.reason}"
    channel.failures += 1
    if all(s == AT for s, _ in statuses.values()):
        degrade(channel, f"{where} {cause}")
        return
    if any(s == PAST for s, _ in statuses.values()):  # those members are not here
        channel.broken = f"{where} {cause}, after some members had completed it"
        after = "The axis cannot be used again."
    else:  # every member is here: new communicators, the axis usable again
        channel.resynchronise()
        channel.last_failure = f"{where} {cause}"
        after = "The axis's next collectives start afresh."
    why = {w for s, w in statuses.values() if s != AT}
    if len(why) == 1:
        reasons = why.pop()
    else:
        reasons = "; ".join(
            f"rank {channel.world_ranks[i]}: {w}"
            for i, (s, w) in sorted(statuses.items())
            if s != AT
        )
    if channel.policy != "retry":
        after += (
            " fault='retry' (TESSERA_DIST_FAULT=retry) runs a failed collective once more "
            "on Tessera's own algorithms."
        )
    error = TransportError(
        f"{where} {cause}. It was not run again: {reasons}. {after}",
        kind,
        seq,
        channel.axis,
        failure.rank,
    )
    log.error("%s", error)
    raise error


def _send_status(channel, seq: int, status: str, why: str) -> None:
    for i in range(channel.size):
        if i != channel.index:
            channel.control.isend((seq, status, why), dest=i, tag=STATUS)


def _statuses(channel, kind: str, seq: int, mine: str, why: str) -> dict[int, tuple[str, str]]:
    """Every member's status on collective ``seq`` (this one's sent to all of them),
    within the collective timeout (a member that never answers: CollectiveTimeout naming
    it; one on this node that exited: RankExited)."""
    from mpi4py import MPI

    _send_status(channel, seq, mine, why)
    got = {channel.index: (mine, why)}
    status = MPI.Status()
    start = time.monotonic()
    timeout, next_check = timed.timeout_seconds(), 1.0
    while len(got) < channel.size:
        timed.idle()  # the members' queries answered meanwhile (channel.answer_queries)
        while channel.control.Iprobe(source=MPI.ANY_SOURCE, tag=STATUS, status=status):
            source = status.Get_source()
            their_seq, state, reason = channel.control.recv(source=source, tag=STATUS)
            if their_seq == seq:
                got[source] = (state, reason)
        waited = time.monotonic() - start
        if len(got) < channel.size and waited > next_check:
            channel.check_members(kind, seq)
            next_check = waited * timed.PROBE_GROWTH
        if len(got) < channel.size and waited > timeout:
            missing = [channel.world_ranks[i] for i in range(channel.size) if i not in got]
            error = CollectiveTimeout(
                f"{kind} #{seq} on axis '{channel.axis}' failed in its transport, and ranks "
                f"{missing} did not answer within {timeout:g} s (TESSERA_COLLECTIVE_TIMEOUT) "
                "whether they could run it again (computing, hung or dead)",
                kind,
                seq,
                channel.axis,
                missing,
            )
            log.error("%s", error)
            raise error
        time.sleep(timed.POLL_SLEEP_S)
    return got


def degrade(channel, cause: str) -> None:
    """Rebuild the axis after a transport failure that every member agreed to retry: new
    communicators (collective: every member is here), Tessera's own algorithms from now
    on (collectives.py reads ``channel.degraded``), one warning."""
    channel.resynchronise()
    channel.degraded = channel.last_failure = cause
    message = (
        f"{cause}; every member agreed to run it again (fault='retry'): axis "
        f"'{channel.axis}' now runs its collectives on Tessera's own algorithms over MPI "
        "point-to-point on new communicators (mesh.health() shows it)"
    )
    log.warning("%s", message)
    warnings.warn(message, FaultWarning, stacklevel=2)


def health(channel) -> dict:
    """What ``mesh.health()`` reports for one axis: its ``policy``; ``path``: ``library``,
    ``degraded`` (retried: Tessera's own algorithms) or ``broken`` (a failure some members
    had completed the collective of); ``failures`` (transport failures) and
    ``last_failure`` (the latest, in words, or None)."""
    return {
        "policy": channel.policy,
        "path": "broken" if channel.broken else "degraded" if channel.degraded else "library",
        "failures": channel.failures,
        "last_failure": channel.broken or channel.last_failure,
        "heartbeats": heartbeats(channel),
    }


def heartbeats(channel) -> dict:
    """The axis's heartbeats for ``mesh.health()``: ``status`` (``running``, or why there
    are none), ``every`` (seconds, or None) and ``silent`` (per other member's world rank,
    seconds since its last heartbeat, for the members it exchanges them with; empty without
    heartbeats)."""
    beats = channel.heartbeats
    running = beats.status == "running"
    if running:
        beats.lost()  # (drains what came)
    return {
        "status": beats.status,
        "every": beats.every,
        "silent": {
            rank: round(beats.silent_for(i), 3)
            for i, rank in enumerate(channel.world_ranks)
            if running and i in beats.peers
        },
    }
