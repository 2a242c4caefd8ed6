"""TESSERA_CRASH_DIR: what a capture holds, that it never changes the error, and what is
not captured."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import numpy as np
import pytest

import tessera
from tessera import KiB, f32, kernel, mut, tile, tshared
from tessera.errors import CollectiveTimeout, LaunchError, OutOfBoundsError, RaceError
from tessera.observe import record
from tessera.observe.repro import replay
from tessera.runtime import timed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OFFSET = 1


@tessera.func
def shifted(i):
    return i + OFFSET


@kernel
def write_past_end(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    y[shifted(i)] = x[i]


@kernel(tile=(8,), shared=1 * KiB)
def unsynchronised(x: f32[n], y: mut[f32[n]]):
    s = tshared.alloc[f32](8)
    lane = tile.linear_id()
    s[lane] = x[lane]
    y[lane] = s[(lane + 1) % 8]


@kernel
def double(x: f32[n], y: mut[f32[n]], alpha: f32):
    i = tile.linear_id()
    y[i] = alpha * x[i]


def _captures(root):
    return sorted(p for p in root.iterdir() if (p / "metadata.json").exists())


def _oob(tmp_path, **settings):
    x, y = np.arange(8, dtype=np.float32), np.full(8, 7, np.float32)
    with tessera.config(target="debug", crash_dir=str(tmp_path), **settings):
        with pytest.raises(OutOfBoundsError) as info:
            write_past_end[8](x, y)
    return info.value, x, y


def test_a_debug_finding_writes_a_capture_with_metadata_ir_and_arguments(tmp_path):
    _, x, y = _oob(tmp_path)
    (capture,) = _captures(tmp_path)
    assert capture.name.endswith("-write_past_end")
    meta = json.loads((capture / "metadata.json").read_text())
    assert meta["kernel"] == "write_past_end" and meta["grid"] == [8]
    assert meta["target"] == "debug" and meta["error_type"] == "OutOfBoundsError"
    assert meta["defined"].endswith(
        f"test_crash_capture.py:{write_past_end.fn.__code__.co_firstlineno}"
    )
    assert [a["shape"] for a in meta["args"]] == [[8], [8]]
    saved = np.load(capture / "args.npz")
    np.testing.assert_array_equal(saved["arg0"], x)
    np.testing.assert_array_equal(saved["arg1"], np.full(8, 7, np.float32))  # before
    assert "y[" in (capture / "ir.txt").read_text()
    for name in ("error.txt", "settings.json", "versions.json", "log.txt", "kernel.py"):
        assert (capture / name).exists(), name


def test_the_capture_writes_the_kernel_with_its_helpers_and_constants(tmp_path):
    _oob(tmp_path)
    (capture,) = _captures(tmp_path)
    text = (capture / "kernel.py").read_text()
    assert "OFFSET = 1" in text and "def shifted(i):" in text and "def write_past_end(" in text


def test_capturing_leaves_the_error_as_it_was(tmp_path):
    with tessera.config(target="debug"), pytest.raises(OutOfBoundsError) as plain:
        write_past_end[8](np.arange(8, dtype=np.float32), np.zeros(8, np.float32))
    captured, _, _ = _oob(tmp_path)
    assert str(captured) == str(plain.value)


def test_a_capture_that_cannot_be_written_does_not_mask_the_error(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    error, _, _ = _oob(blocker)
    assert "out of bounds" in str(error)


def test_arrays_past_the_size_limit_keep_only_shape_and_dtype(tmp_path):
    _oob(tmp_path, crash_max_mb=0)
    (capture,) = _captures(tmp_path)
    meta = json.loads((capture / "metadata.json").read_text())
    assert not (capture / "args.npz").exists() and "data" not in meta["args"][0]
    assert any("TESSERA_CRASH_MAX_MB" in note for note in meta["notes"])


def test_a_refused_launch_is_not_captured(tmp_path):
    with tessera.config(crash_dir=str(tmp_path)), pytest.raises(LaunchError):
        write_past_end[8](np.zeros(8, np.float64), np.zeros(8, np.float32))
    assert _captures(tmp_path) == []


def test_a_race_on_the_debug_target_is_captured_and_replayed(tmp_path):
    x, y = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    with tessera.config(target="debug", crash_dir=str(tmp_path)), pytest.raises(RaceError):
        unsynchronised[1](x, y)
    (capture,) = _captures(tmp_path)
    lines = []
    assert replay(capture, out=lines.append) == 0
    assert lines[-1] == "reproduced"


def test_a_recorded_launch_replays_on_another_target_with_the_same_outputs(tmp_path):
    x, y = np.arange(16, dtype=np.float32), np.zeros(16, np.float32)
    with tessera.config(target="debug", crash_dir=str(tmp_path)):
        capture = record(double, 16, x, y, 3.0)
    np.testing.assert_array_equal(np.load(capture / "outputs.npz")["arg1"], 3 * x)
    lines = []
    assert replay(capture, target="cpu", out=lines.append) == 0
    assert "arg1: identical" in lines


def test_a_collective_timeout_is_logged_and_captured(tmp_path, caplog):
    from mpi4py import MPI

    buffer = np.empty(1)
    request = MPI.COMM_WORLD.Irecv(buffer, source=MPI.COMM_WORLD.Get_rank(), tag=4242)
    try:
        with tessera.config(collective_timeout="0.05", crash_dir=str(tmp_path)):
            with pytest.raises(CollectiveTimeout):
                timed.wait(
                    [request],
                    lambda: "a test wait",
                    lambda s: CollectiveTimeout(
                        f"all_reduce timed out after {s} s", "all_reduce", 3, "dp", [1]
                    ),
                )
    finally:
        request.Cancel()
        request.Wait()
    assert "all_reduce timed out" in caplog.text
    (capture,) = _captures(tmp_path)
    meta = json.loads((capture / "metadata.json").read_text())
    assert meta["collective"] == "all_reduce" and meta["seq"] == 3 and meta["missing"] == [1]


def test_a_fatal_signal_leaves_the_stacks_in_the_crash_directory(tmp_path):
    code = "import faulthandler, tessera\nfaulthandler._sigsegv()\n"
    env = dict(os.environ, TESSERA_CRASH_DIR=str(tmp_path), PYTHONPATH=ROOT)
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=120)
    assert result.returncode != 0
    (fatal,) = tmp_path.glob("fatal-*.txt")
    assert "Segmentation fault" in fatal.read_text()


def test_a_clean_exit_leaves_no_fatal_signal_file(tmp_path):
    env = dict(os.environ, TESSERA_CRASH_DIR=str(tmp_path), PYTHONPATH=ROOT)
    subprocess.run([sys.executable, "-c", "import tessera"], env=env, check=True, timeout=120)
    assert list(tmp_path.iterdir()) == []


def test_a_config_failing_in_an_autotune_sweep_is_a_table_row_not_a_capture(
    tmp_path, cache_dir, caplog
):
    def copy_shifted(x: f32[n], y: mut[f32[n]]):
        i = tile.linear_id()
        y[i] = x[i + OFF]  # noqa: F821 - OFF is the tuned constant

    tuned = tessera.kernel.autotune(space=dict(OFF=[1, 0]))(copy_shifted)
    x, y = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    with caplog.at_level(logging.INFO, logger="tessera"):
        with tessera.config(target="debug", crash_dir=str(tmp_path / "crashes")):
            tuned[8](x, y)
    np.testing.assert_array_equal(y, x)
    assert not (tmp_path / "crashes").exists()
    assert "autotune copy_shifted: OFF=0 won a sweep of 2 configs" in caplog.text
