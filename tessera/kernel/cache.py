"""Specialisation keys, the in-memory cache of compiled programs (docs/targets.md) and
"why did it recompile?" (``TESSERA_EXPLAIN_RECOMPILE=1``). The disk cache is in
``disk_cache.py``.

A key is everything that changes the generated code: the grid's rank, each array's
layout, writability and alignment (Numba specialises on them), and constexpr values.
Dtypes and ranks are fixed by the signature, so they need not be in the key; the
kernel's one cache keys each program by (target, bounds checks, key).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict

from ..config import get_int
from .launch import describe_flags, key_parts

log = logging.getLogger("tessera")


class SpecialisationCache:
    """Thread-safe map from specialisation key to a compiled program, bounded: past
    ``TESSERA_KERNEL_CACHE_SIZE`` entries the least recently used one is dropped (a kernel
    launched with ever new constexpr values must not keep every program alive).
    Launches read ``programs`` directly and call ``used`` on a hit."""

    def __init__(self) -> None:
        self.programs: OrderedDict[tuple, object] = OrderedDict()
        self.used = self.programs.move_to_end  # a hit: now the most recently used
        self._lock = threading.Lock()

    def get(self, key: tuple) -> object | None:
        return self.programs.get(key)

    def put(self, key: tuple, program: object) -> None:
        limit = max(get_int("kernel_cache_size"), 1)
        with self._lock:
            self.programs.setdefault(key, program)
            while len(self.programs) > limit:
                self.programs.popitem(last=False)

    def __len__(self) -> int:
        return len(self.programs)


def key_changes(old: tuple, new: tuple, params: list) -> list[str]:
    """What differs between two specialisation keys of one kernel, in words."""
    before, after = key_parts(old, params), key_parts(new, params)
    changes = []
    for name, now in after.items():
        was = before[name]
        if was == now:
            continue
        if now[0] == "grid":
            changes.append(f"grid rank {was[1]} -> {now[1]}")
        elif now[0] == "constexpr":
            if was[1] != now[1]:
                changes.append(
                    f"constexpr {name} changed {was[2]!r} ({was[1]}) -> {now[2]!r} ({now[1]})"
                )
            else:
                changes.append(f"constexpr {name} changed {was[2]!r} -> {now[2]!r}")
        else:
            a, b = describe_flags(was[1]), describe_flags(now[1])
            if a["layout"] != b["layout"]:
                changes.append(f"layout of '{name}' changed {a['layout']} -> {b['layout']}")
            if a["aligned"] != b["aligned"]:
                changes.append(f"'{name}' is now {b['aligned']}")
            if a["writable"] != b["writable"]:
                changes.append(f"'{name}' is now {b['writable']}")
    return changes


def explain_recompile(
    kernel: str, params: list, key: tuple, previous: list[tuple], level: int = logging.WARNING
) -> str:
    """Log (logger "tessera", WARNING; DEBUG for ``k.inspect``'s builds, which no launch
    pays for) why ``key`` needs new code: how it differs from the nearest of the
    ``previous`` keys (fewest changes; of equals, the latest). Returns the message."""
    nearest = min((key_changes(old, key, params) for old in reversed(previous)), key=len)
    message = f"kernel '{kernel}' recompiles: " + ("; ".join(nearest) or "new specialisation")
    log.log(level, message)
    return message
