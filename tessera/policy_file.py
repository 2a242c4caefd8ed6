"""Reading ``TESSERA_CONFIG``'s policy file as untrusted input: only a regular file of
bounded size is opened (a FIFO would hang ``import tessera``, ``/dev/zero`` would fill
memory), and JSON or TOML nested deeper than :data:`MAX_DEPTH` is refused before it is
parsed (the parsers would recurse into a ``RecursionError``). Every problem is a
``ValueError`` or ``OSError`` whose message says what is wrong; config.py turns it into a
warning and ignores the file."""

from __future__ import annotations

import json
import os
import re
import stat

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: tomli, the package tomllib came from
    try:
        import tomli as tomllib
    except ModuleNotFoundError:
        tomllib = None

MAX_BYTES = 1 << 20  # a policy file is a few lines
MAX_DEPTH = 32
_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_BRACKETS = re.compile(rb'"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|#[^\n]*|[\[\]{}]')


def read(path: str) -> dict:
    """The top-level table of the policy file at ``path`` (.json, else TOML)."""
    text = _bounded_bytes(path)
    _check_depth(text)
    if path.endswith(".json"):
        data = json.loads(text)
    elif tomllib is None:
        raise ValueError(
            "reading TOML on Python 3.10 needs the tomli package (pip install tomli); "
            "or use a .json file"
        )
    else:
        data = tomllib.loads(text.decode("utf-8"))
    if not isinstance(data, dict):
        raise ValueError("its top level must be a table of settings")
    return data


def _bounded_bytes(path: str) -> bytes:
    st = os.stat(path)  # a symbolic link to a policy file is fine; what it names is checked
    if not stat.S_ISREG(st.st_mode):
        raise ValueError("not a regular file")
    fd = os.open(path, _FLAGS)  # non-blocking: a FIFO swapped in meanwhile cannot hang it
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a regular file")
        data = os.read(fd, MAX_BYTES + 1)
        while len(data) <= MAX_BYTES and (chunk := os.read(fd, MAX_BYTES + 1 - len(data))):
            data += chunk
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        raise ValueError(f"more than {MAX_BYTES} bytes; a policy file is a few lines")
    return data


def _check_depth(text: bytes) -> None:
    """Refuse brackets nested deeper than MAX_DEPTH (strings and comments skipped)."""
    depth = 0
    for token in _BRACKETS.finditer(text):
        bracket = token.group()
        if bracket in (b"[", b"{"):
            depth += 1
            if depth > MAX_DEPTH:
                raise ValueError(f"nested more than {MAX_DEPTH} deep")
        elif bracket in (b"]", b"}"):
            depth = max(depth - 1, 0)
