"""What the collectives' fingerprint checks cost, side by side: none, the default one (a
stamp inside an all_reduce's or reduce_scatter's message, the root's call in front of a
64 KB broadcast's; for the other collectives the fingerprint exchanged together with
the collective) and ``TESSERA_DIST_DEBUG=1`` (exchanged first).

    python -m bench.dist_check [--ranks 2] [--rounds 40]

Starts ``mpiexec -n RANKS`` running this file as the worker. On a 1-D mesh over every
rank the worker times ``dist.all_reduce`` of float32 messages (1 KB to 1 MB),
``dist.all_gather`` of a 1 KB block and ``broadcast``/``reduce_scatter`` of 1 KB, 64 KB and
256 KB with no check (``none``: ``channel.ALWAYS_CHECK`` off,
for this measurement only), the default check (``0``) and the debug one (``1``). An
all_gather carries its fingerprint with the block lengths it exchanges anyway, so for it
the two should be the same. The cases are interleaved: each round runs every case once,
in a new random order (the same on every rank). A case's sample is a batch of ``BATCH``
back-to-back calls after a barrier, divided by ``BATCH``; the sample's time is the
slowest rank's. The setting is switched between batches through the environment
(``tessera.config.refresh``), outside the clock, so the timed calls pay for nothing but
the collective. Prints the medians and the 10th percentiles (less moved by other work on
the machine) and, for each collective, check on / check off.
"""

from __future__ import annotations

import os
import random
import statistics
import subprocess
import sys
import time

KB = 2**10
SIZES = (1 * KB, 64 * KB, 256 * KB, 1024 * KB)
CHECKS = ("none", "0", "1")  # no check, the default one, TESSERA_DIST_DEBUG=1
BATCH = 50  # calls per sample: a 1 KB all_reduce takes microseconds, a timer read ~0.1


def worker(rounds: int) -> None:
    import numpy as np  # the parent imports none of these: it only starts mpiexec
    from mpi4py import MPI

    from tessera import dist
    from tessera.config import refresh
    from tessera.mesh import channel

    world = MPI.COMM_WORLD
    dist.Mesh(axes=("x",), shape=(dist.size(),))
    cases = {}
    for nbytes in SIZES:
        x = np.ones(nbytes // 4, np.float32)
        for check in CHECKS:
            cases[(f"all_reduce {nbytes // KB} KB", check)] = lambda x=x: dist.all_reduce(
                x, axis="x"
            )
    block = np.ones(KB // 4, np.float32)
    big = np.ones(64 * KB // 4, np.float32)
    for check in CHECKS:
        cases[("all_gather 1 KB", check)] = lambda: dist.all_gather(block, axis="x")
    for x in (block, big, np.ones(256 * KB // 4, np.float32)):
        for check in CHECKS:
            size = f"{x.nbytes // KB} KB"
            cases[(f"broadcast {size}", check)] = lambda x=x: dist.broadcast(x, axis="x")
            cases[(f"reduce_scatter {size}", check)] = lambda x=x: dist.reduce_scatter(x, axis="x")
    times = {name: [] for name in cases}
    for r in range(rounds + 2):  # two warm-up rounds
        order = list(cases)
        random.Random(r).shuffle(order)
        for name in order:
            os.environ["TESSERA_DIST_DEBUG"] = "1" if name[1] == "1" else "0"
            channel.ALWAYS_CHECK = name[1] != "none"
            refresh()
            cases[name]()
            world.Barrier()
            t0 = time.perf_counter()
            for _ in range(BATCH):
                cases[name]()
            seconds = world.allreduce((time.perf_counter() - t0) / BATCH, op=MPI.MAX)
            if r >= 2:
                times[name].append(seconds)
    if world.Get_rank() == 0:
        report(times, world.Get_size(), rounds)


def report(times: dict, ranks: int, rounds: int) -> None:
    print(f"{ranks} ranks, {rounds} rounds of {BATCH} calls per case (slowest rank)")
    for label, statistic in (("medians", statistics.median), ("10th percentiles", _p10)):
        table = {name: statistic(ts) for name, ts in times.items()}
        head = f"{label:<21} {'no check':>10} {'default':>10} {'debug':>10}"
        print(f"{head} {'default/none':>13} {'debug/none':>11}")
        for what in dict.fromkeys(name[0] for name in table):
            none, default, debug = (table[(what, c)] for c in CHECKS)
            cells = " ".join(f"{t * 1e6:8.2f}us" for t in (none, default, debug))
            print(f"{what:<21} {cells} {default / none:12.3f}x {debug / none:10.3f}x")


def _p10(samples: list) -> float:
    """The 10th percentile: on a machine that other work shares, the samples it slowed
    least (the median moves with the load)."""
    return sorted(samples)[len(samples) // 10]


def main() -> None:
    if "--worker" in sys.argv:
        worker(int(sys.argv[sys.argv.index("--worker") + 1]))
        return
    from tessera.runtime.world import find_mpiexec

    ranks = int(sys.argv[sys.argv.index("--ranks") + 1]) if "--ranks" in sys.argv else 2
    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 40
    command = [find_mpiexec(), "-n", str(ranks), sys.executable, __file__, "--worker"]
    subprocess.run(command + [str(rounds)], check=True, timeout=600)


if __name__ == "__main__":
    main()
