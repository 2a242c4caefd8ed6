"""Coalesced all-reduce through memory that the ranks of one node share.

When every member of an axis runs on one node, ``all_reduce_coalesced`` need not pass
its buckets through MPI's collectives: MPI-3 can give the members windows of memory that
all of them map (``MPI.Win.Allocate_shared``). A bucket then costs each member one copy
of its arrays into its own *slot* of a shared input window, and one reading of a 1/n
share of every slot: member i reduces the i-th share of the elements over all the
slots, left to right in rank order, into a shared *result region*. Every member's
results are views of that region. MPI's all-reduce moves each byte more often: into
the library's buffers, across, and out again. Where the cores share little memory
bandwidth, that traffic is most of what a bucket costs.

Every element is reduced in rank order, so the result is the deterministic one, bit
for bit, and equal on every member. It is also the same memory on every member, which
is why ``all_reduce_coalesced`` hands out its results read-only.

Each bucket synchronises three times. First comes one small all-gather, in which the
members agree on the bucket's size, dtype and op, and on a result region that no member
still holds results of. Then there is a barrier after packing and one after reducing.
All three are non-blocking MPI calls, waited on through the axis's channel, so a missing
member ends in ``CollectiveTimeout`` as in any collective. Windows are allocated and
freed (collectively, blocking) only right after the all-gather, when every member is
known to be there.

A result region is used again only when no member holds a view of it: every NumPy view
keeps a reference to the region's array, which is the test ``BucketPool`` uses too. At
most ``KEEP`` regions exist per axis. When every one is held, or the node's shared-memory
file system lacks the room, the bucket goes through MPI instead. Only host arrays of the
dtypes NumPy reduces as MPI does take this path: integers, f32, f64, complex. The 16-bit
floats (reduced in f32) and bools (reduced as bytes) go through MPI.
``TESSERA_DIST_SHARED_MEMORY=off`` turns the path off.
"""

from __future__ import annotations

import os
from typing import NamedTuple

import numpy as np

from ..errors import CollectiveMismatch
from .channel import Channel
from .layout import block
from .mpi_transport import OPS
from .views import outside_references

KEEP = 8  # result regions per axis (a call of several buckets, and results still held)
ALIGN_BYTES = 64  # members' shares start on cache lines of their own
SHM_DIR = "/dev/shm"
_KINDS = "iuc"  # dtype kinds NumPy reduces as MPI does (plus f32 and f64)
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_OP_CODES = {op: k for k, op in enumerate(OPS)}


class BucketShape(NamedTuple):
    """What the fingerprint check reads of a bucket (it is packed later)."""

    shape: tuple
    dtype: np.dtype


def eligible(x) -> bool:
    """Whether an array of ``x``'s type and dtype may take the shared-memory path."""
    return type(x) is np.ndarray and (x.dtype.kind in _KINDS or x.dtype in _FLOATS)


def reduce_bucket(channel: Channel, pieces: list, count: int, dtype, op: str, seq: int):
    """``op`` over the members of ``pieces`` packed flat (``count`` elements of
    ``dtype``), as a view of a shared result region; None when this bucket has to go
    through MPI (the members agree on that; the agreement took sequence number ``seq``,
    and the all_reduce through MPI takes the next one). Call with ISSUE_LOCK held."""
    if channel.shared_buckets is None:
        channel.shared_buckets = _Arena(channel)
    return channel.shared_buckets.reduce(pieces, count, np.dtype(dtype), op, seq)


class _Arena:
    """The shared windows of one axis: the members' input slots and the result regions."""

    def __init__(self, channel: Channel):
        self.channel = channel
        self.node = channel.node  # the members, in axis order, able to share memory
        self.slots_win = None
        self.slots: list[np.ndarray] = []  # per member: its slot, as bytes
        self.slot_bytes = 0
        self.region_wins: list = []  # the result regions' windows
        self.regions: list[np.ndarray] = []  # their memory, as bytes: results are views

    def reduce(self, pieces: list, count: int, dtype: np.dtype, op: str, seq: int):
        nbytes = count * dtype.itemsize
        mine = [nbytes, ord(dtype.char), _OP_CODES[op], self._unheld_mask(), _shm_room()]
        everyone = np.empty((self.channel.size, len(mine)), np.int64)
        request = self.node.Iallgather(np.array(mine, np.int64), everyone)
        self.channel.wait([request], "all_reduce", seq)
        if not (everyone[:, :3] == everyone[0, :3]).all():
            raise self._mismatch(everyone, seq)
        # From here on every member decides alike: it saw the same table.
        k = self._region_for(nbytes, int(np.bitwise_and.reduce(everyone[:, 3])))
        if k is None:
            return None  # every region is held somewhere
        new = nbytes if k == len(self.regions) or self.regions[k].nbytes < nbytes else 0
        new += self.channel.size * nbytes if self.slot_bytes < nbytes else 0
        if 2 * new > everyone[:, 4].min():
            return None  # the node's shared memory is short: leave room for others
        self._make_region(k, nbytes)
        self._ensure_slots(nbytes)
        slot = self.slots[self.channel.index][:nbytes].view(dtype)
        np.concatenate(pieces, axis=None, out=slot)
        self._barrier(self.region_wins[k], seq)
        result = self.regions[k][:nbytes].view(dtype)
        self._reduce_share(result, dtype, op)
        self._barrier(self.region_wins[k], seq)
        return result

    def _unheld_mask(self) -> int:
        """Bit k set: no result of region k is held here."""
        return sum(1 << k for k, n in enumerate(outside_references(self.regions)) if n == 0)

    def _region_for(self, nbytes: int, unheld: int) -> int | None:
        """The index of the region to use: one that no member holds, large enough if
        one is; ``len(self.regions)`` for a new one; None if every region is held."""
        free = [k for k in range(len(self.regions)) if unheld >> k & 1]
        large = [k for k in free if self.regions[k].nbytes >= nbytes]
        if large or free:
            return (large or free)[0]
        return len(self.regions) if len(self.regions) < KEEP else None

    def _make_region(self, k: int, nbytes: int) -> None:
        """Region ``k`` made (collectively), or replaced by a larger one, if need be."""
        if k < len(self.regions) and self.regions[k].nbytes >= nbytes:
            return
        win = self._allocate(nbytes, whole_on_first=True)
        memory = np.frombuffer(win.Shared_query(0)[0], np.uint8, _rounded(nbytes))
        if k == len(self.regions):
            self.region_wins.append(win)
            self.regions.append(memory)
        else:  # held nowhere (agreed), so nothing refers to the old memory once replaced
            old = self.region_wins[k]
            self.region_wins[k], self.regions[k] = win, memory
            _free(old)

    def _ensure_slots(self, nbytes: int) -> None:
        if self.slot_bytes >= nbytes:
            return
        if self.slots_win is not None:
            self.slots = []
            _free(self.slots_win)
        self.slots_win, self.slot_bytes = self._allocate(nbytes, whole_on_first=False), nbytes
        self.slots = [
            np.frombuffer(self.slots_win.Shared_query(i)[0], np.uint8, nbytes)
            for i in range(self.channel.size)
        ]

    def _allocate(self, nbytes: int, whole_on_first: bool):
        """A shared window: ``nbytes`` on the first member (a result region) or on each
        member (the slots), locked for the members' loads and stores."""
        from mpi4py import MPI

        local = _rounded(nbytes) if (self.channel.index == 0 or not whole_on_first) else 0
        win = MPI.Win.Allocate_shared(local, 1, comm=self.node)
        win.Lock_all()
        return win

    def _barrier(self, region_win, seq: int) -> None:
        """Every member's stores before it are seen by every member's loads after it."""
        self.slots_win.Sync()
        region_win.Sync()
        self.channel.wait([self.node.Ibarrier()], "all_reduce", seq)
        self.slots_win.Sync()
        region_win.Sync()

    def _reduce_share(self, result: np.ndarray, dtype: np.dtype, op: str) -> None:
        """This member's share of ``result``: ``op`` over every slot, in rank order."""
        n = self.channel.size
        align = max(1, ALIGN_BYTES // dtype.itemsize)
        lines = -(-result.size // align)
        start, stop = (min(b * align, result.size) for b in block(lines, n, self.channel.index))
        share = result[start:stop]
        slots = [s[: result.nbytes].view(dtype)[start:stop] for s in self.slots]
        ufunc = getattr(np, OPS[op])
        ufunc(slots[0], slots[1], out=share)
        for s in slots[2:]:
            ufunc(share, s, out=share)

    def _mismatch(self, everyone: np.ndarray, seq: int) -> CollectiveMismatch:
        ops = list(OPS)
        lines = "\n".join(
            f"  rank {self.channel.world_ranks[i]} (index {i} on axis '{self.channel.axis}'): "
            f"a bucket of {nbytes} bytes of {np.dtype(chr(char))}, op={ops[code]}"
            for i, (nbytes, char, code, *_) in enumerate(everyone.tolist())
        )
        return CollectiveMismatch(
            f"all_reduce #{seq} on axis '{self.channel.axis}': the ranks passed different "
            f"arrays or ops to all_reduce_coalesced:\n{lines}"
        )


def _rounded(nbytes: int) -> int:
    """``nbytes`` rounded up to whole cache lines (at least one)."""
    return max(1, -(-nbytes // ALIGN_BYTES)) * ALIGN_BYTES


def _free(win) -> None:
    """Free a window (collectively) whose memory nobody refers to any more."""
    win.Unlock_all()
    win.Free()


def _shm_room() -> int:
    """Bytes free for new shared memory on this node (where MPI puts its windows)."""
    try:
        stat = os.statvfs(SHM_DIR)
    except OSError:
        return 2**62  # no such file system to run out of: MPI maps memory otherwise
    return stat.f_bavail * stat.f_frsize
