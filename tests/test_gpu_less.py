"""GPU-less paths say what to do, in one TesseraError or one line of ``tessera info``:
without numba-cuda (a process where ``numba.cuda`` is Numba's own retired copy, as in an
install without the ``[cuda]`` extra) and under numba-cuda's simulator, which compiles
nothing. Each case runs in a process of its own: both are decided when Numba is imported."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

# numba-cuda reaches ``numba.cuda`` through a finder its .pth file installs; without that
# finder, ``from numba import cuda`` imports the copy inside Numba, as without numba-cuda
NO_NUMBA_CUDA = """
import sys
sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "NumbaCudaFinder"]
sys.modules["numba_cuda"] = None
"""

INSPECT = """
import numpy as np
from tessera import TesseraError, f32, kernel, mut, tile

@kernel
def scale(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    if i < n:
        y[i] = 2.0 * x[i]

x = np.ones(8, np.float32)
assert "def " in scale.inspect("cuda", x, x.copy(), grid=8)  # the source needs no compiler
for stage in ("ptx", "cubin", "meta"):
    try:
        scale.inspect(stage, x, x.copy(), grid=8)
    except TesseraError as exc:
        print(stage, "TesseraError:", exc)
    except Exception as exc:
        print(stage, "raw", type(exc).__name__, exc)
"""


def _run(tmp_path, code: str, **env: str) -> str:
    script = tmp_path / "script.py"  # a file: kernels read their source
    script.write_text("from __future__ import annotations\n" + textwrap.dedent(code))
    result = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NUMBA_ENABLE_CUDASIM": "0", **env},
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_info_without_numba_cuda_says_what_to_install(tmp_path):
    out = _run(tmp_path, NO_NUMBA_CUDA + "from tessera.cli import main\nmain(['info'])")
    gpu = next(line for line in out.splitlines() if "cuda GPU" in line)
    assert "numba-cuda is not installed: pip install 'tessera-kernels[cuda]'" in gpu
    assert "-e '.[cuda]'" in gpu  # the checkout's form, while the name is not published
    assert "numba.cuda.np" not in out and "No module named" not in out
    assert "cuda simulator no (needs numba-cuda)" in out


def test_inspect_ptx_without_numba_cuda_is_a_tessera_error_saying_what_to_install(tmp_path):
    out = _run(tmp_path, NO_NUMBA_CUDA + INSPECT)
    lines = out.splitlines()
    assert len(lines) == 3, out
    for stage, line in zip(("ptx", "cubin", "meta"), lines):
        assert line.startswith(f"{stage} TesseraError: numba-cuda is not installed: "), line
        assert "pip install 'tessera-kernels[cuda]'" in line


@pytest.mark.skipif(
    importlib.util.find_spec("numba_cuda") is None, reason="the simulator is numba-cuda's"
)
def test_inspect_ptx_under_the_simulator_says_what_the_simulator_cannot_do(tmp_path):
    out = _run(tmp_path, INSPECT, NUMBA_ENABLE_CUDASIM="1")
    lines = out.splitlines()
    assert len(lines) == 3, out
    for stage, line in zip(("ptx", "cubin", "meta"), lines):
        assert line.startswith(
            f"{stage} TesseraError: k.inspect('{stage}') under numba-cuda's "
            "simulator (NUMBA_ENABLE_CUDASIM=1)"
        ), line
        assert "no ptx, cubin, sass or meta stage" in line
        assert "run without NUMBA_ENABLE_CUDASIM" in line
