"""Launch shapes that starve the CPU: a long launch on fewer groups than threads is
reported once per kernel (a WARNING on the ``tessera`` logger); the shapes agree on
every target; short launches and launches that fill the cores are not reported."""

from __future__ import annotations

import logging
import runpy
from pathlib import Path

import numpy as np
import pytest

import tessera
from tessera import f32, i64, kernel, mut, tile
from tessera.kernel.targets.cpu import program

ROOT = Path(__file__).parent.parent
EXAMPLE = runpy.run_path(str(ROOT / "examples" / "cpu_launch_shapes.py"))
needs_two_threads = pytest.mark.skipif(
    program.cpu_threads() < 2, reason="one thread: every launch fills the cores"
)


def test_both_launch_shapes_compute_the_same_sum(target, rng):
    x = rng.random(5000, dtype=np.float32)
    want = float(np.dot(x.astype(np.float64), x))
    for groups in (1, 4):  # one group of 512 lanes, and several
        assert EXAMPLE["sum_of_squares"](x, groups) == pytest.approx(want, rel=1e-5)


def starved_records(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "sat idle" in r.getMessage()]


@kernel(tile=(64,))
def stride_scale(x: mut[f32[n]], times: i64):
    lane = tile.linear_id()
    for _ in range(times):
        for i in range(lane, n, 64):
            x[i] = x[i] * 0.5 + 1.0


@needs_two_threads
def test_a_long_launch_on_one_group_warns_once_naming_the_kernel(caplog, monkeypatch):
    monkeypatch.setattr(program, "STARVED_SECONDS", 0.0)  # any timed launch is long
    x = np.ones(256, np.float32)
    with caplog.at_level(logging.WARNING, logger="tessera"), tessera.config(target="cpu"):
        for _ in range(3):  # the first launch compiles: not timed
            stride_scale[1](x, 2)
    (record,) = starved_records(caplog)
    assert record.levelno == logging.WARNING and record.name == "tessera"
    message = record.getMessage()
    assert "kernel 'stride_scale'" in message and "test_cpu_launch_shapes.py" in message
    assert "1 group(s) of 64 lanes" in message and "docs/targets.md" in message


@kernel(tile=(64,))
def stride_scale_filled(x: mut[f32[n]]):
    i = tile.linear_id()
    if i < n:
        x[i] = x[i] * 0.5 + 1.0


@needs_two_threads
def test_a_launch_with_a_group_per_thread_does_not_warn(caplog, monkeypatch):
    monkeypatch.setattr(program, "STARVED_SECONDS", 0.0)
    groups = program.cpu_threads()
    x = np.ones(64 * groups, np.float32)
    with caplog.at_level(logging.WARNING, logger="tessera"), tessera.config(target="cpu"):
        for _ in range(3):
            stride_scale_filled[groups](x)
    assert starved_records(caplog) == []


@kernel(tile=(8,))
def tiny(x: mut[f32[n]]):
    i = tile.linear_id()
    if i < n:
        x[i] += 1.0


@needs_two_threads
def test_a_short_launch_on_one_group_does_not_warn(caplog):
    x = np.zeros(8, np.float32)
    with caplog.at_level(logging.WARNING, logger="tessera"), tessera.config(target="cpu"):
        for _ in range(3):
            tiny[1](x)
    assert starved_records(caplog) == [] and np.all(x == 3)


def test_the_docs_show_the_examples_kernel():
    docs = (ROOT / "docs" / "targets.md").read_text()
    section = docs.split("### Launch shapes for the CPU", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert code.strip() in (ROOT / "examples" / "cpu_launch_shapes.py").read_text()


@needs_two_threads
def test_kernels_the_operator_layer_generated_do_not_warn(caplog, monkeypatch):
    # op.softmax on one row is one group: its shape is tessera's, the user cannot act on it
    monkeypatch.setattr(program, "STARVED_SECONDS", 0.0)
    x = np.random.default_rng(0).random((1, 4096), dtype=np.float32)
    with caplog.at_level(logging.WARNING, logger="tessera"), tessera.config(target="cpu"):
        for _ in range(3):
            tessera.op.softmax(x)
    assert starved_records(caplog) == []
