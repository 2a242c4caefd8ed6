"""The CPU target compiles with LLVM's SLP vectoriser on, whatever the process did with
Numba before its first kernel.

Numba's compiler re-reads all its settings from the ``NUMBA_*`` environment whenever that
changed since it last looked; ``import tessera`` sets ``NUMBA_NUM_THREADS``, so in a
process that imported Numba first, the first kernel used to be compiled with the
vectoriser off (a 64x64-block GEMM 15-20 % slower, and stored so in the disk cache under a
key that says it is on)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    from __future__ import annotations

    import os
    import numba  # before tessera, as a script that uses Numba itself would
    from numba.core import codegen

    os.environ["NUMBA_TESSERA_TEST_CHANGE"] = "1"  # a change Numba's compiler will notice
    import numpy as np
    import tessera as ts
    from tessera import f32, kernel, mut, tile

    seen = []
    make = codegen.create_pass_builder

    def recording(tm, **kwargs):
        seen.append(kwargs["slp_vectorize"])
        return make(tm, **kwargs)

    codegen.create_pass_builder = recording

    @kernel
    def scale(x: f32[n], y: mut[f32[n]]):
        i = tile.linear_id()
        if i < n:
            y[i] = x[i] * 2.0

    x = np.ones(64, np.float32)
    y = np.zeros_like(x)
    scale[x.size](x, y)
    assert ts.stats()["compiles"] == 1, ts.stats()
    print("slp", True in seen, len(seen))
    """
)


def test_the_first_kernel_is_compiled_with_the_slp_vectoriser_after_numba_was_imported(tmp_path):
    env = dict(os.environ, TESSERA_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("NUMBA_SLP_VECTORIZE", None)
    script = tmp_path / "numba_first.py"
    script.write_text(SCRIPT)
    out = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "slp True" in out.stdout, out.stdout
