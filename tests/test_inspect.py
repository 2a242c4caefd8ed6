"""``k.inspect(stage, *args, grid=...)`` shows the IR, the region schedule and the
generated CPU code, which maps back to the kernel's source lines."""

from __future__ import annotations

import numpy as np
import pytest
from classic_kernels import block_reduce_tree, scale

import tessera as ts


def _args():
    x = np.zeros(1000, np.float32)
    return x, np.zeros(4, np.float32)


def test_inspect_ir_shows_the_typed_kernel():
    text = block_reduce_tree.inspect("ir", *_args(), grid=4)
    assert text.startswith("kernel block_reduce_tree(")
    assert "tbarrier()" in text
    assert "stride = 128" in text


def test_inspect_regions_cuts_the_body_at_barriers():
    text = block_reduce_tree.inspect("regions", *_args(), grid=4)
    assert text.count("region ") == 3
    assert "group: tbarrier()" in text


def test_inspect_cpu_code_maps_back_to_kernel_lines():
    text = block_reduce_tree.inspect("cpu", *_args(), grid=4)
    assert "def _chunk(_c," in text and "for _g in range(" in text  # a chunk's groups
    lines = [int(part.split()[0]) for part in text.split("# line ")[1:]]
    first = block_reduce_tree.fn.__code__.co_firstlineno
    assert lines and all(first < n < first + 20 for n in lines)


def test_inspect_of_a_flat_kernel_has_one_region():
    x = np.zeros(8, np.float32)
    assert "flat kernel" in scale.inspect("regions", x, x, 1.0, grid=8)


def test_inspect_rejects_an_unknown_stage():
    with pytest.raises(ts.TesseraError, match="unknown stage"):
        scale.inspect("hlo", np.zeros(8, np.float32), np.zeros(8, np.float32), 1.0)


def test_inspect_llvm_and_asm_compile_the_kernel():
    x = np.zeros(64, np.float32)
    llvm = scale.inspect("llvm", x, x, 2.0, grid=64)
    asm = scale.inspect("asm", x, x, 2.0, grid=64)
    assert "define" in llvm and "fmul" in llvm
    assert "mul" in asm.lower()


def test_dump_writes_one_file_per_stage(tmp_path):
    from tessera import kernel

    k = kernel(scale.fn)  # a fresh kernel: its first specialisation is built below
    x = np.zeros(8, np.float32)
    with ts.config(dump="ir,regions,cpu", dump_dir=str(tmp_path)):
        k[8](x, x, 1.0)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["scale.1.cpu.txt", "scale.1.ir.txt", "scale.1.regions.txt"]
    assert "def _kernel(" in (tmp_path / "scale.1.cpu.txt").read_text()


def test_dump_of_an_unknown_stage_is_an_error(tmp_path):
    from tessera import kernel

    k = kernel(scale.fn)
    x = np.zeros(8, np.float32)
    with ts.config(dump="ptx", dump_dir=str(tmp_path)), pytest.raises(ts.TesseraError):
        k[8](x, x, 1.0)
