"""Ahead-of-time modules from C against the same kernels launched from Python (ABI.md §7).

The module (``tessera.aot``) and the runtime are built with the C compiler into a shared
library loaded in this process; a small C loop (bench/c/aot_timing.c) times ``tsrLaunch``
so that no Python call sits between two C launches. Cases: an empty flat kernel (one
runtime thread: the cost of a launch), the tile GEMM of bench/tiles.py at 1024^3 f32 and
the block reduction of bench/kernels.py over 2^24 floats, both with the threads a Python
launch uses.
"""

from __future__ import annotations

import ctypes
import subprocess
import tempfile
from pathlib import Path

import numba
import numpy as np

from tessera import aot
from tessera.aot import c_types
from tessera.aot.c_files import compiler

from . import kernels
from .common import Case, Record, measure, standalone
from .tiles import gemm_tiles

NAME = "aot"
HERE = Path(__file__).parent


class _Library:
    """The module of the benchmark's kernels and the runtime, as a shared library."""

    def __init__(self, out: Path):
        images = [
            aot.compile(kernels.empty, target="cpu", layouts="contiguous"),
            aot.compile(kernels.block_reduce_tree, target="cpu", layouts="contiguous"),
            aot.compile(gemm_tiles, target="cpu", layouts="contiguous"),
        ]
        aot.write_c(images, out, name="benchmod")
        library = out / "libbenchmod.so"
        command = [
            *compiler().split(),
            "-std=c99",
            "-O2",
            "-shared",
            "-fPIC",
            f"-I{out}",
            str(out / "tessera_rt.c"),
            str(out / "benchmod.c"),
            str(out / "benchmod_cpu.o"),
            str(HERE / "c" / "aot_timing.c"),
            "-o",
            str(library),
            "-lpthread",
            "-ldl",
            "-lm",
        ]
        subprocess.run(command, check=True, capture_output=True)
        self.lib = c_types.bind(ctypes.CDLL(str(library)))
        self.lib.tsr_bench_launches.restype = ctypes.c_double
        self.lib.tsr_bench_launches.argtypes = [
            ctypes.c_void_p,
            ctypes.POINTER(c_types.Launch),
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_int,
        ]
        self.image = c_types.Image.in_dll(self.lib, "benchmod_image")
        self.contexts = {}
        self.keep = []

    def kernel(self, name: str, threads: int):
        if threads not in self.contexts:
            desc = c_types.ContextDesc(c_types.KDL_CPU, 0, threads)
            ctx, mod = ctypes.c_void_p(), ctypes.c_void_p()
            assert self.lib.tsrCreateContextEx(ctypes.byref(desc), ctypes.byref(ctx)) == 0
            size = ctypes.sizeof(self.image)
            assert (
                self.lib.tsrLoadModule(ctx, ctypes.byref(self.image), size, ctypes.byref(mod)) == 0
            )
            self.contexts[threads] = mod
        k = ctypes.c_void_p()
        assert self.lib.tsrGetKernel(self.contexts[threads], name.encode(), ctypes.byref(k)) == 0
        return k

    def tensor(self, a: np.ndarray):
        t = c_types.Tensor.of(a)
        self.keep.append(t)
        return ctypes.addressof(t)

    def case(self, tool: str, name: str, threads: int, grid, arrays, count: int) -> Case:
        k = self.kernel(name, threads)
        args = (ctypes.c_void_p * len(arrays))(*(self.tensor(a) for a in arrays))
        launch = c_types.Launch(*grid)
        self.keep += [args, launch]

        def run():
            seconds = self.lib.tsr_bench_launches(k, ctypes.byref(launch), args, len(arrays), count)
            if seconds < 0:
                raise RuntimeError(f"tsrLaunch failed with status {-seconds:.0f}")

        return Case(tool, run, inner=count)


def run(quick: bool) -> list[Record]:
    if compiler() is None:
        print("aot: no C compiler ($CC or cc): skipped")
        return []
    out = Path(tempfile.mkdtemp(prefix="tessera-bench-aot-"))
    lib = _Library(out)
    threads = numba.get_num_threads()
    records = []

    calls = 200 if quick else 20000
    x = np.zeros(16, np.float32)
    launch = kernels.empty[1]

    def python_empty():
        for _ in range(calls):
            launch(x)

    with numba_threads(1):
        records += measure(
            NAME,
            "empty k[1](x), 1 thread",
            f"{calls} calls",
            [
                Case("tessera (python)", python_empty, inner=calls, first=lambda: launch(x)),
                lib.case("tessera (C)", "empty", 1, (1, 1, 1), [x], calls),
            ],
            quick,
        )

    n = 1 << (18 if quick else 24)
    xs = np.random.default_rng(0).random(n).astype(np.float32)
    groups = -(-n // 256)
    want = np.zeros(groups, np.float32)
    kernels.block_reduce_tree[groups](xs, want)
    py_out, c_out = np.zeros(groups, np.float32), np.zeros(groups, np.float32)
    records += measure(
        NAME,
        "block_sum",
        f"n=2^{n.bit_length() - 1}",
        [
            Case(
                "tessera (python)",
                lambda: kernels.block_reduce_tree[groups](xs, py_out),
                output=lambda: py_out,
                expected=want,
                rtol=0,
            ),
            _checked(
                lib.case(
                    "tessera (C)", "block_reduce_tree", threads, (groups, 1, 1), [xs, c_out], 1
                ),
                c_out,
                want,
            ),
        ],
        quick,
        nbytes=4 * n,
    )

    s = 256 if quick else 1024
    rng = np.random.default_rng(1)
    a = rng.standard_normal((s, s)).astype(np.float32)
    b = rng.standard_normal((s, s)).astype(np.float32)
    grid = (-(-s // 128), -(-s // 128))
    ref = np.zeros((s, s), np.float32)
    gemm_tiles[grid](a, b, ref)
    c_py, c_c = np.zeros((s, s), np.float32), np.zeros((s, s), np.float32)
    records += measure(
        NAME,
        "tile GEMM f32",
        f"{s}^3",
        [
            Case(
                "tessera (python)",
                lambda: gemm_tiles[grid](a, b, c_py),
                output=lambda: c_py,
                expected=ref,
                rtol=0,
            ),
            _checked(
                lib.case("tessera (C)", "gemm_tiles", threads, (*grid, 1), [a, b, c_c], 1), c_c, ref
            ),
        ],
        quick,
        flops=2.0 * s**3,
    )
    return records


def _checked(case: Case, output: np.ndarray, expected: np.ndarray) -> Case:
    """The C case checked bitwise against the Python launch's result."""
    case.output, case.expected, case.rtol = (lambda: output), expected, 0
    return case


class numba_threads:
    """Python launches on ``n`` threads inside the block."""

    def __init__(self, n: int):
        self.n, self.saved = n, None

    def __enter__(self):
        self.saved = numba.get_num_threads()
        numba.set_num_threads(self.n)

    def __exit__(self, *exc):
        numba.set_num_threads(self.saved)


if __name__ == "__main__":
    standalone(NAME, run)


def targets(records: list[dict]) -> list[tuple[str, float, str, bool]]:
    """ABI.md §7: (what, value, wanted, met) of each target measured in ``records``."""
    by = {(r["kernel"], r["tool"]): r["median_s"] for r in records if r["bench"] == NAME}
    out = []
    empty = by.get(("empty k[1](x), 1 thread", "tessera (C)"))
    if empty is not None:
        out.append(("tsrLaunch, empty flat kernel, µs", empty * 1e6, "≤ 2", empty <= 2e-6))
    for kernel in ("block_sum", "tile GEMM f32"):
        c, py = by.get((kernel, "tessera (C)")), by.get((kernel, "tessera (python)"))
        if c is not None and py is not None:
            out.append((f"{kernel} C / Python", c / py, "≤ 1.1×", c / py <= 1.1))
    return out
