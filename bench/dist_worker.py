"""The ranks of ``dist_allreduce``: run under ``mpiexec -n N``, not on its own.

    mpiexec -n 2 python bench/dist_worker.py RESULT.json [--quick]

On a 1-D mesh ``("x",)`` over every rank, times Tessera's all-reduce beside raw mpi4py on
the same buffers, interleaved in one run, and writes every repetition's time (the slowest
rank's) to ``RESULT.json`` from rank 0. Each case is checked against the exact sum first
(the inputs are small integers, so every float32 sum is exact in any order).

Timing: each timed call is preceded by a barrier on COMM_WORLD (not timed), so every rank
starts together; a repetition's time is the largest over the ranks (the collective is done
when the last rank has its result); a case that returns new arrays frees them after the
clock stops. Each round runs the cases in a new random order (seeded by the round number,
so the same on every rank), so slow phases of the shared machine hit every case alike. For
the message sizes, each timed call follows one untimed call of the same case (see
``interleaved``): what one case leaves behind changes what the next call costs.
"""

from __future__ import annotations

import json
import random
import sys
import time

import numpy as np
from mpi4py import MPI

import tessera
from tessera import dist

KB, MB = 2**10, 2**20
SIZES = (1 * KB, 16 * KB, 256 * KB, 1 * MB, 4 * MB, 16 * MB, 64 * MB)
QUICK_SIZES = (1 * KB, 256 * KB, 4 * MB)
COALESCED_TENSORS = 1000
QUICK_COALESCED_TENSORS = 200
COALESCED_MAX_ELEMENTS = 4096
COALESCED_BUDGET_S = 20.0  # aimed at for the timed rounds of the 1,000 tensors (3 to 15)


def rounds(nbytes: int, quick: bool) -> tuple[int, int]:
    """(warm-up rounds, timed rounds) for a message of ``nbytes``."""
    if quick:
        return 1, 5
    if nbytes <= 1 * MB:
        return 3, 30
    if nbytes <= 4 * MB:  # the 1.1x target's sizes: enough rounds for a steady median
        return 2, 40
    if nbytes <= 16 * MB:
        return 1, 25
    return 1, 11


def label(nbytes: int) -> str:
    return f"{nbytes // MB} MB" if nbytes >= MB else f"{nbytes // KB} KB"


def interleaved(cases: dict, warmup: int, reps: int, prime: bool) -> dict[str, list[float]]:
    """Each rank's seconds per call of every case, first (warm-up) rounds included.

    With ``prime``, each timed call follows one untimed call of the same case, so that it
    pays its own steady state rather than what the previous case left behind: here,
    freeing a large array that MPI has received into makes the next large MPI call, of any
    case, up to 1.5x slower.
    """
    world = MPI.COMM_WORLD
    names = list(cases)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(warmup + reps):
        order = names[:]
        random.Random(r).shuffle(order)  # the same order on every rank
        for name in order:
            if prime:
                world.Barrier()
                result = cases[name]()
                del result
            world.Barrier()
            t0 = time.perf_counter()
            result = cases[name]()
            times[name].append(time.perf_counter() - t0)
            del result  # a new array is freed after the clock stops
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

    def raw_new() -> np.ndarray:  # what returning a new array costs raw MPI
        result = np.empty_like(x)
        world.Allreduce(x, result, op=MPI.SUM)
        return result

    cases = {
        "mpi4py": lambda: world.Allreduce(x, raw_out, op=MPI.SUM),
        "mpi4py new array": raw_new,
        "tessera": lambda: dist.all_reduce(x, axis="x"),
        "tessera out=": lambda: dist.all_reduce(x, axis="x", out=tessera_out),
        "tessera deterministic": lambda: dist.all_reduce(x, axis="x", deterministic=True),
        # the algorithms (MESH.md): "tessera" above is algorithm="auto"
        "tessera library": lambda: dist.all_reduce(x, axis="x", algorithm="library"),
        "tessera ring": lambda: dist.all_reduce(x, axis="x", algorithm="ring"),
        "tessera rd": lambda: dist.all_reduce(x, axis="x", algorithm="rd"),
        "tessera tree": lambda: dist.all_reduce(x, axis="x", algorithm="tree"),
    }
    first = {}  # the first call of each case, timed, then checked
    for name, fn in cases.items():
        world.Barrier()
        t0 = time.perf_counter()
        got = fn()
        first[name] = world.allreduce(time.perf_counter() - t0, op=MPI.MAX)
        got = {"mpi4py": raw_out, "tessera out=": tessera_out}.get(name, got)
        check(name, got, want)
    warmup, reps = rounds(nbytes, quick)
    times = slowest(interleaved(cases, warmup, reps, prime=True))
    if times is None:
        return []
    return [
        {
            "kernel": f"all_reduce f32, {n} ranks",
            "size": label(nbytes),
            "bytes": nbytes,
            "tool": name,
            "first_s": first[name],
            "times": ts[warmup:],
        }
        for name, ts in times.items()
    ]


def coalesced_cases(quick: bool) -> list[dict]:
    world, n, rank = MPI.COMM_WORLD, dist.size(), dist.rank()
    rng = np.random.default_rng(0)  # the same sizes on every rank
    count = QUICK_COALESCED_TENSORS if quick else COALESCED_TENSORS
    sizes = rng.integers(1, COALESCED_MAX_ELEMENTS + 1, count)
    tensors = [(np.arange(c) % 7 + rank).astype(np.float32) for c in sizes]
    wants = [(np.arange(c) % 7 * n + n * (n - 1) // 2).astype(np.float32) for c in sizes]
    outs = [np.empty_like(t) for t in tensors]
    nbytes = sum(t.nbytes for t in tensors)

    def raw_loop() -> None:
        for t, o in zip(tensors, outs):
            world.Allreduce(t, o, op=MPI.SUM)

    def tessera_loop() -> list:
        return [dist.all_reduce(t, axis="x") for t in tensors]

    def coalesced() -> list:
        return dist.all_reduce_coalesced(tensors, axis="x", bucket_mb=16)

    def coalesced_via_mpi() -> list:  # as across nodes: no shared memory
        with tessera.config(dist_shared_memory="off"):
            return dist.all_reduce_coalesced(tensors, axis="x", bucket_mb=16)

    # The checked first calls are the warm-up; they also give the time of one round,
    # which sets the number of rounds (the same on every rank: the slowest rank's).
    first = {}
    for name, fn, results in (
        ("tessera coalesced", coalesced, None),
        ("tessera coalesced via MPI", coalesced_via_mpi, None),
        ("tessera loop", tessera_loop, None),
        ("mpi4py loop", raw_loop, outs),
    ):
        world.Barrier()
        t0 = time.perf_counter()
        got = fn()
        first[name] = world.allreduce(time.perf_counter() - t0, op=MPI.MAX)
        for i, (g, want) in enumerate(zip(results or got, wants)):
            check(f"{name}, tensor {i}", g, want)
    per_round = sum(first.values())
    reps = 3 if quick else int(min(15, max(3, COALESCED_BUDGET_S / per_round)))
    cases = {
        "mpi4py loop": raw_loop,
        "tessera loop": tessera_loop,
        "tessera coalesced": coalesced,
        "tessera coalesced via MPI": coalesced_via_mpi,
    }
    times = slowest(interleaved(cases, 0, reps, prime=False))
    if times is None:
        return []
    return [
        {
            "kernel": f"{count} tensors f32, {n} ranks",
            "size": f"{nbytes / MB:.1f} MB",
            "bytes": nbytes,
            "tool": name,
            "first_s": first[name],
            "times": ts,
        }
        for name, ts in times.items()
    ]


def overlap_cases(quick: bool) -> list[dict]:
    """An MLP's forward and backward pass (``graph.value_and_grad``) on each rank's own
    batch, its gradients averaged over the ranks: with ``reduce=dist.GradReduce`` (buckets
    started while the backward pass runs) against the backward pass followed by
    ``all_reduce_coalesced`` of every gradient (one reduction after it)."""
    from tessera import graph, op

    n = dist.size()
    batch, width, hidden = (64, 256, 1024) if quick else (256, 1024, 4096)

    def loss(x, w1, w2, w3):
        h = op.relu(op.matmul(op.relu(op.matmul(x, w1)), w2))
        return op.mean(op.matmul(h, w3) * op.matmul(h, w3))

    rng = np.random.default_rng(dist.rank())
    x = rng.standard_normal((batch, width)).astype(np.float32)
    weights = [
        (np.random.default_rng(i).standard_normal(shape) * 0.02).astype(np.float32)
        for i, shape in enumerate([(width, hidden), (hidden, hidden), (hidden, width)])
    ]
    plain = graph.value_and_grad(loss, argnums=(1, 2, 3))
    reducer = dist.GradReduce(axis="x", op="mean", bucket_mb=4)
    overlapped = graph.value_and_grad(loss, argnums=(1, 2, 3), reduce=reducer)

    def after() -> list:
        _, grads = plain(x, *weights)
        reduced = dist.all_reduce_coalesced(list(grads), axis="x", bucket_mb=4)
        return [g / np.float32(n) for g in reduced]

    def during() -> list:
        return list(overlapped(x, *weights)[1])

    for a, b in zip(after(), during()):  # the same averages, up to the order of the sums
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    cases = {"backward then all_reduce": after, "GradReduce during backward": during}
    warmup, reps = (1, 5) if quick else (2, 15)
    times = slowest(interleaved(cases, warmup, reps, prime=False))
    if times is None:
        return []
    nbytes = sum(w.nbytes for w in weights)
    return [
        {
            "kernel": f"MLP fwd+bwd {batch}x{width}-{hidden}, {n} ranks",
            "size": f"{nbytes / MB:.1f} MB",
            "bytes": nbytes,
            "tool": name,
            "first_s": 0.0,
            "times": ts[warmup:],
        }
        for name, ts in times.items()
    ]


def main() -> None:
    path, quick = sys.argv[1], "--quick" in sys.argv[2:]
    mesh = dist.Mesh(axes=("x",), shape=(dist.size(),))
    dist.topology(mesh, measure=True)  # fitted links and timings: what "auto" chooses by
    start = time.perf_counter()
    results = []
    for nbytes in QUICK_SIZES if quick else SIZES:
        results += allreduce_cases(nbytes, quick)
    results += coalesced_cases(quick)
    results += overlap_cases(quick)
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
