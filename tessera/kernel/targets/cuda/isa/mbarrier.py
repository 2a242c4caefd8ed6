"""``mbarrier`` phases, and a model of the staging ring built on them (PTX ISA,
"Parallel Synchronization and Communication Instructions: mbarrier", sm_90).

An mbarrier counts down the arrivals of its current *phase* (the count it was initialised
with) and, since sm_90, a *transaction count* of bytes that asynchronous copies
(``cp.async.bulk``, TMA) complete on it: ``arrive.expect_tx`` adds bytes to expect and
arrives; each copy's completion subtracts its bytes. When both reach zero the phase
completes: the phase bit flips and the arrival count resets. ``try_wait.parity(p)``
succeeds once the phase of parity ``p`` has completed (while the barrier is in phase
``p`` it waits).

The ring of GPU.md §4 (FlashAttention-3 and CUTLASS's warp-specialised pipeline): ``S``
stages, each with a *full* barrier (count 1: the producer's ``arrive.expect_tx``, then
the TMA bytes) and an *empty* barrier (one arrival per consumer warpgroup). For step
``k`` the producer uses stage ``k % S`` with phase ``(k // S) & 1``: it waits on empty
with the opposite parity (the first round passes at once), expects the bytes, issues the
copy; each consumer waits on full with the phase's parity, reads, and arrives on empty.

:func:`run_ring` plays that protocol under a random scheduler — copies complete whenever,
agents interleave arbitrarily — and checks every read sees the step's data (a producer
overwriting a stage before its consumers released it would be caught) and that it ends:
a state where nothing can move and work remains is a :class:`Deadlock`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

# The instructions, as PTX templates (shared::cta barriers of 8 bytes; ``bar`` an address
# or symbol in shared memory, ``pred`` a predicate register)
PTX = {
    "init": "mbarrier.init.shared::cta.b64 [{bar}], {count};",
    "arrive": "mbarrier.arrive.shared::cta.b64 _, [{bar}];",
    "arrive_expect_tx": "mbarrier.arrive.expect_tx.shared::cta.b64 _, [{bar}], {nbytes};",
    "try_wait_parity": "mbarrier.try_wait.parity.shared::cta.b64 {pred}, [{bar}], {parity};",
}


class RingError(RuntimeError):
    """The ring's protocol went wrong (one of the three below)."""


class Deadlock(RingError):
    """No agent can move and the ring has not finished."""


class RingRace(RingError):
    """A consumer read a stage that held another step's data."""


class OverArrival(RingError):
    """An arrival on a barrier whose phase had none left (undefined on the hardware)."""


@dataclass
class MBarrier:
    count: int
    pending: int = field(init=False)
    tx: int = 0
    phase: int = 0  # the parity of the phase in progress

    def __post_init__(self):
        self.pending = self.count

    def arrive(self, expect_tx: int = 0) -> None:
        if self.pending <= 0:
            raise OverArrival("more arrivals than the phase's count")
        self.tx += expect_tx
        self.pending -= 1
        self._maybe_complete()

    def complete_tx(self, nbytes: int) -> None:
        self.tx -= nbytes
        self._maybe_complete()

    def _maybe_complete(self) -> None:
        if self.pending == 0 and self.tx == 0:
            self.phase ^= 1
            self.pending = self.count

    def try_wait(self, parity: int) -> bool:
        """Whether the phase of ``parity`` has completed (the barrier has moved past it)."""
        return self.phase != parity


def run_ring(
    stages: int,
    consumers: int,
    steps: int,
    seed: int = 0,
    nbytes: int = 4096,
    consumer_parity_offset: int = 0,
    release: bool = True,
    empty_count: int | None = None,
) -> int:
    """Play the ring to the end under a random schedule; the number of moves it took.
    ``consumer_parity_offset``, ``release=False`` and ``empty_count`` break the protocol
    on purpose (a wrong parity, a consumer that never releases its stage, an empty barrier
    that waits for fewer consumers than there are): for the tests that show the model
    catches such mistakes."""
    rng = random.Random(seed)
    full = [MBarrier(1) for _ in range(stages)]
    empty = [MBarrier(consumers if empty_count is None else empty_count) for _ in range(stages)]
    data = [None] * stages  # what each stage holds (the step whose bytes landed there)
    in_flight: list[tuple[int, int]] = []  # (stage, step) copies issued, not complete
    producer = {"k": 0}
    readers = [{"k": 0} for _ in range(consumers)]

    def producer_moves() -> list:
        k = producer["k"]
        if k >= steps:
            return []
        s, parity = k % stages, (k // stages) & 1
        return [("produce", None)] if empty[s].try_wait(parity ^ 1) else []

    def consumer_moves(c: int) -> list:
        k = readers[c]["k"]
        if k >= steps:
            return []
        s, parity = k % stages, ((k // stages) + consumer_parity_offset) & 1
        return [("consume", c)] if full[s].try_wait(parity) else []

    moves = 0
    while True:
        options = producer_moves()
        for c in range(consumers):
            options += consumer_moves(c)
        options += [("land", i) for i in range(len(in_flight))]
        if not options:
            if producer["k"] >= steps and all(r["k"] >= steps for r in readers) and not in_flight:
                return moves
            raise Deadlock(
                f"ring of {stages} stages, {consumers} consumers: stuck at producer step "
                f"{producer['k']}, consumer steps {[r['k'] for r in readers]}"
            )
        kind, arg = rng.choice(options)
        moves += 1
        if kind == "produce":
            k = producer["k"]
            s = k % stages
            full[s].arrive(expect_tx=nbytes)
            in_flight.append((s, k))
            producer["k"] += 1
        elif kind == "land":  # a copy completes: its bytes are in the stage
            s, k = in_flight.pop(arg)
            data[s] = k
            full[s].complete_tx(nbytes)
        else:
            k = readers[arg]["k"]
            s = k % stages
            if data[s] != k:
                raise RingRace(f"consumer {arg} read stage {s} for step {k}: it held {data[s]}")
            if release:
                empty[s].arrive()
            readers[arg]["k"] += 1
