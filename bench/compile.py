"""Cold compile times of the examples' kernels (issue "cold compiles in seconds").

    python -m bench.compile [--rounds 1] [EXAMPLE ...]
    python -m bench.compile --sweep [--rounds 3] [--workers 2]
    python -m bench.compile --batch CASE [--rounds 3] [--workers 2]

Runs each example script (default: every one that needs neither MPI nor a GPU) in a new
process with an empty ``TESSERA_CACHE_DIR``, and reads how long each kernel took to
compile from Tessera's log ("compiled kernel 'k' for cpu (parallel variant) in 5.15 s":
the Numba compile alone, not the process start or the run). Prints per example the
wall time of the process and each kernel's compile time, then the targets: every kernel
≤ 10 s, the median ≤ 3 s. Writes the rows to ``results/compile.json`` (one JSON record a
line, as the other benchmarks).

``--sweep`` times instead one cold autotune sweep of 8 configs (bench/autotune_sweep.py)
in new processes with empty caches, alternating ``TESSERA_COMPILE_WORKERS=1`` (each config
compiled in turn, in the process) and ``--workers N`` (the configs compiled side by side:
the process and N-1 worker processes), round after round, so a busy machine slows both
alike; prints the median wall time of the processes and of the sweep for each, and writes
them to ``results/compile_sweep.json``.

``--batch CASE`` does the same for one cold batch of bench/cold_batches.py: a graph
module's kernels on the CPU (``mlp``, ``attention``) or a batch of CUDA cubins made
without a GPU (``gemm_cubins``, ``attention_cubins``).
"""

from __future__ import annotations

import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import RESULTS

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = (
    "attention",
    "mlp_training",
    "flash_attention",
    "flash_attention_backward",
    "gemm_tiles",
    "softmax",
    "matmul",
    "block_sum",
    "histogram",
    "cpu_launch_shapes",
    "profile_matmul",
)
LINE = re.compile(r"compiled kernel '([^']+)' for (.+?) in ([0-9.]+) s")
CHILD = """
import logging, runpy, sys
logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
sys.argv = sys.argv[1:]  # the example sees itself as argv[0], as when run directly
runpy.run_path(sys.argv[0], run_name="__main__")
"""
TARGET_EACH_S, TARGET_MEDIAN_S = 10.0, 3.0


def run_example(name: str) -> tuple[float, list[tuple[str, str, float]]]:
    """(wall seconds, [(kernel, where, compile seconds)]) of one cold run."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TESSERA_CACHE_DIR=cache)
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(ROOT / "examples" / f"{name}.py")],
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
            cwd=ROOT,
        )
        wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"examples/{name}.py failed:\n{done.stderr[-3000:]}")
    kernels = [(k, where, float(s)) for k, where, s in LINE.findall(done.stderr)]
    return wall, kernels


def run_sweep(workers: int, child: tuple = ("bench.autotune_sweep",)) -> dict:
    """One cold sweep (or batch: ``child``, the module and its arguments) in a new process
    with ``workers`` compilers: its record, with the process's wall seconds."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TESSERA_CACHE_DIR=cache, TESSERA_COMPILE_WORKERS=str(workers))
        load = os.getloadavg()[0]
        used = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", *child],
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
            cwd=ROOT,
        )
        wall = time.perf_counter() - start
        now = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(child)} failed:\n{done.stderr[-3000:]}")
    cpu = now.ru_utime + now.ru_stime - used.ru_utime - used.ru_stime  # its workers' too
    record = json.loads(done.stdout.splitlines()[-1])
    return {"workers": workers, "wall_s": wall, "cpu_s": cpu, "load_before": load, **record}


def sweep_main(rounds: int, workers: int, case: str | None = None) -> None:
    child = ("bench.autotune_sweep",) if case is None else ("bench.cold_batches", case)
    timed = "sweep_s" if case is None else "batch_s"
    rows = []
    for r in range(rounds):
        for count in (1, workers) if r % 2 == 0 else (workers, 1):
            row = run_sweep(count, child)
            row["sweep_s"] = row[timed]
            rows.append({"round": r, **row})
            print(
                f"round {r}  workers {count}  {row['wall_s']:6.2f} s wall  sweep "
                f"{row['sweep_s']:6.2f} s  CPU {row['cpu_s']:6.2f} s  compiled here "
                f"{row['compiled_here']}, in workers {row['compiled_in_workers']}  (load "
                f"{row['load_before']:.1f} before)",
                flush=True,
            )
    sums = {row["checksum"] for row in rows}
    if len(sums) != 1:
        raise SystemExit(f"the sweeps computed different results: {sorted(sums)}")
    medians = {}
    for count in (1, workers):
        mine = [row for row in rows if row["workers"] == count]
        medians[count] = (
            statistics.median(row["wall_s"] for row in mine),
            statistics.median(row["sweep_s"] for row in mine),
            statistics.median(row["cpu_s"] for row in mine),
        )
        print(
            f"TESSERA_COMPILE_WORKERS={count}: median {medians[count][0]:.2f} s wall, "
            f"{medians[count][1]:.2f} s sweep, {medians[count][2]:.2f} s CPU ({len(mine)} runs)"
        )
    print(
        f"workers={workers} / serial: {medians[workers][0] / medians[1][0]:.2f} (wall), "
        f"{medians[workers][1] / medians[1][1]:.2f} (sweep), on {os.cpu_count()} CPUs"
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = "compile_sweep" if case is None else "compile_batch"
    with open(RESULTS / f"{name}.json", "a") as f:
        for row in rows:
            f.write(json.dumps({"benchmark": name, "cpus": os.cpu_count(), **row}))
            f.write("\n")


def main() -> None:
    args = sys.argv[1:]
    if "--sweep" in args or "--batch" in args:
        rounds = int(args[args.index("--rounds") + 1]) if "--rounds" in args else 3
        workers = int(args[args.index("--workers") + 1]) if "--workers" in args else 2
        case = args[args.index("--batch") + 1] if "--batch" in args else None
        sweep_main(rounds, workers, case)
        return
    rounds = 1
    if "--rounds" in args:
        i = args.index("--rounds")
        rounds = int(args[i + 1])
        del args[i : i + 2]
    names = args or list(EXAMPLES)
    rows = []
    for name in names:
        for r in range(rounds):
            wall, kernels = run_example(name)
            rows.append({"example": name, "round": r, "wall_s": wall, "kernels": kernels})
            compiled = ", ".join(f"{k} {s:.2f} s" for k, _, s in kernels) or "nothing compiled"
            print(f"{name:<18} {wall:7.2f} s wall   {compiled}", flush=True)
    times = [s for row in rows for _, _, s in row["kernels"]]
    if times:
        worst = max(times)
        median = statistics.median(times)
        print(
            f"\n{len(times)} compiles: median {median:.2f} s (target ≤ {TARGET_MEDIAN_S:g} s), "
            f"slowest {worst:.2f} s (target ≤ {TARGET_EACH_S:g} s each)"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    with open(RESULTS / "compile.json", "a") as f:
        for row in rows:
            f.write(json.dumps({"benchmark": "compile", "cpus": os.cpu_count(), **row}) + "\n")


if __name__ == "__main__":
    main()
