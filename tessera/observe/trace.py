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

from ..observers import LaunchRecord, Observer, Span, attach, detach
from .measures import Clock, rank_and_size, rank_path, shapes


class Trace(Observer):
    """Collects trace events while attached; :meth:`write` saves them."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.events: list[dict] = []
        self.clock = Clock()
        self.rank = rank_and_size()[0]
        self._lock = threading.Lock()

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
        with self._lock:
            self.events.append(event)

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

    def document(self) -> dict:
        rank = rank_and_size()[0]
        meta = [
            {"name": "process_name", "ph": "M", "pid": self.rank, "args": {"name": f"rank {rank}"}},
            {
                "name": "process_sort_index",
                "ph": "M",
                "pid": self.rank,
                "args": {"sort_index": rank},
            },
        ]
        with self._lock:
            events = meta + list(self.events)
        return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"rank": rank}}

    def write(self) -> Path:
        """Write the events to this rank's file (see :func:`~.measures.rank_path`)."""
        path = rank_path(self.path)
        if path.parent != Path(""):
            path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.document(), default=str))
        return path

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
        document = json.loads(Path(path).read_text())
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
