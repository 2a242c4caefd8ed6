"""The traceback of a Tessera error shows the user's frames only (docs/debugging.md,
"Tracebacks"): a LaunchError or KernelError is about the user's code, and the compiler's
frames it passed through would push the message off the screen. TESSERA_TRACEBACK=full
keeps them, for reporting a bug in Tessera."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import traceback
from pathlib import Path

import numpy as np
import pytest

import tessera
from tessera import f32, kernel, mut, tile

PACKAGE = str(Path(tessera.__file__).parent)
pytestmark = pytest.mark.skipif(
    sys.version_info < (3, 11), reason="before Python 3.11 a bare raise keeps every frame"
)


@kernel
def tk(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    if i < n:
        y[i] = x[i]


def caught(run) -> tessera.TesseraError:
    try:
        run()
    except tessera.TesseraError as error:
        return error
    raise AssertionError("no error")


def frame_files(error: BaseException) -> list[str]:
    return [f.filename for f in traceback.extract_tb(error.__traceback__)]


def bad_launch() -> None:
    tk[4](np.ones(4), np.zeros(4, np.float32))  # f64 for an f32 parameter


def test_a_launch_error_has_no_tessera_frames():
    error = caught(bad_launch)
    assert isinstance(error, tessera.LaunchError)
    assert frame_files(error) == [__file__, __file__]  # caught(), then bad_launch()
    assert PACKAGE not in "".join(traceback.format_exception(error))


def test_a_launch_error_keeps_tessera_frames_with_full_tracebacks():
    with tessera.config(traceback="full"):
        error = caught(bad_launch)
    assert any(f.startswith(PACKAGE) for f in frame_files(error))


def test_a_grid_error_has_no_tessera_frames():
    error = caught(lambda: tk["4"])
    assert isinstance(error, tessera.LaunchError)
    assert not any(f.startswith(PACKAGE) for f in frame_files(error))


def writes_an_input(x: f32[n]):
    x[0] = 1.0


def test_a_compile_error_has_no_tessera_frames():
    error = caught(lambda: kernel(writes_an_input))
    assert isinstance(error, tessera.KernelError)
    assert not any(f.startswith(PACKAGE) for f in frame_files(error))


def test_a_compile_error_at_the_first_launch_has_no_tessera_frames():
    @kernel
    def reads(x: f32[n], y: mut[f32[n]], c: tessera.constexpr):
        y[0] = x[c]

    error = caught(lambda: reads[1](np.ones(2, np.float32), np.zeros(2, np.float32), 0.5))
    assert isinstance(error, tessera.KernelError)
    assert not any(f.startswith(PACKAGE) for f in frame_files(error))


def test_an_inspect_error_has_no_tessera_frames():
    error = caught(lambda: tk.inspect("nonsense", np.ones(4, np.float32), np.ones(4, np.float32)))
    assert not any(f.startswith(PACKAGE) for f in frame_files(error))


SCRIPT = """
from __future__ import annotations
import numpy as np
from tessera import f32, kernel, mut, tile

@kernel
def k(x: f32[n], y: mut[f32[n]]):
    y[tile.linear_id()] = x[tile.linear_id()]

k[4](np.ones(4), np.zeros(4, np.float32))
"""


def run_script(tmp_path, **env) -> str:
    """Run SCRIPT (an uncaught launch error) as a program; its stderr."""
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(SCRIPT))
    done = subprocess.run(
        [sys.executable, str(path)],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
    )
    assert done.returncode == 1
    return done.stderr


def test_an_uncaught_launch_error_shows_the_users_line_only(tmp_path):
    stderr = run_script(tmp_path)
    assert "tessera.errors.LaunchError: launch of kernel 'k'" in stderr
    assert 'script.py", line 10, in <module>' in stderr
    assert PACKAGE not in stderr


def test_an_uncaught_launch_error_shows_every_frame_with_full_tracebacks(tmp_path):
    stderr = run_script(tmp_path, TESSERA_TRACEBACK="full")
    assert PACKAGE in stderr


@kernel.autotune(space={"B": [1, 2]})
def tuned(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    if i < n:
        y[i] = x[i] * B


def test_a_bad_launch_of_an_autotuned_kernel_has_no_tessera_frames():
    error = caught(lambda: tuned[4](np.ones(4), np.zeros(4, np.float32)))
    assert isinstance(error, tessera.AutotuneError)  # every config failed: the same way
    assert not any(f.startswith(PACKAGE) for f in frame_files(error))


def test_an_index_launch_error_has_no_tessera_frames():
    launch = tessera.index_launch(axis="tp")(tk)
    error = caught(lambda: launch(np.ones(4, np.float32)))
    assert isinstance(error, tessera.LaunchError)
    assert not any(f.startswith(PACKAGE) for f in frame_files(error))


def test_an_op_error_has_no_tessera_frames():
    error = caught(lambda: tessera.op.add(np.ones(3, np.float32), np.ones(4, np.float32)))
    assert isinstance(error, tessera.TesseraError)
    assert frame_files(error) == [__file__, __file__]  # caught(), then the lambda


def adds_mismatched(a, b):
    return tessera.op.add(a, b)


def test_a_graph_module_error_keeps_the_traced_functions_frame_only():
    module = tessera.graph.module(adds_mismatched)
    error = caught(lambda: module(np.ones(3, np.float32), np.ones(4, np.float32)))
    lines = [f.line for f in traceback.extract_tb(error.__traceback__)]
    assert frame_files(error) == [__file__] * 3
    assert lines[-1] == "return tessera.op.add(a, b)"


def test_a_bench_of_a_bad_launch_has_no_tessera_frames():
    error = caught(lambda: tessera.bench(tk[4], np.ones(4), np.zeros(4, np.float32)))
    assert isinstance(error, tessera.LaunchError)
    assert not any(f.startswith(PACKAGE) for f in frame_files(error))


OP_SCRIPT = """
import numpy as np
from tessera import op

op.matmul(np.ones((3, 4), np.float32), np.ones((5, 6), np.float32))
"""


@pytest.mark.parametrize("script", [SCRIPT, OP_SCRIPT], ids=["launch", "op"])
def test_an_uncaught_error_is_a_few_lines_with_the_users_line(tmp_path, script):
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(script))
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert len(done.stderr.splitlines()) <= 8, done.stderr
    assert 'script.py", line' in done.stderr and PACKAGE not in done.stderr
