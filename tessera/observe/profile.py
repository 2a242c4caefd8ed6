"""``with tessera.profile() as p: ...; print(p.table())``: per kernel and per collective,
how often it ran, how long it took, how fast it moved bytes and did flops, how long it
took to compile, and how often the caches answered.

A profile waits for asynchronous (GPU) launches before it times them, so its times are
kernel times; the first launch of a specialisation has its compilation left out of its
time and counted under ``compile s`` instead.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from .measures import bytes_moved, flops
from .observers import BUILDING, LaunchRecord, Observer, Span, attach, detach
from .plots import roofline_plot


@dataclass
class Row:
    """What a profile knows about one kernel (``kind`` "kernel") or collective."""

    kind: str
    name: str
    times: list[float] = field(default_factory=list)
    bytes: int = 0
    flops: float | None = None
    compile_s: float = 0.0  # building programs: front end, codegen, Numba, disk-cache loads
    cache_hits: int = 0  # launches whose program was in memory
    disk_loads: int = 0

    @property
    def calls(self) -> int:
        return len(self.times)

    @property
    def total_s(self) -> float:
        return sum(self.times)

    @property
    def median_s(self) -> float:
        return statistics.median(self.times) if self.times else 0.0

    @property
    def p95_s(self) -> float:
        return percentile(self.times, 95)

    @property
    def gbps(self) -> float | None:
        return self.bytes / self.total_s / 1e9 if self.total_s > 0 and self.bytes else None

    @property
    def gflops(self) -> float | None:
        if self.flops is None or self.total_s <= 0:
            return None
        return self.flops / self.total_s / 1e9

    def as_dict(self) -> dict:
        return {
            "kind": self.kind,
            "name": self.name,
            "calls": self.calls,
            "total_s": self.total_s,
            "median_s": self.median_s,
            "p95_s": self.p95_s,
            "gbps": self.gbps,
            "gflops": self.gflops,
            "compile_s": self.compile_s,
            "cache_hits": self.cache_hits,
            "disk_loads": self.disk_loads,
        }


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


class Profile(Observer):
    """The observer behind :func:`profile`; ``rows()`` and ``table()`` read it."""

    synchronous = True

    def __init__(self) -> None:
        self._rows: dict[tuple[str, str], Row] = {}

    def _row(self, kind: str, name: str) -> Row:
        row = self._rows.get((kind, name))
        if row is None:
            row = self._rows[(kind, name)] = Row(kind, name)
        return row

    def launch(self, record: LaunchRecord) -> None:
        row = self._row("kernel", record.kernel.name)
        row.times.append(record.seconds)
        row.bytes += bytes_moved(record.args)
        amount = flops(record)
        if amount is not None:
            row.flops = (row.flops or 0.0) + amount
        if not record.compiled:
            row.cache_hits += 1

    def span(self, record: Span) -> None:
        if record.kind == "collective":
            row = self._row("collective", record.name)
            row.times.append(record.seconds)
            row.bytes += record.fields.get("bytes", 0)
        elif record.kind in BUILDING:
            row = self._row("kernel", record.name)
            row.compile_s += record.seconds
            if record.kind == "cache load" and record.fields.get("found"):
                row.disk_loads += 1

    def rows(self) -> list[Row]:
        """Kernels, then collectives, each by total time, longest first."""
        return sorted(self._rows.values(), key=lambda r: (r.kind != "kernel", -r.total_s))

    def table(self) -> str:
        """The rows as a text table (times in milliseconds)."""
        head = (
            f"{'kind':<10} {'name':<24} {'calls':>6} {'total ms':>10} {'median ms':>10} "
            f"{'p95 ms':>9} {'GB/s':>8} {'GFLOP/s':>8} {'compile s':>9} {'cache hits':>10}"
        )
        lines = [head, "-" * len(head)]
        for r in self.rows():
            lines.append(
                f"{r.kind:<10} {r.name[:24]:<24} {r.calls:>6} {r.total_s * 1e3:>10.3f} "
                f"{r.median_s * 1e3:>10.3f} {r.p95_s * 1e3:>9.3f} {_num(r.gbps):>8} "
                f"{_num(r.gflops):>8} {r.compile_s:>9.3f} {r.cache_hits:>10}"
            )
        return "\n".join(lines)

    def plot(self, path, *, peak_gbps: float | None = None, peak_gflops: float | None = None):
        """Draw the kernels' roofline to ``path`` (a PNG): GFLOP/s against flops per byte
        for each kernel that declares ``flops=``, under the host's measured memory
        bandwidth and compute roofs (or the ones given, e.g. a GPU's); kernels without
        flops are listed beside it. Returns the path; needs matplotlib."""
        return roofline_plot(self.rows(), path, peak_gbps, peak_gflops, "Profile.plot")

    def __enter__(self) -> Profile:
        attach(self)
        return self

    def __exit__(self, *exc) -> None:
        detach(self)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def profile() -> Profile:
    """A profile of the launches and collectives in a ``with`` block::

    with tessera.profile() as p:
        axpy[n](a, x, y)
    print(p.table())
    """
    return Profile()
