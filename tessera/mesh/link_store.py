"""Measured links on disk: ``dist.topology(mesh, measure=True)`` times the links and the
collective algorithms once per set of hosts and devices, and later processes reuse it.

One file per key (the hosts, devices, rank count and the timed axis's size, and Tessera's
version) under ``<TESSERA_CACHE_DIR>/links/``, under the disk cache's rules
(``kernel/cache_files.py``: a private directory, regular files of bounded size sealed with
the user's key, JSON of bounded depth). The numbers only steer the ``auto`` algorithm
choice (never a result), and every field is checked before use: a file that fails a check
is ignored with a warning and measured again.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
import warnings
from pathlib import Path

from ..errors import CacheWarning
from ..kernel import cache_files, disk_cache
from ..kernel.cache_files import CorruptEntry
from ..version import __version__

FORMAT = "tessera-links-1"
MAGIC = f"{FORMAT}\n".encode()
FOLDER = "links"
MAX_BYTES = 1 << 20


def key_of(hosts: list[str], devices: list[str], axis_ranks: int) -> dict:
    return {"hosts": hosts, "devices": devices, "axis_ranks": axis_ranks, "tessera": __version__}


def _path(key: dict) -> Path:
    digest = hashlib.sha256((FORMAT + json.dumps(key, sort_keys=True)).encode()).hexdigest()
    return disk_cache.directory() / FOLDER / f"{digest[:40]}.json"


def load(key: dict) -> dict | None:
    """The stored measurement for ``key`` (link_cost.snapshot's form), or None."""
    mac = disk_cache.folder_key(FOLDER, create=False)
    if mac is None:
        return None
    path = _path(key)
    try:
        data = cache_files.read_sealed_json(path, mac, MAGIC, MAX_BYTES)
        if not isinstance(data, dict) or data.get("key") != key or not valid(data.get("links")):
            raise CorruptEntry("not a measurement for these hosts and devices")
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, CorruptEntry) as exc:
        warnings.warn(f"ignoring the link measurement {path}: {exc}", CacheWarning, stacklevel=3)
        return None
    return data["links"]


def save(key: dict, links: dict) -> Path | None:
    mac = disk_cache.folder_key(FOLDER, create=True)
    if mac is None:
        return None
    path = _path(key)
    entry = {"key": key, "links": links, "created": time.strftime("%Y-%m-%d %H:%M:%S")}
    try:
        cache_files.write_sealed_json(path, mac, MAGIC, entry)
    except OSError as exc:
        warnings.warn(
            f"cannot write the link measurement {path}: {exc}", CacheWarning, stacklevel=3
        )
        return None
    return path


def _seconds(value) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0 <= value < 3600
    )


def valid(links) -> bool:
    """Whether ``links`` has link_cost.snapshot's shape with sane numbers."""
    if not isinstance(links, dict):
        return False
    measured, fitted = links.get("measured"), links.get("fitted")
    if not isinstance(measured, list) or not isinstance(fitted, dict):
        return False
    for row in measured:
        if not (
            isinstance(row, list)
            and len(row) == 3
            and isinstance(row[0], str)
            and _seconds(row[1])
            and _seconds(row[2])
        ):
            return False
    for name, entry in fitted.items():
        if not (
            isinstance(name, str)
            and isinstance(entry, list)
            and len(entry) == 2
            and isinstance(entry[0], int)
            and entry[0] > 1
            and isinstance(entry[1], list)
        ):
            return False
        if (
            not all(
                isinstance(p, list)
                and len(p) == 2
                and isinstance(p[0], int)
                and p[0] > 0
                and _seconds(p[1])
                for p in entry[1]
            )
            or len(entry[1]) < 2
        ):
            return False
    return all(links.get(k) is None or _seconds(links[k]) for k in ("step", "gamma"))


def files() -> list[Path]:
    """The stored measurements (``tessera cache list``)."""
    return cache_files.files(disk_cache.directory() / FOLDER, "*.json")


def clear() -> int:
    """Delete every stored measurement (``tessera cache clear``); how many went."""
    removed = 0
    for path in files():
        try:
            path.unlink()
            removed += 1
        except OSError:
            continue
    return removed
