"""A collective in flight: :class:`Work`, the handle ``async_op=True`` returns, and
:func:`_run`, which every collective ends in (its result now, or its Work).

A Work polls the collective's transfers (and the steps that follow them), verifies the
members' fingerprints before delivering, reports to the observers when it is done, and,
when the collective fails in its transport, agrees with the members on what happens
(faults.py): it starts again on the axis's degraded path, or raises TransportError.
"""

from __future__ import annotations

from ..observe.observers import OBSERVERS, entered, now, report
from . import faults, fingerprint
from .channel import Channel, Transfer


class Work:
    """A collective in flight (``async_op=True``): ``wait()`` blocks until it is done —
    or until the collective timeout — and returns its result."""

    def __init__(
        self,
        channel: Channel,
        kind: str,
        seq: int,
        transfer: Transfer,
        deliver,
        check=None,
        call: tuple = (None, None, {}),
        issue=None,
    ):
        self.channel, self.kind, self.seq = channel, kind, seq
        self._call = call  # (x, op, extra): what fingerprint.describe names the call by
        self._transfer, self._deliver = transfer, deliver
        self._check = check  # the members' fingerprints, verified before delivering
        self._issue = issue  # starts the collective again: (seq, transfer, check, extra, name)
        self._done, self._result = False, None
        self.observed: dict | None = None  # what observers hear when it is done (_run)
        self.start = 0.0
        self.algorithm = "library"  # what moved the data (dist.algorithm choice)
        channel.in_flight.add(seq)

    def __repr__(self) -> str:
        state = "done" if self._done else "in flight"
        return f"<Work {self.kind} #{self.seq} on axis '{self.channel.axis}', {state}>"

    def is_completed(self) -> bool:
        """Whether the communication has finished (never blocks; starts the next step of
        a collective made of several)."""
        while not self._done:
            try:
                faults.raise_pending(self.channel, self.seq)
                if self._check is not None:
                    if not self._check[0].Test():
                        return False
                    self._verify()
                t = self._transfer
                if not all(r.Test() for r in t.requests) or not (
                    t.gpu_done is None or t.gpu_done()
                ):
                    return False
                self._step(t.finish())
            except faults.TransportFailure as failure:  # agreed on now (blocks a while)
                self._again(failure)
            except Exception as exc:
                if not faults.library_failure(exc):
                    raise
                self._again(self._failure(exc))
        return True

    def wait(self):
        if self.observed is not None and not self._done:
            with entered("collective", self.kind):
                self._wait()
        else:
            self._wait()
        return self._result

    def _wait(self) -> None:
        while not self._done:
            try:
                faults.raise_pending(self.channel, self.seq)
                if self._check is not None:
                    self._verify()
                t = self._transfer
                self.channel.wait(t.requests, self.kind, self.seq, t.gpu_done, self._describe)
                self._step(t.finish())
            except faults.TransportFailure as failure:
                self._again(failure)
            except BaseException as exc:
                if isinstance(exc, Exception) and faults.library_failure(exc):
                    self._again(self._failure(exc))
                    continue
                self.channel.abandoned.append(self._transfer)  # a late peer may complete it
                self.channel.in_flight.discard(self.seq)
                raise

    def _failure(self, exc: BaseException) -> faults.TransportFailure:
        me = self.channel.world_ranks[self.channel.index]
        return faults.TransportFailure(f"MPI error: {exc}", me, True)

    def _again(self, failure: faults.TransportFailure) -> None:
        """A transport failure of this collective: agreed on with the members; then it
        starts again on the axis's degraded path (fault policy ``retry``), or every
        member raises TransportError (faults.recover)."""
        channel = self.channel
        channel.abandoned.append(self._transfer)  # a late peer may complete it
        channel.in_flight.discard(self.seq)
        faults.recover(channel, self.kind, self.seq, failure, self._issue is not None)
        try:
            self.seq, self._transfer, self._check, extra, self.algorithm = self._issue()
        except faults.TransportFailure as second:  # raised: retry runs once an axis
            faults.recover(channel, self.kind, channel.started, second, True)
        self._call = (*self._call[:2], extra)
        channel.in_flight.add(self.seq)
        if self.observed is not None:
            self.observed.update(seq=self.seq, algorithm=self.algorithm)

    def _describe(self) -> str:
        x, op, extra = self._call
        return fingerprint.describe(self.kind, x, op, **extra)

    def _verify(self) -> None:
        """The members called the same collective, or CollectiveMismatch (the collective,
        started with its check, is abandoned: nothing is delivered)."""
        check, self._check = self._check, None
        try:
            self.channel.verify(check)
        except BaseException:
            self.channel.abandoned.append((check, self._transfer))
            raise

    def _step(self, result) -> None:
        if isinstance(result, Transfer):  # the collective's next step has started
            self._transfer = result
        else:
            self.channel.in_flight.discard(self.seq)
            self._result = self._deliver(result)
            self._done = True
            if self.observed is not None:
                report("collective", self.kind, self.start, **self.observed)


def _run(
    channel: Channel,
    kind: str,
    seq: int,
    transfer: Transfer,
    deliver,
    async_op: bool,
    x=None,
    op: str | None = None,
    start: float = 0.0,
    check=None,
    extra: dict | None = None,
    algorithm: str = "library",
    issue=None,
):
    """The collective's :class:`Work`, or (not ``async_op``) its result. Observers
    (profiles, traces, metrics) hear of it when it is done: op, axis, bytes, seq and the
    algorithm. ``extra``: the call's other arguments, as fingerprint.describe names them.
    ``issue()`` starts it again after a transport failure (fault policy ``retry``)."""
    work = Work(channel, kind, seq, transfer, deliver, check, (x, op, extra or {}), issue)
    work.algorithm = algorithm
    if OBSERVERS:
        work.start = start or now()
        work.observed = {
            "op": op or "",
            "axis": channel.axis,
            "bytes": 0 if x is None else int(x.nbytes),
            "seq": seq,
            "algorithm": algorithm,
        }
    return work if async_op else work.wait()
