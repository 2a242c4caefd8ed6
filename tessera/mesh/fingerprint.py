"""What the ranks of an axis compare before a collective: a fingerprint of the call.

Every argument that changes what goes over the wire is in it: the kind of collective,
the op, the dtype, the shape (for an all_gather without the gathered dim, whose length
may differ between ranks), ``dim``, ``root``, ``deterministic`` (a rank-order reduction
moves other messages than MPI's all-reduce) and the backend. Two ranks that disagree on
any of them would otherwise reduce the wrong bytes, read uninitialised memory, trip an
assertion inside MPI or wait for ever.

The fingerprint is a number, so that the ranks compare 8 bytes each
(``tessera.timed.exchange``); :func:`describe` spells the same call out for the error
message, and runs only when the numbers differ.
"""

from __future__ import annotations

import zlib

_codes: dict = {}  # str or dtype -> its number


def _code(value) -> int:
    """A number for a string or dtype, the same in every process (Python salts the
    hashes of strings per process, so ``hash("sum")`` differs between ranks)."""
    code = _codes.get(value)
    if code is None:
        code = _codes[value] = zlib.crc32(str(value).encode())
    return code


def code(kind: str, x, op: str | None, extra: dict) -> int:
    """The fingerprint of ``kind`` on array ``x`` (None for a barrier) with ``op`` and
    ``extra`` (dim, root, deterministic, backend, ...), as a signed 64-bit number.

    A hash of a tuple of ints: the same in every process of one Python version (ints and
    tuples of ints are not salted)."""
    values = [_code(v) if isinstance(v, str) else int(v) for v in extra.values()]
    if x is None:
        return hash((_code(kind), *values))
    shape = x.shape
    if kind == "all_gather":
        d = extra["dim"]
        shape = shape[:d] + shape[d + 1 :]
    return hash((_code(kind), _code(op), _code(x.dtype), shape, *values))


def describe(kind: str, x, op: str | None = None, **extra) -> str:
    """The call as the mismatch error names it: ``all_gather(shape=('*', 2),
    dtype=float64, dim=0, backend=mpi)``."""
    if x is None:
        return f"{kind}()"
    shape = tuple(x.shape)
    if kind == "all_gather":
        d = extra["dim"]
        shape = shape[:d] + ("*",) + shape[d + 1 :]
    parts = [f"shape={shape}", f"dtype={x.dtype}"]
    parts += [f"op={op}"] if op else []
    parts += [f"{k}={v}" for k, v in extra.items()]
    return f"{kind}({', '.join(parts)})"
