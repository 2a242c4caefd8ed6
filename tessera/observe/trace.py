"""Chrome trace-event JSON (Perfetto, chrome://tracing): ``TESSERA_TRACE=trace.json`` for
a whole process, or ``with tessera.trace("trace.json"):`` for a block.

Each launch, compile stage, disk-cache load, collective, autotune trial and graph-module
run becomes one complete event (``"ph": "X"``) on its thread's track, with what it was in
``args``. Times are wall-clock microseconds, so the files of several ranks share one time
axis: under MPI each rank writes its own file (``trace.rank3.json``, its process id the
rank) and :func:`merge` (``tessera trace merge``) joins them into one timeline with a
track per rank.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from .measures import Clock, rank_and_size, rank_path, shapes
from .observers import LaunchRecord, Observer, Span, attach, detach

BATCH = 8192  # events held in memory before they are appended to the file


class Trace(Observer):
    """Collects trace events while attached and streams them to the file in batches of
    :data:`BATCH`, so a long process's trace costs a bounded amount of memory; the file
    is complete JSON once :meth:`write` (at the end of the ``with`` block, or at exit for
    ``TESSERA_TRACE``) has closed it. A process that dies first leaves the batches written
    so far; :func:`merge` reads such a file too."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.events: list[dict] = []  # not yet written
        self.written = 0  # events in the file so far
        self.clock = Clock()
        self.rank = rank_and_size()[0]
        self._lock = threading.Lock()
        self._file = None  # opened at the first batch: under MPI the rank is known by then
        self._closed: Path | None = None

    def _event(self, name: str, cat: str, start: float, seconds: float, args: dict) -> None:
        event = {
            "name": name,
            "cat": cat,
            "ph": "X",
            "ts": self.clock.wall(start) * 1e6,
            "dur": seconds * 1e6,
            "pid": self.rank,
            "tid": threading.get_native_id(),
            "args": args,
        }
        events = self.events
        events.append(event)  # one list operation: safe from any thread without the lock
        if len(events) >= BATCH:
            self.flush()

    def launch(self, record: LaunchRecord) -> None:
        args = {
            "target": record.target.name,
            "grid": list(record.grid),
            "shapes": shapes(record.args),
            "compiled": record.compiled,
        }
        seconds = record.seconds + record.compile_seconds
        self._event(record.kernel.name, "launch", record.start, seconds, args)

    def span(self, record: Span) -> None:
        name = f"{record.name} {record.fields['step']}" if "step" in record.fields else None
        self._event(name or record.name, record.kind, record.start, record.seconds, record.fields)

    def _meta(self) -> list[dict]:
        rank = rank_and_size()[0]
        return [
            {"name": "process_name", "ph": "M", "pid": self.rank, "args": {"name": f"rank {rank}"}},
            {
                "name": "process_sort_index",
                "ph": "M",
                "pid": self.rank,
                "args": {"sort_index": rank},
            },
        ]

    def flush(self) -> None:
        """Append the events held so far to the file (opening it at the first batch).
        Events other threads add meanwhile stay for the next batch."""
        with self._lock:
            if self._closed is not None:
                return
            pending = self.events
            count = len(pending)
            batch = pending[:count]
            del pending[:count]
            if self._file is None:
                path = rank_path(self.path)
                if path.parent != Path(""):
                    path.parent.mkdir(parents=True, exist_ok=True)
                self._file = open(path, "w")  # noqa: SIM115 - open while attached
                rank = rank_and_size()[0]
                self._file.write(
                    f'{{"displayTimeUnit": "ms", "otherData": {{"rank": {rank}}}, '
                    '"traceEvents": [\n'
                )
                batch = self._meta() + batch
            elif batch:
                self._file.write(",\n")
            self._file.write(",\n".join(json.dumps(e, default=str) for e in batch))
            self._file.flush()
            self.written += count

    def write(self) -> Path:
        """Write what is left and close the file: complete JSON from here on. Returns this
        rank's file (see :func:`~.measures.rank_path`); a second call changes nothing."""
        self.flush()
        with self._lock:
            if self._closed is None:
                self._file.write("\n]}\n")
                self._file.close()
                self._closed = Path(self._file.name)
            return self._closed

    def __enter__(self) -> Trace:
        attach(self)
        return self

    def __exit__(self, *exc) -> None:
        detach(self)
        self.write()


def trace(path: str | os.PathLike) -> Trace:
    """Trace the ``with`` block into ``path`` (per rank under MPI)::

    with tessera.trace("trace.json"):
        step()
    """
    return Trace(path)


def merge(paths: list[str | os.PathLike], out: str | os.PathLike) -> int:
    """Join per-rank trace files into one (a track per rank); returns the event count.
    Files that claim the same process id (traces of separate runs) are given their own."""
    events: list[dict] = []
    used: set[int] = set()
    for path in paths:
        document = _load(Path(path))
        found = document["traceEvents"] if isinstance(document, dict) else document
        pids = {e.get("pid", 0) for e in found}
        clash = pids & used
        shift = (max(used) + 1 if used else 0) if clash else 0
        for e in found:
            e = dict(e)
            e["pid"] = e.get("pid", 0) + shift
            if e.get("name") == "process_name" and clash:
                e["args"] = {"name": f"{e['args'].get('name', 'process')} ({Path(path).name})"}
            events.append(e)
        used |= {p + shift for p in pids}
    Path(out).write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}))
    return len(events)


def _load(path: Path) -> dict | list:
    """A trace file; one that a process left unfinished (it died before closing its
    trace) is read up to its last complete batch."""
    text = path.read_text()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return json.loads(text.rstrip().rstrip(",") + "\n]}")
