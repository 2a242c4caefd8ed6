"""``python -m bench [names...] [--quick] [--plot] [--omp-default]``: run the benchmarks.

Each benchmark writes JSON lines to ``bench/results/<name>.json``; the runner prints one
table for all of them, then the BENCH.md targets. A benchmark that computes a wrong result
fails loudly (traceback, exit status 1) after the others have run.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
import time
import traceback
from dataclasses import asdict

from .common import RESULTS, fmt_time, save, table

BENCHES = (
    "axpy",
    "reduction",
    "matmul",
    "tiles",
    "ops",
    "gpu_ops",
    "gpu_launch",
    "gpu_rows",
    "gpu_gemm",
    "gpu_gemm8",
    "gpu_attention",
    "gpu_capture",
    "rows",
    "softmax",
    "stencil",
    "axpy_tiled",
    "cpu_traps",
    "launch",
    "capture",
    "bandwidth",
    "warm_start",
    "dist_allreduce",
    "aot",
)

# (bench, what is compared, limit[, tool]): a ratio of Tessera's median to Numba's, or
# seconds; of the tool "tessera" unless another is named
TARGETS = (
    ("axpy", "ratio", 1.1),
    ("reduction", "ratio", 1.5),
    ("matmul", "ratio", 1.5),
    ("launch", "seconds", 5e-6),
    ("launch", "seconds", 10e-6, "tessera (torch)"),
    ("gpu_launch", "seconds", 6e-6, "tessera empty (numba)"),
    ("gpu_launch", "seconds", 8e-6, "tessera 3 arrays (numba)"),
    ("gpu_launch", "seconds", 8e-6, "tessera 3 arrays (cupy)"),
    ("gpu_launch", "seconds", 8e-6, "tessera 3 arrays (torch)"),
    ("gpu_launch", "seconds", 0.2, "warm process"),
)


def targets(records: list[dict], quick: bool) -> str:
    lines = ["targets (BENCH.md)" + (" - quick sizes, not the target sizes" if quick else "")]
    for bench, kind, limit, *tool in TARGETS:
        recs = {r["tool"]: r for r in records if r["bench"] == bench}
        name = tool[0] if tool else "tessera"
        if name not in recs:
            continue
        t = recs[name]
        if kind == "ratio":
            value = t["median_s"] / recs["numba"]["median_s"]
            shown, wanted = f"{value:.2f}× numba", f"≤ {limit}×"
        else:
            value = t["median_s"]
            shown, wanted = fmt_time(value), f"≤ {fmt_time(limit)}"
        verdict = "ok" if value <= limit else "MISSED"
        label = bench if not tool else f"{bench} {name.removeprefix('tessera ')}"
        lines.append(f"  {label:<14} {t['size']:<10} {shown:>14}  target {wanted:<8} {verdict}")
    from .warm_start import targets as warm_start_targets

    for what, value, limit, met in warm_start_targets(records):
        wanted = f"≥ {limit}×" if what.startswith("cold") else f"≤ {limit}×"
        verdict = "ok" if met else "MISSED"
        lines.append(f"  warm_start {what:<18} {value:>5.2f}×  target {wanted:<8} {verdict}")
    from .tiles import targets as math_targets

    for what, value, limit, met in math_targets(records):
        verdict = "ok" if met else "MISSED"
        lines.append(f"  {what:<42} {value:>5.2f}× numba  target ≥ {limit}×  {verdict}")
    from .ops import targets as ops_targets

    for what, value, wanted, met in ops_targets(records):
        verdict = "ok" if met else "MISSED"
        lines.append(f"  ops {what:<34} {value:>7.2f}  target {wanted:<7} {verdict}")
    from .gpu_ops import targets as gpu_targets

    for what, value, wanted, met in gpu_targets(records):
        verdict = "ok" if met else "MISSED"
        lines.append(f"  gpu_ops {what:<38} {value:>7.2f}  target {wanted:<7} {verdict}")
    from .aot import targets as aot_targets

    for what, value, wanted, met in aot_targets(records):
        verdict = "ok" if met else "MISSED"
        lines.append(f"  aot {what:<34} {value:>7.2f}  target {wanted:<7} {verdict}")
    from .dist_allreduce import targets as dist_targets

    for what, value, wanted, met in dist_targets(records):
        verdict = "ok" if met else "MISSED"
        lines.append(f"  dist {what:<52} {value:>5.2f}×  target {wanted:<7} {verdict}")
    return "\n".join(lines)


PLOT_NEEDS_MATPLOTLIB = "python -m bench --plot needs matplotlib: pip install matplotlib"


def plot(records: list[dict]) -> None:
    """The side-by-side tables as bars: each tool's median over the baseline's (numba,
    else numpy), per kernel and size, on a log scale; written to results/bench.png."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(PLOT_NEEDS_MATPLOTLIB, file=sys.stderr)
        return
    groups: dict[str, dict[str, float]] = {}
    for r in records:
        groups.setdefault(f"{r['bench']}: {r['kernel']}\n{r['size']}", {})[r["tool"]] = r[
            "median_s"
        ]
    tools = list(dict.fromkeys(r["tool"] for r in records))  # in the tables' order
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(groups)), 4.5))
    width = 0.8 / len(tools)
    ratios = []
    for k, tool in enumerate(tools):
        xs, ys = [], []
        for i, times in enumerate(groups.values()):
            base = times.get("numba") or times.get("numpy")
            if tool in times and base:
                xs.append(i + (k - (len(tools) - 1) / 2) * width)
                ys.append(times[tool] / base)
        ratios += ys
        bars = ax.bar(xs, ys, width, label=tool)
        ax.bar_label(bars, [f"{y:.2f}" for y in ys], fontsize=7)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    if ratios:  # bars start below the smallest ratio, so a ratio of 1 shows
        ax.set_ylim(min(ratios + [1.0]) / 1.5, max(ratios + [1.0]) * 1.5)
    ax.set_ylabel("median time / baseline (numba, else numpy)")
    ax.set_xticks(range(len(groups)), list(groups), fontsize=8)
    ax.legend(fontsize=8)
    fig.tight_layout()
    RESULTS.mkdir(parents=True, exist_ok=True)
    fig.savefig(RESULTS / "bench.png", dpi=120)
    plt.close(fig)
    print(f"plot: {RESULTS / 'bench.png'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", metavar="name", help=f"some of {', '.join(BENCHES)}")
    parser.add_argument("--quick", action="store_true", help="small sizes, a smoke test")
    parser.add_argument("--plot", action="store_true", help="draw results/bench.png")
    parser.add_argument(
        "--omp-default",
        action="store_true",
        help="keep OpenMP's default wait policy (see bench/__init__.py)",
    )
    args = parser.parse_args(argv)
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        parser.error(PLOT_NEEDS_MATPLOTLIB)  # before the runs, not after minutes of them
    unknown = [n for n in args.names if n not in BENCHES]
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(BENCHES)}")
    records, failed = [], []
    start = time.perf_counter()
    for name in args.names or BENCHES:
        print(f"running {name} ...", file=sys.stderr, flush=True)
        try:
            recs = importlib.import_module(f"bench.{name}").run(args.quick)
        except Exception:
            traceback.print_exc()
            failed.append(name)
            continue
        save(name, recs)
        records.extend(asdict(r) for r in recs)
    if records:
        print(table(records))
        print()
        from .dist_allreduce import summary as dist_summary

        if dist := dist_summary(records):
            print(dist)
            print()
        print(targets(records, args.quick))
        print(
            f"\n{len(records)} records in {RESULTS}, {time.perf_counter() - start:.1f} s, "
            f"threads={records[0]['threads']} ({records[0]['threading']})"
        )
        if args.plot:
            plot(records)
    if failed:
        print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
