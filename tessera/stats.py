"""Process-wide counters (``tessera.stats()``), so users and tests can tell whether a
process compiled, hit the disk cache, launched or tuned."""

from __future__ import annotations

import threading

_lock = threading.Lock()
_counters = {
    "compiles": 0,
    "disk_cache_hits": 0,
    "launches": 0,
    "autotune_trials": 0,
    "stream_waits": 0,
    "graph_captures": 0,
    "graph_replays": 0,
    "graph_input_copies": 0,
}


def bump(name: str, n: int = 1) -> None:
    with _lock:
        _counters[name] += n


def stats() -> dict[str, int]:
    """A snapshot of the counters: compiles, disk_cache_hits, launches, autotune_trials,
    stream_waits, graph_captures, graph_replays, graph_input_copies."""
    with _lock:
        return dict(_counters)
