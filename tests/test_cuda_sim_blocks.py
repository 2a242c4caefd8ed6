"""Simulated launches run their blocks without polling (targets/cuda/sim_blocks.py), with
the simulator's semantics: a barrier opens when every thread still running has reached
it, a thread's exception is raised from the launch. Runs in the suite's simulator
process (NUMBA_ENABLE_CUDASIM=1), on numba-cuda's own simulator."""

from __future__ import annotations

import os

import numpy as np
import pytest

import tessera as ts
from tessera import f32, kernel, mut, tbarrier, tile, tshared

pytestmark = pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") != "1",
    reason="runs in the simulator process (test_cuda_simulator.py starts it)",
)

THREADS = 64


cuda = pytest.importorskip("numba.cuda")  # (a global: the simulator swaps it in kernels)


def simulator():
    from numba.cuda.simulator import kernel as sim

    from tessera.kernel.targets.cuda import sim_blocks

    return sim, sim_blocks


def test_cuda_threads_meet_at_every_barrier_of_a_simulated_block():
    @cuda.jit
    def rotate(out, rounds):
        s = cuda.shared.array(64, np.int64)
        t = cuda.threadIdx.x
        value = t
        for _ in range(rounds):
            s[t] = value
            cuda.syncthreads()
            value = s[(t + 1) % 64]
            cuda.syncthreads()
        out[cuda.blockIdx.x, t] = value

    sim, sim_blocks = simulator()
    original = sim.BlockManager
    out = np.zeros((3, THREADS), np.int64)
    with sim_blocks.blocks():
        assert sim.BlockManager is not original
        rotate[3, THREADS](out, 5)
    want = (np.arange(THREADS) + 5) % THREADS
    assert (out == want).all()


def test_cuda_threads_that_end_early_do_not_hold_a_simulated_barrier():
    _, sim_blocks = simulator()

    @cuda.jit
    def half(out):
        t = cuda.threadIdx.x
        if t % 2 == 1:
            return
        cuda.syncthreads()
        out[t] = 1

    out = np.zeros(THREADS, np.int64)
    with sim_blocks.blocks():
        half[1, THREADS](out)
    assert (out[0::2] == 1).all() and (out[1::2] == 0).all()


def test_cuda_barrier_counts_see_every_threads_vote_in_a_simulated_block():
    _, sim_blocks = simulator()

    @cuda.jit
    def vote(out):
        t = cuda.threadIdx.x
        out[t] = cuda.syncthreads_count(t < 10)

    out = np.zeros(THREADS, np.int64)
    with sim_blocks.blocks():
        vote[1, THREADS](out)
    assert (out == 10).all()


def test_a_cuda_threads_exception_is_raised_from_the_simulated_launch():
    sim, sim_blocks = simulator()
    original = sim.BlockManager

    @cuda.jit
    def fails(out):
        t = cuda.threadIdx.x
        cuda.syncthreads()
        out[t + 60] = t  # threads 4.. index past the end

    out = np.zeros(THREADS, np.int64)
    with pytest.raises(IndexError, match="tid="), sim_blocks.blocks():
        fails[1, THREADS](out)
    assert sim.BlockManager is original  # numba-cuda's own manager is back


@kernel(tile=(THREADS,))
def shift_through_shared(x: f32[N], out: mut[f32[N]]):
    s = tshared.alloc[f32](THREADS)
    lane = tile.linear_id()
    s[lane] = x[lane]
    tbarrier()
    out[lane] = s[(lane + 1) % THREADS]


def test_a_cuda_launch_under_the_simulator_leaves_numba_cudas_block_manager_in_place():
    sim, _ = simulator()
    original = sim.BlockManager
    x = np.arange(THREADS, dtype=np.float32)
    out = np.zeros_like(x)
    with ts.config(target="cuda"):
        shift_through_shared[1](x, out)
    assert (out == np.roll(x, -1)).all()
    assert sim.BlockManager is original
