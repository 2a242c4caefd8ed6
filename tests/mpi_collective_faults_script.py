"""Run under ``mpiexec -n 2`` with a mode and a folder; each rank
writes what it saw to ``<folder>/<mode>.rank<r>.txt``. test_collective_faults.py reads it.

* ``out_untouched``: rank 1 comes late; rank 0's collectives with ``out=`` time out and
  must leave ``out`` as it was, also after rank 1 arrives and completes them.
* ``small_timeout``: a fault-free run of large all_reduces under a timeout far shorter than
  they take: every member arrives, so none may time out.
* ``mismatch``: every case of MISMATCHES, with the default settings (no
  TESSERA_DIST_DEBUG): each must raise CollectiveMismatch on both ranks; and every case
  of HEADERS, which must raise it on rank 1, the broadcast's receiver.
"""

from __future__ import annotations

import sys
import time

import numpy as np

import tessera
from tessera import dist

# case -> the call, given the rank (the two ranks disagree in one respect)
MISMATCHES = {
    "shape": lambda r: dist.all_reduce(np.ones(3 + r), "x"),
    "op": lambda r: dist.all_reduce(np.ones(3), "x", op=("sum", "max")[r]),
    "kind": lambda r: (
        dist.all_reduce(np.ones(4), "x") if r == 0 else dist.broadcast(np.ones(4), "x")
    ),
    "reduce_scatter_dim": lambda r: dist.reduce_scatter(np.ones((4, 4)), "x", dim=r),
    "reduce_scatter_vs_all_reduce": lambda r: (
        dist.all_reduce(np.ones(4), "x") if r == 0 else dist.reduce_scatter(np.ones(4), "x")
    ),
    "root": lambda r: dist.broadcast(np.ones(3), "x", root=r),
    "async_vs_blocking": lambda r: (
        dist.all_reduce(np.ones(3), "x", async_op=True).wait()
        if r == 0
        else dist.all_reduce(np.ones(5), "x")
    ),
    "all_reduce_vs_all_gather": lambda r: (
        dist.all_reduce(np.ones((2, 2))) if r == 0 else dist.all_gather(np.ones((2, 2)), "x")
    ),
    "dtype": lambda r: dist.all_reduce(np.ones(3, (np.float32, np.float64)[r]), "x"),
    "dtype_large": lambda r: dist.all_reduce(np.ones(2**15, (np.int32, np.int64)[r]), "x"),
    "large_against_small": lambda r: dist.all_reduce(np.ones((2**16, 4**r)[r]), "x"),
    "reduce_scatter_op": lambda r: dist.reduce_scatter(np.ones(4), "x", op=("sum", "min")[r]),
    "reduce_scatter_dtype": lambda r: dist.reduce_scatter(np.ones(4, ("f4", "i8")[r]), "x"),
    # blocks of the same size: only the tag (the call's fingerprint) tells them apart
    "reduce_scatter_same_bytes": lambda r: dist.reduce_scatter(np.ones(((4, 6), (6, 4))[r]), "x"),
    "reduce_scatter_uneven_op": lambda r: dist.reduce_scatter(
        np.ones(5), "x", op=("sum", "max")[r]
    ),
    "reduce_scatter_256k_dtype": lambda r: dist.reduce_scatter(
        np.ones(2**16, ("f4", "f8")[r]), "x"
    ),
    "deterministic": lambda r: dist.all_reduce(np.ones(3), "x", deterministic=r == 0),
    "all_reduce_vs_barrier": lambda r: (
        dist.all_reduce(np.ones(3), "x") if r == 0 else dist.barrier("x")
    ),
    # 64 KB broadcasts carry the root's call in a header: ranks that both take
    # themselves for the root send 64 KB each and wait (MPI sends that much only to a
    # posted receive), as do ranks that both take the other for it; the probe names both
    "broadcast_64k_two_roots": lambda r: dist.broadcast(np.ones(2**14, "f4"), "x", root=r),
    "broadcast_64k_no_root": lambda r: dist.broadcast(np.ones(2**14, "f4"), "x", root=1 - r),
}

# case -> the call, given the rank: a 64 KB broadcast from rank 0 that rank 1, a
# receiver, finds to be another call than its own (the root returns its own array)
HEADERS = {
    "broadcast_64k_shape": lambda r: dist.broadcast(np.ones((2**14, (128, 128))[r], "f4"), "x"),
    "broadcast_64k_dtype": lambda r: dist.broadcast(
        np.ones(2**14 // (1 + r), ("f4", "f8")[r]), "x"
    ),
    "broadcast_64k_one_call_late": lambda r: _one_call_late(r),
}

# case -> the call, given the rank: calls that agree, with a header (must not raise)
AGREED = {
    "broadcast_64k_from_1": lambda r: dist.broadcast(
        np.arange(2**15, dtype="f4").reshape(128, 256)[:, ::2] * (r + 1), "x", root=1
    ),
    "reduce_scatter_512k_three_in_flight": lambda r: _three_in_flight(r),
}


def _three_in_flight(rank: int) -> str:
    """Three checked 512 KB reduce_scatters in flight at once: each delivers its own sum
    (their messages share a communicator and a tag; MPI pairs them in order)."""
    base = np.arange(2**17, dtype="f4") % 100
    works = [dist.reduce_scatter(base * (rank + k), "x", async_op=True) for k in (1, 2, 3)]
    for k, work in zip((1, 2, 3), works):
        want = np.array_split(base * (2 * k + 1), 2)[rank]
        assert np.array_equal(work.wait(), want), k
    return "all three right"


def _one_call_late(rank: int):
    """Rank 1 skips an all_reduce that rank 0 makes (asynchronously) before a 64 KB
    broadcast: the broadcasts pair, the root's is its collective #2 on the axis, rank 1's
    its #1; then rank 1 makes the all_reduce, which pairs with rank 0's."""
    x, big = np.ones(4), np.arange(2**14, dtype="f4")
    if rank == 0:
        work = dist.all_reduce(x, "x", async_op=True)
        got = dist.broadcast(big, "x")
        work.wait()
        return got
    try:
        return dist.broadcast(np.zeros_like(big), "x")
    finally:
        dist.all_reduce(x, "x")


def write(folder: str, name: str, rank: int, text: str) -> None:
    with open(f"{folder}/{name}.rank{rank}.txt", "w") as f:
        f.write(text)


def out_untouched(folder: str, rank: int) -> None:
    x = np.arange(6.0)
    if rank == 1:
        time.sleep(4)  # rank 0 times out meanwhile; then this rank completes its calls
        got = [dist.all_reduce(x, "x"), dist.all_reduce(x, "x"), dist.reduce_scatter(x, "x")]
        write(folder, "out_untouched", rank, repr(got))
        dist.barrier()
        return
    o, inplace, rs = np.full(6, -7.0), x.copy(), np.full(3, -7.0)
    calls = [
        ("out=", lambda: dist.all_reduce(x, "x", out=o)),
        ("in place", lambda: dist.all_reduce(inplace, "x", out=inplace)),
        ("reduce_scatter out=", lambda: dist.reduce_scatter(x, "x", out=rs)),
    ]
    lines = []
    for name, call in calls:
        try:
            with tessera.config(collective_timeout="0.5"):
                call()
            lines.append(f"{name}: no error")
        except dist.CollectiveTimeout:
            lines.append(f"{name}: timed out")
    dist.barrier()  # rank 1 has completed the collectives rank 0 gave up on
    time.sleep(0.2)
    lines.append(f"out= {o.tolist()}")
    lines.append(f"in place {inplace.tolist()}")
    lines.append(f"reduce_scatter out= {rs.tolist()}")
    write(folder, "out_untouched", rank, "\n".join(lines))


def small_timeout(folder: str, rank: int) -> None:
    x = np.ones(8 * 2**20, np.float32)  # 32 MB: it takes far longer than 1 ms to reduce
    text = "ok"
    try:
        for late in (0, 1, 0, 1):
            dist.barrier()
            if rank == late:  # the other rank is in the collective already when this
                time.sleep(0.3)  # one's 1 ms deadline passes: every member has arrived
            with tessera.config(collective_timeout="0.001" if rank == late else "60"):
                got = dist.all_reduce(x, "x")
            assert got[0] == 2.0
    except dist.CollectiveTimeout as exc:
        text = f"CollectiveTimeout\n{exc}"
    write(folder, "small_timeout", rank, text)


def mismatch(folder: str, rank: int) -> None:
    for name, call in {**MISMATCHES, **HEADERS, **AGREED}.items():
        try:
            with tessera.config(collective_timeout="20"):
                got = call(rank)
            text = f"no error\n{got!r}"
        except dist.CollectiveMismatch as exc:
            text = f"CollectiveMismatch\n{exc}"
        except dist.CollectiveTimeout as exc:
            text = f"CollectiveTimeout\n{exc}"
        write(folder, name, rank, text)
        dist.barrier()  # the next case starts together, whatever this one did


if __name__ == "__main__":
    mode, folder = sys.argv[1], sys.argv[2]
    dist.Mesh(axes=("x",), shape=(dist.size(),))
    globals()[mode](folder, dist.rank())
