"""What the ranks of an axis compare before a collective: a fingerprint of the call.

Every argument that changes what goes over the wire is in it: the kind of collective,
the op, the dtype, the shape (for an all_gather without the gathered dim, whose length
may differ between ranks), ``dim``, ``root``, ``deterministic`` (a rank-order reduction
moves other messages than MPI's all-reduce) and the backend. Two ranks that disagree on
any of them would otherwise reduce the wrong bytes, read uninitialised memory, trip an
assertion inside MPI or wait for ever.

The fingerprint is a number, so that the ranks compare 8 bytes each
(``tessera.runtime.timed.exchange``); :func:`describe` spells the same call out for the error
message, and runs only when the numbers differ.
"""

from __future__ import annotations

import zlib

import numpy as np

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


# ------------------------------------------------------------------ stamps
# An all_reduce carries its check inside the reduced message: a *stamp* of a few
# elements after the data, in the wire dtype. Member i writes its fingerprint into its
# own slots and the op's identity into everyone else's, so the reduction leaves every
# member's fingerprint in its slots, exactly (a sum with zeros, a product with ones, a
# max with the lowest value, a min with the highest): the reduced stamp is an all-gather
# of the fingerprints at no message of its own. Each slot holds BITS_PER_SLOT[kind]
# bits of the fingerprint plus 2 (never an identity), an integer the dtype holds exactly.

STAMP_BITS = 44  # of the 64-bit fingerprint that a stamp carries
_SLOT_BITS = {
    "i1": 6, "u1": 7, "i2": 14, "u2": 15, "i4": 30, "u4": 31, "i8": 44, "u8": 44,
    "f4": 22, "c8": 22, "f8": 44, "c16": 44,
}  # fmt: skip
_stamps: dict = {}  # (code, dtype, op, size, index) -> (my stamp, the expected result)


def stamp_length(dtype, size: int, items: int) -> int:
    """The length in elements of ``dtype`` of the stamp after ``items`` elements for
    ``size`` members, 0 for a dtype that cannot carry one (Tessera reduces 16-bit floats
    as f32 and bools as bytes). The stamp is padded so that the whole message is a
    multiple of 16 bytes: ranks that disagree on the dtype then still send every member
    whole elements of its own (MPI aborts the process on a message that ends inside
    one)."""
    bits = _SLOT_BITS.get(f"{dtype.kind}{dtype.itemsize}")
    if bits is None:
        return 0
    length = size * -(-STAMP_BITS // bits)
    return length + (-(items + length) * dtype.itemsize) % 16 // dtype.itemsize


def stamp(
    value: int, dtype, op: str, size: int, index: int, items: int
) -> tuple[np.ndarray, bytes]:
    """Member ``index``'s stamp for fingerprint ``value`` after ``items`` elements, and
    what the reduced stamp is when every member has that fingerprint (as bytes, to
    compare with)."""
    length = stamp_length(dtype, size, items)
    key = (value, dtype, op, size, index, length)
    found = _stamps.get(key)
    if found is None:
        bits = _SLOT_BITS[f"{dtype.kind}{dtype.itemsize}"]
        per_member = -(-STAMP_BITS // bits)
        slots = [2 + ((value >> (bits * j)) & ((1 << bits) - 1)) for j in range(per_member)]
        mine = np.full(length, _identity(dtype, op), dtype)
        mine[index * per_member : (index + 1) * per_member] = slots
        expected = mine.copy()
        expected[: size * per_member] = slots * size
        expected = expected.tobytes()
        found = _stamps[key] = (mine, expected)
        if len(_stamps) > 4096:  # many shapes: forget the oldest
            del _stamps[next(iter(_stamps))]
    return found


def _identity(dtype, op: str):
    if op == "sum":
        return 0
    if op == "prod":
        return 1
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return info.min if op == "max" else info.max
    return -np.inf if op == "max" else np.inf


# ------------------------------------------------------------------ broadcast headers
# A host broadcast of HEADER_MIN_BYTES or more carries the root's call in front of its
# data: HEADER_BYTES as 16 int64s (the magic number, the sequence number on the axis,
# the digest of the axis's earlier broadcasts' roots, the fingerprint, the root, the
# number of dims, up to 8 dims and the dtype's name). A receiver compares it with its own
# call's header; the root learns nothing (a broadcast sends it nothing).

HEADER_BYTES = 128
HEADER_MIN_BYTES = 64 * 1024
MAGIC = 0x7E55_B0AD_CA57_0001
_MAX_DIMS = 8


def header(value: int, root: int, x) -> np.ndarray:
    """The header of a broadcast from ``root`` of an array like ``x`` with fingerprint
    ``value``, sequence number and digest 0 (the caller sets words 1 and 2)."""
    words = np.zeros(HEADER_BYTES // 8, np.int64)
    words[0], words[3], words[4], words[5] = MAGIC, value, root, x.ndim
    dims = x.shape[:_MAX_DIMS]
    words[6 : 6 + len(dims)] = dims
    words[14:16] = np.frombuffer(str(x.dtype).encode()[:16].ljust(16, b"\0"), np.int64)
    return words


def describe_header(words) -> str:
    """The call a received header names, as :func:`describe` spells it (``"a message
    that is not a broadcast's"`` for anything else)."""
    if int(words[0]) != MAGIC:
        return "a message that is not a broadcast's (another collective, or a late one)"
    ndim = int(words[5])
    shape = tuple(int(d) for d in words[6 : 6 + min(ndim, _MAX_DIMS)])
    shown = str(shape) if ndim <= _MAX_DIMS else f"{shape[:-1]}... ({ndim} dims)"
    dtype = words[14:16].tobytes().rstrip(b"\0").decode(errors="replace")
    root, seq = int(words[4]), int(words[1])
    return f"broadcast(shape={shown}, dtype={dtype}, root={root}, backend=mpi) as its #{seq}"
