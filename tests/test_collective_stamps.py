"""The stamp an all_reduce carries after its data (tessera/mesh/fingerprint.py): reduced
with the collective's own op, the members' stamps give every member's fingerprint in its
slots, exactly, so a member that called something else shows. Modelled here with NumPy's
ufuncs, the ops MPI applies element by element; the MPI runs are in
test_collective_faults.py (a mismatch by default) and bench/dist_check.py (the cost)."""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
import pytest

from tessera.mesh import fingerprint

UFUNCS = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}
WIRE_DTYPES = ["i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8", "f4", "f8", "c8", "c16"]
FINGERPRINTS = [0, 1, -1, 2**63 - 1, -(2**63), 0x0123456789ABCDEF, -0x5555555555555555]


def reduced(stamps: list[np.ndarray], op: str) -> bytes:
    return functools.reduce(UFUNCS[op], stamps).tobytes()


def cases():
    for dtype in WIRE_DTYPES:
        for op in UFUNCS:
            if dtype.startswith("c") and op in ("max", "min"):
                continue  # complex numbers have no order: the collectives refuse these
            yield dtype, op


@pytest.mark.parametrize(("dtype", "op"), list(cases()))
@pytest.mark.parametrize("size", [2, 3, 8])
def test_members_with_one_fingerprint_reduce_to_the_expected_stamp(dtype, op, size):
    dtype = np.dtype(dtype)
    for value in FINGERPRINTS:
        made = [fingerprint.stamp(value, dtype, op, size, i, 5) for i in range(size)]
        assert reduced([mine for mine, _ in made], op) == made[0][1]
        assert all(expected == made[0][1] for _, expected in made)


@pytest.mark.parametrize(("dtype", "op"), list(cases()))
def test_a_member_with_another_fingerprint_changes_the_reduced_stamp(dtype, op):
    dtype = np.dtype(dtype)
    for value in FINGERPRINTS:
        for other in FINGERPRINTS:
            if other == value:
                continue
            mine, expected = fingerprint.stamp(value, dtype, op, 3, 0, 7)
            theirs = [fingerprint.stamp(other, dtype, op, 3, i, 7)[0] for i in (1, 2)]
            if (value ^ other) % 2**fingerprint.STAMP_BITS:
                assert reduced([mine, *theirs], op) != expected


@pytest.mark.parametrize("dtype", WIRE_DTYPES)
@pytest.mark.parametrize("items", [0, 1, 3, 7, 100, 4097])
def test_a_stamped_message_is_a_whole_number_of_16_byte_units(dtype, items):
    dtype = np.dtype(dtype)
    length = fingerprint.stamp_length(dtype, 2, items)
    assert length > 0
    assert (items + length) * dtype.itemsize % 16 == 0


@pytest.mark.parametrize("dtype", ["f2", "?", "V2", "M8[s]"])
def test_dtypes_the_wire_never_reduces_in_carry_no_stamp(dtype):
    assert fingerprint.stamp_length(np.dtype(dtype), 2, 10) == 0


def test_slot_values_are_never_the_ops_identity():
    for dtype, op in cases():
        dtype = np.dtype(dtype)
        mine, _ = fingerprint.stamp(-1, dtype, op, 2, 0, 0)
        identity = mine[-1]
        per_member = -(-fingerprint.STAMP_BITS // fingerprint._SLOT_BITS[dtype.str[1:]])
        assert all(v != identity for v in mine[:per_member]), (dtype, op)


# ------------------------------------------- the header in front of a large broadcast


def header_of(x, root: int, seq: int = 1) -> np.ndarray:
    value = fingerprint.code("broadcast", x, None, {"root": root, "backend": "mpi"})
    words = fingerprint.header(value, root, x)
    words[1] = seq
    return words


def test_a_broadcast_header_names_the_call_it_was_made_for():
    words = header_of(np.ones((128, 128), np.float32), 1, seq=7)
    assert words.nbytes == fingerprint.HEADER_BYTES
    assert fingerprint.describe_header(words) == (
        "broadcast(shape=(128, 128), dtype=float32, root=1, backend=mpi) as its #7"
    )


def test_headers_of_calls_that_differ_in_one_respect_differ():
    x = np.ones((16, 8), np.float32)
    base = header_of(x, 0).tobytes()
    others = [
        header_of(x.reshape(8, 16), 0),
        header_of(x.reshape(-1), 0),
        header_of(x.astype(np.int32), 0),
        header_of(x, 1),
        header_of(x, 0, seq=2),
    ]
    assert all(other.tobytes() != base for other in others)


def test_a_header_of_many_dims_and_a_long_dtype_name_still_names_them():
    x = np.ones((1,) * 10, ml_dtypes.bfloat16)
    text = fingerprint.describe_header(header_of(x, 0))
    assert "(10 dims)" in text and "dtype=bfloat16" in text


def test_a_message_without_the_magic_number_is_no_header():
    text = fingerprint.describe_header(np.zeros(16, np.int64))
    assert text.startswith("a message that is not a broadcast's")
