"""Launch overhead on a GPU (GPU.md §5, issue "the CUDA launch path"): host time per call of
an empty Tessera kernel and of a three-array kernel, with numba-cuda device arrays, CuPy
arrays and CUDA PyTorch tensors, side by side with a PyTorch op and Triton's empty kernel
in the same process; and a warm process (a second interpreter launching the same kernels
from the disk cache: what it compiles, and the time of its first launch). Each timed run
is ``calls`` launches followed by one synchronisation, reported per launch. Without a GPU
it records nothing and says so."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np

import tessera
from tessera import f32, kernel, mut, tile
from tessera.kernel.targets.cuda.streams import gpu_usable

from .common import Case, Record, measure, standalone
from .kernels import empty

NAME = "gpu_launch"


@kernel
def axpy3(x: f32[n], y: f32[n], out: mut[f32[n]]):
    """out = 2x + y: a launch with three arrays."""
    i = tile.linear_id()
    if i < n:
        out[i] = 2.0 * x[i] + y[i]


def _kinds(n: int):
    """(label, make) per GPU array library installed: make() gives a float32 array of n."""
    from numba import cuda

    kinds = [("numba", lambda: cuda.to_device(np.zeros(n, np.float32)))]
    if importlib.util.find_spec("cupy") is not None:
        import cupy

        kinds.append(("cupy", lambda: cupy.zeros(n, cupy.float32)))
    if importlib.util.find_spec("torch") is not None:
        import torch

        if torch.cuda.is_available():
            kinds.append(("torch", lambda: torch.zeros(n, device="cuda")))
    return kinds


def _loop(fn, calls: int):
    def run():
        for _ in range(calls):
            fn()
        tessera.synchronize()

    return run


def run(quick: bool) -> list[Record]:
    if not gpu_usable():
        print("gpu_launch: no GPU here, nothing measured", file=sys.stderr)
        return []
    calls = 200 if quick else 2000
    n = 1024
    records = []
    cases = []
    for label, make in _kinds(n):
        x = make()
        e = empty[1]
        cases.append(
            Case(f"tessera empty ({label})", _loop(lambda e=e, x=x: e(x), calls), inner=calls)
        )
        a, b, c = make(), make(), make()
        launch = axpy3[n]
        cases.append(
            Case(
                f"tessera 3 arrays ({label})",
                _loop(lambda a=a, b=b, c=c, f=launch: f(a, b, c), calls),
                inner=calls,
            )
        )
    cases += _foreign(calls)
    records += measure(NAME, "launch", f"{calls} calls", cases, quick)
    records += _warm_process(quick)
    return records


def _foreign(calls: int) -> list[Case]:
    """A PyTorch op and Triton's empty kernel, where installed."""
    cases = []
    if importlib.util.find_spec("torch") is None:
        return cases
    import torch

    x = torch.zeros(1024, device="cuda")

    def torch_run():
        for _ in range(calls):
            x.add_(1.0)
        torch.cuda.synchronize()

    cases.append(Case("torch x.add_(1)", torch_run, inner=calls))
    if importlib.util.find_spec("triton") is not None:
        try:
            import triton
            import triton.language as tl

            @triton.jit
            def triton_empty(p):
                pass

            def triton_run():
                for _ in range(calls):
                    triton_empty[(1,)](x)
                torch.cuda.synchronize()

            cases.append(Case("triton empty", triton_run, inner=calls))
            del tl
        except Exception as exc:  # Triton is optional: say why it is missing
            print(f"gpu_launch: Triton not measured ({exc})", file=sys.stderr)
    return cases


_CHILD = """
import json, time
start = time.perf_counter()
import numpy as np
import tessera
from numba import cuda
from bench.kernels import empty
from bench.gpu_launch import axpy3
x = cuda.to_device(np.arange(1024, dtype=np.float32))
out = cuda.device_array(1024, np.float32)
ready = time.perf_counter()
empty[1](x)
axpy3[1024](x, x, out)
tessera.synchronize()
first = time.perf_counter() - ready
ok = bool(np.array_equal(out.copy_to_host(), 3 * np.arange(1024, dtype=np.float32)))
print(json.dumps({"first_launches_s": first, "process_s": time.perf_counter() - start,
                  "stats": tessera.stats(), "ok": ok}))
"""


def _warm_process(quick: bool) -> list[Record]:
    """Two interpreters in turn launch the same two kernels with a fresh disk cache: the
    first compiles them, the second must load them (stats()["compiles"] == 0)."""
    import tempfile

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TESSERA_CACHE_DIR": cache, "PYTHONPATH": here}
        runs = []
        for _ in range(2):
            out = subprocess.run(
                [sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=300
            )
            if out.returncode != 0:
                raise RuntimeError(f"the warm-process child failed:\n{out.stderr}")
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    cold, warm = runs
    for label, r in (("cold process", cold), ("warm process", warm)):
        if not r["ok"]:
            raise RuntimeError(f"{label}: wrong result")
        print(
            f"gpu_launch: {label}: first two launches {r['first_launches_s']:.3f} s, "
            f"process {r['process_s']:.2f} s, compiles {r['stats']['compiles']}, "
            f"disk cache hits {r['stats']['disk_cache_hits']}",
            file=sys.stderr,
        )
    return [
        Record(
            NAME,
            label,
            "first 2 launches",
            "2 kernels",
            r["first_launches_s"],
            r["first_launches_s"],
            r["first_launches_s"],
            1,
            r["first_launches_s"],
            quick=quick,
        )
        for label, r in (("cold process", cold), ("warm process", warm))
    ] + [_stamp(warm)]


def _stamp(warm: dict) -> Record:
    """The warm process's compile count, as a record (median_s holds the count)."""
    count = float(warm["stats"]["compiles"])
    return Record(NAME, "warm process compiles", "count", "2 kernels", count, count, count, 1, 0.0)


if __name__ == "__main__":
    standalone(NAME, run)
