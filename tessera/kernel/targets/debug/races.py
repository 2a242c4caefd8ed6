"""Race detection on global memory for the debug target (docs/debugging.md).

Two accesses to one element of a ``mut`` argument conflict when at least one writes and
they are not both atomic updates, and they are not ordered:

* by two different lanes of one group in the same *epoch*: between two ``tbarrier()``,
  or the end of a tile statement (after which CUDA waits for the group too). A tile
  statement or a ``cp_async`` copy is "the whole group", an agent of its own; or
* by two different groups at any time: groups run in any order, or at once, and no
  barrier orders them.

A write that stores the very bits the element holds does not conflict with other
writes (every lane running a uniform store ``out[g] = total`` is race-free, and every
target gives the same answer), and a lane's read of an element it wrote itself in the
epoch sees those bits whatever the order. Anything else is a ``RaceError`` naming both
accesses: their lanes, groups and ``file:line``.

Each element carries two records: one of the current epoch of the running group (lanes
as agents; stale once the epoch moves on, so a barrier costs one counter increment) and
one of the whole launch (groups as agents; a flat kernel is one group, its instances
lanes). Read-only arguments are never tracked: nothing writes them.
"""

from __future__ import annotations

from ....errors import RaceError
from .runtime import ATOMIC, READ, WRITE, CheckedArray, Who, _fmt


class Clock:
    """The launch's epoch counter: moved on at every barrier, after every tile statement
    and at every new group; and what the groups' fenced atomics order (:meth:`fence`)."""

    __slots__ = ("epoch", "phase", "seen", "released")

    def __init__(self) -> None:
        self.epoch = 0
        # Vector clocks of the fenced atomics (a lock taken with atomic_cas, released with
        # atomic_xchg): each group's phase (moved on at each of its fenced atomics), what
        # each group has acquired of the others' phases, and what each location released.
        self.phase: dict = {}
        self.seen: dict = {}
        self.released: dict = {}

    def tick(self) -> None:
        self.epoch += 1

    def fence(self, group, location) -> None:
        """``group``'s fenced atomic at ``location``: it acquires what was released
        there, then releases all it has seen and its own accesses so far."""
        seen = self.seen.setdefault(group, {})
        released = self.released.setdefault(location, {})
        for g, phase in released.items():
            if seen.get(g, -1) < phase:
                seen[g] = phase
        for g, phase in seen.items():
            if released.get(g, -1) < phase:
                released[g] = phase
        released[group] = self.phase.get(group, 0)
        self.phase[group] = self.phase.get(group, 0) + 1

    def ordered(self, earlier, later, phase: int) -> bool:
        """Whether group ``later`` has acquired group ``earlier``'s accesses of ``phase``."""
        return self.seen.get(later, {}).get(earlier, -1) >= phase


# What is known of one element is one list, ``[epoch, *lanes, *groups]``: two records of
# four fields, ``[sole, writes, reads, atomics]``, one for the lanes of the running group
# in ``epoch`` and one for the groups of the launch. ``sole`` is the one agent that
# touched the element (None: nobody yet); then each other field is its first access of
# that kind (a Who, or None). Once a second agent comes, ``sole`` is _MANY and each field
# maps agents to their first access of that kind. So an element only one lane uses, the
# common case, costs one list and a comparison per access.
_MANY = object()
_SLOT = {WRITE: 1, READ: 2, ATOMIC: 3}
_LANES, _GROUPS = 1, 5


def _record(cell: list, at: int) -> list:
    """The record at ``at`` as (writes, reads, atomics) dicts from agents to accesses."""
    sole = cell[at]
    if sole is _MANY:
        return cell[at + 1 : at + 4]
    return [None if who is None else {sole: who} for who in cell[at + 1 : at + 4]]


def _other(accesses: dict | None, me, ordered=None):
    """One access in ``accesses`` by an agent other than ``me`` (and, given ``ordered``,
    not ordered before ``me``'s), or None."""
    if accesses:
        for agent, who in accesses.items():
            if agent != me and (ordered is None or not ordered(agent)):
                return who
    return None


def _conflict(record: list, me, kind: str, same_bits, ordered=None) -> tuple[Who, str] | None:
    """The earlier access that ``me``'s access of ``kind`` races with, if any."""
    writers, readers, atomics = record
    if kind == READ:
        if writers and me not in writers:
            other = _other(writers, me, ordered)
            if other is not None:
                return other, WRITE
        other = _other(atomics, me, ordered)
        return (other, ATOMIC) if other is not None else None
    other = _other(writers, me, ordered)
    if other is not None and (kind == ATOMIC or not same_bits()):
        return other, WRITE
    other = _other(readers, me, ordered)
    if other is not None:
        return other, READ
    if kind == WRITE:
        other = _other(atomics, me, ordered)
        if other is not None:
            return other, ATOMIC
    return None


def _note(cell: list, at: int, me, kind: str, who: Who) -> None:
    """Adds ``me``'s access to the record at ``at``. A read of one's own write is not
    kept: it conflicts with nothing (a different value written later conflicts with the
    write)."""
    sole, slot = cell[at], at + _SLOT[kind]
    if sole is not _MANY:
        if sole is None or sole == me:
            cell[at] = me
            if cell[slot] is None and not (kind == READ and cell[at + 1] is not None):
                cell[slot] = who
            return
        cell[at] = _MANY
        for k in range(at + 1, at + 4):
            cell[k] = None if cell[k] is None else {sole: cell[k]}
    if kind == READ and cell[at + 1] and me in cell[at + 1]:
        return
    accesses = cell[slot]
    if accesses is None:
        cell[slot] = {me: who}
    elif me not in accesses:
        accesses[me] = who


class GlobalArray(CheckedArray):
    """A ``mut`` argument: bounds-checked, and every access race-checked."""

    def __init__(self, name: str, data, clock: Clock):
        super().__init__(name, data, "global")
        self.clock = clock
        self.cells: dict[tuple[int, ...], list] = {}  # element → what is known of it
        # element → group → the phase of its last access, once a fenced atomic has run
        self.phases: dict[tuple[int, ...], dict] = {}

    def _log(self, idx: tuple[int, ...], who: Who, kind: str, value=None) -> None:
        cell = self.cells.get(idx)
        epoch = self.clock.epoch
        group, lane = who.group, who.lane
        if cell is None:
            cell = self.cells[idx] = [epoch, None, None, None, None, None, None, None, None]
        elif cell[0] != epoch:
            cell[0] = epoch
            cell[1] = cell[2] = cell[3] = cell[4] = None
        solo_lane, solo_group = cell[_LANES], cell[_GROUPS]
        if (solo_group is not None and solo_group != group) or (
            solo_lane is not None and solo_lane != lane
        ):

            def same_bits() -> bool:
                stored = self.data[idx]
                return stored.tobytes() == stored.dtype.type(value).tobytes()

            ordered = None
            if self.clock.seen:  # a fenced atomic ran: groups it orders do not race
                phases = self.phases.get(idx, {})

                def ordered(other) -> bool:
                    return self.clock.ordered(other, group, phases.get(other, 0))

            found = _conflict(_record(cell, _GROUPS), group, kind, same_bits, ordered)
            if found is None:
                found = _conflict(_record(cell, _LANES), lane, kind, same_bits)
            if found is not None:
                raise self._race(idx, found, who, kind)
        _note(cell, _LANES, lane, kind, who)
        _note(cell, _GROUPS, group, kind, who)
        if self.clock.phase:
            self.phases.setdefault(idx, {})[group] = self.clock.phase.get(group, 0)

    def _race(self, idx, found: tuple[Who, str], who: Who, kind: str) -> RaceError:
        other, other_kind = found
        if other.group != who.group:
            why = (
                "by different groups, which no barrier orders (use an atomic: tile.atomic_add, ...)"
            )
        else:
            why = "with no tbarrier() between them"
        return RaceError(
            who.kernel,
            f"race on global array '{self.name}' element {_fmt(idx)}: {other_kind} by "
            f"{other.describe()} and {kind} by {who.describe()} {why}",
            (
                (f"{other_kind} ({other.describe()})", other.loc),
                (f"{kind} ({who.describe()})", who.loc),
            ),
        )

    def load(self, index: tuple, who: Who) -> object:
        idx = self.check_index(index, who)
        self._log(idx, who, READ)
        return self.data[idx]

    def store(self, index: tuple, value: object, who: Who) -> None:
        idx = self.check_index(index, who)
        self._log(idx, who, WRITE, value)
        self.data[idx] = value

    def atomic(self, index: tuple, update, who: Who, what: str, fenced: bool = False) -> object:
        idx = self.check_index(index, who)
        self._log(idx, who, ATOMIC)
        old = self.data[idx]
        self.data[idx] = update(old)
        if fenced:
            self.clock.fence(who.group, (self.name, idx))
        return old
