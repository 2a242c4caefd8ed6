"""Checked memory for the debug target: bounds, uninitialised reads, shared-memory races
and reads of asynchronous copies that have not completed.

Every access names who made it (group, lane, source line), so a report can name both
sides of a race. Shared-memory accesses are logged per *epoch*, the stretch between two
barriers: two different lanes touching one element in an epoch, at least one writing,
is a race. Atomic updates only race with plain accesses, not with each other.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ....errors import (
    AsyncCopyError,
    OutOfBoundsError,
    RaceError,
    SourceLoc,
    UninitializedReadError,
)

READ, WRITE, ATOMIC = "read", "write", "atomic update"


@dataclass(frozen=True, slots=True)  # no __dict__: cheap to keep (races.py)
class Who:
    """The lane making an access: ``lane`` is None for the group itself (a collective)."""

    kernel: str
    group: tuple[int, ...]
    lane: tuple[int, ...] | None
    loc: SourceLoc

    def describe(self) -> str:
        lane = "the whole group" if self.lane is None else f"lane {_fmt(self.lane)}"
        return f"{lane} of group {_fmt(self.group)}"


def _fmt(ids: tuple[int, ...]) -> str:
    return str(ids[0]) if len(ids) == 1 else str(ids)


class CheckedArray:
    """A global (parameter) or shared array with bounds-checked element access."""

    def __init__(self, name: str, data: np.ndarray, space: str):
        self.name = name
        self.data = data
        self.space = space
        self.shape = data.shape

    def check_index(self, index: tuple, who: Who) -> tuple[int, ...]:
        idx = tuple(int(i) for i in index)
        if len(idx) != len(self.shape) or any(not 0 <= i < n for i, n in zip(idx, self.shape)):
            raise OutOfBoundsError(
                who.kernel,
                f"index {_fmt(idx)} is out of bounds for {self.space} array '{self.name}' of "
                f"shape {self.shape} ({who.describe()})",
                (("", who.loc),),
            )
        return idx

    def load(self, index: tuple, who: Who) -> object:
        return self.data[self.check_index(index, who)]

    def store(self, index: tuple, value: object, who: Who) -> None:
        self.data[self.check_index(index, who)] = value

    def atomic(self, index: tuple, update, who: Who, what: str, fenced: bool = False) -> object:
        """``old = a[index]; a[index] = update(old)`` as one step; returns ``old``
        (``fenced``: ``atomic_xchg``/``atomic_cas``, which order memory: races.py)."""
        idx = self.check_index(index, who)
        old = self.data[idx]
        self.data[idx] = update(old)
        return old


@dataclass
class _Cell:
    """What happened to one shared element in the current epoch."""

    writer: tuple[Who, str] | None = None
    readers: dict | None = None  # lane → (Who, kind) of its first read or atomic


class SharedArray(CheckedArray):
    """A group's shared array: starts poisoned (NaN or 0xAB bytes), remembers which
    elements were written, logs accesses for race detection and marks elements that an
    unfinished cp_async is filling."""

    def __init__(self, name: str, shape: tuple[int, ...], dtype: np.dtype):
        data = np.empty(shape, dtype)
        if data.dtype.kind == "f" or data.dtype.name == "bfloat16":
            data[...] = np.nan
        else:
            data.view(np.uint8)[...] = 0xAB
        super().__init__(name, data, "shared")
        self.written = np.zeros(shape, bool)
        self.pending: dict[tuple[int, ...], Who] = {}
        self.epoch: dict[tuple[int, ...], _Cell] = {}
        self.unwritten_reads: dict[tuple[int, ...], Who] = {}  # first read of each

    def new_epoch(self) -> None:
        self.epoch.clear()
        self.unwritten_reads.clear()

    def complete_copies(self) -> None:
        """The group waited for its copies: their data is now visible to every lane."""
        for idx in self.pending:
            cell = self.epoch.get(idx)
            if cell is not None and cell.writer is not None and cell.writer[0].lane is None:
                cell.writer = None
        self.pending.clear()

    def _log(self, idx: tuple[int, ...], who: Who, kind: str) -> None:
        cell = self.epoch.setdefault(idx, _Cell())
        lane = who.lane
        for other, other_kind in self._conflicts(cell, lane, kind):
            raise RaceError(
                who.kernel,
                f"race on shared array '{self.name}' element {_fmt(idx)}: {other_kind} by "
                f"{other.describe()} and {kind} by {who.describe()} with no tbarrier() "
                "between them",
                (
                    (f"{other_kind} ({other.describe()})", other.loc),
                    (f"{kind} ({who.describe()})", who.loc),
                ),
            )
        if kind == WRITE:
            cell.writer = (who, kind)
        else:
            if cell.readers is None:
                cell.readers = {}
            cell.readers.setdefault(lane, (who, kind))

    @staticmethod
    def _conflicts(cell: _Cell, lane, kind: str):
        if cell.writer is not None and cell.writer[0].lane != lane:
            yield cell.writer
        if kind != READ and cell.readers:
            for other_lane, (other, other_kind) in cell.readers.items():
                if other_lane == lane:
                    continue
                if kind == ATOMIC and other_kind == ATOMIC:
                    continue
                yield other, other_kind
        if kind == READ and cell.readers:
            for other_lane, (other, other_kind) in cell.readers.items():
                if other_lane != lane and other_kind == ATOMIC:
                    yield other, other_kind

    def _check_pending(self, idx: tuple[int, ...], who: Who, what: str) -> None:
        copy = self.pending.get(idx)
        if copy is not None:
            raise AsyncCopyError(
                who.kernel,
                f"{what} of shared array '{self.name}' element {_fmt(idx)} while a "
                "cp_async copy into it may still be in flight; wait for it with "
                f"cp_async.wait() or tbarrier() first ({who.describe()})",
                (("the copy", copy.loc), (what, who.loc)),
            )

    def load(self, index: tuple, who: Who) -> object:
        idx = self.check_index(index, who)
        self._check_pending(idx, who, "read")
        if not self.written[idx]:
            # Lanes run one after another, so another lane may still write this element
            # before the next barrier: that is a race, reported when the write comes.
            # Only if nobody writes it by then is it an uninitialised read.
            self.unwritten_reads.setdefault(idx, who)
        self._log(idx, who, READ)
        return self.data[idx]

    def check_uninitialised_reads(self) -> None:
        """At a barrier or the group's end: report reads of never-written elements."""
        for idx, who in self.unwritten_reads.items():
            raise self._uninitialised(idx, who)

    def _uninitialised(self, idx: tuple[int, ...], who: Who) -> UninitializedReadError:
        return UninitializedReadError(
            who.kernel,
            f"read of shared array '{self.name}' element {_fmt(idx)}, which no lane had "
            f"written since the group started ({who.describe()})",
            (("", who.loc),),
        )

    def _written(self, idx: tuple[int, ...]) -> None:
        """After a write passed the race check: an earlier read of this element in the
        epoch was by the writing lane itself, so it read garbage."""
        reader = self.unwritten_reads.pop(idx, None)
        if reader is not None:
            raise self._uninitialised(idx, reader)
        self.written[idx] = True

    def store(self, index: tuple, value: object, who: Who) -> None:
        idx = self.check_index(index, who)
        self._check_pending(idx, who, "write")
        self._log(idx, who, WRITE)
        self._written(idx)
        self.data[idx] = value

    def atomic(self, index: tuple, update, who: Who, what: str, fenced: bool = False) -> object:
        idx = self.check_index(index, who)
        self._check_pending(idx, who, what)
        if not self.written[idx]:
            raise UninitializedReadError(
                who.kernel,
                f"{what} of shared array '{self.name}' element {_fmt(idx)}, which no "
                f"lane has written since the group started ({who.describe()})",
                (("", who.loc),),
            )
        self._log(idx, who, ATOMIC)
        old = self.data[idx]
        self.data[idx] = update(old)
        return old

    def read_all(self, who: Who) -> np.ndarray:
        """A collective read of every element (``reduce_*``), checked like lane reads."""
        for idx in np.ndindex(*self.shape):
            self._check_pending(idx, who, "read")
            if not self.written[idx]:
                raise UninitializedReadError(
                    who.kernel,
                    f"{who.describe()} reduces shared array '{self.name}', but element "
                    f"{_fmt(idx)} was never written since the group started",
                    (("", who.loc),),
                )
            self._log(idx, who, READ)
        return self.data

    def copy_in(self, idx: tuple[int, ...], value: object, who: Who) -> None:
        """One element of a cp_async copy: written now, readable after completion."""
        idx = self.check_index(idx, who)  # a sub-array's fixed index may be outside
        self._check_pending(idx, who, "cp_async write")
        self._log(idx, who, WRITE)
        self._written(idx)
        self.data[idx] = value
        self.pending[idx] = who
