"""Tessera's own collective algorithms over MPI point-to-point (MESH.md, "Collective
algorithms"): ring, pipelined binary tree and recursive doubling.

Each algorithm is a generator of *steps*: it posts non-blocking sends and receives on the
channel's ``steps`` communicator, yields their requests, and continues (reducing what
arrived) once they are complete; :func:`stepped` turns it into the chain of
:class:`~.channel.Transfer` objects a :class:`~.collectives.Work` waits on, so an
algorithm's collective waits, times out, is checked and runs asynchronously exactly as the
library's does. Messages are tagged with the collective's sequence number, so collectives
in flight at once never take each other's messages.

* ``ring`` all-reduce: a reduce-scatter then an all-gather around the ring, 2(p−1) steps of
  n/p elements; rank r ends the first phase with the whole reduction of its own block
  (so reduce_scatter is the first phase alone, all_gather the second).
* ``rd`` (recursive doubling) all-reduce: ⌈log₂p⌉ exchanges of the whole array with the
  partner ``r xor 2^i``; ranks past the largest power of two first fold into a partner
  and get the result back at the end. Each exchange combines the lower rank's data first,
  so both partners hold the same bits.
* ``tree`` all-reduce (reduce up to rank 0, then broadcast down, a binary tree, in ``k``
  chunks so the levels work at once) and ``tree`` broadcast (the same downward half,
  rooted at ``root``).

Host arrays only (NumPy ufuncs reduce what arrives). 16-bit floats reduce in f32 and
booleans as bytes, as through MPI's own collectives (mpi_transport's wire types).
"""

from __future__ import annotations

import numpy as np

from .channel import Channel, Transfer
from .layout import block
from .mpi_transport import OPS, from_reduction_wire, to_reduction_wire

TAGS = 32768  # tags used (MPI guarantees at least this many): sequence number mod TAGS


def stepped(steps) -> Transfer:
    """The Transfer chain of a step generator (its return value is the result)."""

    def advance():
        try:
            requests = next(steps)
        except StopIteration as done:
            return done.value
        return Transfer(requests, advance)

    first = advance()
    return first if isinstance(first, Transfer) else Transfer([], lambda: first)


def _tag(seq: int) -> int:
    return seq % TAGS


def _reducer(op: str):
    return getattr(np, OPS[op])


# ------------------------------------------------------------------ ring
def _ring_reduce_scatter(ch: Channel, buf, bounds, op: str, tag: int):
    """Steps leaving rank r with the whole reduction of ``buf[bounds[r]]`` (in place)."""
    p, r = ch.size, ch.index
    right, left = (r + 1) % p, (r - 1) % p
    combine = _reducer(op)
    scratch = np.empty(max(b - a for a, b in bounds), buf.dtype)
    for s in range(p - 1):
        send_a, send_b = bounds[(r - s - 1) % p]
        recv_a, recv_b = bounds[(r - s - 2) % p]
        got = scratch[: recv_b - recv_a]
        yield [
            ch.steps.Isend(buf[send_a:send_b], dest=right, tag=tag),
            ch.steps.Irecv(got, source=left, tag=tag),
        ]
        combine(got, buf[recv_a:recv_b], out=buf[recv_a:recv_b])


def _ring_all_gather(ch: Channel, buf, bounds, tag: int):
    """Steps filling every block of ``buf`` from rank r's own ``buf[bounds[r]]``."""
    p, r = ch.size, ch.index
    right, left = (r + 1) % p, (r - 1) % p
    for s in range(p - 1):
        send_a, send_b = bounds[(r - s) % p]
        recv_a, recv_b = bounds[(r - s - 1) % p]
        yield [
            ch.steps.Isend(buf[send_a:send_b], dest=right, tag=tag),
            ch.steps.Irecv(buf[recv_a:recv_b], source=left, tag=tag),
        ]


def _flat_wire(x):
    """A private, flat copy of ``x`` in the dtype it is reduced in."""
    wire = to_reduction_wire(x, np)
    return np.array(wire.reshape(-1), copy=True)


def ring_all_reduce(ch: Channel, x, op: str, seq: int) -> Transfer:
    buf = _flat_wire(x)
    bounds = [block(buf.size, ch.size, i) for i in range(ch.size)]
    tag = _tag(seq)

    def steps():
        yield from _ring_reduce_scatter(ch, buf, bounds, op, tag)
        yield from _ring_all_gather(ch, buf, bounds, tag)
        return from_reduction_wire(buf.reshape(x.shape), x.dtype)

    return stepped(steps())


def ring_reduce_scatter(ch: Channel, front, op: str, rows: list[int], seq: int) -> Transfer:
    """``front``'s reduction over the axis, then this rank's block of ``rows[r]`` rows."""
    return _scatter(ch, front, op, rows, seq, _ring_reduce_scatter)


def ring_all_gather(ch: Channel, front, rows: list[int], seq: int) -> Transfer:
    """The axis's blocks of ``rows[i]`` rows each concatenated along dim 0."""
    return _gather(ch, front, rows, seq, _ring_all_gather)


def _scatter(ch: Channel, front, op: str, rows: list[int], seq: int, steps_of) -> Transfer:
    buf = _flat_wire(front)
    row = int(np.prod(front.shape[1:], dtype=np.int64))
    starts = np.concatenate([[0], np.cumsum(rows)]) * row
    bounds = [(int(starts[i]), int(starts[i + 1])) for i in range(ch.size)]

    def steps():
        yield from steps_of(ch, buf, bounds, op, _tag(seq))
        a, b = bounds[ch.index]
        mine = buf[a:b].reshape((rows[ch.index],) + front.shape[1:])
        return from_reduction_wire(mine, front.dtype)

    return stepped(steps())


def _gather(ch: Channel, front, rows: list[int], seq: int, steps_of) -> Transfer:
    row = int(np.prod(front.shape[1:], dtype=np.int64))
    flat = np.ascontiguousarray(front).reshape(-1).view(np.uint8)
    width = row * front.dtype.itemsize
    buf = np.empty(sum(rows) * width, np.uint8)
    starts = np.concatenate([[0], np.cumsum(rows)]) * width
    bounds = [(int(starts[i]), int(starts[i + 1])) for i in range(ch.size)]
    a, b = bounds[ch.index]
    buf[a:b] = flat

    def steps():
        yield from steps_of(ch, buf, bounds, _tag(seq))
        return buf.view(front.dtype).reshape((sum(rows),) + front.shape[1:])

    return stepped(steps())


# ------------------------------------------------------------------ recursive doubling
def rd_all_reduce(ch: Channel, x, op: str, seq: int) -> Transfer:
    buf = _flat_wire(x)
    p, r, tag = ch.size, ch.index, _tag(seq)
    pof2 = 1 << (p.bit_length() - 1)
    extra = p - pof2
    combine = _reducer(op)
    scratch = np.empty_like(buf)

    def steps():
        if r >= pof2:  # folded into rank r - pof2, which hands the result back at the end
            yield [ch.steps.Isend(buf, dest=r - pof2, tag=tag)]
            yield [ch.steps.Irecv(buf, source=r - pof2, tag=tag)]
            return from_reduction_wire(buf.reshape(x.shape), x.dtype)
        if r < extra:
            yield [ch.steps.Irecv(scratch, source=r + pof2, tag=tag)]
            combine(buf, scratch, out=buf)
        mask = 1
        while mask < pof2:
            partner = r ^ mask
            yield [
                ch.steps.Isend(buf, dest=partner, tag=tag),
                ch.steps.Irecv(scratch, source=partner, tag=tag),
            ]
            if partner < r:
                combine(scratch, buf, out=buf)
            else:
                combine(buf, scratch, out=buf)
            mask <<= 1
        if r < extra:
            yield [ch.steps.Isend(buf, dest=r + pof2, tag=tag)]
        return from_reduction_wire(buf.reshape(x.shape), x.dtype)

    return stepped(steps())


def _owned(v: int, mask: int, pof2: int, extra: int, bounds) -> list[tuple[int, int]]:
    """The ranges of ``buf`` the group of ``mask`` virtual ranks holding ``v`` owns: their
    own blocks, and the blocks of the ranks past ``pof2`` folded into them (non-empty
    ranges only)."""
    first = v & ~(mask - 1)
    ranges = [(bounds[first][0], bounds[first + mask - 1][1])]
    folded = max(0, min(first + mask, extra) - first)
    if folded:
        ranges.append((bounds[first + pof2][0], bounds[first + pof2 + folded - 1][1]))
    return [(a, b) for a, b in ranges if b > a]


def _rd_all_gather(ch: Channel, buf, bounds, tag: int):
    """Steps filling every block of ``buf`` from rank r's ``buf[bounds[r]]`` by
    recursive doubling (ranks past the largest power of two folded in first)."""
    p, r = ch.size, ch.index
    pof2 = 1 << (p.bit_length() - 1)
    extra = p - pof2
    if r >= pof2:  # hands its block to r - pof2, gets everything back at the end
        a, b = bounds[r]
        yield [ch.steps.Isend(buf[a:b], dest=r - pof2, tag=tag)]
        yield [ch.steps.Irecv(buf, source=r - pof2, tag=tag)]
        return
    if r < extra:
        a, b = bounds[r + pof2]
        yield [ch.steps.Irecv(buf[a:b], source=r + pof2, tag=tag)]
    mask = 1
    while mask < pof2:
        partner = r ^ mask
        mine = _owned(r, mask, pof2, extra, bounds)
        theirs = _owned(partner, mask, pof2, extra, bounds)
        yield [ch.steps.Isend(buf[a:b], dest=partner, tag=tag) for a, b in mine] + [
            ch.steps.Irecv(buf[a:b], source=partner, tag=tag) for a, b in theirs
        ]
        mask <<= 1
    if r < extra:
        yield [ch.steps.Isend(buf, dest=r + pof2, tag=tag)]


def _rd_reduce_scatter(ch: Channel, buf, bounds, op: str, tag: int):
    """Steps leaving rank r with the whole reduction of ``buf[bounds[r]]`` by recursive
    halving (ranks past the largest power of two folded in first)."""
    p, r = ch.size, ch.index
    pof2 = 1 << (p.bit_length() - 1)
    extra = p - pof2
    combine = _reducer(op)
    scratch = np.empty_like(buf)
    if r >= pof2:  # its whole array to r - pof2, its own block back at the end
        yield [ch.steps.Isend(buf, dest=r - pof2, tag=tag)]
        a, b = bounds[r]
        yield [ch.steps.Irecv(buf[a:b], source=r - pof2, tag=tag)]
        return
    if r < extra:
        yield [ch.steps.Irecv(scratch, source=r + pof2, tag=tag)]
        combine(buf, scratch, out=buf)
    mask = pof2 // 2
    while mask >= 1:
        partner = r ^ mask
        keep = _owned(r, mask, pof2, extra, bounds)
        give = _owned(partner, mask, pof2, extra, bounds)
        yield [ch.steps.Isend(buf[a:b], dest=partner, tag=tag) for a, b in give] + [
            ch.steps.Irecv(scratch[a:b], source=partner, tag=tag) for a, b in keep
        ]
        for a, b in keep:
            combine(buf[a:b], scratch[a:b], out=buf[a:b])
        mask //= 2
    if r < extra:
        a, b = bounds[r + pof2]
        yield [ch.steps.Isend(buf[a:b], dest=r + pof2, tag=tag)]


def rd_reduce_scatter(ch: Channel, front, op: str, rows: list[int], seq: int) -> Transfer:
    """``ring_reduce_scatter`` by recursive halving."""
    return _scatter(ch, front, op, rows, seq, _rd_reduce_scatter)


def rd_all_gather(ch: Channel, front, rows: list[int], seq: int) -> Transfer:
    """``ring_all_gather`` by recursive doubling."""
    return _gather(ch, front, rows, seq, _rd_all_gather)


# ------------------------------------------------------------------ pipelined binary tree
def _tree_down(ch: Channel, out, chunks, root: int, tag: int, pending: list):
    """Steps broadcasting ``out`` from ``root`` down a binary tree, chunk by chunk; the
    sends are left in ``pending`` (the caller waits for them last)."""
    p = ch.size
    v = (ch.index - root) % p  # the rank's place in a tree rooted at ``root``
    parent = ((v - 1) // 2 + root) % p
    children = [(c + root) % p for c in (2 * v + 1, 2 * v + 2) if c < p]
    for a, b in chunks:
        if v != 0:
            yield [ch.steps.Irecv(out[a:b], source=parent, tag=tag)]
        pending += [ch.steps.Isend(out[a:b], dest=c, tag=tag) for c in children]


def tree_all_reduce(ch: Channel, x, op: str, seq: int, k: int) -> Transfer:
    buf = _flat_wire(x)
    p, r, tag = ch.size, ch.index, _tag(seq)
    combine = _reducer(op)
    children = [c for c in (2 * r + 1, 2 * r + 2) if c < p]
    chunks = [block(buf.size, max(1, min(k, buf.size)), j) for j in range(max(1, min(k, buf.size)))]
    longest = max(b - a for a, b in chunks)
    scratch = [np.empty(longest, buf.dtype) for _ in children]
    out = buf if r == 0 else np.empty_like(buf)

    def steps():
        pending: list = []
        for a, b in chunks:  # up: each chunk reduced with the children's, then sent on
            if children:
                yield [
                    ch.steps.Irecv(s[: b - a], source=c, tag=tag) for s, c in zip(scratch, children)
                ]
                for s in scratch:  # own data first, then the children's in rank order
                    combine(buf[a:b], s[: b - a], out=buf[a:b])
            if r != 0:
                pending.append(ch.steps.Isend(buf[a:b], dest=(r - 1) // 2, tag=tag))
        yield from _tree_down(ch, out, chunks, 0, tag, pending)
        if pending:
            yield pending
        return from_reduction_wire(out.reshape(x.shape), x.dtype)

    return stepped(steps())


def tree_broadcast(ch: Channel, x, root: int, seq: int, k: int) -> Transfer:
    """``x`` of the member ``root`` on every member, down a binary tree in ``k`` chunks."""
    flat = np.ascontiguousarray(x).reshape(-1).view(np.uint8)
    out = np.array(flat, copy=True) if ch.index == root else np.empty_like(flat)
    parts = max(1, min(k, out.size))
    chunks = [block(out.size, parts, j) for j in range(parts)]

    def steps():
        pending: list = []
        yield from _tree_down(ch, out, chunks, root, _tag(seq), pending)
        if pending:
            yield pending
        return out.view(x.dtype).reshape(x.shape)

    return stepped(steps())
