"""The autotune cache: the winning config per key, in memory and as JSON on disk.

One file per (kernel, key) under ``<TESSERA_CACHE_DIR>/autotune/``, written atomically
(temporary file + rename) so many processes can write at once. A winner decides which code
runs, so these files follow the disk cache's rules (``kernel/cache_files.py``): a private
directory, regular files of bounded size, sealed with the user's key, JSON of bounded
depth. A file that fails a check, or that is not an entry for the key asked for, is
ignored with a warning and rewritten by the next sweep; the tuner then checks the stored
config against the current space (``tuner.py``).
"""

from __future__ import annotations

import hashlib
import json
import time
import warnings
from pathlib import Path

from ..errors import CacheWarning
from ..kernel import cache_files, disk_cache
from ..kernel.cache_files import CorruptEntry

FORMAT = "tessera-autotune-2"
MAGIC = f"{FORMAT}\n".encode()
FOLDER = "autotune"
MAX_BYTES = 16 << 20  # a winner and its sweep's table: a few KiB


def key_digest(key: dict) -> str:
    text = FORMAT + json.dumps(key, sort_keys=True, default=str)  # a new format: new names
    return hashlib.sha256(text.encode()).hexdigest()[:40]


def path_for(kernel: str, digest: str) -> Path:
    return disk_cache.directory() / FOLDER / f"{kernel}.{digest}.json"


def load(kernel: str, key: dict) -> dict | None:
    """The cached winner (``{"config": {...}, ...}``) for ``key``, or None."""
    mac = disk_cache.folder_key(FOLDER, create=False)
    if mac is None:
        return None
    path = path_for(kernel, key_digest(key))
    try:
        data = read(path, mac)
        if data["kernel"] != kernel or data["key"] != json.loads(json.dumps(key, default=str)):
            raise CorruptEntry("not an entry for this key")
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, CorruptEntry) as exc:
        warnings.warn(f"ignoring the autotune cache file {path}: {exc}", CacheWarning, stacklevel=3)
        return None
    return data


def read(path: Path, mac: bytes) -> dict:
    """The entry in ``path``, checked (file, MAC, JSON, fields); else :class:`CorruptEntry`."""
    data = cache_files.read_sealed_json(path, mac, MAGIC, MAX_BYTES)
    config = data.get("config") if isinstance(data, dict) else None
    if not (
        isinstance(config, dict)
        and all(isinstance(data.get(name), str) for name in ("kernel", "created"))
        and isinstance(data.get("key"), dict)
        and isinstance(data.get("table"), list)
    ):
        raise CorruptEntry("not an autotune entry")
    return data


def save(kernel: str, key: dict, config: dict, table: list[dict]) -> Path | None:
    """Write the winner and the sweep's table; None when the cache is off or unwritable."""
    mac = disk_cache.folder_key(FOLDER, create=True)
    if mac is None:
        return None  # refused or unwritable: warned once
    path = path_for(kernel, key_digest(key))
    entry = {
        "kernel": kernel,
        "key": key,
        "config": config,
        "table": table,
        "created": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    try:
        cache_files.write_sealed_json(path, mac, MAGIC, entry)
    except OSError as exc:
        warnings.warn(f"cannot write the autotune cache {path}: {exc}", CacheWarning, stacklevel=3)
        return None
    return path


def entries() -> list[dict]:
    """Every autotune entry on disk (for ``tessera cache list``); ``problem`` says why an
    entry is unusable ("" if it is not)."""
    root = disk_cache.directory()
    mac = cache_files.cache_key(root, None, create=False)
    out = []
    for path in cache_files.files(root / FOLDER, "*.json"):
        try:
            if mac is None:
                raise CorruptEntry(cache_files.refusal(root) or "no key to check it with")
            data, problem = read(path, mac), ""
        except (OSError, CorruptEntry) as exc:
            data, problem = {}, str(exc) or type(exc).__name__
        out.append(
            {
                "path": path,
                "kernel": data.get("kernel", "?"),
                "config": data.get("config"),
                "created": data.get("created", "?"),
                "problem": problem,
            }
        )
    return out


def clear() -> int:
    """Remove every autotune entry; how many files went."""
    removed = 0
    for path in cache_files.files(disk_cache.directory() / FOLDER, "*.json"):
        try:
            path.unlink()
            removed += 1
        except OSError:
            continue
    return removed
