"""Names a port writes that the language spells otherwise: CUDA's and numba-cuda's shuffle
and barrier names, NumPy's functions, and near misses of a primitive or a local name.
Each is a compile error that says what to write instead (docs/language.md, Decisions:
one spelling per primitive), pointing at the name.
"""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest
from error_helpers import assert_points_at, compile_error

from tessera import f32, mut, tbarrier, tile

FILE = inspect.getsourcefile(inspect.currentframe())
GROUP = {"tile": (32,), "shared": 1024}


def points_at(msg: str, marker: str, token: str) -> None:
    assert_points_at(msg, FILE, marker, token)


def k_shfl_down(x: f32[n], y: mut[f32[n]]):
    lane = tile.linear_id()
    v = x[lane]
    v += tile.shfl_down(v, 1)  # E:shfl_down
    y[lane] = v


def k_shfl_up(x: f32[n], y: mut[f32[n]]):
    lane = tile.linear_id()
    y[lane] = tile.shfl_up(x[lane], 1)  # E:shfl_up


def k_shfl_xor(x: f32[n], y: mut[f32[n]]):
    lane = tile.linear_id()
    y[lane] = tile.shfl_xor(x[lane], 1)  # E:shfl_xor


def k_shfl_sync(x: f32[n], y: mut[f32[n]]):
    lane = tile.linear_id()
    y[lane] = tile.shfl_sync(x[lane], 0)  # E:shfl_sync


@pytest.mark.parametrize(
    "fn, marker, want",
    [
        (k_shfl_down, "shfl_down", "tile.shuffle_down"),
        (k_shfl_up, "shfl_up", "tile.shuffle_up"),
        (k_shfl_xor, "shfl_xor", "tile.shuffle_xor"),
        (k_shfl_sync, "shfl_sync", "tile.shuffle"),
    ],
)
def test_cuda_shuffle_spellings_suggest_the_shuffle(fn, marker, want):
    err = str(compile_error(fn, **GROUP))
    assert f"'tile.{marker}' is not defined; did you mean {want}?" in err
    assert "no lane mask" in err
    points_at(err, marker, "tile.")


class _NumbaCuda:
    """What ``from numba import cuda`` gives a port: intrinsics the kernel cannot call."""

    @staticmethod
    def syncthreads():
        pass

    @staticmethod
    def shfl_down_sync(mask, value, delta):
        return value

    class cg:  # noqa: N801 - numba-cuda's cooperative groups
        @staticmethod
        def this_grid():
            return None

    class atomic:  # noqa: N801 - numba-cuda's spelling
        @staticmethod
        def max(array, index, value):
            return array[index]


cuda = _NumbaCuda()


def k_numba_shfl(x: f32[n], y: mut[f32[n]]):
    lane = tile.linear_id()
    y[lane] = cuda.shfl_down_sync(0xFFFFFFFF, x[lane], 1)  # E:numba_shfl


def test_numba_cuda_shuffle_suggests_the_shuffle():
    err = str(compile_error(k_numba_shfl, **GROUP))
    assert "cannot call 'cuda.shfl_down_sync' in a kernel; did you mean tile.shuffle_down?" in err
    points_at(err, "numba_shfl", "cuda.")


def k_numba_sync(x: f32[n], y: mut[f32[n]]):
    lane = tile.linear_id()
    cuda.syncthreads()  # E:numba_sync
    y[lane] = x[lane]


def test_numba_cuda_syncthreads_suggests_tbarrier():
    err = str(compile_error(k_numba_sync, **GROUP))
    assert "cannot call 'cuda.syncthreads' in a kernel; did you mean tbarrier()?" in err
    points_at(err, "numba_sync", "cuda.")


def k_np_sin(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    y[i] = np.sin(x[i])  # E:np_sin


def test_numpy_sin_suggests_math_sin():
    err = str(compile_error(k_np_sin))
    assert "cannot call 'np.sin' in a kernel; write math.sin(x)" in err
    points_at(err, "np_sin", "np.sin")


def k_np_float32(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    y[i] = np.float32(x[i])  # E:np_float32


def test_numpy_scalar_type_suggests_the_cast():
    err = str(compile_error(k_np_float32))
    assert "cannot call 'np.float32' in a kernel; write the cast f32(x)" in err


def k_np_maximum(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    y[i] = np.maximum(x[i], 0.0)  # E:np_maximum


def test_numpy_maximum_suggests_max():
    err = str(compile_error(k_np_maximum))
    assert "cannot call 'np.maximum' in a kernel; write max(a, b)" in err


def k_near_attr(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_idd()  # E:near_attr
    y[i] = x[i]


def test_a_near_miss_primitive_suggests_it():
    err = str(compile_error(k_near_attr))
    assert "'tile.linear_idd' is not defined; did you mean tile.linear_id?" in err
    points_at(err, "near_attr", "tile.")


def k_near_name(x: f32[n], y: mut[f32[n]]):
    lane = tile.linear_id()
    tbarier()  # noqa: F821  # E:near_name
    y[lane] = x[lane]


def test_a_near_miss_name_suggests_the_primitive():
    assert tbarrier is not None  # the kernel's module imports it
    err = str(compile_error(k_near_name, **GROUP))
    assert "name 'tbarier' is not defined; did you mean tbarrier?" in err
    points_at(err, "near_name", "tbarier")


def k_near_local(x: f32[n], y: mut[f32[n]]):
    lane = tile.linear_id()
    y[lane] = x[lnae]  # noqa: F821  # E:near_local


def test_a_near_miss_local_suggests_it():
    err = str(compile_error(k_near_local))
    assert "name 'lnae' is not defined; did you mean lane?" in err


def k_not_imported(x: f32[n], y: mut[f32[n]]):
    lane = tile.linear_id()
    y[lane] = shuffle_down(x[lane], 1)  # noqa: F821  # E:not_imported


def test_a_primitive_not_imported_says_how_to_spell_it():
    err = str(compile_error(k_not_imported, **GROUP))
    assert "name 'shuffle_down' is not defined; it is tile.shuffle_down" in err


def k_math_near(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    y[i] = math.sine(x[i])  # E:math_near


def test_a_near_miss_math_function_suggests_it():
    err = str(compile_error(k_math_near))
    assert "'math.sine' is not defined; did you mean math.sin?" in err


def k_far(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    y[i] = x[i] * zzqqxx  # noqa: F821  # E:far


def test_a_name_near_nothing_gets_no_suggestion():
    err = str(compile_error(k_far))
    assert "name 'zzqqxx' is not defined" in err and "did you mean" not in err


def k_atomic_cas(x: f32[n], y: mut[f32[n]]):
    atomicCAS(y, 0, 0.0, 1.0)  # noqa: F821  # E:atomicCAS


def k_numba_atomic_max(x: f32[n], y: mut[f32[n]]):
    cuda.atomic.max(y, 0, x[0])


def k_xoroshiro(x: f32[n], y: mut[f32[n]]):
    lane = tile.linear_id()
    y[lane] = xoroshiro128p_uniform_float32(x, lane)  # noqa: F821  # E:xoroshiro128p_uniform_float32


@pytest.mark.parametrize(
    "fn, want",
    [
        (k_atomic_cas, "did you mean tile.atomic_cas?"),
        (k_numba_atomic_max, "did you mean tile.atomic_max?"),
        (k_xoroshiro, "did you mean tile.rand? (tile.rand(seed, offset) is a uniform f32"),
    ],
)
def test_cuda_atomic_and_random_spellings_suggest_the_languages(fn, want):
    assert want in str(compile_error(fn, **GROUP))


def k_grid_sync(x: f32[n], y: mut[f32[n]]):
    g = cuda.cg.this_grid()
    g.sync()


def test_grid_synchronisation_is_refused_with_what_to_write_instead():
    err = str(compile_error(k_grid_sync, **GROUP))
    assert "cannot call 'cuda.cg.this_grid' in a kernel; grid-wide synchronisation" in err
    assert "launch a second kernel for the rest" in err


def k_triton_exp(x: f32[n], y: mut[f32[n]]):
    t = tile.load_block(x, (0,), (32,))
    tile.store_block(y, (0,), tile.exp(t))  # E:triton_exp


def k_triton_maximum(x: f32[n], y: mut[f32[n]]):
    t = tile.load_block(x, (0,), (32,))
    tile.store_block(y, (0,), tile.maximum(t, 0.0))  # E:triton_maximum


def k_triton_program_id(x: f32[n], y: mut[f32[n]]):
    y[tile.linear_id()] = x[tile.program_id(0)]  # E:triton_program_id


@pytest.mark.parametrize(
    "fn, marker, name, want",
    [
        (k_triton_exp, "triton_exp", "exp", "write math.exp(x) (the math functions apply"),
        (k_triton_maximum, "triton_maximum", "maximum", "write max(a, b) (elementwise"),
        (k_triton_program_id, "triton_program_id", "program_id", "write tile.group_id(axis)"),
    ],
)
def test_tritons_spellings_of_tile_functions_say_what_to_write(fn, marker, name, want):
    err = str(compile_error(fn, **GROUP))
    assert f"'tile.{name}' is not defined; {want}" in err
    points_at(err, marker, f"tile.{name}")
