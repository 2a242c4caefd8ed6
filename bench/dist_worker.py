"""The ranks of ``dist_allreduce``: run under ``mpiexec -n N``, not on its own.

    mpiexec -n 2 python bench/dist_worker.py RESULT.json [--quick]

On a 1-D mesh ``("x",)`` over every rank, times Tessera's all-reduce beside raw mpi4py on
the same buffers, interleaved in one run, and writes every repetition's time (the slowest
rank's) to ``RESULT.json`` from rank 0. Each case is checked against the exact sum first
(the inputs are small integers, so every float32 sum is exact in any order).

Timing: each timed call is preceded by a barrier on COMM_WORLD (not timed), so every rank
starts together; a repetition's time is the largest over the ranks (the collective is done
when the last rank has its result). Each round runs the cases in a rotated order (A B C D,
B C D A, ...), so slow phases of the shared machine hit every case alike.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
from mpi4py import MPI

from tessera import dist

KB, MB = 2**10, 2**20
SIZES = (1 * KB, 16 * KB, 256 * KB, 1 * MB, 4 * MB, 16 * MB, 64 * MB)
QUICK_SIZES = (1 * KB, 256 * KB, 4 * MB)
COALESCED_TENSORS = 1000
COALESCED_MAX_ELEMENTS = 4096


def rounds(nbytes: int, quick: bool) -> tuple[int, int]:
    """(warm-up rounds, timed rounds) for a message of ``nbytes``."""
    if quick:
        return 1, 5
    if nbytes <= 1 * MB:
        return 3, 30
    if nbytes <= 4 * MB:
        return 2, 15
    if nbytes <= 16 * MB:
        return 1, 9
    return 1, 5


def label(nbytes: int) -> str:
    return f"{nbytes // MB} MB" if nbytes >= MB else f"{nbytes // KB} KB"


def interleaved(cases: dict, warmup: int, reps: int) -> dict[str, list[float]]:
    """Each rank's seconds per call of every case, first (warm-up) rounds included."""
    world = MPI.COMM_WORLD
    names = list(cases)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(warmup + reps):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            world.Barrier()
            t0 = time.perf_counter()
            cases[name]()
            times[name].append(time.perf_counter() - t0)
    return times


def slowest(times: dict[str, list[float]]) -> dict[str, list[float]]:
    """Per case and round, the largest time over the ranks (on rank 0; None elsewhere)."""
    everyone = MPI.COMM_WORLD.gather(times, root=0)
    if everyone is None:
        return None
    return {name: [max(ts) for ts in zip(*(t[name] for t in everyone))] for name in times}


def check(what: str, got, want) -> None:
    if not np.array_equal(got, want):
        bad = int(np.flatnonzero(got != want)[0])
        raise AssertionError(
            f"{what} on rank {dist.rank()} is wrong at {bad}: {got[bad]} != {want[bad]}"
        )


def allreduce_cases(nbytes: int, quick: bool) -> list[dict]:
    world, n, rank = MPI.COMM_WORLD, dist.size(), dist.rank()
    count = nbytes // 4
    base = (np.arange(count) % 13).astype(np.float32)
    x = base + np.float32(rank)
    want = base * n + np.float32(n * (n - 1) // 2)
    raw_out = np.empty_like(x)
    tessera_out = np.empty_like(x)

    world.Allreduce(x, raw_out, op=MPI.SUM)
    check("mpi4py Allreduce", raw_out, want)
    check("dist.all_reduce", dist.all_reduce(x, axis="x"), want)
    dist.all_reduce(x, axis="x", out=tessera_out)
    check("dist.all_reduce(out=)", tessera_out, want)
    check("dist.all_reduce(deterministic=True)", dist.all_reduce(x, "x", deterministic=True), want)

    cases = {
        "mpi4py": lambda: world.Allreduce(x, raw_out, op=MPI.SUM),
        "tessera": lambda: dist.all_reduce(x, axis="x"),
        "tessera out=": lambda: dist.all_reduce(x, axis="x", out=tessera_out),
        "tessera deterministic": lambda: dist.all_reduce(x, axis="x", deterministic=True),
    }
    warmup, reps = rounds(nbytes, quick)
    times = slowest(interleaved(cases, warmup, reps))
    if times is None:
        return []
    return [
        {
            "kernel": f"all_reduce f32, {n} ranks",
            "size": label(nbytes),
            "bytes": nbytes,
            "tool": name,
            "first_s": ts[0],
            "times": ts[warmup:],
        }
        for name, ts in times.items()
    ]


def coalesced_cases(quick: bool) -> list[dict]:
    world, n, rank = MPI.COMM_WORLD, dist.size(), dist.rank()
    rng = np.random.default_rng(0)  # the same sizes on every rank
    counts = rng.integers(1, COALESCED_MAX_ELEMENTS + 1, COALESCED_TENSORS)
    tensors = [(np.arange(c) % 7 + rank).astype(np.float32) for c in counts]
    wants = [(np.arange(c) % 7 * n + n * (n - 1) // 2).astype(np.float32) for c in counts]
    outs = [np.empty_like(t) for t in tensors]
    nbytes = sum(t.nbytes for t in tensors)

    for i, (got, want) in enumerate(
        zip(dist.all_reduce_coalesced(tensors, axis="x", bucket_mb=16), wants)
    ):
        check(f"all_reduce_coalesced item {i}", got, want)
    for i, (t, want) in enumerate(zip(tensors, wants)):
        check(f"dist.all_reduce of tensor {i}", dist.all_reduce(t, axis="x"), want)

    def raw_loop() -> None:
        for t, o in zip(tensors, outs):
            world.Allreduce(t, o, op=MPI.SUM)

    cases = {
        "mpi4py loop": raw_loop,
        "tessera loop": lambda: [dist.all_reduce(t, axis="x") for t in tensors],
        "tessera coalesced": lambda: dist.all_reduce_coalesced(tensors, axis="x", bucket_mb=16),
    }
    warmup, reps = (1, 3) if quick else (1, 7)
    times = slowest(interleaved(cases, warmup, reps))
    if times is None:
        return []
    return [
        {
            "kernel": f"{COALESCED_TENSORS} tensors f32, {n} ranks",
            "size": f"{nbytes / MB:.1f} MB",
            "bytes": nbytes,
            "tool": name,
            "first_s": ts[0],
            "times": ts[warmup:],
        }
        for name, ts in times.items()
    ]


def main() -> None:
    path, quick = sys.argv[1], "--quick" in sys.argv[2:]
    dist.Mesh(axes=("x",), shape=(dist.size(),))
    start = time.perf_counter()
    results = []
    for nbytes in QUICK_SIZES if quick else SIZES:
        results += allreduce_cases(nbytes, quick)
    results += coalesced_cases(quick)
    if dist.rank() == 0:
        report = {
            "ranks": dist.size(),
            "mpi": MPI.Get_library_version().splitlines()[0].strip(),
            "seconds": time.perf_counter() - start,
            "cases": results,
        }
        with open(path, "w") as f:
            json.dump(report, f)


if __name__ == "__main__":
    main()
