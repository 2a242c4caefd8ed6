"""Warm start: time from process start to the first finished launch of a grouped kernel (the
block reduction, groups of 256), with a cold and with a warm disk cache, against a plain
``numba.njit(cache=True, parallel=True)`` function of the same per-block sum, cold and warm.

Every run is a fresh Python process (``sys.executable``), so imports, the kernel's front end,
loading or compiling, and the launch are all counted. The parent notes the time just before
it starts the child; the child reports the time once the launch has returned, then checks its
result against NumPy (a wrong result fails the benchmark). The four cases are interleaved
round by round (tessera cold, tessera warm, numba cold, numba warm) and the medians reported.
Cold means an empty ``TESSERA_CACHE_DIR`` (Tessera) or no ``__pycache__`` (Numba); warm means
the files the cold run just wrote. Tessera's own bytecode is compiled first, as an install does
(numba's is, by its wheel's install). A warm run that compiled anything is an error: its time
would not measure a warm start.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from .common import BenchError, Record, standalone

NAME = "warm_start"
G = 256

_CHECK = """
want = x.astype(np.float64).reshape(-1, 256).sum(axis=1)
if not np.allclose(partial, want, rtol=1e-6):
    sys.exit(f"wrong result: max error {np.abs(partial - want).max()}")
"""

TESSERA_CHILD = (
    """
from __future__ import annotations

import json
import sys
import time

import numpy as np

import tessera
from tessera import KiB, f32, group_linear_id, kernel, mut, tbarrier, tile, tshared


@kernel(tile=(256,), shared=1 * KiB)
def block_reduce_tree(x: f32[n], partial: mut[f32[grid_groups]]):
    s = tshared.alloc[f32](256)
    lane = tile.linear_id()
    k = group_linear_id() * 256 + lane
    s[lane] = x[k] if k < n else 0.0
    tbarrier()
    stride = 128
    while stride > 0:
        if lane < stride:
            s[lane] += s[lane + stride]
        tbarrier()
        stride //= 2
    if lane == 0:
        partial[group_linear_id()] = s[0]


n = int(sys.argv[1])
x = (np.arange(n) % 7).astype(np.float32)
partial = np.zeros(n // 256, np.float32)
block_reduce_tree[n // 256](x, partial)
done = time.time()
"""
    + _CHECK
    + """
print(json.dumps({"done": done, **tessera.stats()}))
"""
)

NUMBA_CHILD = (
    """
import json
import sys
import time

import numpy as np
from numba import njit, prange


@njit(cache=True, parallel=True)
def block_sum(x, partial):
    for g in prange(partial.size):
        s = np.float32(0.0)
        for i in range(256):
            s += x[g * 256 + i]
        partial[g] = s


n = int(sys.argv[1])
x = (np.arange(n) % 7).astype(np.float32)
partial = np.zeros(n // 256, np.float32)
block_sum(x, partial)
done = time.time()
"""
    + _CHECK
    + """
hits = sum(block_sum.stats.cache_hits.values())
print(json.dumps({"done": done, "compiles": len(block_sum.stats.cache_misses), "hits": hits}))
"""
)


def _start(script: Path, n: int, env: dict) -> tuple[float, dict]:
    """Seconds from starting ``script`` in a new process to its first finished launch."""
    start = time.time()
    out = subprocess.run(
        [sys.executable, str(script), str(n)], capture_output=True, text=True, env=env, timeout=600
    )
    if out.returncode != 0:
        raise BenchError(f"{NAME}: {script.name} failed:\n{out.stderr[-3000:]}")
    report = json.loads(out.stdout.strip().splitlines()[-1])
    return report["done"] - start, report


def _compile_bytecode() -> None:
    """Byte-compile Tessera as ``pip install`` does. Where PYTHONDONTWRITEBYTECODE is set
    (some CI images set it), imports never write ``.pyc`` files, and every child would
    compile Tessera's sources again (about 0.3 s): not what a user's install does. The
    environment is left as it is; the children read these files."""
    import compileall

    import tessera

    compileall.compile_dir(os.path.dirname(tessera.__file__), quiet=1)


def run(quick: bool) -> list[Record]:
    _compile_bytecode()
    n = 2**20 if quick else 2**22
    reps = 3 if quick else 7
    work = Path(tempfile.mkdtemp(prefix="tessera-warm-start-"))
    try:
        tessera_script, numba_script = work / "ws_tessera.py", work / "ws_numba.py"
        tessera_script.write_text(textwrap.dedent(TESSERA_CHILD))
        numba_script.write_text(textwrap.dedent(NUMBA_CHILD))
        cache = work / "tessera-cache"
        env = {**os.environ, "TESSERA_CACHE_DIR": str(cache), "TESSERA_CACHE": "on"}
        env.pop("NUMBA_CACHE_DIR", None)  # Numba's cache goes next to its script, in ``work``
        times: dict[tuple[str, str], list[float]] = {}
        for _ in range(reps):
            for tool, script in (("tessera", tessera_script), ("numba", numba_script)):
                shutil.rmtree(cache, ignore_errors=True)
                shutil.rmtree(work / "__pycache__", ignore_errors=True)
                for state in ("cold", "warm"):
                    seconds, report = _start(script, n, env)
                    if (report["compiles"] == 0) != (state == "warm"):
                        raise BenchError(f"{NAME}: {tool} {state} start compiled: {report}")
                    times.setdefault((tool, state), []).append(seconds)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    size = f"2^{n.bit_length() - 1}"
    return [
        Record(
            bench=NAME,
            tool=tool,
            kernel=f"start to first launch, {state} cache",
            size=size,
            median_s=statistics.median(ts),
            min_s=min(ts),
            max_s=max(ts),
            reps=len(ts),
            first_call_s=ts[0],
            quick=quick,
        )
        for (tool, state), ts in times.items()
    ]


def targets(records: list[dict]) -> list[tuple[str, float, float, bool]]:
    """(what, value, limit, met) for BENCH.md's two warm-start targets."""
    med = {
        (r["tool"], r["kernel"].rsplit(", ", 1)[1].split()[0]): r["median_s"]
        for r in records
        if r["bench"] == NAME
    }
    if not {("tessera", "cold"), ("tessera", "warm"), ("numba", "warm")} <= med.keys():
        return []
    speedup = med["tessera", "cold"] / med["tessera", "warm"]
    versus = med["tessera", "warm"] / med["numba", "warm"]
    return [
        ("cold / warm", speedup, 5.0, speedup >= 5.0),
        ("warm / numba warm", versus, 1.5, versus <= 1.5),
    ]


if __name__ == "__main__":
    standalone(NAME, run)
