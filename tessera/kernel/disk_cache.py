"""The disk cache of compiled kernels (docs/targets.md): a process that launches a kernel with a
specialisation that an earlier process compiled loads the machine code instead of compiling.

Why not Numba's own ``cache=True``: it finds an entry through the ``.py`` file's timestamp,
keeps one index per function that concurrent writers (MPI ranks on a shared filesystem)
rewrite under each other, and raises on a corrupt index. Here each entry is one
self-checking file whose name is the hash of everything that affects the code:

* **key**: sha256 over the backend's parts (for the CPU target: the kernel's source hash, the
  specialisation key, the variant, the argument types, the generated source, the sources of
  the runtime it calls and the Numba options) and over this process's environment (Tessera,
  Numba, llvmlite and Python versions, every ``NUMBA_*`` setting, and the target triple, CPU
  name and CPU features). Any change is another file; no file is ever updated in place, so
  there is nothing to invalidate. The key is computed without importing Numba, so that a
  warm process need not import it at all (``backend/native.py``).
* **file**: ``<dir>/<backend>/<kernel>.<key>.nbk`` holds a magic line, a JSON header line
  (kernel, variant, where it is defined, payload size and sha256) and the payload (for the
  CPU target, a ``native.Image``: object code and what linking it needs).
* **writes** go to a uniquely named temporary file in the same directory, then
  ``os.replace``: a reader sees the whole old file, the whole new one, or none, on one machine
  or on a shared filesystem. When several processes compile one entry at once, the last
  rename wins and every copy is complete and identical.
* **reads** check the magic line, the header, the length and the checksum before
  handing the payload over, so a torn or garbled file is never given to LLVM. A file that
  fails a check (or that the backend cannot use) is ignored with a
  :class:`~tessera.errors.CacheWarning`; the kernel is compiled and the entry written again.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from ..config import get as setting
from ..errors import CacheWarning
from ..version import __version__

FORMAT = 2  # of the files; a new format is a new magic line, and old files are misses
MAGIC = f"tessera-kernel-cache {FORMAT}\n".encode()
SUFFIX = ".nbk"
_warned_dirs: set[Path] = set()
# Numba settings read at run time only: the same code runs under any of their values
_NOT_CODE_SETTINGS = frozenset({"NUMBA_NUM_THREADS", "NUMBA_CACHE_DIR"})


def enabled() -> bool:
    """Whether launches read and write the disk cache (``TESSERA_CACHE``, default on)."""
    value = setting("cache").strip().lower()
    if value in ("on", "1", "yes", "true"):
        return True
    if value in ("off", "0", "no", "false"):
        return False
    raise ValueError(f"TESSERA_CACHE={value!r} must be 'on' or 'off'")


def directory() -> Path:
    """The cache's root: ``TESSERA_CACHE_DIR``, else :func:`default_directory`."""
    configured = setting("cache_dir")
    return Path(configured).expanduser() if configured else default_directory()


def default_directory() -> Path:
    """The user's cache directory by platform convention, with a ``tessera`` folder."""
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / "tessera" / "Cache"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "tessera"
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"  # XDG: ignore relative
    return base / "tessera"


@functools.cache
def environment() -> tuple:
    """What besides a kernel decides its machine code: versions, Numba's settings, the CPU.

    Read without importing Numba: its version from its version file, its settings from the
    ``NUMBA_*`` environment variables (all but those that cannot change code, such as the
    thread count: coarser than needed, never too coarse)
    and ``.numba_config.yaml``, and the CPU as Numba's ``magic_tuple`` would describe it
    (target triple, host CPU name and features, both overridden by ``NUMBA_CPU_NAME`` and
    ``NUMBA_CPU_FEATURES``, which are part of the settings).
    """
    import llvmlite
    import llvmlite.binding as llb

    settings = tuple(
        sorted(
            (k, v)
            for k, v in os.environ.items()
            if k.startswith("NUMBA_") and k not in _NOT_CODE_SETTINGS
        )
    )
    config_file = Path(".numba_config.yaml")
    if config_file.is_file():
        settings += (("numba_config.yaml", config_file.read_text(errors="replace")),)
    return (
        ("tessera", __version__),
        ("numba", _numba_version()),
        ("llvmlite", llvmlite.__version__),
        ("python", sys.implementation.cache_tag, sys.version),
        ("numba settings", settings),
        ("target", llb.get_process_triple(), llb.get_host_cpu_name(), _cpu_features(llb)),
    )


def _numba_version() -> str:
    """The installed Numba's version (with its revision), without importing it."""
    from importlib.util import find_spec

    spec = find_spec("numba")
    if spec is None or not spec.submodule_search_locations:
        return "not installed"
    version_file = Path(spec.submodule_search_locations[0]) / "_version.py"
    try:
        return hashlib.sha256(version_file.read_bytes()).hexdigest()
    except OSError:
        from importlib.metadata import version

        return version("numba")


def _cpu_features(llb) -> str:
    try:
        return llb.get_host_cpu_features().flatten()
    except RuntimeError:
        return ""


def entry_key(parts: tuple) -> str:
    """The file-name hash of an entry: ``parts`` (the backend's) and :func:`environment`."""
    text = repr((FORMAT, environment(), parts))
    return hashlib.sha256(text.encode()).hexdigest()[:40]


class Entry:
    """One cache file: the compiled code of one kernel specialisation and variant."""

    def __init__(self, backend: str, kernel: str, key: str, meta: dict):
        self.path = directory() / backend / f"{kernel}.{key}{SUFFIX}"
        self.meta = {"kernel": kernel, **meta}

    def read(self) -> bytes | None:
        """The entry's payload, or None: missing, or failing a check (warned)."""
        try:
            data = self.path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None  # a miss; an unusable directory is reported when writing
        except OSError as exc:
            self.ignore(f"cannot be read: {exc}")
            return None
        try:
            return parse(data)[1]
        except CorruptEntry as exc:
            self.ignore(str(exc))
            return None

    def write(self, payload: bytes, signature: str) -> None:
        """Store ``payload``; a failure to write is a warning, not an error."""
        header = {
            **self.meta,
            "signature": signature,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "payload_bytes": len(payload),
            "payload_sha256": hashlib.sha256(payload).hexdigest(),
        }
        data = MAGIC + json.dumps(header).encode() + b"\n" + payload
        try:
            write_atomic(self.path, data)
        except OSError as exc:
            if self.path.parent not in _warned_dirs:  # once per directory, not per kernel
                _warned_dirs.add(self.path.parent)
                warnings.warn(
                    f"tessera disk cache: cannot write {self.path.parent} ({exc}); compiled "
                    "kernels are kept in memory only (set TESSERA_CACHE_DIR or TESSERA_CACHE=off)",
                    CacheWarning,
                    stacklevel=3,
                )

    def ignore(self, why: str) -> None:
        """Warn that this entry is not used (it is compiled and written again)."""
        warnings.warn(
            f"tessera disk cache: ignoring the entry {self.path} ({why}); compiling kernel "
            f"'{self.meta['kernel']}' again",
            CacheWarning,
            stacklevel=3,
        )


class CorruptEntry(ValueError):
    """A cache file failed one of the checks of :func:`parse`."""


def parse(data: bytes) -> tuple[dict, bytes]:
    """Split a cache file into its header and payload, checking both."""
    if not data.startswith(MAGIC):
        raise CorruptEntry("not a Tessera cache file, or another format version")
    end = data.find(b"\n", len(MAGIC))
    if end < 0:
        raise CorruptEntry("truncated header")
    try:
        header = json.loads(data[len(MAGIC) : end])
        size, digest = header["payload_bytes"], header["payload_sha256"]
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptEntry(f"unreadable header ({exc})") from None
    payload = data[end + 1 :]
    if len(payload) != size:
        raise CorruptEntry(f"truncated: {len(payload)} of {size} payload bytes")
    if hashlib.sha256(payload).hexdigest() != digest:
        raise CorruptEntry("checksum mismatch")
    return header, payload


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that no reader ever sees part of it (temp file + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # unique across processes and hosts sharing the directory (pid alone is not, over NFS)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(6).hex()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())  # the data is on disk before the name points at it
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@dataclass(frozen=True)
class EntryInfo:
    """One cache file as ``tessera cache list`` shows it (``kernel`` is "?" if unreadable)."""

    path: Path
    backend: str
    kernel: str
    variant: str
    defined: str
    size: int
    created: str
    ok: bool


def entries(root: Path | None = None) -> list[EntryInfo]:
    """The entries under ``root`` (default: :func:`directory`), reading only their headers."""
    root = directory() if root is None else root
    out = []
    for path in sorted(root.glob(f"*/*{SUFFIX}")):
        try:
            size = path.stat().st_size
            with path.open("rb") as f:
                ok = f.read(len(MAGIC)) == MAGIC
                header = json.loads(f.readline()) if ok else {}
        except (OSError, ValueError):
            ok, header, size = False, {}, 0
        out.append(
            EntryInfo(
                path=path,
                backend=path.parent.name,
                kernel=header.get("kernel", "?"),
                variant=header.get("variant", "?"),
                defined=header.get("defined", "?"),
                size=size,
                created=header.get("created", "?"),
                ok=ok and isinstance(header, dict),
            )
        )
    return out


def clear(root: Path | None = None) -> tuple[int, int]:
    """Delete every entry and leftover temporary file under ``root``; (files, bytes) freed.

    Safe while other processes use the cache: a reader that loses a file compiles, and a
    writer whose temporary file vanished warns and keeps its kernel in memory.
    """
    root = directory() if root is None else root
    files = nbytes = 0
    for path in [*root.glob(f"*/*{SUFFIX}"), *root.glob("*/.*.tmp")]:
        try:
            size = path.stat().st_size
            path.unlink()
        except OSError:
            continue  # removed by someone else meanwhile
        files, nbytes = files + 1, nbytes + size
    return files, nbytes
