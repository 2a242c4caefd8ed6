"""The files of Tessera's on-disk caches, read as what they may be: input someone else wrote.

The disk cache holds machine code that Tessera links and runs, and the autotune cache picks
which code runs, so a file in them is used only if this user's own process wrote it. The
rules, the ones ssh and pip apply to their own directories:

* **The directory** (``TESSERA_CACHE_DIR``) and its sub-directories are created 0700 and
  must be owned by this user and writable by nobody else. Otherwise the whole cache is
  refused for the rest of the process (one :class:`~tessera.errors.CacheWarning`), and
  kernels are compiled and kept in memory.
* **The key**: 32 random bytes in ``<dir>/secret.key``, created 0600 on first use and
  refused unless it is a regular file owned by this user that nobody else can read or
  write. Every file is sealed with an HMAC-SHA256 under it. Someone who can write into the
  directory but cannot read the key cannot make a file that is accepted; an edited,
  truncated or half-written file fails the same check.
* **Reads** take only regular files of bounded size, owned by this user and writable by
  nobody else: no symbolic link is followed (``O_NOFOLLOW``), a FIFO or a device is never
  opened for reading (``lstat`` first, ``O_NONBLOCK``, then ``fstat`` of what was opened),
  and nothing past the size limit is read.
* **JSON** from a file is parsed only after its nesting depth was checked, so a deeply
  nested header is a refused entry, not a ``RecursionError``.

What this cannot protect against: anyone who can read the key file (this user's own
account, root) can seal a file. docs/targets.md states the trust model.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import re
import stat
import warnings
from pathlib import Path

from ..errors import CacheWarning, TesseraError

KEY_FILE = "secret.key"
KEY_BYTES = 32
MAC_LENGTH = 64  # hex digits of an HMAC-SHA256
MAX_JSON_DEPTH = 32
_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)
_CREATE_FLAGS = (
    os.O_WRONLY
    | os.O_CREAT
    | os.O_EXCL
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)
_JSON_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')

_keys: dict[Path, tuple[tuple, bytes]] = {}  # key files read: (inode, mode, owner, times), key
_refused: dict[Path, str] = {}  # the cache roots it refused (warned once), and why


class CorruptEntry(TesseraError):
    """A cache file failed a check; it is ignored (with a warning) and written again."""


class _Refused(TesseraError):
    """The cache directory or its key fails a check: the cache is not used at all."""


def cache_key(root: Path, sub: str | None, create: bool) -> bytes | None:
    """The MAC key of the cache at ``root`` after checking ``root``, its folder ``sub`` and
    the key file; with ``create``, making whichever of them is missing, privately.

    None: nothing to read yet (something is missing and ``create`` is false), or the cache
    is refused for this process; the first refusal of a directory is warned.
    """
    if root in _refused:
        return None
    try:
        for path in (root, root / sub) if sub else (root,):
            if create:
                path.mkdir(mode=0o700, parents=True, exist_ok=True)
            _check_directory(path, follow=path == root)
        return _key(root / KEY_FILE, create)
    except OSError as exc:
        if not create and isinstance(exc, (FileNotFoundError, NotADirectoryError)):
            return None  # nothing written yet
        _refuse(root, f"cannot {'write' if create else 'read'} {root} ({exc})", "")
    except _Refused as exc:
        _refuse(
            root,
            f"refusing the cache directory (its files decide what code runs): {exc}",
            f"make {root} yours and private (chmod 700, a key file chmod 600), or remove it",
        )
    return None


def refusal(root: Path) -> str | None:
    """Why the cache at ``root`` was refused in this process, if it was."""
    return _refused.get(root)


def _refuse(root: Path, message: str, advice: str) -> None:
    _refused[root] = message
    warnings.warn(
        f"tessera disk cache: {message}; compiled kernels are kept in memory only in this "
        f"process ({advice + ', or ' if advice else ''}set TESSERA_CACHE_DIR or "
        "TESSERA_CACHE=off)",
        CacheWarning,
        stacklevel=4,
    )


def _check_directory(path: Path, follow: bool) -> None:
    """Raise :class:`_Refused` unless ``path`` is a directory this user owns that nobody
    else can write (the root may be a symbolic link to one; its folders may not)."""
    st = os.stat(path) if follow else os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise _Refused(f"{path} is a symbolic link")
    if not stat.S_ISDIR(st.st_mode):
        raise _Refused(f"{path} is not a directory")
    problem = _permission_problem(st, 0o022)
    if problem:
        raise _Refused(f"{path} is {problem}")


def _permission_problem(st: os.stat_result, forbidden: int) -> str | None:
    """What is wrong with a file's owner or mode (``forbidden``: bits others must lack)."""
    if os.name != "posix":  # no owners or mode bits to check
        return None
    uid = os.getuid()
    if st.st_uid != uid:
        return f"owned by uid {st.st_uid}, not by this user (uid {uid})"
    loose = st.st_mode & forbidden
    if loose & 0o022:
        return f"writable by others (mode {st.st_mode & 0o777:o})"
    if loose:
        return f"readable by others (mode {st.st_mode & 0o777:o})"
    return None


def _key(path: Path, create: bool) -> bytes | None:
    """The key in ``path``: read once per process, its file checked again at every use (an
    ``lstat``) so that a key file that others can now read stops the cache at once."""
    try:
        st = os.lstat(path)
        identity = (st.st_ino, st.st_mode, st.st_uid, st.st_mtime_ns, st.st_ctime_ns)
    except FileNotFoundError:
        identity = None  # made below, if ``create``
    known = _keys.get(path)
    if known is not None and identity == known[0]:
        return known[1]
    key = _read_key(path, create)
    if key is not None and identity is not None:  # stat before read: a newer file is reread
        _keys[path] = (identity, key)
    return key


def _read_key(path: Path, create: bool) -> bytes | None:
    try:
        data = read_regular(path, KEY_BYTES, forbidden=0o066)
    except FileNotFoundError:
        if not create:
            return None
        _make_key(path)
        data = read_regular(path, KEY_BYTES, forbidden=0o066)
    except CorruptEntry as exc:
        raise _Refused(f"the key file {path} is {exc}") from None
    if len(data) != KEY_BYTES:
        raise _Refused(f"the key file {path} holds {len(data)} bytes, not {KEY_BYTES}")
    return data


def _make_key(path: Path) -> None:
    """Create the key file whole; a key another process made meanwhile is kept (a hard link
    never replaces a file), so every process of one cache uses one key."""
    tmp = _write_temporary(path, os.urandom(KEY_BYTES))
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    except OSError:  # a filesystem without hard links: the last writer's key wins
        if not path.exists():
            os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def read_regular(path: Path, limit: int, forbidden: int = 0o022) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most ``limit`` bytes, owned by
    this user and without the ``forbidden`` mode bits; else :class:`CorruptEntry`.

    A missing file raises ``FileNotFoundError`` (a miss). Nothing but a regular file is
    ever opened for reading, and a symbolic link is not followed.
    """
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise CorruptEntry("a symbolic link")
    if not stat.S_ISREG(st.st_mode):
        raise CorruptEntry("not a regular file")
    fd = os.open(path, _OPEN_FLAGS)
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode) or opened.st_ino != st.st_ino:
            raise CorruptEntry("replaced while being opened")
        problem = _permission_problem(opened, forbidden)
        if problem:
            raise CorruptEntry(problem)
        if opened.st_size > limit:
            raise CorruptEntry(f"{opened.st_size} bytes, more than the limit of {limit}")
        chunks, size, want = [], 0, opened.st_size + 1  # one read, unless it grows
        while chunk := os.read(fd, want):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise CorruptEntry(f"more than the limit of {limit} bytes")
            want = min(1 << 20, limit + 1 - size)
        return b"".join(chunks)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` (readable by this user only) so that no reader ever sees
    part of it: a new temporary file, then a rename."""
    tmp = _write_temporary(path, data)
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _write_temporary(path: Path, data: bytes) -> str:
    """A new file next to ``path`` holding ``data``, mode 0600, flushed to disk."""
    # unique across processes and hosts sharing the directory (pid alone is not, over NFS)
    tmp = str(path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(6).hex()}.tmp"))
    fd = os.open(tmp, _CREATE_FLAGS, 0o600)  # a new file: never one planted at that name
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())  # the data is on disk before a name points at it
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return tmp


def seal(key: bytes, magic: bytes, body: bytes) -> bytes:
    """A cache file: its ``magic`` line, the MAC of the file under ``key``, ``body``."""
    return magic + _mac(key, magic, body) + b"\n" + body


def unseal(key: bytes, magic: bytes, data: bytes) -> bytes:
    """The body of a file made by :func:`seal`, once its magic line and MAC are checked."""
    if not data.startswith(magic):
        raise CorruptEntry("not a Tessera cache file, or another format version")
    end = len(magic) + MAC_LENGTH
    if data[end : end + 1] != b"\n":
        raise CorruptEntry("truncated")
    body = data[end + 1 :]
    if not hmac.compare_digest(data[len(magic) : end], _mac(key, magic, body)):
        raise CorruptEntry("its MAC does not match: changed, truncated, or written by someone else")
    return body


def _mac(key: bytes, magic: bytes, body: bytes) -> bytes:
    mac = hmac.new(key, magic, hashlib.sha256)
    mac.update(body)
    return mac.hexdigest().encode()


def read_sealed_json(path: Path, key: bytes, magic: bytes, limit: int) -> object:
    """The JSON body of a sealed file (:func:`seal`), every check made: a regular private
    file of at most ``limit`` bytes, its magic line and MAC, JSON of bounded depth; else
    :class:`CorruptEntry` (or OSError, FileNotFoundError)."""
    return loads_json(unseal(key, magic, read_regular(path, limit)))


def write_sealed_json(path: Path, key: bytes, magic: bytes, value: object) -> None:
    """Write ``value`` as the JSON body of a sealed file, atomically (OSError on failure)."""
    body = json.dumps(value, indent=1, default=str).encode()
    write_atomic(path, seal(key, magic, body))


def loads_json(text: bytes) -> object:
    """``json.loads`` of untrusted text, nested at most :data:`MAX_JSON_DEPTH` deep (deeper
    is :class:`CorruptEntry`, where ``json`` would recurse until ``RecursionError``)."""
    depth = 0
    for token in _JSON_TOKENS.finditer(text):
        bracket = token.group()
        if bracket in (b"[", b"{"):
            depth += 1
            if depth > MAX_JSON_DEPTH:
                raise CorruptEntry(f"JSON nested more than {MAX_JSON_DEPTH} deep")
        elif bracket in (b"]", b"}"):
            depth -= 1
    try:
        return json.loads(text)
    except ValueError as exc:
        raise CorruptEntry(f"not JSON ({exc})") from None


def files(folder: Path, pattern: str) -> list[Path]:
    """The names matching ``pattern`` in ``folder``, unless ``folder`` is a symbolic link
    (``tessera cache list`` and ``clear`` never follow one out of the cache)."""
    if folder.is_symlink() or not folder.is_dir():
        return []
    return sorted(folder.glob(pattern))
