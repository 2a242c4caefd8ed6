"""Timing, checking and reporting shared by the benchmarks.

Every benchmark builds a list of :class:`Case` (one per tool) for a kernel and a size and
hands it to :func:`measure`, which

1. calls each case once, timed (``first_call_s``: includes JIT compilation when this is the
   first call of that function in the process for these argument types), and checks the
   case's output against the NumPy reference: a wrong result raises :class:`BenchError`
   before anything is timed;
2. warms each case up;
3. times the cases interleaved in one process (A B C, B C A, C A B, ...), so that drift in
   the machine's speed hits every tool alike, and reports medians.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numba
import numpy as np

# where the JSON records and bench.png go (BENCH_RESULTS moves them, e.g. for a test)
RESULTS = Path(os.environ.get("BENCH_RESULTS") or Path(__file__).resolve().parent / "results")


class BenchError(AssertionError):
    """A benchmark computed a wrong result; its timings would mean nothing."""


@dataclass
class Case:
    """One tool running one kernel at one size.

    ``run`` is the timed call. ``output`` returns what ``run`` computed and ``expected`` is
    the NumPy reference it must match (``rtol``/``atol``); ``reset`` restores the inputs
    before the checked first call. ``inner`` is how many operations one ``run`` performs
    (times are reported per operation); then ``first``, one operation, is what the first
    call times instead of ``run``.
    """

    tool: str
    run: Callable[[], object]
    output: Callable[[], object] | None = None
    expected: object = None
    rtol: float = 1e-5
    atol: float = 0.0
    reset: Callable[[], None] | None = None
    inner: int = 1
    first: Callable[[], object] | None = None


@dataclass
class Record:
    bench: str
    tool: str
    kernel: str
    size: str
    median_s: float
    min_s: float
    max_s: float
    reps: int
    first_call_s: float
    gbps: float | None = None
    gflops: float | None = None
    quick: bool = False
    threads: int = field(default_factory=numba.get_num_threads)
    threading: str = field(default_factory=lambda: threading_layer())
    machine: str = field(default_factory=lambda: f"{platform.node()} {platform.machine()}")


@dataclass
class Settings:
    budget_s: float  # time spent in the timed loop, per kernel and size
    min_reps: int
    max_reps: int
    warmup: int


FULL = Settings(budget_s=3.0, min_reps=7, max_reps=60, warmup=2)
QUICK = Settings(budget_s=0.15, min_reps=3, max_reps=15, warmup=1)


def threading_layer() -> str:
    """Numba's threading layer and OpenMP wait policy, e.g. ``omp/PASSIVE``."""
    try:
        layer = numba.threading_layer()
    except ValueError:  # no parallel function has run yet
        layer = "none"
    return f"{layer}/{os.environ.get('OMP_WAIT_POLICY', 'default')}"


def settings(quick: bool) -> Settings:
    return QUICK if quick else FULL


def check(bench: str, kernel: str, case: Case) -> None:
    if case.output is None:
        return
    got = np.asarray(case.output(), dtype=np.float64)
    want = np.asarray(case.expected, dtype=np.float64)
    if got.shape != want.shape:
        raise BenchError(
            f"{bench}/{kernel}: {case.tool} returned shape {got.shape}, expected {want.shape}"
        )
    if not np.allclose(got, want, rtol=case.rtol, atol=case.atol, equal_nan=True):
        err = np.abs(got - want)
        worst = tuple(int(i) for i in np.unravel_index(np.nanargmax(err), err.shape))
        raise BenchError(
            f"{bench}/{kernel}: {case.tool} is wrong: max |error| "
            f"{np.nanmax(err):.3g} at {worst} (got {got[worst]:.7g}, expected "
            f"{want[worst]:.7g}; rtol={case.rtol}, atol={case.atol})"
        )


def measure(
    bench: str,
    kernel: str,
    size: str,
    cases: list[Case],
    quick: bool,
    nbytes: float | None = None,
    flops: float | None = None,
) -> list[Record]:
    """Check, warm up and time ``cases`` interleaved; one :class:`Record` per case."""
    cfg = settings(quick)
    first = {}
    for case in cases:
        if case.reset is not None:
            case.reset()
        t0 = time.perf_counter()
        (case.first or case.run)()
        first[case.tool] = time.perf_counter() - t0
        check(bench, kernel, case)
    estimate = {}
    for case in cases:
        t0 = time.perf_counter()
        for _ in range(cfg.warmup):
            case.run()
        estimate[case.tool] = (time.perf_counter() - t0) / cfg.warmup
    per_round = sum(estimate.values()) or 1e-9
    reps = int(min(cfg.max_reps, max(cfg.min_reps, cfg.budget_s / per_round)))
    times: dict[str, list[float]] = {c.tool: [] for c in cases}
    for r in range(reps):
        k = r % len(cases)
        for case in cases[k:] + cases[:k]:
            t0 = time.perf_counter()
            case.run()
            times[case.tool].append((time.perf_counter() - t0) / case.inner)
    records = []
    for case in cases:
        ts = times[case.tool]
        med = statistics.median(ts)
        records.append(
            Record(
                bench=bench,
                tool=case.tool,
                kernel=kernel,
                size=size,
                median_s=med,
                min_s=min(ts),
                max_s=max(ts),
                reps=reps,
                first_call_s=first[case.tool],
                gbps=nbytes / med / 1e9 if nbytes else None,
                gflops=flops / med / 1e9 if flops else None,
                quick=quick,
            )
        )
    return records


# --- results files and the table -------------------------------------------------------


def save(bench: str, records: list[Record]) -> Path:
    """Write ``records`` as JSON lines to ``results/<bench>.json`` (replacing the last run)."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{bench}.json"
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    with path.open("w") as f:
        for rec in records:
            f.write(json.dumps({**asdict(rec), "time": stamp}) + "\n")
    return path


def load(bench: str) -> list[dict]:
    path = RESULTS / f"{bench}.json"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def fmt_time(s: float) -> str:
    if s >= 1.0:
        return f"{s:.3g} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} µs"


HEAD = ("bench", "kernel", "size", "tool", "median", "min", "max", "reps", "rate", "first call")


def rate(rec: dict) -> str:
    if rec["gbps"] is not None:
        return f"{rec['gbps']:.3g} GB/s"
    if rec["gflops"] is not None:
        return f"{rec['gflops']:.3g} GFLOP/s"
    return "-"


# where ``baseline`` did not run, ``× base`` divides by the first of these that did
BASELINES = ("numpy", "cupy", "mpi4py", "mpi4py loop")


def table(records: list[dict], baseline: str = "numba") -> str:
    """A readable table; ``× base`` is each tool's median over the baseline tool's median
    for the same kernel and size (the baseline is ``numba`` where it ran, else ``numpy``;
    raw ``mpi4py`` for the distributed benchmark)."""
    rows = [(*HEAD, "× base")]
    groups: dict[tuple, list[dict]] = {}
    for rec in records:
        groups.setdefault((rec["bench"], rec["kernel"], rec["size"]), []).append(rec)
    for key, recs in groups.items():
        tools = {r["tool"]: r for r in recs}
        base = tools.get(baseline) or next((tools[t] for t in BASELINES if t in tools), None)
        for r in recs:
            ratio = f"{r['median_s'] / base['median_s']:.2f}× {base['tool']}" if base else "-"
            times = [fmt_time(r[k]) for k in ("median_s", "min_s", "max_s")]
            first = fmt_time(r["first_call_s"])
            rows.append((*key, r["tool"], *times, str(r["reps"]), rate(r), first, ratio))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def repeated(fn: Callable[[], object], sync: Callable[[], object], calls: int):
    """A timed call: ``calls`` calls of ``fn`` then one ``sync()`` (a GPU's queue runs
    them back to back); returns the last result."""

    def timed():
        out = None
        for _ in range(calls):
            out = fn()
        sync()
        return out

    return timed


def gemm_sizes(bench: str, size: Callable, quick: bool) -> list[Record]:
    """A GPU GEMM benchmark's records: ``size(s, calls, quick)`` for s = 1024 (and 4096
    unless ``quick``), or none where there is no GPU or no PyTorch to compare with."""
    import importlib.util
    import sys

    from tessera.kernel.targets.cuda.streams import gpu_usable

    if not gpu_usable() or importlib.util.find_spec("torch") is None:
        print(f"{bench}: no GPU (or no PyTorch) here, nothing measured", file=sys.stderr)
        return []
    records: list[Record] = []
    for s in (1024,) if quick else (1024, 4096):
        records += size(s, 3 if quick else 10, quick)
    return records


def standalone(bench: str, run: Callable[[bool], list[Record]]) -> None:
    """``python -m bench.<name> [--quick]``: run one benchmark, save and print it."""
    import sys

    records = run("--quick" in sys.argv[1:])
    save(bench, records)
    print(table([asdict(r) for r in records]))
