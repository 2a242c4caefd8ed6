"""Rank agreement: under MPI every rank must launch the same config.

With ``scope="world"`` (the default) rank 0 decides — from the cache or by tuning — and
sends the winner to the others; the other ranks run no trial. ``scope="rank"`` lets each
rank decide alone. mpi4py is imported only when the process was started by an MPI
launcher (its environment says so) or mpi4py is already in use; without MPI this is a
no-op.

An agreement is collective, and waits like a collective: it never blocks inside MPI.
Two non-blocking exchanges on COMM_WORLD are waited on with ``TESSERA_COLLECTIVE_TIMEOUT``
(``tessera.runtime.timed``):

1. one 16-byte all-gather of each rank's fingerprint of what it launches (the kernel, its
   source, space, key values and dtypes) and the length of rank 0's answer. A rank that
   launches another kernel or key makes every rank raise ``CollectiveMismatch``, naming
   each rank's launch, rather than launch rank 0's winner for another key; a rank that
   never launches what the others do makes them raise ``CollectiveTimeout``, where a
   blocking broadcast waited for ever.
2. rank 0's answer (the winner, or the error it raised), broadcast.
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Callable

import numpy as np

from ..errors import CollectiveMismatch, CollectiveTimeout
from ..runtime import timed
from ..runtime.world import world as process_world
from .space import Config

SAME_ON_EVERY_RANK = ("kernel", "source", "space", "key", "dtypes")  # of a launch's key
_agreements = [0]  # how many agreements this process has started: their numbers


def world():
    """MPI.COMM_WORLD when running under MPI with more than one rank, else None."""
    comm = process_world()
    return comm if comm.Get_size() > 1 else None


def agree(scope: str, decide: Callable[[], Config], launch: dict) -> Config:
    """The config every rank launches for ``launch`` (the autotune key: what the ranks
    compare, but for the target and device, which may differ between ranks). ``decide``
    runs on rank 0 only, or everywhere with ``scope="rank"``. An exception on rank 0 is
    re-raised on every rank."""
    comm = world() if scope == "world" else None
    if comm is None:
        return decide()
    _agreements[0] += 1
    agreement = _Agreement(comm, _agreements[0], launch)
    answer = b""
    if agreement.rank == 0:
        try:
            outcome = ("ok", dict(decide().items()))
        except Exception as exc:  # pass it on: the other ranks are waiting for rank 0
            outcome = ("error", exc)
        answer = pickle.dumps(outcome)
    outcome = pickle.loads(agreement.run(answer))
    if outcome[0] == "error":
        raise outcome[1]
    return Config(outcome[1])


class _Agreement:
    """One agreement's two exchanges, and its errors."""

    def __init__(self, comm, seq: int, launch: dict):
        self.comm, self.seq = comm, seq
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.launch = {k: launch[k] for k in SAME_ON_EVERY_RANK if k in launch}
        self.what = f"autotune agreement #{seq} (kernel '{launch.get('kernel')}')"

    def run(self, answer: bytes) -> bytes:
        """Rank 0's ``answer``, on every rank, once every rank is known to launch what
        this one does."""
        digest = hashlib.sha256(repr(self.launch).encode()).digest()[:8]
        records = timed.exchange(
            self.comm,
            self.size,
            int.from_bytes(digest, "little", signed=True),
            len(answer),
            lambda: self.what,
            self._timeout,
        )
        if any(r[0] != records[0][0] for r in records):
            raise self._mismatch()
        data = np.frombuffer(answer, np.uint8).copy() if self.rank == 0 else None
        if data is None:
            data = np.empty(records[0][1], np.uint8)
        timed.wait([self.comm.Ibcast(data, root=0)], lambda: self.what, self._timeout)
        return data.tobytes()

    def _mismatch(self) -> CollectiveMismatch:
        launches = timed.texts(
            self.comm, self.size, self._describe(), lambda: self.what, self._timeout
        )
        lines = "\n".join(f"  rank {i}: {launch}" for i, launch in enumerate(launches))
        return CollectiveMismatch(
            f"{self.what}: the ranks launched different autotuned kernels or keys:\n{lines}\n"
            "With scope='world' every rank must make the first launch of each autotuned "
            "kernel for each key, in the same order; scope='rank' lets each rank tune alone."
        )

    def _describe(self) -> str:
        launch = dict(self.launch)
        source = launch.pop("source", "")[:12]
        return ", ".join(f"{k} {v!r}" for k, v in launch.items()) + f", source {source}"

    def _timeout(self, seconds: float) -> CollectiveTimeout:
        return CollectiveTimeout(
            f"{self.what} timed out after {seconds:g} s (TESSERA_COLLECTIVE_TIMEOUT) on rank "
            f"{self.rank}: not every rank launched it (key {self.launch.get('key')}). With "
            "scope='world' the first launch of an autotuned kernel for a key is collective: "
            "every rank must make it, in the same order; scope='rank' lets each rank tune "
            "alone.",
            "autotune agreement",
            self.seq,
            "world",
            [],
        )
