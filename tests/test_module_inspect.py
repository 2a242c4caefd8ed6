"""``f.inspect(stage, *args)`` on graph modules and ``tessera.jit`` functions: the graph's
stages, and any kernel stage of every generated kernel, headed by its name."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera import graph, jit, op


@jit
def layer(x, w):
    return op.relu(op.matmul(x, w)) * 2.0


def _args():
    return np.ones((64, 32), np.float32), np.ones((32, 16), np.float32)


def test_the_graph_stages_are_the_traced_and_fused_graph():
    assert "matmul(x, w)" in layer.inspect("graph", *_args())
    fused = layer.inspect("fused", *_args())
    assert "matmul %0 → relu %1 → mul %2" in fused and "-> kernel layer_0_matmul" in fused
    assert "@kernel(tile=" in layer.inspect("kernels", *_args())


def test_a_kernel_stage_is_every_kernels_headed_by_its_name():
    text = layer.inspect("cpu", *_args())
    assert text.startswith("== kernel layer_0_matmul ==\n")
    assert "def _chunk(" in text


def test_a_graph_module_and_static_arguments_take_the_same_call():
    @graph.module
    def scaled(x, y):
        return x * 3.0 + y

    x = np.ones(8, np.float32)
    assert "== kernel scaled_0_elementwise ==" in scaled.inspect("ir", x, x)

    @jit(static_argnums=(1,))
    def power(x, k):
        return x**k

    assert "pow(x, 3)" in power.inspect("graph", x, 3)


def test_binary_and_dict_stages_come_back_by_kernel_name():
    pytest.importorskip("numba.cuda")
    meta = layer.inspect("meta", *_args(), arch="sm_80")
    assert set(meta) == {"layer_0_matmul"} and meta["layer_0_matmul"]["spill_bytes"] == 0


def test_an_unknown_stage_lists_the_stages():
    with pytest.raises(tessera.TesseraError, match="unknown stage 'nope'; choose one of ir,"):
        layer.inspect("nope", *_args())
