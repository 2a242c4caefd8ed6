"""Compile feedback: a slow compile says so on a terminal, and is always logged."""

from __future__ import annotations

import logging
import time

import numpy as np
import pytest

import tessera as ts
from tessera.kernel import compile_feedback


def _fresh_kernel():
    def plus_one(x: ts.f32[n], y: ts.mut[ts.f32[n]]):
        i = ts.tile.linear_id()
        if i < n:
            y[i] = x[i] + 1.0

    return ts.kernel(plus_one)


@pytest.fixture
def terminal(monkeypatch):
    monkeypatch.setattr(compile_feedback, "_terminal", lambda: True)


def test_a_slow_compile_on_a_terminal_prints_a_line_before_and_after(terminal, capsys):
    with compile_feedback.compiling("attention", "cuda (sm_90)", after=0.0):
        time.sleep(0.2)  # the announcement comes from a timer thread
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "tessera: compiling 'attention' for cuda (sm_90)..."
    assert err[1].startswith("tessera: compiled 'attention' in 0.")


def test_a_fast_compile_prints_nothing(terminal, capsys):
    with compile_feedback.compiling("quick", "cpu (serial variant)"):
        pass
    assert capsys.readouterr().err == ""


def test_no_lines_when_stderr_is_not_a_terminal(capsys):
    with compile_feedback.compiling("batch", "cpu (serial variant)", after=0.0):
        time.sleep(0.2)
    assert capsys.readouterr().err == ""


def test_a_failed_compile_says_it_failed(terminal, capsys):
    with pytest.raises(RuntimeError), compile_feedback.compiling("bad", "cpu", after=0.0):
        time.sleep(0.2)
        raise RuntimeError("boom")
    assert "failed to compile 'bad'" in capsys.readouterr().err


def test_a_cpu_compile_is_logged_with_its_seconds(caplog):
    k = _fresh_kernel()
    x, y = np.ones(8, np.float32), np.zeros(8, np.float32)
    with caplog.at_level(logging.INFO, logger="tessera"), ts.config(target="cpu", cache="off"):
        k[8](x, y)
    said = [r.getMessage() for r in caplog.records]
    done = [m for m in said if "compiled kernel 'plus_one'" in m]
    assert len(done) == 1 and " for cpu (" in done[0] and done[0].endswith(" s")
