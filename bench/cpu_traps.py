"""The CPU target's speed traps (issue 18), each timed beside the form that avoids it and a
hand-written Numba equivalent:

* ``scan swap``: a block scan double-buffered by swapping shared arrays (``s0, s1 = s1,
  s0``) beside the same scan copying the second buffer back; the swap is a reference swap
  in the generated code, so it should not cost more than the copy;
* ``histogram``: a histogram privatised in shared memory (``tile.atomic_add`` on a shared
  array: a plain read-modify-write on the CPU) beside one atomic add per element on the
  global histogram;
* ``sum of squares``: the GPU launch shape (one group of 512 lanes striding over the whole
  input, which Tessera reports on the ``tessera`` logger) beside one group per 4096
  elements.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import numpy as np
from numba import njit, prange

from . import kernels
from .common import Case, Record, measure, standalone

# the launch-shape case times the kernel docs/targets.md shows, from its example
SHAPES = runpy.run_path(str(Path(__file__).parent.parent / "examples" / "cpu_launch_shapes.py"))

NAME = "cpu_traps"
BLOCK = 256  # scan block
PER_GROUP = 4096  # elements per group: histogram, sum of squares


@njit(parallel=True)
def scan_numba(x, out):
    """Inclusive scan of each 256-element block, Hillis-Steele over the two halves of one
    buffer (swapping two arrays inside ``prange`` hangs Numba's copy propagation)."""
    for b in prange(x.size // 256):
        s = np.empty((2, 256), np.float32)
        for i in range(256):
            s[0, i] = x[b * 256 + i]
        p = 0
        offset = 1
        while offset < 256:
            for i in range(256):
                v = s[p, i]
                if i >= offset:
                    v += s[p, i - offset]
                s[1 - p, i] = v
            p = 1 - p
            offset *= 2
        for i in range(256):
            out[b * 256 + i] = s[p, i]


@njit(parallel=True)
def histogram_numba(x, chunks):
    """One private histogram per chunk, summed at the end."""
    partial = np.zeros((chunks, 256), np.int32)
    step = (x.size + chunks - 1) // chunks
    for c in prange(chunks):
        for i in range(c * step, min((c + 1) * step, x.size)):
            partial[c, x[i]] += 1
    return partial.sum(axis=0)


@njit(parallel=True)
def sum_squares_numba(x):
    s = 0.0  # float64: an f32 running sum of 2^24 squares is off by 1e-4
    for i in prange(x.size):
        s += x[i] * x[i]
    return s


def run_scan(quick: bool) -> list[Record]:
    n = 2**20 if quick else 2**22
    x = np.random.default_rng(0).random(n, dtype=np.float32)
    outs = {t: np.zeros_like(x) for t in ("tessera", "tessera copy-back", "numba", "numpy")}
    want = np.cumsum(x.reshape(-1, BLOCK).astype(np.float64), axis=1).ravel()
    groups = n // BLOCK

    def case(tool, fn):
        return Case(tool, fn, lambda: outs[tool], want, rtol=1e-4)

    cases = [
        case("tessera", lambda: kernels.scan_swap[groups](x, outs["tessera"])),
        case(
            "tessera copy-back",
            lambda: kernels.scan_copy_back[groups](x, outs["tessera copy-back"]),
        ),
        case("numba", lambda: scan_numba(x, outs["numba"])),
        case(
            "numpy",
            lambda: np.cumsum(x.reshape(-1, BLOCK), axis=1, out=outs["numpy"].reshape(-1, BLOCK)),
        ),
    ]
    return measure(NAME, "scan swap", f"2^{n.bit_length() - 1}", cases, quick, nbytes=8 * n)


def run_histogram(quick: bool) -> list[Record]:
    n = 2**20 if quick else 2**24
    x = np.random.default_rng(1).integers(0, 256, n).astype(np.int32)
    hists = {t: np.zeros(256, np.int32) for t in ("tessera", "tessera global", "numba", "numpy")}
    want = np.bincount(x, minlength=256)
    groups = n // PER_GROUP

    def fresh(tool, launch):
        def run():
            hists[tool][:] = 0
            launch(hists[tool])

        return Case(tool, run, lambda: hists[tool], want)

    def numba_run(h):
        h[:] = histogram_numba(x, 64)

    def numpy_run(h):
        h[:] = np.bincount(x, minlength=256)

    cases = [
        fresh("tessera", lambda h: kernels.histogram_shared[groups](x, h, PER_GROUP)),
        fresh("tessera global", lambda h: kernels.histogram_global[n](x, h)),
        fresh("numba", numba_run),
        fresh("numpy", numpy_run),
    ]
    return measure(NAME, "histogram", f"2^{n.bit_length() - 1}", cases, quick, nbytes=4 * n)


def run_launch_shape(quick: bool) -> list[Record]:
    n = 2**20 if quick else 2**24
    x = np.random.default_rng(2).random(n, dtype=np.float32)
    want = np.array([np.dot(x.astype(np.float64), x)])
    got = {t: np.zeros(1) for t in ("tessera", "tessera 1 group", "numba", "numpy")}
    partial = np.zeros(n // PER_GROUP, np.float32)
    one = np.zeros(1, np.float32)

    def cpu_shape():
        SHAPES["sum_squares"][n // PER_GROUP](x, partial, PER_GROUP)
        got["tessera"][0] = partial.sum(dtype=np.float64)

    def gpu_shape():
        SHAPES["sum_squares"][1](x, one, n)
        got["tessera 1 group"][0] = one[0]

    def numba_run():
        got["numba"][0] = sum_squares_numba(x)

    def numpy_run():
        got["numpy"][0] = np.dot(x, x)

    cases = [
        Case(tool, fn, lambda tool=tool: got[tool], want, rtol=1e-4)
        for tool, fn in (
            ("tessera", cpu_shape),
            ("tessera 1 group", gpu_shape),
            ("numba", numba_run),
            ("numpy", numpy_run),
        )
    ]
    return measure(NAME, "sum of squares", f"2^{n.bit_length() - 1}", cases, quick, nbytes=4 * n)


def run(quick: bool) -> list[Record]:
    return run_scan(quick) + run_histogram(quick) + run_launch_shape(quick)


if __name__ == "__main__":
    standalone(NAME, run)
