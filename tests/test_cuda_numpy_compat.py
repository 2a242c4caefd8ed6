"""numba-cuda 0.30 on NumPy 2.5, which removed ``np.row_stack``: CUDA kernels still compile
(Tessera lends the alias while numba-cuda registers it), and NumPy is left as it was."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("numba.cuda") is None, reason="needs numba-cuda"
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# NumPy 2.5 in miniature: the alias gone before anything imports numba-cuda
SCRIPT = textwrap.dedent(
    """
    from __future__ import annotations
    import numpy
    if hasattr(numpy, "row_stack"):
        del numpy.row_stack
    numpy.__all__ = [name for name in numpy.__all__ if name != "row_stack"]
    import tessera as ts

    @ts.kernel
    def add_one(x: ts.f32[n], y: ts.mut[ts.f32[n]]):
        i = ts.tile.linear_id()
        if i < n:
            y[i] = x[i] + 1.0

    ptx = add_one.inspect("ptx", numpy.zeros(8, numpy.float32), numpy.zeros(8, numpy.float32),
                          grid=8, arch="sm_90")
    assert ".entry" in ptx
    print("row_stack afterwards:", hasattr(numpy, "row_stack"))
    """
)


def test_a_cuda_kernel_compiles_where_numpy_has_no_row_stack(tmp_path):
    script = tmp_path / "no_row_stack.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = os.pathsep.join([ROOT, env.get("PYTHONPATH", "")])
    result = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "row_stack afterwards: False" in result.stdout
