"""The autotune cache: the winning config per key, in memory and as JSON on disk.

One file per (kernel, key) under ``<TESSERA_CACHE_DIR>/autotune/``, written atomically
(temporary file + rename) so many processes can write at once; a corrupt or foreign file
is ignored with a warning and rewritten by the next sweep.
"""

from __future__ import annotations

import hashlib
import json
import time
import warnings
from pathlib import Path

from ..errors import CacheWarning
from ..kernel import disk_cache

FORMAT = "tessera-autotune-1"


def key_digest(key: dict) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:40]


def path_for(kernel: str, digest: str) -> Path:
    return disk_cache.directory() / "autotune" / f"{kernel}.{digest}.json"


def load(kernel: str, key: dict) -> dict | None:
    """The cached winner (``{"config": {...}, ...}``) for ``key``, or None."""
    if not disk_cache.enabled():
        return None
    path = path_for(kernel, key_digest(key))
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        warnings.warn(
            f"ignoring unreadable autotune cache file {path}: {exc}", CacheWarning, stacklevel=3
        )
        return None
    if not (
        isinstance(data, dict)
        and data.get("format") == FORMAT
        and data.get("key") == json.loads(json.dumps(key, default=str))
        and isinstance(data.get("config"), dict)
    ):
        warnings.warn(
            f"ignoring autotune cache file {path}: not an entry for this key",
            CacheWarning,
            stacklevel=3,
        )
        return None
    return data


def save(kernel: str, key: dict, config: dict, table: list[dict]) -> Path | None:
    """Write the winner and the sweep's table; None when the cache is off or unwritable."""
    if not disk_cache.enabled():
        return None
    path = path_for(kernel, key_digest(key))
    entry = {
        "format": FORMAT,
        "kernel": kernel,
        "key": key,
        "config": config,
        "table": table,
        "created": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    try:
        disk_cache.write_atomic(path, json.dumps(entry, indent=1, default=str).encode())
    except OSError as exc:
        warnings.warn(f"cannot write the autotune cache {path}: {exc}", CacheWarning, stacklevel=3)
        return None
    return path


def entries() -> list[dict]:
    """Every autotune entry on disk (for ``tessera cache list``)."""
    out = []
    for path in sorted((disk_cache.directory() / "autotune").glob("*.json")):
        try:
            data = json.loads(path.read_text())
            out.append(
                {
                    "path": path,
                    "kernel": data.get("kernel", "?"),
                    "config": data.get("config"),
                    "created": data.get("created", "?"),
                }
            )
        except (OSError, ValueError):
            out.append({"path": path, "kernel": "?", "config": None, "created": "?"})
    return out


def clear() -> int:
    """Remove every autotune entry; how many files went."""
    removed = 0
    for path in (disk_cache.directory() / "autotune").glob("*.json"):
        try:
            path.unlink()
            removed += 1
        except OSError:
            continue
    return removed
