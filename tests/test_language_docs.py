"""The examples of docs/language.md's porting section run, and give what the text says."""

from __future__ import annotations

import linecache
import re
from pathlib import Path

import numpy as np

import tessera as ts
from tessera import op

DOCS = Path(__file__).parent.parent / "docs" / "language.md"


def _section(title: str) -> dict:
    """The kernels the section's code blocks define, by name."""
    text = DOCS.read_text().split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    namespace = {name: getattr(ts, name) for name in ts.__all__}
    namespace["tile"] = ts.tile
    for k, block in enumerate(re.findall(r"```python\n(.*?)```", text, re.S)):
        code = "from __future__ import annotations\n" + block
        filename = f"<docs/language.md, {title}, example {k}>"  # where the kernel's source is
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        exec(compile(code, filename, "exec"), namespace)  # noqa: S102 - the docs' own examples
    return namespace


def test_the_grid_stride_example_covers_every_element(target):
    kernels = _section("Porting from CUDA: grid sizes and random numbers")
    x, y = np.arange(3000, dtype=np.float32), np.ones(3000, np.float32)
    kernels["saxpy_strided"][3](x, y, 2.0)
    np.testing.assert_array_equal(y, 2 * np.arange(3000, dtype=np.float32) + 1)


def test_the_dropout_example_keeps_what_op_dropout_keeps(target):
    kernels = _section("Porting from CUDA: grid sizes and random numbers")
    x, y = np.arange(1, 501, dtype=np.float32), np.zeros(500, np.float32)
    kernels["dropout_mask"][500](x, y, 0.25, 99)
    np.testing.assert_array_equal(y != 0, op.dropout(x, 0.25, 99) != 0)
