"""``TESSERA_EXPLAIN_RECOMPILE=1``: each new specialisation of a kernel after its first logs,
in words, which part of the specialisation key changed (logger "tessera", WARNING)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import numpy as np
import pytest

import tessera as ts
from tessera.kernel.cache import key_changes


def scale(x: ts.f32[n], y: ts.mut[ts.f32[n]], BM: ts.constexpr):
    i = ts.tile.linear_id()
    if i < n:
        y[i] = x[i] * BM


@pytest.fixture
def explain(caplog):
    """The messages logged while the test runs with the setting on."""
    caplog.set_level(logging.WARNING, logger="tessera")
    with ts.config(explain_recompile=1):
        yield lambda: [r.getMessage() for r in caplog.records if r.name == "tessera"]


def _arrays(n=16):
    return np.ones(n, np.float32), np.zeros(n, np.float32)


def test_the_first_compile_and_cache_hits_log_nothing(explain):
    k = ts.kernel(scale)
    x, y = _arrays()
    k[16](x, y, 2)
    k[16](x, y, 2)
    assert explain() == []


def test_a_constexpr_value(explain):
    k = ts.kernel(scale)
    x, y = _arrays()
    k[16](x, y, 128)
    k[16](x, y, 256)
    assert explain() == ["kernel 'scale' recompiles: constexpr BM changed 128 -> 256"]
    k[16](x, y, 256.0)
    assert explain()[-1] == (
        "kernel 'scale' recompiles: constexpr BM changed 256 (int) -> 256.0 (float)"
    )


def test_layout_of_an_array(explain):
    k = ts.kernel(scale)
    x, y = _arrays(32)
    k[16](x[:16], y[:16], 2)
    k[16](x[::2], y[:16], 2)
    assert explain() == ["kernel 'scale' recompiles: layout of 'x' changed contiguous -> strided"]


def test_a_read_only_array(explain):
    k = ts.kernel(scale)
    x, y = _arrays()
    k[16](x, y, 2)
    x.setflags(write=False)
    k[16](x, y, 2)
    assert explain() == ["kernel 'scale' recompiles: 'x' is now read-only"]


def test_an_unaligned_array(explain):
    k = ts.kernel(scale)
    x, y = _arrays()
    k[16](x, y, 2)
    unaligned = np.zeros(16 * 4 + 1, np.uint8)[1:].view(np.float32)
    unaligned[:] = 1.0
    k[16](unaligned, y, 2)
    assert explain() == ["kernel 'scale' recompiles: 'x' is now unaligned"]
    np.testing.assert_array_equal(y, 2.0)


def test_the_grid_rank(explain):
    k = ts.kernel(scale)
    x, y = _arrays()
    k[16](x, y, 2)
    k[(4, 4)](x, y, 2)
    assert explain() == ["kernel 'scale' recompiles: grid rank 1 -> 2"]


def test_the_nearest_previous_key_is_explained(explain):
    k = ts.kernel(scale)
    x, y = _arrays(32)
    k[16](x[:16], y[:16], 1)
    k[16](x[:16], y[:16], 2)
    k[16](x[::2], y[:16], 2)  # one change from BM=2, two from BM=1
    assert explain()[-1] == "kernel 'scale' recompiles: layout of 'x' changed contiguous -> strided"


def test_several_changes_at_once(explain):
    k = ts.kernel(scale)
    x, y = _arrays(32)
    k[16](x[:16], y[:16], 1)
    x.setflags(write=False)
    k[(4, 4)](x[::2], y[:16], 3)
    assert explain() == [
        "kernel 'scale' recompiles: grid rank 1 -> 2; layout of 'x' changed contiguous -> "
        "strided; 'x' is now read-only; constexpr BM changed 1 -> 3"
    ]


def test_off_by_default(caplog):
    caplog.set_level(logging.WARNING, logger="tessera")
    k = ts.kernel(scale)
    x, y = _arrays()
    k[16](x, y, 1)
    k[16](x, y, 2)
    assert not [r for r in caplog.records if r.name == "tessera"]


def test_the_environment_variable_logs_to_stderr(tmp_path):
    script = tmp_path / "recompile.py"
    script.write_text(
        "from __future__ import annotations\n"
        "import numpy as np\n"
        "import tessera as ts\n\n"
        "@ts.kernel\n"
        "def k(x: ts.f32[n], y: ts.mut[ts.f32[n]], B: ts.constexpr):\n"
        "    i = ts.tile.linear_id()\n"
        "    if i < n:\n"
        "        y[i] = x[i] + B\n\n"
        "x, y = np.ones(4, np.float32), np.zeros(4, np.float32)\n"
        "k[4](x, y, 1)\n"
        "k[4](x, y, 2)\n"
    )
    env = {"TESSERA_EXPLAIN_RECOMPILE": "1", "TESSERA_CACHE": "off"}
    out = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "kernel 'k' recompiles: constexpr B changed 1 -> 2" in out.stderr


def test_key_changes_of_fortran_and_c_layouts():
    params = ts.kernel(lambda_free_kernel).params
    c, f = 0x1 | 0x100 | 0x400, 0x2 | 0x100 | 0x400
    assert key_changes((2, c), (2, f), params) == ["layout of 'a' changed C -> F"]


def lambda_free_kernel(a: ts.f32[m, n]):
    """An empty kernel: only its signature matters to the key decoder."""
