"""``TESSERA_METRICS=metrics.jsonl`` (or ``.csv``): one record per launch and collective.

Each record: ``time`` (wall clock, seconds), ``kind`` (launch or collective), ``kernel``
(the kernel, or the collective: all_reduce, ...), ``target`` (or the collective's axis),
``grid``, ``seconds``, ``bytes`` (the arrays' bytes), ``gbps``, ``gflops`` (kernels that
declare ``flops=``), ``rank``, ``op`` and ``seq`` (collectives). Under MPI each rank
writes its own file (``metrics.rank3.jsonl``). ``tessera metrics summary FILE`` prints
p50/p95 per kernel (:func:`summary`).

Records are kept as tuples and written in batches: a launch pays for a tuple, and for a
line of text once per batch, so that metrics cost little per launch (bench/README.md).
Launches may come from several threads while one of them flushes: a launch appends to the
one pending list (one atomic list operation, no lock), and a flush takes, under its lock,
the records that are there when it starts and deletes exactly those, so a record appended
meanwhile stays for the next flush. (Swapping in a fresh list instead would lose a record
appended by a thread that had fetched the old list just before the swap.)
"""

from __future__ import annotations

import csv
import json
import os
import statistics
import threading
from pathlib import Path

from ..errors import TesseraError
from .measures import Clock, bytes_moved, flops, rank_and_size, rank_path
from .observers import LaunchRecord, Observer, Span, attach, detach
from .profile import percentile

FIELDS = (
    "time", "kind", "kernel", "target", "grid", "seconds", "bytes", "gbps", "gflops", "rank",
    "op", "seq",
)  # fmt: skip
BATCH = 4096  # records held before they are written


class Metrics(Observer):
    """Writes one record per launch and collective to ``path`` (.jsonl or .csv)."""

    synchronous = True

    def __init__(self, path: str | os.PathLike) -> None:
        suffix = Path(path).suffix.lower()
        if suffix not in (".jsonl", ".json", ".csv"):
            raise TesseraError(
                f"TESSERA_METRICS={str(path)!r}: the file must end in .jsonl or .csv"
            )
        self.csv = suffix == ".csv"
        self.rank = rank_and_size()[0]
        self.path = rank_path(path)
        self.clock = Clock()
        self.wall0 = self.clock.wall(0.0)  # wall time = wall0 + a record's now() time
        self._pending: list[tuple] = []
        self._lock = threading.Lock()
        self._middles: dict[tuple, tuple[str, str]] = {}
        self._templates: dict[tuple, str] = {}
        self._file = None  # opened at the first write: a process that stands down
        # (tessera run's launcher and wrappers, observe/session.py) leaves no file

    def _open(self):
        if self._file is None:
            if self.path.parent != Path(""):
                self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "w", newline="")  # noqa: SIM115 - open while attached
            if self.csv:
                self._file.write(",".join(FIELDS) + "\n")
        return self._file

    def launch(self, record: LaunchRecord) -> None:
        amount = flops(record) if record.kernel.flops is not None else None
        pending = self._pending
        pending.append(
            (
                record.start,
                record.kernel.name,
                record.target.name,
                record.grid,
                record.seconds,
                bytes_moved(record.args),
                amount,
            )
        )
        if len(pending) >= BATCH:
            self.flush()

    def span(self, record: Span) -> None:
        if record.kind == "collective":
            f = record.fields
            self._pending.append(
                (record.start, record.name, f["axis"], None, record.seconds, f["bytes"], None, f)
            )
            if len(self._pending) >= BATCH:
                self.flush()

    def flush(self) -> None:
        """Write the records held so far."""
        with self._lock:
            pending = self._pending
            count = len(pending)
            batch = pending[:count]
            del pending[:count]
            if not batch or (self._file is not None and self._file.closed):
                return
            file = self._open()
            file.write("".join(self._line(*r) for r in batch))
            file.flush()

    def _line(self, start, name, target, grid, seconds, nbytes, amount, extra=None) -> str:
        wall = self.wall0 + start  # (the clock's offset, added once per record)
        if extra is None and seconds > 0:  # a launch: one %-format of its kernel's template
            key = (name, target, grid, amount is None)
            template = self._templates.get(key)
            if template is None:
                template = self._templates[key] = self._template(*key)
            if amount is None:
                return template % (wall, seconds, nbytes, nbytes / seconds * 1e-9)
            rates = (nbytes / seconds * 1e-9, amount / seconds * 1e-9)
            return template % (wall, seconds, nbytes, *rates)
        csv = self.csv
        none = "" if csv else "null"
        if seconds > 0:
            gbps = f"{nbytes / seconds * 1e-9:.6g}"
            gflops = none if amount is None else f"{amount / seconds * 1e-9:.6g}"
        else:
            gbps = gflops = none
        if extra is None:  # a launch: its kernel, target and grid repeat
            middle = self._middles.get((name, target, grid))
            if middle is None:
                middle = self._middles[(name, target, grid)] = self._middle(name, target, grid)
        else:
            middle = self._middle(name, target, grid, extra)
        if csv:
            return f"{wall:.6f},{middle[0]},{seconds:.9f},{nbytes},{gbps},{gflops},{middle[1]}\n"
        return (
            f'{{"time": {wall:.6f}, {middle[0]}, "seconds": {seconds:.9f}, "bytes": {nbytes}, '
            f'"gbps": {gbps}, "gflops": {gflops}, {middle[1]}}}\n'
        )

    def _template(self, name, target, grid, no_flops: bool) -> str:
        """A launch record's line with %-fields for its numbers (the rest made once)."""
        head, tail = (part.replace("%", "%%") for part in self._middle(name, target, grid))
        gflops = ("" if self.csv else "null") if no_flops else "%.6g"
        if self.csv:
            return f"%.6f,{head},%.9f,%d,%.6g,{gflops},{tail}\n"
        return (
            f'{{"time": %.6f, {head}, "seconds": %.9f, "bytes": %d, "gbps": %.6g, '
            f'"gflops": {gflops}, {tail}}}\n'
        )

    def _middle(self, name, target, grid, extra=None) -> tuple[str, str]:
        """The text of a record's fields that repeat from launch to launch (kernel,
        target, grid; rank, op, seq): made once per combination."""
        kind = "launch" if extra is None else "collective"
        op = "" if extra is None else extra["op"]
        seq = None if extra is None else extra["seq"]
        if self.csv:
            grid_text = "x".join(map(str, grid)) if grid is not None else ""
            return (
                f"{kind},{name},{target},{grid_text}",
                f"{self.rank},{op},{'' if seq is None else seq}",
            )
        grid_json = json.dumps(None if grid is None else list(grid))
        return (
            f'"kind": "{kind}", "kernel": {json.dumps(name)}, "target": {json.dumps(target)}, '
            f'"grid": {grid_json}',
            f'"rank": {self.rank}, "op": {json.dumps(op)}, "seq": {json.dumps(seq)}',
        )

    def close(self) -> None:
        self.flush()
        self._open().close()

    def __enter__(self) -> Metrics:
        attach(self)
        return self

    def __exit__(self, *exc) -> None:
        detach(self)
        self.close()


def _number(value: float | None, csv: bool) -> str:
    if value is None:
        return "" if csv else "null"
    return f"{value:.6g}"


def metrics(path: str | os.PathLike) -> Metrics:
    """Write a record per launch and collective of the ``with`` block to ``path``."""
    return Metrics(path)


def read(path: str | os.PathLike) -> list[dict]:
    """The records of a metrics file (.jsonl or .csv), numbers as numbers."""
    path = Path(path)
    if path.suffix.lower() == ".csv":
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        for r in rows:
            r["seconds"] = float(r["seconds"])
            r["bytes"] = int(r["bytes"])
            for k in ("gbps", "gflops"):
                r[k] = float(r[k]) if r[k] else None
        return rows
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def summary(paths: str | os.PathLike | list) -> str:
    """Per kernel and collective: calls, p50 and p95 milliseconds, median GB/s and
    GFLOP/s (what ``tessera metrics summary FILE...`` prints). Several files (the ranks'
    ``metrics.rank<r>.jsonl``) are merged: their records count together."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    groups: dict[tuple[str, str], list[dict]] = {}
    for path in paths:
        for r in read(path):
            groups.setdefault((r["kind"], r["kernel"]), []).append(r)
    head = (
        f"{'kind':<10} {'kernel':<24} {'calls':>7} {'p50 ms':>10} {'p95 ms':>10} "
        f"{'GB/s':>8} {'GFLOP/s':>8}"
    )
    lines = [head, "-" * len(head)]
    for (kind, name), rows in sorted(groups.items()):
        times = [r["seconds"] for r in rows]
        gbps = [r["gbps"] for r in rows if r["gbps"] is not None]
        gflops = [r["gflops"] for r in rows if r["gflops"] is not None]
        lines.append(
            f"{kind:<10} {name[:24]:<24} {len(rows):>7} "
            f"{percentile(times, 50) * 1e3:>10.4f} {percentile(times, 95) * 1e3:>10.4f} "
            f"{_median(gbps):>8} {_median(gflops):>8}"
        )
    return "\n".join(lines)


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}" if values else "-"
