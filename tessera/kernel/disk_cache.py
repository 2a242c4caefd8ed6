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
  warm process need not import it at all (``targets/cpu/native.py``).
* **file**: ``<dir>/<backend>/<kernel>.<key>.nbk`` holds a magic line, a MAC line, a JSON
  header line (kernel, backend, the whole key and a fingerprint of the environment, variant,
  where it is defined, payload size) and the payload (for the CPU target, a
  ``native.Image``: object code and what linking it needs).
* **trust**: the directory, the key file that the MAC is made with and every file read are
  checked as ``cache_files.py`` says (owned by this user, writable by nobody else, regular
  files of bounded size); a file is used only if its MAC is this user's and its header
  names exactly the kernel, key and environment asked for. The file name is never trusted:
  an entry copied or renamed to another kernel's name is refused.
* **writes** go to a uniquely named temporary file in the same directory, then
  ``os.replace``: a reader sees the whole old file, the whole new one, or none, on one machine
  or on a shared filesystem. When several processes compile one entry at once, the last
  rename wins and every copy is complete and identical.
* **one compile per node**: under MPI the ranks of a node often reach one kernel at once.
  The first to take the entry's lock file (``<entry>.lock``, :func:`compiling`) compiles;
  the others wait for its entry (at most ``LOCK_WAIT_S``, then they compile too).
* **reads** check all of the above before handing the payload over, so a torn, garbled,
  planted or misplaced file is never given to LLVM. A file that fails a check (or that the
  backend cannot use) is ignored with a :class:`~tessera.errors.CacheWarning`; the kernel is
  compiled and the entry written again.
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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..config import get as setting
from ..errors import CacheWarning
from ..version import __version__
from . import cache_files
from .cache_files import CorruptEntry

FORMAT = 3  # of the files; a new format is a new magic line, and old files are misses
MAGIC = f"tessera-kernel-cache {FORMAT}\n".encode()
SUFFIX = ".nbk"
MAX_ENTRY_BYTES = 64 << 20  # a few hundred KiB is usual; a larger file is not read
MAX_HEADER_BYTES = 64 << 10
LOCK_WAIT_S = 120.0  # a compile takes seconds; past this a waiting process compiles itself
_POLL_S = 0.05
# the header's fields and their types: anything else is a malformed header
HEADER_FIELDS = {
    "kernel": str,
    "backend": str,
    "key": str,
    "environment": str,
    "variant": str,
    "defined": str,
    "signature": str,
    "created": str,
    "payload_bytes": int,
}
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


def folder_key(sub: str, create: bool) -> bytes | None:
    """The key that seals the entries of the cache's folder ``sub`` (autotune winners,
    link measurements), or None where the cache is off or its directory is refused."""
    if not enabled():
        return None
    return cache_files.cache_key(directory(), sub, create=create)


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


def fingerprint() -> str:
    """The environment (:func:`environment`: versions, settings, CPU) as an entry records it."""
    return hashlib.sha256(repr(environment()).encode()).hexdigest()


def mac_key(root: Path | None = None) -> bytes | None:
    """The key this user's entries under ``root`` (default: :func:`directory`) are sealed
    with; None: no usable cache there."""
    return cache_files.cache_key(directory() if root is None else root, None, create=False)


class Entry:
    """One cache file: the compiled code of one kernel specialisation and variant.

    ``parts`` are everything the backend's code depends on; the file's header must repeat
    them (and this process's environment) exactly, whatever the file is called. ``meta``
    holds what ``tessera cache list`` shows: the ``variant`` and where it is ``defined``.
    """

    def __init__(self, backend: str, kernel: str, parts: tuple, meta: dict):
        self.root = directory()
        self.backend = backend
        self.parts = parts
        self.path = self.root / backend / f"{kernel}.{entry_key(parts)}{SUFFIX}"
        self.identity = {
            "kernel": kernel,
            "backend": backend,
            "key": repr(parts),
            "environment": fingerprint(),
        }
        self.meta = {"kernel": kernel, **meta}

    def read(self) -> bytes | None:
        """The entry's payload, or None: missing, or failing a check (warned)."""
        key = cache_files.cache_key(self.root, self.backend, create=False)
        if key is None:
            return None  # nothing cached yet, or a refused directory (warned once)
        try:
            header, payload = parse(cache_files.read_regular(self.path, MAX_ENTRY_BYTES), key)
            for field, wanted in self.identity.items():
                if header[field] != wanted:
                    raise CorruptEntry(_mismatch(field, header))
        except (FileNotFoundError, NotADirectoryError):
            return None  # a miss
        except OSError as exc:
            self.ignore(f"cannot be read: {exc}")
            return None
        except CorruptEntry as exc:
            self.ignore(str(exc))
            return None
        return payload

    def write(self, payload: bytes, signature: str) -> None:
        """Store ``payload``; a failure to write is a warning, not an error."""
        key = cache_files.cache_key(self.root, self.backend, create=True)
        if key is None:
            return  # refused or unwritable: warned once
        header = {
            **self.meta,
            **self.identity,
            "signature": signature,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "payload_bytes": len(payload),
        }
        data = pack(json.dumps(header).encode(), payload, key)
        try:
            if len(data) > MAX_ENTRY_BYTES:
                raise OSError(f"{len(data)} bytes, more than the limit of {MAX_ENTRY_BYTES}")
            cache_files.write_atomic(self.path, data)
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


def _mismatch(field: str, header: dict) -> str:
    if field == "environment":
        return "compiled under other versions, settings or another CPU"
    return (
        f"it holds the {header['backend']} code of kernel '{header['kernel']}' for another "
        "specialisation or kernel"
    )


def pack(header: bytes, payload: bytes, key: bytes) -> bytes:
    """A cache file: its header line and payload, sealed under ``key``."""
    return cache_files.seal(key, MAGIC, header + b"\n" + payload)


def parse(data: bytes, key: bytes) -> tuple[dict, bytes]:
    """Split a cache file into its header and payload, checking its MAC, then the header."""
    body = cache_files.unseal(key, MAGIC, data)
    end = body.find(b"\n", 0, MAX_HEADER_BYTES)
    if end < 0:
        raise CorruptEntry("truncated header")
    try:
        header = cache_files.loads_json(body[:end])
    except CorruptEntry as exc:
        raise CorruptEntry(f"malformed header: {exc}") from None
    if not (
        isinstance(header, dict)
        and all(type(header.get(name)) is kind for name, kind in HEADER_FIELDS.items())
    ):
        raise CorruptEntry("malformed header: not the fields of an entry")
    payload = body[end + 1 :]
    if len(payload) != header["payload_bytes"]:
        raise CorruptEntry(f"truncated: {len(payload)} of {header['payload_bytes']} payload bytes")
    return header, payload


@dataclass(frozen=True)
class EntryInfo:
    """One cache file as ``tessera cache list`` shows it (``problem``: why it is unusable)."""

    path: Path
    backend: str
    kernel: str
    variant: str
    defined: str
    size: int
    created: str
    problem: str = ""

    @property
    def ok(self) -> bool:
        return not self.problem


def entries(root: Path | None = None) -> list[EntryInfo]:
    """The entries under ``root`` (default: :func:`directory`), each checked as a launch
    would check it (but for the key it is asked for)."""
    root = directory() if root is None else root
    key = cache_files.cache_key(root, None, create=False)
    out = []
    for folder in cache_files.files(root, "*"):
        for path in cache_files.files(folder, f"*{SUFFIX}"):
            out.append(_info(path, key, cache_files.refusal(root)))
    return out


def _info(path: Path, key: bytes | None, refusal: str | None) -> EntryInfo:
    header, problem, size = {}, "", 0
    try:
        size = path.lstat().st_size
        data = cache_files.read_regular(path, MAX_ENTRY_BYTES)
        if key is None:
            raise CorruptEntry(refusal or "no key to check it with")
        header, _ = parse(data, key)
    except (OSError, CorruptEntry) as exc:
        problem = str(exc) or type(exc).__name__
    return EntryInfo(
        path=path,
        backend=path.parent.name,
        kernel=header.get("kernel", "?"),
        variant=header.get("variant", "?"),
        defined=header.get("defined", "?"),
        size=size,
        created=header.get("created", "?"),
        problem=problem,
    )


def clear(root: Path | None = None) -> tuple[int, int]:
    """Delete every entry and leftover temporary file under ``root``; (files, bytes) freed.

    Safe while other processes use the cache: a reader that loses a file compiles, and a
    writer whose temporary file vanished warns and keeps its kernel in memory.
    """
    root = directory() if root is None else root
    files = nbytes = 0
    for folder in cache_files.files(root, "*"):
        leftovers = cache_files.files(folder, ".*.tmp")
        for path in [*cache_files.files(folder, f"*{SUFFIX}"), *leftovers]:
            try:
                size = path.lstat().st_size
                path.unlink()
            except OSError:
                continue  # removed by someone else meanwhile
            files, nbytes = files + 1, nbytes + size
    return files, nbytes


def prune(older_than: float, root: Path | None = None) -> tuple[int, int]:
    """Delete the entries (and leftover temporary files) under ``root`` last written more
    than ``older_than`` seconds ago; (files, bytes) freed. Safe as :func:`clear` is."""
    root = directory() if root is None else root
    cutoff = time.time() - older_than
    files = nbytes = 0
    for folder in cache_files.files(root, "*"):
        leftovers = cache_files.files(folder, ".*.tmp")
        for path in [*cache_files.files(folder, f"*{SUFFIX}"), *leftovers]:
            try:
                st = path.lstat()
                if st.st_mtime >= cutoff:
                    continue
                path.unlink()
            except OSError:
                continue
            files, nbytes = files + 1, nbytes + st.st_size
    return files, nbytes


@contextlib.contextmanager
def compiling(entry: Entry | None) -> Iterator[bool]:
    """Hold ``entry``'s lock while compiling it (for any backend). Yields whether this
    process waited for another one that held the lock: then read the entry again before
    compiling. No entry (the cache is off) or a refused directory: no lock."""
    lock = None
    if entry is not None and cache_files.cache_key(entry.root, entry.backend, create=True):
        lock = entry.path.with_name(entry.path.name + ".lock")
    fd, waited = _take(lock) if lock is not None else (None, False)
    try:
        yield waited
    finally:
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
                lock.unlink()  # type: ignore[union-attr]


def _take(lock: Path) -> tuple[int | None, bool]:
    """Create ``lock`` exclusively: (its descriptor, whether this process waited first).
    While another process holds it, wait until it is gone (then ``(None, True)``: read
    the entry it wrote) or LOCK_WAIT_S has passed (``(None, True)`` too: the caller
    finds no entry and compiles). A lock older than LOCK_WAIT_S is left by a process that
    died: it is taken over. Where no lock file can be made, ``(None, False)``."""
    deadline = time.monotonic() + LOCK_WAIT_S
    waited = False
    while True:
        try:
            return os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600), waited
        except FileExistsError:
            pass
        except OSError:
            return None, waited
        try:
            stale = time.time() - lock.stat().st_mtime > LOCK_WAIT_S
        except OSError:  # released between the two calls: the entry may be there now
            if waited:
                return None, True
            continue
        if stale:
            with contextlib.suppress(OSError):
                lock.unlink()
            continue
        if time.monotonic() > deadline:
            return None, True
        waited = True
        time.sleep(_POLL_S)
