"""Tile layouts in the type on CUDA (targets/cuda/passes/layouts.py): every tile value gets
a placement — registers with a linear layout, a staging ring, shared memory with the
reason — and the layouts agree with the index arithmetic of the code generated for them."""

from __future__ import annotations

import importlib.util
import inspect
import math
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from test_cuda_blocked_tiles import transposed_sum

from tessera import f16, f32, group_id, kernel, mut, tile
from tessera.dtypes import f32 as F32
from tessera.kernel.ir import TileType
from tessera.kernel.layout import Placement, shared
from tessera.kernel.targets.cuda import mma, stage_copy
from tessera.kernel.targets.cuda.acc_layout import (
    AccLayout,
    linear,
    register_loops,
    row_linear,
    row_loops,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.kernels import gemm_f16, gemm_i8  # noqa: E402

REGISTER_PATHS = pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or importlib.util.find_spec("numba.cuda") is None,
    reason="the register paths are generated for sm_80+ without numba-cuda's simulator",
)


@kernel(tile=(64,))
def uneven_rows(x: f32[G, n], y: mut[f32[G, n]]):
    g = group_id(0)
    a = tile.load_block(x, (g, 0), (96,))  # 96 elements over 64 threads
    big = tile.load_block(x, (g, 0), (8192,))  # 128 values a thread
    tile.store_block(y, (g, 0), a * 2.0)
    y[g, 0] = big.sum()


@kernel(tile=(128,))
def half_rows(x: f16[G, n], y: mut[f32[G, n]]):
    g = group_id(0)
    a = tile.load_block(x, (g, 0), (1, 1024))
    tile.store_block(y, (g, 0), a * 2.0)


class _Lines:
    def __init__(self):
        self.lines, self.indent = [], 0

    def emit(self, line, loc=None):
        self.lines.append("    " * self.indent + line)


def _run_per_thread(lines: list[str], warps_n: int, threads: int) -> list[tuple]:
    """Run the emitted ``lines`` for every thread of a block: the tuples they record."""
    code = compile("\n".join(lines), "<emitted>", "exec")
    found = []
    for thread in range(threads):
        mw, lane = divmod(thread, 32)
        env = {
            "_mw": mw,
            "_mg": lane // 4,
            "_mq": lane % 4,
            "_mwm": mw // warps_n,
            "_mwn": mw % warps_n,
            "_out": found,
            "_lane": lane,
            "_warp": mw,
        }
        exec(code, env)  # noqa: S102 (the generator's own code)
    return found


ACC_CASES = {
    "f16 128x128, 2x4 warps": (AccLayout(mma.M16N8K16_F16, 64, 32), (128, 128)),
    "f16 128x256, 2x4 warps": (AccLayout(mma.M16N8K16_F16, 64, 64), (128, 256)),
    "f64 64x64, 2x2 warps": (AccLayout(mma.M8N8K4_F64, 32, 32), (64, 64)),
    "i8 K x N, interleaved": (AccLayout(mma.M16N8K32_S8, 64, 32, 4), (128, 128)),
    "row loop 64x64, 4 warps": (AccLayout(mma.M16N8K16_F16, 16, 64), (64, 64)),
}


@pytest.mark.parametrize("case", list(ACC_CASES))
def test_the_accumulators_registers_in_generated_code_are_its_linear_layout(case):
    acc, shape = ACC_CASES[case]
    out = _Lines()
    register_loops(
        out,
        acc,
        lambda row, col, reg, _: out.emit(f"_out.append(({row}, {col}, {reg}, _lane, _warp))"),
    )
    warps_n = shape[1] // acc.warp_n
    threads = 32 * (shape[0] // acc.warp_m) * warps_n
    layout = linear(acc, shape)
    held = _run_per_thread(out.lines, warps_n, threads)
    assert len(held) == math.prod(shape)  # every element once
    for row, col, reg, lane, warp in held:
        assert layout.position(reg, lane, warp) == (row, col)
    assert layout.kind == "bijection"


@pytest.mark.parametrize("case", list(ACC_CASES))
def test_row_registers_in_generated_code_are_the_slice_of_the_accumulator(case):
    acc, shape = ACC_CASES[case]
    out = _Lines()
    row_loops(out, acc, lambda row, reg: out.emit(f"_out.append(({row}, {reg}, _lane, _warp))"))
    warps_n = shape[1] // acc.warp_n
    threads = 32 * (shape[0] // acc.warp_m) * warps_n
    layout = row_linear(acc, shape)
    held = _run_per_thread(out.lines, warps_n, threads)
    for row, reg, lane, warp in held:
        assert layout.position(reg, lane, warp) == (row,)
    assert {r for r, *_ in held} == set(range(shape[0]))  # every row is held
    assert layout.kind == "broadcast"  # the four threads of a group (and column warps) share


@pytest.mark.parametrize(
    ("element", "row_bytes", "down"),
    [(2, 64, False), (2, 256, False), (1, 128, True), (8, 256, False)],
)
def test_a_staged_blocks_layout_is_the_swizzle_its_copies_use(element, row_bytes, down):
    cols = row_bytes // element
    rows = 32
    layout = shared((rows, cols), element, stage_copy.stage_swizzle(element, row_bytes, down))
    per_chunk = 16 // element
    for row in range(rows):
        for chunk in range(row_bytes // 16):
            code = stage_copy.swizzle(element, row_bytes, str(row), str(chunk), down)
            stored = eval(code)  # noqa: S307 (the generator's own code)
            offset = layout.offset(row, chunk * per_chunk)
            assert offset == row * cols + stored * per_chunk


def _element_loop(source: str, register: str) -> list[str]:
    """The index lines of the first element loop of ``source`` that writes ``register``
    at its thread's elements (``_t = ...``, ``_e<d> = ...``)."""
    lines = source.splitlines()
    for i, line in enumerate(lines):
        if re.match(rf"\s*{register}\[_kk\] = ", line):
            start = max(j for j in range(i) if "for _kk in range(" in lines[j])
            return [ln.strip() for ln in lines[start + 1 : i] if re.match(r"\s*_(t|e\d) = ", ln)]
    raise AssertionError(f"no element loop writes {register}")


@pytest.mark.parametrize("grid_args", ["f32 16x16", "f16 row of 1024"])
def test_a_blocked_register_tiles_elements_in_generated_code_are_its_layout(grid_args):
    if grid_args == "f32 16x16":
        x = np.zeros((16, 16), np.float32)
        k, args, var = transposed_sum, (x, x.copy()), "b"
    else:
        x = np.zeros((2, 1024), np.float16)
        k, args, var = half_rows, (x, np.zeros((2, 1024), np.float32)), "a"
    source = k.inspect("cuda", *args, grid=2)
    text = k.inspect("layouts", *args, grid=2)
    assert re.search(rf"^  {var}: .* in registers, blocked", text, re.M)
    index = _element_loop(source, f"rv_{var}")
    program = _program(k, args, grid=2)
    placement = program.placements[var]
    shape = program.kir.var_types[var].shape
    per = math.prod(shape) // program.threads
    for thread in range(program.threads):
        for kk in range(per):
            env = {"_lane": thread, "_kk": kk}
            for line in index:
                exec(line, env)  # noqa: S102 (the generator's own code)
            coords = tuple(env[f"_e{d}"] for d in range(len(shape)))
            assert placement.layout.position(kk, thread % 32, thread // 32) == coords


def _program(k, args, grid):
    """The CUDA program a launch of ``k`` with ``args`` would run (sm_90)."""
    k.inspect("cuda", *args, grid=grid)  # builds it
    programs = [p for key, p in k._programs.items() if key[0].name == "cuda"]
    return programs[-1].for_args(args)


@REGISTER_PATHS
def test_a_gemm_main_loops_tiles_are_an_mma_accumulator_and_two_staging_rings():
    A, B = np.zeros((256, 64), np.float16), np.zeros((64, 256), np.float16)
    args = (A, B, np.zeros((256, 256), np.float32), 128, 128, 32)
    text = gemm_f16.inspect("layouts", *args, grid=(2, 2))
    assert "acc:tile f32[128, 128] #mma_acc" in text
    assert re.search(
        r"^  acc: f32\[128, 128\] in registers, mma_acc, 64 registers a thread", text, re.M
    )
    assert re.search(
        r"^  a: f16\[128, 32\] staged, .*read as mma_operand\(A\) by ldmatrix.x4$", text, re.M
    )
    assert re.search(
        r"^  b: f16\[32, 128\] staged, .*mma_operand\(B\) by ldmatrix.x4.trans$", text, re.M
    )


@REGISTER_PATHS
def test_an_8bit_gemms_b_fragments_are_read_by_byte_permutes():
    A, B = np.zeros((256, 64), np.int8), np.zeros((64, 256), np.int8)
    text = gemm_i8.inspect(
        "layouts", A, B, np.zeros((256, 256), np.int32), 128, 128, 64, grid=(2, 2)
    )
    assert re.search(r"^  b: i8\[64, 128\] staged, .*byte permutes$", text, re.M)


def test_a_tile_read_transposed_is_in_shared_memory_with_the_line_that_reads_it():
    x = np.zeros((16, 16), np.float32)
    text = transposed_sum.inspect("layouts", x, x.copy(), grid=1)
    lines, first = inspect.getsourcelines(transposed_sum.fn)
    at = first + next(i for i, ln in enumerate(lines) if "a.T + b" in ln)
    assert f"  a: f32[16, 16] in shared memory, 1024 bytes: line {at} reads or writes it" in text
    assert "a:tile f32[16, 16] #shared" in text


def test_tiles_that_do_not_split_over_the_threads_say_why_they_are_in_shared_memory():
    x = np.zeros((2, 8192), np.float32)
    text = uneven_rows.inspect("layouts", x, x.copy(), grid=2)
    assert "its 96 elements do not split evenly over the group's 64 threads" in text
    assert "128 values a thread, more than the 64 a register tile holds" in text


def test_a_layout_does_not_change_a_tile_types_identity():
    place = Placement("registers", "blocked")
    plain, placed = TileType(F32, (4, 4)), TileType(F32, (4, 4), layout=place)
    assert plain == placed and hash(plain) == hash(placed)
    assert repr(placed) == "tile f32[4, 4] #blocked" and repr(plain) == "tile f32[4, 4]"


def test_a_placement_names_only_known_homes():
    with pytest.raises(ValueError, match="home must be one of"):
        Placement("texture", "blocked")


@REGISTER_PATHS
def test_metadata_lists_every_tiles_placement():
    A, B = np.zeros((256, 64), np.float16), np.zeros((64, 256), np.float16)
    meta = gemm_f16.metadata(A, B, np.zeros((256, 256), np.float32), 128, 128, 32, grid=(2, 2))
    assert meta["tiles"]["acc"] == {
        "home": "registers",
        "layout": "mma_acc",
        "registers_per_thread": 64,
        "shared_bytes": 0,
        "note": meta["tiles"]["acc"]["note"],
    }
    assert meta["tiles"]["a"]["home"] == "staged" and meta["tiles"]["a"]["shared_bytes"] == 4 * 8192
