"""The disk cache of compiled kernels (LANGUAGE.md §4): a process that launches a kernel with a
specialisation that an earlier process compiled loads the machine code instead of compiling.

Why not Numba's own ``cache=True``: it finds an entry through the ``.py`` file's timestamp,
keeps one index per function that concurrent writers (MPI ranks on a shared filesystem)
rewrite under each other, and raises on a corrupt index. Here each entry is one
self-checking file whose name is the hash of everything that affects the code:

* **key**: sha256 over the backend's parts (for the CPU target: the kernel's source hash, the
  specialisation key, the variant, the signature, the generated source, the sources of the
  runtime it calls and the Numba options) and over this process's environment (Tessera,
  Numba, llvmlite and Python versions, the Numba settings that change code, and Numba's
  target triple, CPU name and CPU features). Any change is another file; no file is ever
  updated in place, so there is nothing to invalidate.
* **file**: ``<dir>/<backend>/<kernel>.<key>.nbk`` holds a magic line, a JSON header line
  (kernel, variant, where it is defined, payload size and sha256) and the payload: Numba's
  own serialisation of the ``CompileResult`` (object code, plus what relinks it).
* **writes** go to a uniquely named temporary file in the same directory, then
  ``os.replace``: a reader sees the whole old file, the whole new one, or none, on one machine
  or on a shared filesystem. When several processes compile one entry at once, the last
  rename wins and every copy is complete and identical.
* **reads** check the magic line, the header, the length and the checksum before
  unpickling, so a torn or garbled file is never handed to LLVM. A file that fails a check is
  ignored with a :class:`~tessera.errors.CacheWarning`; the kernel is compiled and the entry
  written again.

Numba plugs a cache into a dispatcher through its ``_cache`` attribute (the interface of
``numba.core.caching._Cache``): ``dispatcher.compile`` asks it to load before compiling and
to save after. :class:`Entry` is such a cache for exactly one compiled function.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import pickle
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from ..config import get as setting
from ..errors import CacheWarning

FORMAT = 1  # of the files; a new format is a new magic line, and old files are misses
MAGIC = f"tessera-kernel-cache {FORMAT}\n".encode()
SUFFIX = ".nbk"
# Numba settings that change the machine code it generates (the CPU is in magic_tuple)
_NUMBA_SETTINGS = ("OPT", "LOOP_VECTORIZE", "BOUNDSCHECK", "DEBUGINFO_DEFAULT", "USING_SVML")
_warned_dirs: set[Path] = set()


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

    The CPU part is Numba's own ``magic_tuple`` (target triple, CPU name, CPU features,
    honouring ``NUMBA_CPU_NAME``/``NUMBA_CPU_FEATURES``), the same thing Numba's cache keys on.
    """
    import llvmlite
    import numba
    from numba.core import config as numba_config
    from numba.core.registry import cpu_target

    from .. import __version__  # the package root, read at run time (no import cycle)

    return (
        ("tessera", __version__),
        ("numba", numba.__version__),
        ("llvmlite", llvmlite.__version__),
        ("python", sys.implementation.cache_tag, sys.version),
        ("numba settings", tuple((s, getattr(numba_config, s, None)) for s in _NUMBA_SETTINGS)),
        ("target", cpu_target.target_context.codegen().magic_tuple()),
    )


def entry_key(parts: tuple) -> str:
    """The file-name hash of an entry: ``parts`` (the backend's) and :func:`environment`."""
    text = repr((FORMAT, environment(), parts))
    return hashlib.sha256(text.encode()).hexdigest()[:40]


class Entry:
    """One cache file, as the cache of one Numba dispatcher (``dispatcher._cache = entry``).

    ``loaded`` tells afterwards whether ``dispatcher.compile`` loaded the code from the file
    (True) or compiled it (False).
    """

    def __init__(self, backend: str, kernel: str, key: str, meta: dict):
        self.path = directory() / backend / f"{kernel}.{key}{SUFFIX}"
        self.meta = {"kernel": kernel, **meta}
        self.loaded = False

    @property
    def cache_path(self) -> str:
        return str(self.path.parent)

    def load_overload(self, sig, target_context):
        """The cached ``CompileResult`` for ``sig``, or None: missing, or unusable (warned)."""
        payload = self._read()
        if payload is None:
            return None
        from numba.core.compiler import CompileResult

        try:
            prepare_to_link(target_context, payload)
            cres = CompileResult._rebuild(target_context, *payload)
        except Exception as exc:
            self._corrupt(f"cannot be relinked: {type(exc).__name__}: {exc}")
            return None
        self.loaded = True
        return cres

    def save_overload(self, sig, cres) -> None:
        """Write the freshly compiled ``cres``; a failure to write is a warning, not an error."""
        if any(not f.can_cache for f in cres.lifted) or cres.library.has_dynamic_globals:
            return  # refers to this process's memory (Numba's own rule); cannot be reused
        from numba.core.serialize import dumps

        try:
            payload = dumps(cres._reduce())
        except Exception as exc:  # the kernel is compiled and runs; only reuse is lost
            warnings.warn(
                f"tessera disk cache: cannot store kernel '{self.meta['kernel']}' "
                f"({type(exc).__name__}: {exc}); it will be compiled again in a new process",
                CacheWarning,
                stacklevel=2,
            )
            return
        header = {
            **self.meta,
            "signature": str(sig),
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
                    stacklevel=2,
                )

    def _read(self) -> tuple | None:
        try:
            data = self.path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None  # a miss; an unusable directory is reported when writing
        except OSError as exc:
            self._corrupt(f"cannot be read: {exc}")
            return None
        try:
            _, payload = parse(data)
            return pickle.loads(payload)
        except Exception as exc:  # a check failed, or the pickle itself is broken
            self._corrupt(str(exc) if isinstance(exc, CorruptEntry) else repr(exc))
            return None

    def _corrupt(self, why: str) -> None:
        warnings.warn(
            f"tessera disk cache: ignoring the entry {self.path} ({why}); compiling kernel "
            f"'{self.meta['kernel']}' again",
            CacheWarning,
            stacklevel=3,
        )

    # the rest of numba.core.caching._Cache's interface: one file has nothing to switch or flush
    def enable(self) -> None:
        pass

    def disable(self) -> None:
        pass

    def flush(self) -> None:
        pass


def prepare_to_link(target_context, payload: tuple) -> None:
    """Make this process able to link a cached ``CompileResult``, cheaply when it can.

    Numba's own cache calls ``target_context.refresh()``, which loads every typing and
    lowering registry (about half a second, SciPy's BLAS bindings included): that is needed
    to compile, not to link. Linking needs only the symbols the object code calls: Numba's C
    helpers (installed with the target context), the NRT (``rtsys.initialize``) and what the
    payload's ``reload_init`` functions install (the parallel runtime). So those are set up,
    and every external the code declares is looked up; if one is missing (some Numba
    feature that registers its symbols in a registry), the full refresh runs as Numba's own
    cache would. Linking with a missing symbol must never happen: LLVM aborts the process.
    """
    import llvmlite.binding as ll
    from numba.core.runtime import rtsys

    rtsys.initialize(target_context)
    libdata, reload_init = payload[0], payload[7]
    for init in reload_init:  # idempotent; CompileResult._rebuild runs them again
        init()
    _, kind, data = libdata
    if kind != "object":
        target_context.refresh()
        return
    engine = target_context.codegen()._engine
    module = ll.parse_bitcode(data[1])
    for symbol in (*module.functions, *module.global_variables):
        name = symbol.name
        if not symbol.is_declaration or name.startswith("llvm."):
            continue
        if not ll.address_of_symbol(name) and not engine.is_symbol_defined(name):
            target_context.refresh()
            return


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
