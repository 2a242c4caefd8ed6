"""A block of a simulated launch, run without polling.

numba-cuda's simulator runs each thread of a block as a Python thread. Its block manager
finds out that every thread has reached ``syncthreads()`` (or ended) by polling them in a
loop: the launching thread asks each one ``is_alive()`` and reads its flags again and
again while the block runs, taking Python's interpreter lock from the threads that do the
work. Measured on a 2-core machine, a launch of 32 groups of 64 threads spent more time in
that loop than in the kernel.

Tessera's simulated launches (``NUMBA_ENABLE_CUDASIM=1``: program.py's
``_run_simulated`` and ``warp_sim.run``) run each block with :class:`Block` instead: a
block barrier counted under one condition variable. A thread that reaches
``syncthreads()`` counts itself and sleeps; the last live one to arrive wakes them all;
a thread that ends (or fails) leaves the count, which may release the others; the
launching thread sleeps until the block's threads have ended. The semantics are the
simulator's: a barrier is released when every thread still running has reached it, the
first exception of a thread aborts the others and is raised from the launch.

:func:`blocks` swaps the simulator's block manager for :class:`Block` for the length of a
launch (and back after the last of any launches under way in other host threads); code
outside Tessera's launches keeps numba-cuda's own.
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
from collections.abc import Iterator

_swap_lock = threading.Lock()
_swapped = [0, None]  # launches under way with Block in place; the manager it replaced


class _Barrier:
    """The block's barrier and live count, under one condition variable."""

    def __init__(self, threads: int):
        self.cond = threading.Condition()
        self.live = threads
        self.waiting = 0
        self.generation = 0
        self.failed = None  # the first thread that raised

    def release_if_all_wait(self) -> None:
        """(The lock held.) Release the barrier if every live thread waits at it."""
        if self.waiting and self.waiting >= self.live:
            self.waiting = 0
            self.generation += 1
            self.cond.notify_all()

    def abort(self) -> None:
        """(The lock held.) Wake every waiting thread: each sees its abort flag."""
        self.waiting = 0
        self.generation += 1
        self.cond.notify_all()


@functools.cache
def _classes():
    """The simulator's thread and block-manager classes with the barrier above (made on
    first use: numba-cuda's simulator module exists only with the simulator on)."""
    from numba.cuda.simulator import kernel as sim

    class Thread(sim.BlockThread):
        def __init__(self, f, manager, block_index, thread_index, debug, barrier):
            super().__init__(f, manager, block_index, thread_index, debug)
            self._barrier = barrier

        def run(self):
            try:
                super().run()  # (records the thread's exception, as the simulator's)
            finally:
                barrier = self._barrier
                with barrier.cond:
                    barrier.live -= 1
                    if self.exception is not None and barrier.failed is None:
                        barrier.failed = self
                    barrier.release_if_all_wait()
                    barrier.cond.notify_all()  # the launching thread counts the living

        def syncthreads(self):
            if self.abort:
                raise RuntimeError("abort flag set on syncthreads call")
            barrier = self._barrier
            with barrier.cond:
                generation = barrier.generation
                barrier.waiting += 1
                barrier.release_if_all_wait()
                while barrier.generation == generation:
                    barrier.cond.wait()
            if self.abort:
                raise RuntimeError("abort flag set on syncthreads clear")

    class Block(sim.BlockManager):
        """Runs one block of a launch: the simulator's block manager, without polling."""

        def run(self, grid_point, *args):
            import numpy as np

            def target():
                self._f(*args)

            barrier = _Barrier(math.prod(self._block_dim))
            threads = [
                Thread(target, self, grid_point, point, self._debug, barrier)
                for point in np.ndindex(*self._block_dim)
            ]
            for t in threads:
                t.start()
            with barrier.cond:
                while barrier.live and barrier.failed is None:
                    barrier.cond.wait()
                failed = barrier.failed
                if failed is not None:  # abort the others; do not wait for them
                    for t in threads:
                        t.abort = True
                    barrier.abort()
            if failed is not None:
                raise failed.exception[0].with_traceback(failed.exception[1])

    return sim, Block


@contextlib.contextmanager
def blocks() -> Iterator[None]:
    """Simulated launches inside the block run their blocks with :class:`Block`."""
    sim, block = _classes()
    with _swap_lock:
        if _swapped[0] == 0:
            _swapped[1] = sim.BlockManager
            sim.BlockManager = block
        _swapped[0] += 1
    try:
        yield
    finally:
        with _swap_lock:
            _swapped[0] -= 1
            if _swapped[0] == 0:
                sim.BlockManager = _swapped[1]
