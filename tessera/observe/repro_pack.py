"""A repro pack read as what it may be: a file from someone else (docs/observability.md).

* **Trust.** Replaying a pack runs its ``kernel.py``: Python code. A capture and a pack are
  *sealed* when Tessera writes them (``seal.txt``: an HMAC-SHA256, under the disk cache's
  key, of every file's name and SHA-256; ``kernel/cache_files.py``), so a pack made on this
  machine by this user is recognised; any other pack (made elsewhere, edited, unsealed)
  runs only with ``--trust`` or an interactive yes, and is refused otherwise.
* **Bounded reads.** Only the pack's known flat file names are read, each within a size
  limit; JSON nested at most 32 deep; ``.npy`` headers are checked against the bytes that
  follow them before an array is made, and never unpickled (``allow_pickle=False``).
* **Validated metadata.** Kernel name, grid, arguments (kind, shape, dtype, data) and
  outputs are checked before anything runs; a problem is a :class:`PackError` that says
  which file and field.
"""

from __future__ import annotations

import hashlib
import io
import math
import zipfile
from pathlib import Path

import numpy as np
from numpy.lib import format as npy_format

from ..errors import TesseraError
from ..kernel import cache_files, disk_cache

SEAL_FILE = "seal.txt"
MAGIC = b"tessera-repro-seal 1\n"
KNOWN = frozenset(
    {
        "error.txt",
        "log.txt",
        "metadata.json",
        "kernel.py",
        "ir.txt",
        "settings.json",
        "versions.json",
        "args.npz",
        "outputs.npz",
        "env_hash.txt",
        "replay.py",
        "__main__.py",
        SEAL_FILE,
    }
)
MAX_FILE_BYTES = 1 << 30  # args.npz: TESSERA_CRASH_MAX_MB (64 by default) and more
MAX_TEXT_BYTES = 16 << 20  # every other file
MAX_ARRAY_BYTES = 1 << 30  # an argument without data is zeros of its shape: at most this
MAX_GRID_LANES = 1 << 40
MAX_ARGS = 256


class PackError(TesseraError):
    """A repro pack is malformed or inconsistent; nothing of it was run."""


class ReplayRefused(TesseraError):
    """A pack not sealed by this user on this machine, without --trust or a yes."""


def read(path: Path) -> dict[str, bytes]:
    """The pack's known files (a zip, or an unpacked folder), each read within its limit."""
    files: dict[str, bytes] = {}
    try:
        if path.is_dir():
            for name in sorted(KNOWN):
                try:
                    files[name] = cache_files.read_regular(path / name, _limit(name), 0)
                except FileNotFoundError:
                    continue
            return files
        with zipfile.ZipFile(path) as z:
            infos = z.infolist()
            if len(infos) > 4 * len(KNOWN):
                raise PackError(f"{path}: {len(infos)} files, not a repro pack")
            for info in infos:
                if info.filename not in KNOWN:
                    continue  # unknown or nested names are never read
                if info.file_size > _limit(info.filename):
                    raise PackError(f"{path}: {info.filename} is {info.file_size} bytes, too large")
                files[info.filename] = z.read(info)
    except PackError:
        raise
    except (OSError, zipfile.BadZipFile, cache_files.CorruptEntry, ValueError) as exc:
        raise PackError(f"cannot read the repro pack {path}: {exc}") from None
    return files


def _limit(name: str) -> int:
    return MAX_FILE_BYTES if name.endswith(".npz") else MAX_TEXT_BYTES


def manifest(files: dict[str, bytes]) -> bytes:
    """What a seal covers: every file but the seal, by name and SHA-256."""
    rows = [
        f"{name} {hashlib.sha256(data).hexdigest()}\n"
        for name, data in sorted(files.items())
        if name != SEAL_FILE
    ]
    return "".join(rows).encode()


def seal(files: dict[str, bytes]) -> bytes | None:
    """``seal.txt`` for these files under this user's cache key (None: no usable key)."""
    key = cache_files.cache_key(disk_cache.directory(), None, create=True)
    return None if key is None else cache_files.seal(key, MAGIC, manifest(files))


def seal_folder(folder: Path) -> None:
    """Seal a capture directory's files (crash.py, when a capture is complete)."""
    files = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file() and p.name in KNOWN}
    sealed = seal(files)
    if sealed is not None:
        (folder / SEAL_FILE).write_bytes(sealed)


def sealed_here(files: dict[str, bytes]) -> bool:
    """Whether this user sealed exactly these files on this machine."""
    if SEAL_FILE not in files:
        return False
    key = cache_files.cache_key(disk_cache.directory(), None, create=False)
    if key is None:
        return False
    try:
        return cache_files.unseal(key, MAGIC, files[SEAL_FILE]) == manifest(files)
    except cache_files.CorruptEntry:
        return False


def load_json(files: dict[str, bytes], name: str) -> object:
    if name not in files:
        raise PackError(f"the pack has no {name}")
    try:
        return cache_files.loads_json(files[name])
    except cache_files.CorruptEntry as exc:
        raise PackError(f"{name}: {exc}") from None


def metadata(files: dict[str, bytes]) -> tuple[dict, dict]:
    """The pack's checked metadata.json and its settings (name -> value)."""
    meta = load_json(files, "metadata.json")
    if not isinstance(meta, dict):
        raise PackError("metadata.json: not an object")
    kernel = meta.get("kernel")
    if not isinstance(kernel, str) or not kernel.isidentifier():
        raise PackError(f"metadata.json: 'kernel' must name a function, got {kernel!r}")
    grid = meta.get("grid")
    if (
        not isinstance(grid, list)
        or not 1 <= len(grid) <= 3
        or not all(type(g) is int and g >= 0 for g in grid)
        or math.prod(grid) > MAX_GRID_LANES
    ):
        raise PackError(f"metadata.json: 'grid' must be 1 to 3 extents >= 0, got {grid!r}")
    rows = meta.get("args")
    if not isinstance(rows, list) or len(rows) > MAX_ARGS:
        raise PackError("metadata.json: 'args' must be a list of arguments")
    for k, row in enumerate(rows):
        _check_argument(k, row)
    for field in ("target", "error_type", "error_kind"):
        if meta.get(field) is not None and not isinstance(meta[field], str):
            raise PackError(f"metadata.json: {field!r} must be text")
    outputs = meta.get("outputs") or []
    if not isinstance(outputs, list) or not all(
        isinstance(o, str) and o[:3] == "arg" and o[3:].isdigit() and int(o[3:]) < len(rows)
        for o in outputs
    ):
        raise PackError(f"metadata.json: 'outputs' must name arguments (argN), got {outputs!r}")
    settings = load_json(files, "settings.json") if "settings.json" in files else []
    if not isinstance(settings, list) or not all(
        isinstance(r, dict) and isinstance(r.get("name"), str) for r in settings
    ):
        raise PackError("settings.json: not a list of settings")
    return meta, {r["name"]: r.get("value") for r in settings}


def _check_argument(k: int, row: object) -> None:
    where = f"metadata.json: argument {k}"
    if not isinstance(row, dict) or row.get("kind") not in ("scalar", "array"):
        raise PackError(f"{where}: must have kind 'scalar' or 'array'")
    if row["kind"] == "scalar":
        if type(row.get("value")) not in (bool, int, float):
            raise PackError(f"{where}: a scalar's value must be a number, got {row.get('value')!r}")
        return
    shape, dtype = row.get("shape"), _dtype(row.get("dtype"), where)
    if (
        not isinstance(shape, list)
        or len(shape) > 8
        or not all(type(s) is int and s >= 0 for s in shape)
    ):
        raise PackError(f"{where}: shape must be at most 8 extents >= 0, got {shape!r}")
    if row.get("data") is None and math.prod(shape) * dtype.itemsize > MAX_ARRAY_BYTES:
        raise PackError(f"{where}: zeros of shape {shape} would be over {MAX_ARRAY_BYTES} bytes")


def _dtype(name: object, where: str) -> np.dtype:
    try:
        dtype = np.dtype(name) if isinstance(name, str) else None
    except TypeError:
        dtype = None
    if dtype is None or dtype.hasobject or dtype.kind not in "biufc" and dtype.name != "bfloat16":
        raise PackError(f"{where}: {name!r} is not a numeric dtype")
    return dtype


def arrays(files: dict[str, bytes], name: str) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` in the pack, each header checked against its bytes first
    and nothing unpickled."""
    if name not in files:
        return {}
    out = {}
    try:
        with zipfile.ZipFile(io.BytesIO(files[name])) as z:
            for info in z.infolist()[:MAX_ARGS]:
                if not info.filename.endswith(".npy") or info.file_size > MAX_FILE_BYTES:
                    raise PackError(f"{name}: {info.filename} is not an array of bounded size")
                data = z.read(info)
                _check_npy(name, info.filename, data)
                out[info.filename[:-4]] = np.load(io.BytesIO(data), allow_pickle=False)
    except PackError:
        raise
    except (OSError, zipfile.BadZipFile, ValueError, EOFError) as exc:
        raise PackError(f"{name}: cannot be read ({exc})") from None
    return out


def _check_npy(name: str, member: str, data: bytes) -> None:
    stream = io.BytesIO(data)
    version = npy_format.read_magic(stream)
    reader = {
        (1, 0): npy_format.read_array_header_1_0,
        (2, 0): npy_format.read_array_header_2_0,
    }.get(version)
    if reader is None:
        raise PackError(f"{name}: {member} has .npy version {version}")
    shape, _, dtype = reader(stream)
    if dtype.hasobject:
        raise PackError(f"{name}: {member} holds Python objects, which are never unpickled")
    need = math.prod(shape) * dtype.itemsize
    if need != len(data) - stream.tell():
        raise PackError(
            f"{name}: {member} declares shape {shape} of {dtype} ({need} bytes) but holds "
            f"{len(data) - stream.tell()}"
        )
