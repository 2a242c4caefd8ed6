"""Where a reduce_scatter's and a broadcast's check can travel, in plain mpi4py (no
Tessera): the layouts bench/dist_check.py's numbers were chosen from.

    python -m bench.stamp_layouts [--rounds 60]

Starts ``mpiexec -n 2`` running this file as the worker, which times 64 KB of float32:

* ``rs plain``: ``Ireduce_scatter_block`` of the caller's array (no check);
* ``rs copy+stamp``: the blocks copied into a buffer with a stamp after each, reduced in
  place (what Tessera does);
* ``rs side all-reduce``: the caller's array reduce-scattered as it is, with a 16-byte
  all-reduce (max of the fingerprint and its negation) started beside it on another
  communicator, both polled together;
* ``bcast plain``: ``Ibcast`` of a copy of the array on the root, of a new array on the
  receivers (what Tessera's plain broadcast moves);
* ``bcast header``: 128 bytes in front of the data (what Tessera does from 64 KB);
* ``bcast side all-reduce``: the plain one with the 16-byte all-reduce beside it.

Interleaved rounds in a new random order each; a sample is 50 back-to-back calls after a
barrier, per call, the slowest rank's; medians and the ratio to the plain call.
"""

from __future__ import annotations

import os
import random
import statistics
import subprocess
import sys
import time

BATCH = 50


def worker(rounds: int) -> None:
    import numpy as np
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    n = world.Get_size()
    data, side = world.Dup(), world.Dup()
    x = np.ones(16384, np.float32)
    items = x.size // n
    stamp = np.zeros(8, np.float32)
    mine = np.array([12345, -12345], np.int64)

    def poll(requests):
        while requests:
            requests = [r for r in requests if not r.Test()]
            os.sched_yield()

    def rs_plain():
        got = np.empty(items, np.float32)  # buffers held until the request completes
        poll([data.Ireduce_scatter_block(x, got, MPI.SUM)])

    def rs_copy():
        buffer = np.empty((n, items + stamp.size), np.float32)
        buffer[:, :items] = x.reshape(n, items)
        buffer[:, items:] = stamp
        poll([data.Ireduce_scatter_block(MPI.IN_PLACE, buffer, MPI.SUM)])

    def rs_side():
        got, block = np.empty(2, np.int64), np.empty(items, np.float32)
        request = data.Ireduce_scatter_block(x, block, MPI.SUM)
        poll([request, side.Iallreduce(mine, got, MPI.MAX)])

    def bcast_plain():
        out = x.copy() if world.Get_rank() == 0 else np.empty_like(x)
        poll([data.Ibcast(out, root=0)])

    def bcast_header():
        buffer = np.empty(128 + x.nbytes, np.uint8)
        if world.Get_rank() == 0:
            buffer[128:].view(np.float32)[...] = x
        poll([data.Ibcast(buffer, root=0)])

    def bcast_side():
        got = np.empty(2, np.int64)
        out = x.copy() if world.Get_rank() == 0 else np.empty_like(x)
        poll([data.Ibcast(out, root=0), side.Iallreduce(mine, got, MPI.MAX)])

    cases = {
        "rs plain": rs_plain,
        "rs copy+stamp": rs_copy,
        "rs side all-reduce": rs_side,
        "bcast plain": bcast_plain,
        "bcast header": bcast_header,
        "bcast side all-reduce": bcast_side,
    }
    times = {name: [] for name in cases}
    for r in range(rounds + 2):  # two warm-up rounds
        order = list(cases)
        random.Random(r).shuffle(order)
        for name in order:
            cases[name]()
            world.Barrier()
            t0 = time.perf_counter()
            for _ in range(BATCH):
                cases[name]()
            seconds = world.allreduce((time.perf_counter() - t0) / BATCH, op=MPI.MAX)
            if r >= 2:
                times[name].append(seconds)
    if world.Get_rank() == 0:
        medians = {name: statistics.median(ts) for name, ts in times.items()}
        print(f"{n} ranks, {rounds} rounds of {BATCH} calls, 64 KB float32; medians")
        for name, t in medians.items():
            plain = medians["rs plain" if name.startswith("rs") else "bcast plain"]
            print(f"{name:<22} {t * 1e6:8.2f}us {t / plain:7.3f}x")


def main() -> None:
    if "--worker" in sys.argv:
        worker(int(sys.argv[sys.argv.index("--worker") + 1]))
        return
    from tessera.runtime.world import find_mpiexec

    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 60
    command = [find_mpiexec(), "-n", "2", sys.executable, __file__, "--worker", str(rounds)]
    subprocess.run(command, check=True, timeout=600)


if __name__ == "__main__":
    main()
