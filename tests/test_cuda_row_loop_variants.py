"""The register row loop's steady loop chosen by the launch, as a GEMM main loop's
(docs/targets.md, "Register row loop"): where its staged blocks' arrays allow 16-byte
chunks the kernel holds a prologue loop and a branch-free steady loop; where its tiles
end at a constant for every launch (passes/row_loop.py ``tiles_end``: a constant stop,
or a group's share of the keys ``min(keys, k0 + share)``) and that constant is within the
arrays' rows, its copies check no row bound. Whole kernels run under the warp simulator
against the CPU; the analyses and the generated source are checked directly."""

from __future__ import annotations

import importlib.util
import math
import os

import numpy as np
import pytest

import tessera as ts
from tessera import f16, f32, group_id, kernel, mut, tile
from tessera.kernel import ir
from tessera.kernel.passes.divisibility import multiple_of, nonnegative
from tessera.kernel.targets.cuda import warp_sim

NO_PTX = pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or importlib.util.find_spec("numba.cuda") is None,
    reason="generated CUDA source needs numba-cuda without its simulator",
)
IN_SIMULATOR = pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") != "1",
    reason="runs in the simulator process (test_cuda_simulator.py starts it)",
)
LOC = ts.errors.SourceLoc("k.py", 1, 0)


@kernel(tile=(64,))
def shares(q: f16[M, 32], k: f16[N, 32], v: f16[N, 32], o: mut[f32[R, 32]]):
    """Each group's share of 64 keys of the first 128 (as the operator layer's split
    attention takes them), the share's unnormalised result stored side by side."""
    m0 = group_id(0) * 32
    k0 = group_id(1) * 64
    qb = tile.load_block(q, (m0, 0), (32, 32))
    row_max = tile.full((32,), -math.inf, f32)
    row_sum = tile.zeros((32,), f32)
    acc = tile.zeros((32, 32), f32)
    for n0 in tile.range(k0, min(128, k0 + 64), 32):
        kb = tile.load_block(k, (n0, 0), (32, 32))
        vb = tile.load_block(v, (n0, 0), (32, 32))
        s = tile.dot(qb, kb.T) * 0.25
        new_max = max(row_max, s.max(axis=1))
        p = math.exp(s - new_max[:, None])
        rescale = math.exp(row_max - new_max)
        row_sum = row_sum * rescale + p.sum(axis=1)
        acc = acc * rescale[:, None] + tile.dot(p.astype(f16), vb)
        row_max = new_max
    tile.store_block(o, (group_id(1) * 32 + m0, 0), acc / row_sum[:, None])


def _inputs(keys: int, view: str, seed: int = 5):
    gen = np.random.default_rng(seed)
    q = gen.standard_normal((32, 32)).astype(np.float16)
    if view == "misaligned":  # rows start 2 bytes past 16-byte alignment: no chunks
        k0, v0 = (gen.standard_normal((keys + 1, 33)).astype(np.float16) for _ in range(2))
        k, v = k0[1:, 1:], v0[1:, 1:]
    else:
        k, v = (gen.standard_normal((keys, 32)).astype(np.float16) for _ in range(2))
    return q, k, v


@IN_SIMULATOR
@pytest.mark.parametrize(
    "keys, view, variant",
    [
        (128, "aligned", (True, True)),  # tiles end at 128, within the keys: no row bounds
        (96, "aligned", (True, False)),  # 128 is past the 96 keys: each copy checks its rows
        (128, "misaligned", (False, False)),  # no chunks: the general loop
    ],
)
def test_the_launch_runs_the_row_loop_its_arrays_allow_and_all_agree_with_the_cpu(
    keys, view, variant
):
    q, k, v = _inputs(keys, view)
    o = np.zeros((64, 32), np.float32)
    program = warp_sim.run(shares, q, k, v, o, grid=(1, 1))  # (the first share: a second
    assert set(program._variants) == {variant}  # would double the simulator's time)
    assert "register row loop" in program._variants[variant].source
    want = np.zeros_like(o)
    with ts.config(target="cpu"):
        shares[1, 1](q, k, v, want)
    np.testing.assert_allclose(o, want, rtol=2e-3, atol=2e-3)


@NO_PTX
@pytest.mark.parametrize("keys, whole", [(128, True), (96, False)])
def test_a_chunked_row_loop_is_a_prologue_and_a_branch_free_steady_loop(keys, whole):
    q, k, v = _inputs(keys, "aligned")
    source = shares.inspect("cuda", q, k, v, np.zeros((64, 32), np.float32), grid=(1, 2))
    steady = source.split("for _mi in range(_mkt):", 1)[1].split("_cp_wait_all()", 1)[0]
    assert "for _mi in range(-" in source.split("for _mi in range(_mkt):", 1)[0]
    assert not [ln for ln in steady.splitlines() if ln.strip().startswith("if ")]
    assert ("_mks0 = _mk\n" in steady) == whole


@NO_PTX
def test_op_flash_attention_on_gpu_arrays_copies_its_keys_without_row_bounds():
    from gpu_arrays import made_up_gpu_array

    from tessera import graph, op

    attention = graph.module("whole_rows")(lambda q, k, v: op.flash_attention(q, k, v))
    args = (made_up_gpu_array((1024, 64), np.float16),) * 3  # one kernel; stop: 1024
    steady = attention.inspect("cuda", *args).split("for _mi in range(_mkt):", 1)[1]
    assert "_mks0 = _mk\n" in steady and "_mks1 = _mk\n" in steady


# ----------------------------------------------------------------------------- analyses
def _c(value):
    return ir.Const(LOC, value)


def _group(axis: int):
    from tessera.tile import primitives

    return ir.PrimCall(LOC, primitives.group_id, [_c(axis)])


def _mul(a, b):
    return ir.BinOp(LOC, "*", a, b)


def _add(a, b):
    return ir.BinOp(LOC, "+", a, b)


def _min(*args):
    return ir.MathCall(LOC, "min", list(args))


def test_a_min_of_multiples_is_a_multiple():
    assert multiple_of(_min(_c(4096), _add(_mul(_group(1), _c(1024)), _c(1024))), 64, {})
    assert not multiple_of(_min(_c(4096), _c(1000)), 64, {})


@pytest.mark.parametrize(
    "e, answer",
    [
        (_c(0), True),
        (_c(-1), False),
        (_mul(_group(1), _c(1024)), True),  # a share's first key
        (_add(_mul(_group(0), _c(32)), _c(5)), True),
        (_mul(_group(0), _c(-32)), False),
        (_mul(_mul(_group(0), _c(2**31)), _c(2**31)), False),  # could wrap
        (ir.Name(LOC, "x"), False),  # a name never assigned: anything
    ],
)
def test_a_value_is_known_non_negative_only_when_every_term_is_and_nothing_wraps(e, answer):
    assert nonnegative(e, {}) is answer
