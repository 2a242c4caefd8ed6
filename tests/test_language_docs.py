"""The examples of docs/language.md's porting section run, and give what the text says."""

from __future__ import annotations

import linecache
import re
from pathlib import Path

import numpy as np
import pytest

import tessera as ts
from tessera import op

DOCS = Path(__file__).parent.parent / "docs" / "language.md"
SECTION = "Porting from CUDA: grid sizes, shared memory sized at launch, random numbers"


def _section(title: str, **names: object) -> dict:
    """The kernels the section's code blocks define, by name (``names``: module constants
    the examples read)."""
    text = DOCS.read_text().split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    namespace = {name: getattr(ts, name) for name in ts.__all__}
    namespace.update(tile=ts.tile, **names)
    for k, block in enumerate(re.findall(r"```python\n(.*?)```", text, re.S)):
        code = "from __future__ import annotations\n" + block.split("\n\n", 1)[0]  # the def
        filename = f"<docs/language.md, {title}, example {k}>"  # where the kernel's source is
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        exec(compile(code, filename, "exec"), namespace)  # noqa: S102 - the docs' own examples
    return namespace


def test_the_grid_stride_example_covers_every_element(target):
    kernels = _section(SECTION)
    x, y = np.arange(3000, dtype=np.float32), np.ones(3000, np.float32)
    kernels["saxpy_strided"][3](x, y, 2.0)
    np.testing.assert_array_equal(y, 2 * np.arange(3000, dtype=np.float32) + 1)


def test_the_dropout_example_keeps_what_op_dropout_keeps(target):
    kernels = _section(SECTION)
    x, y = np.arange(1, 501, dtype=np.float32), np.zeros(500, np.float32)
    kernels["dropout_mask"][500](x, y, 0.25, 99)
    np.testing.assert_array_equal(y != 0, op.dropout(x, 0.25, 99) != 0)


def test_the_dynamic_shared_example_runs_and_refuses_what_the_text_says(target):
    kernels = _section(SECTION)
    x, y = np.arange(400, dtype=np.float32), np.zeros(400, np.float32)
    kernels["reverse_chunks"][4](x, y, 100)
    np.testing.assert_array_equal(y, np.concatenate([c[::-1] for c in np.split(x, 4)]))
    with pytest.raises(ts.LaunchError, match="20000 bytes.*shared=16384"):
        kernels["reverse_chunks"][1](x, y, 5000)


def test_the_stencil_example_reaches_back_inside_its_base(target):
    kernels = _section("Views", RADIUS=3)
    x, out = np.arange(30, dtype=np.float32), np.zeros(24, np.float32)
    kernels["stencil"][24](x, out)
    np.testing.assert_array_equal(out, [x[i : i + 7].sum() for i in range(24)])


def test_the_multistage_gemm_example_multiplies(target):
    kernels = _section("Views", RADIUS=3)
    rng = np.random.default_rng(0)
    A, B = rng.random((64, 80), np.float32), rng.random((80, 96), np.float32)
    C = np.zeros((64, 96), np.float32)
    kernels["multistage_gemm"][(2, 3)](A, B, C)
    np.testing.assert_allclose(C, A @ B, rtol=1e-4)
