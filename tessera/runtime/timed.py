"""Waiting on other ranks with a deadline: every wait of Tessera's on MPI goes through here.

A blocking MPI call (``comm.bcast``, ``Allreduce``) waits forever for a rank that never
comes, which in a batch job is a job that burns its allocation and says nothing. So
Tessera starts every exchange between ranks non-blocking and polls its requests here
until they complete or ``TESSERA_COLLECTIVE_TIMEOUT`` passes. The collectives
(``tessera.mesh``) and autotune's agreement on a winner (``tessera.autotune``) both wait
this way; this module sits below both (it imports only config and errors), so that
neither has to import the other.

While a wait is long, the hooks registered with :func:`while_waiting` run (the mesh
answers other ranks' questions about how far this process has come), and
:data:`waiting_on` says what this process is waiting on.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable

import numpy as np

from ..config import get as setting
from ..errors import TesseraError
from ..observe import failures

# MPI moves a non-blocking collective's data only while it is polled, so a wait polls
# for SPIN_S, yielding the core between polls (ranks may share cores); a wait that is
# longer is most likely waiting for a late rank, and then polls every POLL_SLEEP_S.
SPIN_S = 0.05
POLL_SLEEP_S = 0.0005
QUICK_POLLS = 32
PROBE_S, PROBE_GROWTH = 1.0, 4.0  # a wait's probes: after 1 s, 4 s, 16 s, ...
NEVER = "off"  # TESSERA_COLLECTIVE_TIMEOUT=off (or 0): wait for ever

log = logging.getLogger("tessera")
_idle_hooks: list[Callable[[], None]] = []
waiting_on: list[str] = []  # what this process is waiting on, innermost last


def while_waiting(hook: Callable[[], None]) -> Callable[[], None]:
    """Run ``hook()`` every poll of a wait that has lasted longer than SPIN_S."""
    _idle_hooks.append(hook)
    return hook


def idle() -> None:
    """Run the :func:`while_waiting` hooks once (a wait of Tessera's own that does not go
    through :func:`wait`)."""
    for hook in _idle_hooks:
        hook()


def wait(
    requests: list,
    what: Callable[[], str],
    on_timeout: Callable[[float], Exception],
    done: Callable[[], bool] | None = None,
    probe: Callable[[], None] | None = None,
) -> None:
    """Poll ``requests`` (and ``done()``, for GPU work) until all are complete; at the
    deadline raise ``on_timeout(seconds)`` unless they completed meanwhile, or it returns
    None (every rank has arrived: the wait goes on for another period). ``what()`` names
    the wait for :data:`waiting_on` (called only when the wait is not over at once).
    ``probe()`` runs after PROBE_S seconds of waiting and then at times PROBE_GROWTH
    times as far apart (it may raise: the mesh asks whether the others wait on the same
    call)."""
    pending = requests
    for _ in range(QUICK_POLLS):  # most small collectives finish here, with no set-up
        pending = [r for r in pending if not r.Test()]
        if not pending and (done is None or done()):
            return
        os.sched_yield()  # a rank sharing a core with its peer lets the peer run
    timeout = timeout_seconds()
    start = time.monotonic()
    next_probe = PROBE_S if probe is not None else math.inf
    waiting_on.append(what())
    try:
        while True:
            pending = [r for r in pending if not r.Test()]
            if not pending and (done is None or done()):
                return
            waited = time.monotonic() - start
            if waited > next_probe:
                probe()
                next_probe = waited * PROBE_GROWTH
            if waited > SPIN_S:
                for hook in _idle_hooks:
                    hook()
                time.sleep(POLL_SLEEP_S)
            else:
                os.sched_yield()
            if waited > timeout:
                error = on_timeout(timeout)  # asks the other ranks: takes a while
                pending = [r for r in pending if not r.Test()]
                if not pending and (done is None or done()):
                    return  # completed while asking: not a timeout
                if error is None:  # every rank has arrived: wait on, another period
                    start = time.monotonic()
                    continue
                log.error("%s", error)
                failures.report(error)
                raise error
    finally:
        waiting_on.pop()


def exchange(comm, size: int, fingerprint: int, payload: int, what, on_timeout, probe=None) -> list:
    """Every rank's ``[fingerprint, payload]`` (two int64s: 16 bytes a rank, in one
    all-gather), waited on as :func:`wait` does. What the ranks compare before a call that
    must be the same on all of them, and what travels with it (a gather's block lengths)."""
    mine = np.array((fingerprint, payload), np.int64)
    everyone = np.empty((size, 2), np.int64)
    wait([comm.Iallgather(mine, everyone)], what, on_timeout, probe=probe)
    return everyone.tolist()


def texts(comm, size: int, text: str, what, on_timeout) -> list[str]:
    """Every rank's ``text``, waited on as :func:`wait` does: what each rank called, for
    the error after :func:`exchange` found fingerprints that differ (every rank found it,
    so every rank takes part)."""
    data = np.frombuffer(text.encode(), np.uint8)
    lengths = np.empty(size, np.int64)
    wait([comm.Iallgather(np.array([data.size], np.int64), lengths)], what, on_timeout)
    ends = np.cumsum(lengths).tolist()
    starts = [0] + ends[:-1]
    everyone = np.empty(ends[-1], np.uint8)
    request = comm.Iallgatherv(data, [everyone, (lengths.tolist(), starts)])
    wait([request], what, on_timeout)
    return [everyone[a:b].tobytes().decode() for a, b in zip(starts, ends)]


def timeout_seconds() -> float:
    """``TESSERA_COLLECTIVE_TIMEOUT`` in seconds: a finite positive number, or ``0`` /
    ``off`` for no deadline (``math.inf``). Anything else is an error, ``nan`` and ``inf``
    included: a typo must not turn a batch job's deadline off."""
    value = setting("collective_timeout")
    seconds = _parsed.get(value)
    if seconds is None:
        seconds = _parsed[value] = _parse_timeout(value)
    return seconds


def _parse_timeout(value: str) -> float:
    wanted = f"a finite number of seconds > 0, or 0 or {NEVER!r} to wait for ever"
    if value.strip().lower() == NEVER:
        return math.inf
    try:
        seconds = float(value)
    except ValueError:
        raise TesseraError(
            f"TESSERA_COLLECTIVE_TIMEOUT={value!r} is not a number; it must be {wanted}"
        ) from None
    if seconds == 0:
        return math.inf
    if not math.isfinite(seconds) or seconds < 0:
        raise TesseraError(f"TESSERA_COLLECTIVE_TIMEOUT={value!r}: it must be {wanted}")
    return seconds


_parsed: dict[str, float] = {}
