"""Attention split along the keys where the arrays live on a GPU (ops/passes.py
split_keys, ops/attention_code.py): few query groups make too few warps for a GPU's SMs,
so each group's keys are taken in shares (``attention_split``) and the shares combined
(``attention_combine``). The kernels are the language's: here they run on the CPU
against float64 and the single kernel; tests/test_cuda_gpu.py runs them on a GPU."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

from tessera import graph, op
from tessera.ops.attention_code import split_plan
from tessera.ops.passes import lower
from tessera.ops.plan import operands, run


@graph.module("split_attention")
def attention(q, k, v):
    return op.flash_attention(q, k, v)


@graph.module("split_causal")
def causal(q, k, v):
    return op.flash_attention(q, k, v, causal=True)


def _inputs(n: int, keys: int, dtype, d: int = 64, seed: int = 3):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((n, d)).astype(dtype)
    k, v = (rng.standard_normal((keys, d)).astype(dtype) for _ in range(2))
    return q, k, v


def _lowered(module, arrays, device: bool):
    return lower(module._trace(operands(module.name, arrays)), device)


def _run(module, arrays, device: bool):
    (out,) = run(_lowered(module, arrays, device), operands(module.name, arrays))
    return out


def _want(q, k, v):
    q64, k64, v64 = (x.astype(np.float64) for x in (q, k, v))
    s = q64 @ k64.T / np.sqrt(q.shape[1])
    p = np.exp(s - s.max(1, keepdims=True))
    return (p / p.sum(1, keepdims=True)) @ v64


def _ops(lowered) -> list[str]:
    return [g.head.op for g in lowered.groups]


def test_on_a_gpu_few_query_groups_split_the_keys_into_shares():
    arrays = _inputs(4096, 4096, np.float16, d=16)
    lowered = _lowered(attention, arrays, device=True)
    assert _ops(lowered) == ["attention_split", "attention_combine"]
    split = lowered.groups[0].head
    assert (split.attrs["splits"], split.attrs["share"]) == (2, 2048)
    assert split.shape == (2 * 2 * 4096, 16) and split.dtype.name == "f32"


@pytest.mark.parametrize(
    "module, n, keys, device",
    [
        (attention, 4096, 4096, False),
        (causal, 4096, 256, True),
        (attention, 16384, 4096, True),
        (attention, 1024, 1024, True),
    ],
    ids=["cpu", "causal", "enough-groups", "few-keys"],
)
def test_the_cpu_causal_attention_many_groups_and_few_keys_keep_one_kernel(module, n, keys, device):
    arrays = _inputs(n, keys, np.float16, d=16)
    assert _ops(_lowered(module, arrays, device)) == ["attention"]


def test_a_share_has_at_least_sixteen_key_blocks():
    assert split_plan(256, 1024, False) is None  # sixteen key blocks: one share
    assert split_plan(256, 2048, False)[0] == 2
    assert split_plan(64, 1 << 16, False)[0] == 8  # at most eight shares


@pytest.mark.parametrize("dtype, tol", [(np.float16, 5e-3), (np.float32, 1e-5)])
@pytest.mark.parametrize("n, keys", [(128, 2048), (250, 2000)], ids=["whole", "ragged"])
def test_split_attention_matches_float64(dtype, tol, n, keys):
    """Shares of whole key blocks, and a last share with masked keys beside a last query
    group padded past the rows."""
    arrays = _inputs(n, keys, dtype)
    assert _ops(_lowered(attention, arrays, True))[0] == "attention_split"
    got = _run(attention, arrays, device=True)
    np.testing.assert_allclose(got.astype(np.float64), _want(*arrays), rtol=tol, atol=tol)


def test_split_attention_is_within_rounding_of_the_single_kernel():
    arrays = _inputs(128, 2048, np.float32)
    split, single = _run(attention, arrays, True), _run(attention, arrays, False)
    np.testing.assert_allclose(split, single, rtol=2e-6, atol=2e-6)
    assert _run(attention, arrays, True).tobytes() == split.tobytes()  # same bits again


@pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or importlib.util.find_spec("numba.cuda") is None,
    reason="generated CUDA source needs numba-cuda without its simulator",
)
def test_on_sm_90_each_share_runs_the_register_row_loop():
    from gpu_arrays import made_up_gpu_array

    args = (made_up_gpu_array((2048, 64), np.float16),) * 3
    source = attention.inspect("cuda", *args)
    split = source[: source.index("== kernel split_attention_1_attention_combine")]
    assert "attention_split" in split and "register row loop" in split
