"""A variable read where some path leaves it unassigned is a compile error at the read."""

from __future__ import annotations

import pytest

import tessera as ts
from tessera import f32, i64, kernel, mut, tile


def test_a_variable_assigned_on_some_lanes_only_is_a_compile_error():
    with pytest.raises(ts.KernelError, match="'i' may be read before it is assigned") as err:

        @kernel(tile=(32,))
        def k(x: f32[n], y: mut[f32[n]]):
            if tile.linear_id() % 2 == 0:
                i = tile.linear_id()
            y[i] = x[0]

    assert "y[i] = x[0]" in str(err.value)


def test_a_variable_assigned_only_in_a_loop_body_is_a_compile_error():
    with pytest.raises(ts.KernelError, match="'last' may be read"):

        @kernel
        def k(y: mut[i64[n]]):
            for j in range(n):
                last = j
            y[0] = last


def test_a_variable_assigned_in_both_branches_is_fine():
    @kernel
    def k(y: mut[i64[n]], c: i64):
        if c > 0:
            v = 1
        else:
            v = 2
        y[0] = v

    assert k.name == "k"


@ts.func
def pick(c):
    if c > 0:
        r = 1
    return r


def test_a_helper_local_assigned_on_some_paths_is_a_compile_error():
    with pytest.raises(ts.KernelError, match="'r' may be read"):

        @kernel
        def k(y: mut[i64[n]], c: i64):
            y[0] = pick(c)
