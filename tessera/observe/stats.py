"""Process-wide counters (``tessera.stats()``), so users and tests can tell whether a
process compiled, hit the disk cache, launched or tuned."""

from __future__ import annotations

import itertools
import threading

_lock = threading.Lock()
_counters = {
    "compiles": 0,
    "disk_cache_hits": 0,
    "worker_compiles": 0,
    "launches": 0,
    "autotune_trials": 0,
    "stream_waits": 0,
    "graph_captures": 0,
    "graph_replays": 0,
    "graph_input_copies": 0,
}


# Kernel launches, the hot path, count without the lock: ``next`` of an itertools.count is
# atomic. :func:`stats` reads it by taking a number too, and subtracts its own reads.
_launch_ticks = itertools.count()
count_launch = _launch_ticks.__next__
_reads = [0]  # numbers stats() has taken from _launch_ticks


def bump(name: str, n: int = 1) -> None:
    with _lock:
        _counters[name] += n


def stats() -> dict[str, int]:
    """A snapshot of the counters: compiles, disk_cache_hits, worker_compiles (compile
    jobs that worker processes finished for this one), launches, autotune_trials,
    stream_waits, graph_captures, graph_replays, graph_input_copies."""
    with _lock:
        snapshot = dict(_counters)
        snapshot["launches"] += next(_launch_ticks) - _reads[0]
        _reads[0] += 1
    return snapshot
