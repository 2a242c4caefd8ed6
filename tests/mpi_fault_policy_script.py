"""Run under ``mpiexec -n 2`` (or 4) with a mode and a folder: the fault policy
(docs/distributed.md, "Fault policy") with faults injected by TESSERA_DIST_FAULT_INJECT,
which the test sets. Each rank writes what it saw to ``<folder>/<mode>.rank<r>.txt``.

* ``retry``: collective #2 fails in its transport (on the ranks the injection names);
  under ``fault="retry"`` it runs again, and the axis's later collectives (every kind,
  an async one, a barrier) run on Tessera's own algorithms with NumPy's results.
* ``raise``: the same failure under the default policy: TransportError on every rank.
* ``twice``: two failures under ``retry``: the second is a TransportError.
* ``mismatch``: the ranks make a mesh with different heartbeat intervals: a SettingError
  on every rank.
* ``lost``: rank 1 exits, stalls or freezes at collective #2 (the test's injection): rank
  0's diagnosis (RankExited; CollectiveTimeout naming a rank that does not answer but
  sends heartbeats; RankLost for one whose heartbeats stopped) and how long it took.
"""

from __future__ import annotations

import os
import sys
import time
import warnings

import numpy as np

import tessera
from tessera import dist
from tessera.errors import SettingError


def values(rank: int, n: int = 12) -> np.ndarray:
    return np.arange(n, dtype=np.float64) * (rank + 1) + rank


def retry(mesh, write) -> None:
    p, r = dist.size(), mesh.rank
    every = [values(q) for q in range(p)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = dist.all_reduce(values(r), axis="x")  # #1: the library's
        again = dist.all_reduce(values(r), axis="x")  # #2: fails, runs again
    shown = [w for w in caught if issubclass(w.category, dist.FaultWarning)]
    write(f"first {np.array_equal(first, sum(every))}")
    write(f"again {np.array_equal(again, sum(every))}")
    write(f"warnings {len(shown)}")
    write(f"health {mesh.health()['x']['path']} {mesh.health()['x']['failures']}")
    total = sum(every)
    scattered = dist.reduce_scatter(values(r), axis="x")
    write(f"reduce_scatter {np.array_equal(scattered, np.array_split(total, p)[r])}")
    gathered = dist.all_gather(np.full(2, r, np.int64), axis="x")
    write(f"all_gather {gathered.tolist() == [q for q in range(p) for _ in range(2)]}")
    root = dist.broadcast(values(r), axis="x", root=p - 1)
    write(f"broadcast {np.array_equal(root, values(p - 1))}")
    work = dist.all_reduce(values(r), axis="x", op="max", async_op=True)
    write(f"async {np.array_equal(work.wait(), np.max(every, axis=0))} {work.algorithm}")
    dist.barrier("x")
    write("done")


def raised(mesh, write) -> None:
    dist.all_reduce(values(mesh.rank), axis="x")
    start = time.monotonic()
    try:
        dist.all_reduce(values(mesh.rank), axis="x")
        write("no error")
    except dist.TransportError as e:
        write(f"TransportError {e.collective} {e.seq} {e.axis} {e.rank}")
        write(f"fast {time.monotonic() - start < 10}")
        write(str(e))
    health = mesh.health()["x"]
    write(f"health {health['path']} {health['failures']}")
    every = [values(q) for q in range(dist.size())]
    after = dist.all_reduce(values(mesh.rank), axis="x")
    write(f"after {np.array_equal(after, sum(every))}")


def twice(mesh, write) -> None:
    dist.all_reduce(values(mesh.rank), axis="x")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dist.all_reduce(values(mesh.rank), axis="x")  # #2: retried
    dist.all_reduce(values(mesh.rank), axis="x")  # #4 (the retry was #3)
    try:
        dist.all_reduce(values(mesh.rank), axis="x")  # #5: fails again
        write("no error")
    except dist.TransportError as e:
        write(f"TransportError {e.seq}")
        write(str(e))


def lost(mesh, write) -> None:
    dist.all_reduce(values(mesh.rank), axis="x")
    start = time.monotonic()
    try:
        dist.all_reduce(values(mesh.rank), axis="x")
        write("no error")
    except dist.RankExited as e:
        write(f"RankExited {e.missing}")
    except dist.RankLost as e:
        write(f"RankLost {e.missing}")
        write(str(e))
    except dist.CollectiveTimeout as e:
        write(f"CollectiveTimeout {e.missing}")
        write(str(e))
    write(f"after {time.monotonic() - start:.1f} s")
    write(f"health {mesh.health()['x']['heartbeats']}")
    if mesh.rank == 0:
        sys.stdout.flush()
        os._exit(0)  # rank 1 stalls for ever: the job ends with this rank


def mismatch(write) -> None:
    """Rank 0 asks for heartbeats every 10 s, the others every 5 s."""
    try:
        with tessera.config(dist_heartbeat="10" if dist.rank() == 0 else "5"):
            dist.Mesh(axes=("x",), shape=(dist.size(),))
        write("no error")
    except SettingError as e:
        write(f"SettingError {e}")


MODES = {"retry": retry, "raise": raised, "twice": twice, "lost": lost}


def main(mode: str, folder: str) -> None:
    with open(f"{folder}/{mode}.rank{dist.rank()}.txt", "w") as f:

        def write(line: str) -> None:
            f.write(line + "\n")
            f.flush()

        if mode == "mismatch":
            return mismatch(write)
        fault = "retry" if mode in ("retry", "twice") else None
        MODES[mode](dist.Mesh(axes=("x",), shape=(dist.size(),), fault=fault), write)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
