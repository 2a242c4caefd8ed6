"""Determinism (LANGUAGE.md §3): group and lane reductions use one fixed tree, so results
are bitwise identical across runs, thread counts and processes; and the tree is the
documented one."""

from __future__ import annotations

import os
import subprocess
import sys

import classic_kernels as ck
import numpy as np

import tessera
from tessera import f32, group_linear_id, kernel, mut, reduce_sum, tbarrier, tile, tshared

HERE = os.path.dirname(os.path.abspath(__file__))
N = 100_003  # ~100k floats; every launch below has enough lanes to run on all threads
GROUPS = 64


@kernel(tile=(128,), shared=0)
def lane_sum(x: f32[n], out: mut[f32[grid_groups]]):
    acc = 0.0
    for k in range(group_linear_id() * 128 + tile.linear_id(), n, 128 * grid_groups):
        acc += x[k]
    t = tile.sum(acc)
    if tile.linear_id() == 0:
        out[group_linear_id()] = t


@kernel(tile=(32,), shared=1024)
def shared_sum_100(x: f32[n], out: mut[f32[grid_groups]]):
    s = tshared.alloc[f32](100)
    for j in range(tile.linear_id(), 100, 32):
        s[j] = x[group_linear_id() * 100 + j]
    tbarrier()
    t = reduce_sum(s)
    if tile.linear_id() == 0:
        out[group_linear_id()] = t


@kernel(tile=(48,), shared=0)
def lane_sum_48(x: f32[n], out: mut[f32[grid_groups]]):
    v = x[group_linear_id() * 48 + tile.linear_id()]
    t = tile.sum(v)
    if tile.linear_id() == 0:
        out[group_linear_id()] = t


def make_input(n=N):
    """Fixed-seed values of widely varying magnitude, so summation order shows."""
    rng = np.random.default_rng(1234)
    return (rng.standard_normal(n) * 10.0 ** rng.uniform(-4, 4, n)).astype(np.float32)


def reductions(x):
    """reduce_sum (group_sum), tile.sum (lane_sum) and block_reduce_tree results."""
    a = np.zeros(GROUPS, np.float32)
    ck.group_sum[GROUPS](x, a)
    b = np.zeros(GROUPS, np.float32)
    lane_sum[GROUPS](x, b)
    g = -(-x.size // 256)
    c = np.zeros(g, np.float32)
    ck.block_reduce_tree[g](x, c)
    return a, b, c


def reductions_hex():
    return "|".join(r.tobytes().hex() for r in reductions(make_input()))


def test_reductions_bitwise_identical_across_runs_in_process():
    x = make_input()
    first = reductions(x)
    for _ in range(2):
        for r0, r in zip(first, reductions(x)):
            assert r.tobytes() == r0.tobytes()
    assert all(np.isfinite(r).all() for r in first)


SCRIPT = (
    "import sys; sys.path.insert(0, {here!r})\n"
    "import numba, tessera, test_determinism as td\n"
    "with tessera.config(target={target!r}):\n"
    "    print(numba.get_num_threads(), td.reductions_hex())\n"
)


def test_reductions_bitwise_identical_across_processes_and_thread_counts():
    target = "cpu"  # thread counts matter only where groups run on several cores
    procs = {}
    for threads in (1, 2):
        env = dict(os.environ, NUMBA_NUM_THREADS=str(threads))
        procs[threads] = subprocess.Popen(
            [sys.executable, "-c", SCRIPT.format(here=HERE, target=target)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=HERE,
        )
    results = {}
    for threads, p in procs.items():
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
        reported, hexes = out.split()
        assert int(reported) == threads
        results[threads] = hexes
    assert results[1] == results[2]
    assert results[1] == reductions_hex()  # and equal to this process's results


def tree_sum(values):
    """The documented tree, in float32, over the last axis."""
    s = np.array(values, np.float32, copy=True)
    m = s.shape[-1]
    p = 1
    while p * 2 <= m:
        p *= 2
    s[..., : m - p] = s[..., : m - p] + s[..., p:m]
    h = p // 2
    while h >= 1:
        s[..., :h] = s[..., :h] + s[..., h : 2 * h]
        h //= 2
    return s[..., 0]


def test_reduce_sum_follows_the_documented_tree(target):
    x = make_input(100 * 40)
    out = np.zeros(40, np.float32)
    shared_sum_100[40](x, out)
    blocks = x.reshape(40, 100)
    np.testing.assert_array_equal(out.view(np.uint32), tree_sum(blocks).view(np.uint32))
    # the check is sensitive: a left-to-right float32 sum differs for some groups
    sequential = np.array([np.cumsum(b, dtype=np.float32)[-1] for b in blocks])
    assert (sequential != out).any()


def test_tile_sum_follows_the_documented_tree(target):
    x = make_input(48 * 30)
    out = np.zeros(30, np.float32)
    lane_sum_48[30](x, out)
    blocks = x.reshape(30, 48)
    np.testing.assert_array_equal(out.view(np.uint32), tree_sum(blocks).view(np.uint32))
    sequential = np.array([np.cumsum(b, dtype=np.float32)[-1] for b in blocks])
    assert (sequential != out).any()


def test_cpu_and_debug_targets_agree_bitwise():
    x = make_input(20_000)
    with tessera.config(target="cpu"):
        on_cpu = reductions(x)
    with tessera.config(target="debug"):
        on_debug = reductions(x)
    for a, b in zip(on_cpu, on_debug):
        assert a.tobytes() == b.tobytes()


def test_group_sum_matches_its_documented_order():
    """group_sum: each lane sums its strided elements in order, then the 128-lane tree."""
    x = make_input()
    a, _, _ = reductions(x)
    lanes = GROUPS * 128
    padded = np.zeros(-(-x.size // lanes) * lanes, np.float32)
    padded[: x.size] = x
    acc = np.zeros(lanes, np.float32)
    for row in padded.reshape(-1, lanes):  # acc += x[k] for k = lane, lane + lanes, ...
        acc = acc + row
    np.testing.assert_array_equal(
        a.view(np.uint32), tree_sum(acc.reshape(GROUPS, 128)).view(np.uint32)
    )
