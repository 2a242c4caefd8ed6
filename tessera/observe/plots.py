"""Pictures: an autotune sweep (``tessera tune --plot``) and the roofline of a profile
(``tessera.profile().plot(path)``); docs/autotune.md and docs/observability.md say what
each draws.

matplotlib is optional and imported only when a picture is drawn. Figures are drawn on
matplotlib's non-interactive Agg canvas directly (never through pyplot), so drawing one
changes no backend or window of the user's program.
"""

from __future__ import annotations

import functools
import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from ..errors import TesseraError


def needs_matplotlib(what: str) -> str:
    return f"{what} needs matplotlib: pip install matplotlib"


def require(what: str):
    """matplotlib's ``Figure`` class, or a TesseraError saying ``what`` needs it."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise TesseraError(needs_matplotlib(what)) from None

    def figure(**options):
        fig = Figure(layout="constrained", **options)
        FigureCanvasAgg(fig)
        return fig

    return figure


def _save(fig, path) -> Path:
    path = Path(path)
    if path.parent != Path():
        path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


# ---------------------------------------------------------------------------- sweeps
def sweeps_plot(sweeps: list[dict], path, what: str = "tessera tune --plot") -> Path:
    """One panel per sweep (``{"kernel", "key", "table"}``, the tuner's table): each
    config's median time as a bar, its minimum and maximum as a whisker, the winner in
    its own colour; configs that failed or were not measured are named with the reason."""
    figure = require(what)
    heights = [max(2.0, 0.38 * len(s["table"]) + 1.2) for s in sweeps]
    fig = figure(figsize=(8, sum(heights)))
    axes = fig.subplots(len(sweeps), 1, squeeze=False, gridspec_kw={"height_ratios": heights})[:, 0]
    for ax, sweep in zip(axes, sweeps):
        _sweep_panel(ax, sweep)
    return _save(fig, path)


def _sweep_panel(ax, sweep: dict) -> None:
    table = sweep["table"]
    labels = []
    longest = max((row["median_s"] for row in table if "median_s" in row), default=1e-3)
    for y, row in enumerate(table):
        label = ", ".join(f"{k}={v}" for k, v in row["config"].items())
        if "median_s" in row:
            winner = row["status"] == "winner"
            med = row["median_s"] * 1e3
            ax.barh(y, med, color="tab:orange" if winner else "tab:blue", height=0.6)
            ax.errorbar(
                med,
                y,
                xerr=[[med - row["min_s"] * 1e3], [row["max_s"] * 1e3 - med]],
                color="black",
                capsize=3,
                linewidth=0.8,
            )
            label += f"  {med:.3g} ms" + ("  WINNER" if winner else "")
        else:
            ax.text(0, y, f" {row['status'][:80]}", va="center", fontsize=8, color="tab:red")
        labels.append(label)
    ax.set_yticks(range(len(table)), labels, fontsize=8)
    for tick, row in zip(ax.get_yticklabels(), table):
        if row.get("status") == "winner":
            tick.set_fontweight("bold")
    ax.invert_yaxis()  # space order, top to bottom
    ax.set_xlim(0, longest * 1e3 * 1.6)  # an outlier's whisker runs off the edge
    ax.set_xlabel("median time per launch (ms); whiskers: min to max")
    key = ", ".join(f"{k}={v}" for k, v in sweep.get("key", {}).items())
    ax.set_title(f"autotune {sweep['kernel']}" + (f" ({key})" if key else ""), fontsize=10)


# ---------------------------------------------------------------------------- roofline
@functools.cache
def machine_roofs() -> tuple[float, float]:
    """The host's measured roofs, (GB/s, GFLOP/s): the best of a few copies of a 32 MiB
    float64 array split over the usable cores, at most 32 (bytes read plus written), and the best of
    three 1024x1024 float32 NumPy matrix products (BLAS on every core, 2 n^3 flops).
    Measured once per process, in a few tenths of a second."""
    usable = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    cores = min(32, len(usable) if usable else os.cpu_count() or 1)
    src = np.ones(1 << 22)
    dst = np.empty_like(src)
    parts = np.array_split(np.arange(src.size), cores)
    bounds = [(int(p[0]), int(p[-1]) + 1) for p in parts if p.size]

    def copy(bound: tuple[int, int]) -> None:
        np.copyto(dst[bound[0] : bound[1]], src[bound[0] : bound[1]])

    with ThreadPoolExecutor(len(bounds)) as pool:
        best = math.inf
        for _ in range(6):
            start = time.perf_counter()
            list(pool.map(copy, bounds))
            best = min(best, time.perf_counter() - start)
    gbps = 2 * src.nbytes / best / 1e9
    a = np.ones((1024, 1024), np.float32)
    a @ a  # BLAS starts its threads
    best = math.inf
    for _ in range(3):
        start = time.perf_counter()
        a @ a
        best = min(best, time.perf_counter() - start)
    gflops = 2 * 1024**3 / best / 1e9
    return gbps, gflops


def roofline_plot(
    rows: list,
    path,
    peak_gbps: float | None = None,
    peak_gflops: float | None = None,
    what: str = "Profile.plot",
) -> Path:
    """GFLOP/s against flops per byte for every profiled kernel that declares ``flops=``,
    under the roofs (measured here unless given); the other kernels are listed."""
    figure = require(what)
    measured = peak_gbps is None or peak_gflops is None
    if measured:
        gbps, gflops = machine_roofs()
        peak_gbps = peak_gbps or gbps
        peak_gflops = peak_gflops or gflops
    points, listed = [], []
    for r in rows:
        if r.kind != "kernel" or not r.calls:
            continue
        if r.gflops is not None and r.bytes:
            points.append((r.name, r.flops / r.bytes, r.gflops))
        else:
            why = "no flops= declared" if r.gflops is None else "no array bytes"
            rate = f"{r.gbps:.3g} GB/s" if r.gbps else "-"
            listed.append(f"{r.name}: {rate} ({why})")
    ridge = peak_gflops / peak_gbps
    xs = [p[1] for p in points] + [ridge]
    lo, hi = min(xs + [0.05]) / 4, max(xs + [50.0]) * 4
    fig = figure(figsize=(7.5, 5))
    ax = fig.subplots()
    grid = np.geomspace(lo, hi, 200)
    ax.plot(grid, np.minimum(peak_gflops, peak_gbps * grid), color="black", linewidth=1.5)
    source = "measured on this host" if measured else "given"
    ax.text(lo * 1.3, peak_gbps * lo * 1.6, f"{peak_gbps:.3g} GB/s", rotation=0, fontsize=8)
    ax.text(hi / 1.3, peak_gflops * 1.08, f"{peak_gflops:.3g} GFLOP/s", ha="right", fontsize=8)
    for name, x, y in points:
        ax.plot([x], [y], "o", markersize=7)
        ax.annotate(name, (x, y), textcoords="offset points", xytext=(6, 4), fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ys = [p[2] for p in points] + [peak_gflops, peak_gbps * lo]
    ax.set_ylim(min(ys) / 3, max(ys) * 3)
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity (flops per byte of array arguments)")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(f"roofline: {len(points)} kernel(s); roofs {source}", fontsize=10)
    ax.grid(True, which="both", linewidth=0.3)
    if listed or not points:
        text = "\n".join(listed[:12]) if listed else "no kernel launch was profiled"
        if len(listed) > 12:
            text += f"\n... and {len(listed) - 12} more"
        ax.text(
            0.98,
            0.03,
            "not on the roofline:\n" + text if listed else text,
            transform=ax.transAxes,
            ha="right",
            va="bottom",
            fontsize=7,
            bbox=dict(facecolor="white", edgecolor="gray", alpha=0.9),
        )
    return _save(fig, path)
