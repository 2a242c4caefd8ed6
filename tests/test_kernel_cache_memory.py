"""The in-memory kernel cache bounds memory (issue 26, item 8c): a program it drops is
freed with everything Tessera made for it, and a size that would keep nothing is refused."""

from __future__ import annotations

import gc
import linecache
import weakref

import numpy as np
import pytest

import tessera
from tessera import constexpr, f32, kernel, mut
from tessera.config import get_int, refresh
from tessera.errors import SettingError, SettingWarning

SIZE = 2


@kernel
def scale(x: f32[n], y: mut[f32[n]], K: constexpr):
    for i in range(n):
        y[i] = x[i] * K


def _launch_specialisations(target: str, values) -> list:
    """Launch ``scale`` with each constexpr value; each program's (weakref, source file)."""
    x, y = np.ones(4, np.float32), np.zeros(4, np.float32)
    made = []
    with tessera.config(kernel_cache_size=SIZE, target=target):
        for k in values:
            scale[1](x, y, k)
            assert y[0] == k
            program = scale._programs[next(reversed(scale._programs))]
            made.append((weakref.ref(program), getattr(program, "filename", None)))
            del program
    gc.collect()
    return made


@pytest.mark.parametrize("target", ["cpu", "debug"])
def test_evicted_programs_are_garbage_collected(target):
    made = _launch_specialisations(target, range(100, 108))
    alive = [ref() is not None for ref, _ in made]
    assert sum(alive) <= SIZE and not any(alive[:-SIZE])


def test_an_evicted_program_leaves_no_generated_source_in_linecache():
    made = _launch_specialisations("cpu", range(200, 206))
    evicted = [filename for ref, filename in made[:-SIZE]]
    assert all(filename is not None for filename in evicted)
    assert not [f for f in evicted if f in linecache.cache]


@pytest.mark.parametrize("size", [0, -1])
def test_a_kernel_cache_size_below_one_is_refused_in_config(size):
    with pytest.raises(SettingError, match="kernel_cache_size.*at least 1"):
        with tessera.config(kernel_cache_size=size):
            pass


@pytest.mark.parametrize("size", ["0", "-1"])
def test_a_kernel_cache_size_below_one_in_the_environment_warns_and_keeps_the_default(
    monkeypatch, size
):
    monkeypatch.setenv("TESSERA_KERNEL_CACHE_SIZE", size)
    refresh()
    try:
        with pytest.warns(SettingWarning, match="TESSERA_KERNEL_CACHE_SIZE.*at least 1"):
            assert get_int("kernel_cache_size") == 256
    finally:
        monkeypatch.undo()
        refresh()
