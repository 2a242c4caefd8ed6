"""The atomic updates in PTX (NVVM, no GPU): CUDA's own instructions where it has them,
compare-and-swap loops elsewhere, and ``atomic_cas``/``atomic_xchg`` fenced."""

from __future__ import annotations

import importlib.util
import os
import re

import ml_dtypes
import numpy as np
import pytest
from test_atomics import (
    compare_bits,
    global_bits,
    global_extrema,
    locked_sum,
    narrow_extrema,
    shared_updates,
    swaps,
)

pytestmark = pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or importlib.util.find_spec("numba.cuda") is None,
    reason="PTX needs numba-cuda without its simulator",
)


def _atoms(ptx: str) -> set[str]:
    return set(re.findall(r"\b(?:atom|red)(?:\.\w+)+", ptx))


def test_integer_bitwise_and_max_atomics_are_single_instructions():
    v, z = np.zeros(256, np.int32), np.zeros(4, np.int32)
    ptx = global_bits.inspect(
        "ptx", v, z, z, z, np.zeros(4, np.uint8), np.zeros(4, np.uint32), grid=4, arch="sm_80"
    )
    atoms = _atoms(ptx)
    for op in ("and.b32", "or.b32", "xor.b32", "max.u32"):
        assert any(a.endswith(op) for a in atoms), (op, atoms)
    # the u8 xor is a compare-and-swap of the word holding the byte
    assert any(a.endswith("cas.b32") for a in atoms)
    assert "membar" not in ptx  # these order nothing


def test_float_max_and_min_are_compare_and_swap_loops_without_fences():
    x = np.zeros(256, np.float32)
    ptx = global_extrema.inspect("ptx", x, x[:4], x[:4], x, grid=4, arch="sm_90")
    assert _atoms(ptx) == {"atom.global.cas.b32"}
    assert "membar" not in ptx and "ld.local" not in ptx


def test_narrow_and_64_bit_extrema_compile_for_sm_80():
    x = np.zeros(256, np.float32)
    ptx = narrow_extrema.inspect(
        "ptx", x, np.zeros(4, np.float16), np.zeros(4, ml_dtypes.bfloat16), np.zeros(4),
        np.zeros(4, np.int8), np.zeros(4, np.int64), grid=4, arch="sm_80",
    )  # fmt: skip
    atoms = _atoms(ptx)
    assert any(a.endswith("min.s64") for a in atoms), atoms
    assert any(a.endswith("cas.b64") for a in atoms), atoms  # the f64 maximum


def test_exchange_and_compare_and_swap_fence_device_memory():
    ptx = swaps.inspect(
        "ptx", np.zeros(1, np.float32), np.zeros(1, np.float16), np.zeros(128, np.float32),
        np.zeros(128, np.float32), grid=2, arch="sm_90",
    )  # fmt: skip
    assert ptx.count("membar.gl") >= 4  # before and after each of the two exchanges
    ptx = compare_bits.inspect(
        "ptx", np.zeros(3, np.float32), np.zeros(2, ml_dtypes.bfloat16), np.zeros(5, np.float32),
        grid=1, arch="sm_90",
    )  # fmt: skip
    assert ptx.count("membar.gl") >= 2 * 5


def test_a_lock_loop_compiles_to_a_fenced_compare_and_swap_spin():
    x, total, lock = np.zeros(256, np.float32), np.zeros(1, np.float32), np.zeros(1, np.int32)
    ptx = locked_sum.inspect("ptx", x, total, lock, grid=4, arch="sm_80")
    assert "atom.global.cas.b32" in ptx and ptx.count("membar.gl") >= 4


def test_atomics_on_shared_arrays_use_shared_memory_instructions():
    v, x = np.zeros(128, np.int32), np.zeros(128, np.float32)
    out, ext = np.zeros((2, 4), np.int32), np.zeros((2, 2), np.float32)
    ptx = shared_updates.inspect("ptx", v, x, out, ext, grid=2, arch="sm_90")
    for op in ("and.b32", "or.b32", "xor.b32", "cas.b32"):  # cas: float max/min, atomic_cas
        assert f"atom.shared.{op}" in ptx
