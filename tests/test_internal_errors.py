"""A bug in Tessera reaches the user as an InternalError (a TesseraError) that names the
kernel and, where it is known, the statement being compiled; never as the bare KeyError
or numba error behind it, which TESSERA_TRACEBACK=full keeps as its cause. Each test
plants the bug with monkeypatch."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from error_helpers import assert_points_at

import tessera
from tessera import f32, kernel, mut, tile
from tessera.kernel.frontend import Frontend
from tessera.kernel.targets.debug.program import DebugProgram
from tessera.kernel.typer import Typer

FILE = inspect.getsourcefile(inspect.currentframe())


def planted(*args, **kwargs):
    raise KeyError("planted")


def body(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()  # E:first
    y[i] = x[i]  # E:second


def test_a_bug_while_lowering_is_an_internal_error_at_the_statement(monkeypatch):
    monkeypatch.setattr(Frontend, "name_expr", planted)
    with pytest.raises(tessera.InternalError) as info:
        kernel(body)
    assert info.value.kernel == "body" and "KeyError: 'planted'" in str(info.value)
    assert_points_at(str(info.value), FILE, "second", "y[i]")


def test_a_bug_while_typing_is_an_internal_error_at_the_statement(monkeypatch):
    monkeypatch.setattr(Typer, "expr", planted)
    with pytest.raises(tessera.InternalError) as info:
        kernel(body)
    assert_points_at(str(info.value), FILE, "first", "i =")


def test_a_bug_while_running_is_an_internal_error_naming_the_kernel(monkeypatch):
    k = kernel(body)
    monkeypatch.setattr(DebugProgram, "run", planted)
    with tessera.config(target="debug"), pytest.raises(tessera.InternalError) as info:
        k[4](np.ones(4, np.float32), np.zeros(4, np.float32))
    assert "in kernel 'body'" in str(info.value) and "bug in Tessera" in str(info.value)


def test_an_internal_error_is_not_a_kernel_error():
    assert issubclass(tessera.InternalError, tessera.TesseraError)
    assert not issubclass(tessera.InternalError, tessera.KernelError)


def test_an_internal_error_keeps_its_cause_with_full_tracebacks(monkeypatch):
    monkeypatch.setattr(Frontend, "name_expr", planted)
    with tessera.config(traceback="full"), pytest.raises(tessera.InternalError) as info:
        kernel(body)
    assert isinstance(info.value.__cause__, KeyError)


def test_an_internal_error_drops_its_cause_by_default(monkeypatch):
    monkeypatch.setattr(Frontend, "name_expr", planted)
    with pytest.raises(tessera.InternalError) as info:
        kernel(body)
    assert info.value.__cause__ is None and info.value.__suppress_context__
