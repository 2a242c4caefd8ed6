"""The operator layer: eager ops on arrays, traced graphs, fusion counted in launches,
in-place graph kernels and the errors of tracing."""

from __future__ import annotations

import os

import numpy as np
import pytest
from gpu_arrays import made_up_gpu_array
from mpi_run import mpi_missing, run_mpi

import tessera
from tessera import f16, f32, graph, op
from tessera.ops.codegen import tile_space


def launches() -> int:
    return tessera.stats()["launches"]


UNARY = {
    "neg": np.negative,
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "tanh": np.tanh,
    "relu": lambda x: np.maximum(x, 0),
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "silu": lambda x: x / (1 + np.exp(-x)),
}
BINARY = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "maximum": np.maximum,
    "minimum": np.minimum,
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_eager_unary_ops_match_numpy(target, rng, name):
    x = rng.uniform(0.1, 3.0, (7, 9)).astype(np.float32)
    np.testing.assert_allclose(getattr(op, name)(x), UNARY[name](x), rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("name", sorted(BINARY))
def test_eager_binary_ops_broadcast_like_numpy(target, rng, name):
    a = rng.uniform(0.5, 2.0, (4, 1, 6)).astype(np.float32)
    b = rng.uniform(0.5, 2.0, (3, 6)).astype(np.float32)
    out = getattr(op, name)(a, b)
    assert out.shape == (4, 3, 6)
    np.testing.assert_allclose(out, BINARY[name](a, b), rtol=1e-6)


def test_gelu_is_the_erf_form(rng):
    x = rng.standard_normal(100).astype(np.float32)
    from math import erf

    want = np.array([0.5 * v * (1 + erf(v / np.sqrt(2))) for v in x.astype(np.float64)])
    np.testing.assert_allclose(op.gelu(x), want, rtol=1e-5, atol=1e-6)


def test_where_and_comparisons_select_elementwise(rng):
    @graph.module("select")
    def select(x, y):
        return op.where(x > y, x, y * 2.0)

    x, y = rng.standard_normal((2, 5, 5)).astype(np.float32)
    np.testing.assert_array_equal(select(x, y), np.where(x > y, x, y * 2))


def test_cast_rounds_to_the_target_dtype(rng):
    x = rng.standard_normal(64).astype(np.float32)
    out = op.cast(x, f16)
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out, x.astype(np.float16))


@pytest.mark.parametrize("name", ["sum", "mean", "max", "min"])
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_reductions_match_numpy_along_each_axis(target, rng, name, axis):
    x = rng.standard_normal((5, 6, 7)).astype(np.float32)
    out = getattr(op, name)(x, axis=axis, keepdims=True)
    want = getattr(np, name)(x.astype(np.float64), axis=axis, keepdims=True)
    assert out.shape == want.shape
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


def test_a_reduction_without_keepdims_drops_the_axis(rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    assert op.sum(x, axis=0).shape == (4,)
    assert op.sum(x).shape == ()


def test_softmax_matches_numpy(target, rng):
    x = rng.standard_normal((6, 33)).astype(np.float32) * 4
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(op.softmax(x), e / e.sum(axis=-1, keepdims=True), rtol=1e-5)


def test_layernorm_and_rmsnorm_match_numpy(target, rng):
    x = rng.standard_normal((6, 40)).astype(np.float32)
    w, b = rng.standard_normal((2, 40)).astype(np.float32)
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    want = (x - mu) / np.sqrt(var + 1e-5) * w + b
    np.testing.assert_allclose(op.layernorm(x, w, b), want, rtol=1e-5, atol=1e-5)
    rms = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * w
    np.testing.assert_allclose(op.rmsnorm(x, w), rms, rtol=1e-5, atol=1e-5)


def test_a_sum_down_columns_adds_each_column_in_row_order(target, rng):
    x = rng.standard_normal((3, 40, 130)).astype(np.float32)  # 130 columns: 3 groups of 64
    want = (x * x).astype(np.float64).sum(axis=1).astype(np.float32)  # f32 squares, f64 sum
    before = launches()
    got = _sum_of_squares(x)
    assert launches() - before == 1
    np.testing.assert_array_equal(got, want)


@graph.module("sum_of_squares_down_columns")
def _sum_of_squares(x):
    return op.sum(x * x, axis=1)


def test_a_normalisation_is_one_launch_with_the_bits_of_its_defining_ops(target, rng):
    x = rng.standard_normal((3, 6, 40)).astype(np.float32)
    w, b = rng.standard_normal((2, 40)).astype(np.float32)

    @graph.module("layernorm_by_ops")
    def by_ops(x, w, b):
        mu = op.mean(x, axis=-1, keepdims=True)
        d = x - mu
        return d / op.sqrt(op.mean(d * d, axis=-1, keepdims=True) + 1e-5) * w + b

    before = launches()
    y = op.layernorm(x, w, b)
    assert launches() - before == 1
    np.testing.assert_array_equal(y, by_ops(x, w, b))
    rms = x / op.sqrt(op.mean(x * x, axis=-1, keepdims=True) + 1e-6) * w
    np.testing.assert_array_equal(op.rmsnorm(x, w), rms)


def test_a_normalisation_with_broadcast_weights_runs_as_its_ops(rng):
    x = rng.standard_normal((4, 8)).astype(np.float32)
    w = rng.standard_normal((4, 1)).astype(np.float32)
    mu = x.mean(-1, keepdims=True)
    want = (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * w
    np.testing.assert_allclose(op.layernorm(x, w, 0.0 * w), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(64, 32, 64), (100, 70, 90), (3, 5, 7)])
def test_matmul_matches_numpy(target, rng, shape):
    m, k, n = shape
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    np.testing.assert_allclose(op.matmul(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_leading_dims_of_a_fold_into_the_rows_of_one_matmul(rng):
    x = rng.standard_normal((2, 5, 8)).astype(np.float32)
    w = rng.standard_normal((8, 3)).astype(np.float32)
    before = launches()
    out = op.matmul(x, w)
    assert launches() - before == 1
    np.testing.assert_allclose(out, x @ w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "shapes",
    [((3, 20, 30), (3, 30, 17)), ((2, 1, 9, 5), (4, 5, 7)), ((9, 5), (3, 5, 7))],
    ids=["same-batch", "broadcast-batch", "2d-times-batch"],
)
def test_batched_matmul_runs_every_product_in_one_launch(target, rng, shapes):
    a = rng.standard_normal(shapes[0]).astype(np.float32)
    b = rng.standard_normal(shapes[1]).astype(np.float32)
    before = launches()
    out = op.matmul(a, b)
    assert launches() - before == 1
    np.testing.assert_allclose(out, np.matmul(a, b), rtol=1e-4, atol=1e-5)


def test_a_batched_product_never_reads_the_next_matrix_of_the_batch(rng):
    @graph.module("batched_scores")
    def scores(q, k, bias):
        return op.relu(q @ k.mT + bias)

    # 20 rows and k = 33: the 24-row and 32-deep blocks reach into the next matrix,
    # whose values are huge; none of them may reach the result
    q = rng.standard_normal((3, 20, 33)).astype(np.float32)
    k = rng.standard_normal((3, 17, 33)).astype(np.float32)
    bias = rng.standard_normal((3, 1, 17)).astype(np.float32)
    q[2], k[2] = 1e30, 1e30
    want = np.maximum(q[:2] @ k[:2].transpose(0, 2, 1) + bias[:2], 0)
    np.testing.assert_allclose(scores(q, k, bias)[:2], want, rtol=1e-4, atol=1e-5)
    assert len(scores.kernels(q, k, bias)) == 1


def test_transposed_batched_operand_zeroes_the_depth_past_its_matrix(rng):
    @graph.module("batched_gram")
    def gram(a, b):
        return op.transpose(a) @ b

    a = rng.standard_normal((2, 33, 20)).astype(np.float32)
    b = rng.standard_normal((2, 33, 7)).astype(np.float32)
    a[1], b[1] = 1e30, np.inf
    np.testing.assert_allclose(gram(a, b)[0], a[0].T @ b[0], rtol=1e-4, atol=1e-5)


def test_dot_t_of_a_batch_is_an_error_naming_mt(rng):
    @graph.module("ambiguous_t")
    def bad(x):
        return x.T

    with pytest.raises(tessera.TesseraError, match=r"\.mT"):
        bad(rng.standard_normal((2, 3, 4)).astype(np.float32))


def test_matmul_tile_shape_space_is_swept_by_the_autotuner_once(rng, cache_dir):
    a = rng.standard_normal((2, 40, 30)).astype(np.float32)
    b = rng.standard_normal((2, 30, 20)).astype(np.float32)
    space = {"BM": [16, 32], "BN": [16], "BK": [16]}
    before = tessera.stats()["autotune_trials"]
    np.testing.assert_allclose(op.matmul(a, b, tile_shape=space), a @ b, rtol=1e-4, atol=1e-5)
    swept = tessera.stats()["autotune_trials"]
    assert swept > before
    np.testing.assert_allclose(op.matmul(a, b, tile_shape=space), a @ b, rtol=1e-4, atol=1e-5)
    assert tessera.stats()["autotune_trials"] == swept


def test_auto_tile_shape_space_fits_the_matrix():
    assert tile_space("auto", 20, 1000, 100) == {"BM": [32], "BN": [32, 64, 128], "BK": [32, 64]}


def test_a_malformed_tile_shape_is_an_error():
    x = np.ones((4, 4), np.float32)
    with pytest.raises(ValueError, match="BM, BN and BK"):
        op.matmul(x, x, tile_shape={"BM": [16]})
    with pytest.raises(ValueError, match=r"\(BM, BN, BK\)"):
        op.matmul(x, x, tile_shape=(16, 16))


def test_transpose_and_reshape_are_ops(rng):
    x = rng.standard_normal((3, 8)).astype(np.float32)
    np.testing.assert_array_equal(op.transpose(x), x.T)
    np.testing.assert_array_equal(op.reshape(x, (4, -1)), x.reshape(4, 6))


@graph.module("linear_relu")
def linear_relu(A, B, bias):
    return op.relu(op.matmul(A, B) + bias)


def test_relu_of_matmul_plus_bias_is_one_launch(rng):
    a = rng.standard_normal((100, 70)).astype(np.float32)
    b = rng.standard_normal((70, 90)).astype(np.float32)
    bias = rng.standard_normal(90).astype(np.float32)
    linear_relu(a, b, bias)  # traced and compiled
    before = launches()
    y = linear_relu(a, b, bias)
    assert launches() - before == 1
    np.testing.assert_allclose(y, np.maximum(a @ b + bias, 0), rtol=1e-4, atol=1e-4)


def test_the_same_ops_run_eagerly_take_a_launch_each(rng):
    a = rng.standard_normal((16, 8)).astype(np.float32)
    b = rng.standard_normal((8, 16)).astype(np.float32)
    bias = rng.standard_normal(16).astype(np.float32)
    before = launches()
    op.relu(op.add(op.matmul(a, b), bias))
    assert launches() - before == 3


def test_an_elementwise_chain_is_one_kernel(rng):
    @graph.module("chain")
    def chain(x, y):
        z = op.exp(x) * 2.0 + y
        return op.tanh(z) - op.sigmoid(y)

    x, y = rng.standard_normal((2, 10, 10)).astype(np.float32)
    assert len(chain.kernels(x, y)) == 1
    want = np.tanh(np.exp(x) * 2 + y) - 1 / (1 + np.exp(-y))
    np.testing.assert_allclose(chain(x, y), want, rtol=1e-5, atol=1e-6)


def test_an_elementwise_prologue_fuses_into_its_reduction(rng):
    @graph.module("sum_of_squares")
    def sum_of_squares(x):
        return op.sum(x * x, axis=1)

    x = rng.standard_normal((6, 50)).astype(np.float32)
    assert len(sum_of_squares.kernels(x)) == 1
    np.testing.assert_allclose(sum_of_squares(x), (x.astype(np.float64) ** 2).sum(1), rtol=1e-5)


def test_a_value_read_twice_is_stored_once_and_reused(rng):
    @graph.module("reuse")
    def reuse(x):
        h = op.exp(x)
        return op.sum(h, axis=0), h * 3.0

    x = rng.standard_normal((4, 5)).astype(np.float32)
    total, tripled = reuse(x)
    np.testing.assert_allclose(total, np.exp(x).sum(0), rtol=1e-5)
    np.testing.assert_allclose(tripled, np.exp(x) * 3, rtol=1e-6)


def test_a_transposed_operand_is_read_by_the_matmul_itself(rng):
    @graph.module("scores")
    def scores(q, k):
        return op.matmul(q, k.T)

    q, k = rng.standard_normal((2, 40, 16)).astype(np.float32)
    assert len(scores.kernels(q, k)) == 1
    np.testing.assert_allclose(scores(q, k), q @ k.T, rtol=1e-4, atol=1e-5)


@graph.module("attention")
def attention(q, k, v):
    return op.matmul(op.softmax(op.matmul(q, k.T) * 0.125), v)


@pytest.mark.parametrize("keys", [128, 100])
def test_attention_is_one_flash_kernel_that_never_stores_the_scores(target, rng, keys):
    q = rng.standard_normal((72, 64)).astype(np.float32)
    k, v = rng.standard_normal((2, keys, 64)).astype(np.float32)
    (kernel,) = attention.kernels(q, k, v)
    assert "row_max" in attention.graph(q, k, v)
    s = q.astype(np.float64) @ k.T * 0.125
    p = np.exp(s - s.max(1, keepdims=True))
    want = p / p.sum(1, keepdims=True) @ v
    np.testing.assert_allclose(attention(q, k, v), want, rtol=1e-4, atol=1e-5)


def attention_reference(q, k, v, causal):
    s = q.astype(np.float64) @ k.T / np.sqrt(q.shape[1])
    if causal:
        s = np.where(np.tril(np.ones(s.shape, bool)), s, -np.inf)
    p = np.exp(s - s.max(1, keepdims=True))
    return p / p.sum(1, keepdims=True) @ v


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_flash_attention_matches_numpy(target, rng, causal):
    q, k = rng.standard_normal((2, 100, 32)).astype(np.float32)
    v = rng.standard_normal((100, 16)).astype(np.float32)
    out = op.flash_attention(q, k, v, causal=causal)
    np.testing.assert_allclose(out, attention_reference(q, k, v, causal), rtol=1e-4, atol=1e-5)


@graph.module("half_attention")
def half_attention(q, k, v):
    return op.flash_attention(q, k, v)


@pytest.mark.parametrize("dtype, atol", [("f16", 5e-3), ("bf16", 4e-2)])
def test_half_flash_attention_keeps_its_operands_and_rounds_p_before_p_at_v(
    target, rng, dtype, atol
):
    """f16/bf16 products stay f16/bf16 (tensor cores on a GPU); P is rounded to the
    inputs' dtype before ``P @ V``, as FlashAttention and SDPA do (docs/ops.md)."""
    import ml_dtypes

    t = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}[dtype]
    q, k, v = (rng.standard_normal((96, 32)).astype(t) for _ in range(3))
    source = half_attention.graph(q, k, v)
    assert f"tile.dot(p.astype({dtype}), vb)" in source and ".astype(f32)" not in source
    out = half_attention(q, k, v)
    want = attention_reference(*(x.astype(np.float64) for x in (q, k, v)), causal=False)
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=1e-2, atol=atol)


def test_attention_whose_probabilities_are_read_elsewhere_stays_unfused(rng):
    @graph.module("attention_and_probabilities")
    def both(q, k, v):
        p = op.softmax(op.matmul(q, k.T))
        return op.matmul(p, v), p

    q, k, v = rng.standard_normal((3, 16, 8)).astype(np.float32)
    assert len(both.kernels(q, k, v)) == 3
    out, p = both(q, k, v)
    np.testing.assert_allclose(out, p @ v, rtol=1e-5, atol=1e-6)


def test_a_graph_kernel_writes_its_result_into_the_argument(rng):
    @graph.kernel
    def linear(A, B, bias, C):
        C[:] = op.relu(op.matmul(A, B) + bias)

    a = rng.standard_normal((32, 16)).astype(np.float32)
    b = rng.standard_normal((16, 24)).astype(np.float32)
    bias = rng.standard_normal(24).astype(np.float32)
    c = np.zeros((32, 24), np.float32)
    assert linear(a, b, bias, c) is None
    np.testing.assert_allclose(c, np.maximum(a @ b + bias, 0), rtol=1e-4, atol=1e-4)


def test_launches_inside_a_named_stream_run_in_order(target, rng):
    a = rng.standard_normal((24, 16)).astype(np.float32)
    b = rng.standard_normal((16, 8)).astype(np.float32)
    bias = rng.standard_normal(8).astype(np.float32)
    with graph.stream("compute"):
        y = linear_relu(a, b, bias)
        z = op.sum(y, axis=0)
    tessera.synchronize()
    np.testing.assert_allclose(z, np.maximum(a @ b + bias, 0).sum(0), rtol=1e-4, atol=1e-4)


def test_a_stream_needs_a_name():
    with pytest.raises(ValueError, match="non-empty string"):
        graph.stream("").__enter__()


def test_a_module_is_traced_once_per_signature(rng):
    calls = []

    @graph.module("counted")
    def counted(x):
        calls.append(1)
        return x * 2.0

    x = np.ones(4, np.float32)
    counted(x)
    counted(x + 1)
    counted(np.ones(5, np.float32))
    assert len(calls) == 2


def test_the_generated_kernels_can_be_inspected(rng):
    a = np.ones((8, 8), np.float32)
    (k,) = linear_relu.kernels(a, a, np.ones(8, np.float32))
    assert isinstance(k, tessera.Kernel)
    source = k.inspect("cpu", a, a, np.ones(8, np.float32), np.ones((8, 8), np.float32))
    assert "_dot_tiles" in source


def test_the_graph_text_shows_nodes_groups_and_kernels(rng):
    a = np.ones((8, 8), np.float32)
    text = linear_relu.graph(a, a, np.ones(8, np.float32))
    assert "matmul(A, B)" in text
    assert "matmul: matmul %0 → add %1 → relu %2" in text
    assert "tile.dot(x, y, acc)" in text


def test_a_branch_on_a_traced_value_names_module_op_and_line():
    @graph.module("branchy")
    def branchy(x):
        y = op.exp(x)
        if op.sum(y) > 1.0:  # data-dependent: cannot be traced
            return y
        return x

    with pytest.raises(tessera.TesseraError) as err:
        branchy(np.ones(3, np.float32))
    text = str(err.value)
    assert "graph module 'branchy'" in text and "op.gt" in text
    assert "test_ops.py" in text and "if op.sum(y) > 1.0" in text


def test_a_shape_mismatch_names_module_op_and_line():
    @graph.module("mismatch")
    def mismatch(a, b):
        return op.matmul(a, b)

    with pytest.raises(tessera.TesseraError) as err:
        mismatch(np.ones((3, 4), np.float32), np.ones((5, 2), np.float32))
    text = str(err.value)
    assert "graph module 'mismatch', op.matmul" in text
    assert "inner dims 4 and 5 differ" in text and "return op.matmul(a, b)" in text


def test_a_dtype_mismatch_names_both_dtypes():
    with pytest.raises(tessera.TesseraError, match=r"op.add: mixes dtypes f32 and f64"):
        op.add(np.ones(3, np.float32), np.ones(3, np.float64))


def test_dump_writes_the_graph_stages(tmp_path, monkeypatch):
    with tessera.config(dump="graph,fused", dump_dir=str(tmp_path)):

        @graph.module("dumped")
        def dumped(x):
            return op.relu(x) * 2.0

        dumped(np.ones(3, np.float32))
    names = sorted(p.name for p in tmp_path.iterdir())
    assert any(n.startswith("dumped.") and n.endswith(".graph.txt") for n in names)
    assert any(n.endswith(".fused.txt") for n in names)


def test_f16_matmul_accumulates_in_f32_and_rounds_once(rng):
    a = rng.standard_normal((32, 64)).astype(np.float16)
    b = rng.standard_normal((64, 16)).astype(np.float16)
    out = op.matmul(a, b)
    assert out.dtype == np.float16
    want = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16)
    np.testing.assert_allclose(out.astype(np.float32), want.astype(np.float32), rtol=2e-3)


def test_ops_on_f32_tensors_keep_f32():
    assert op.mul(np.ones(2, np.float32), 3).dtype == np.float32
    assert f32 is tessera.f32


@pytest.mark.skipif(mpi_missing(), reason="needs mpi4py and mpiexec")
def test_ops_feed_collectives_on_2_ranks(tmp_path):
    result = run_mpi("mpi_ops_script.py", 2, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    reports = {r: (tmp_path / f"rank{r}.txt").read_text() for r in range(2)}
    assert reports == {0: "ok", 1: "ok"}, reports


@pytest.mark.parametrize("dtype", ["f16", np.float16, f16, "float16"])
def test_cast_takes_a_dtype_by_name_numpy_type_or_tessera_dtype(rng, dtype):
    x = rng.standard_normal(8).astype(np.float32)
    traced = graph.module("cast_then_add")(lambda v: op.cast(op.cast(v, dtype), "f32") + v)
    np.testing.assert_array_equal(traced(x), x.astype(np.float16).astype(np.float32) + x)


def test_cast_to_an_unknown_dtype_names_the_dtypes_there_are():
    with pytest.raises(TypeError, match=r"dtype='f17' is not a Tessera dtype \(one of .*f16"):
        op.cast(np.zeros(4, np.float32), "f17")


@graph.module("row_softmax")
def row_softmax(x):
    return op.softmax(x)


def test_a_row_kernel_loops_a_constant_number_of_times_where_the_lanes_divide_the_row():
    text = row_softmax.graph(np.ones((4, 1024), np.float32))  # 128 lanes, 8 elements each
    assert "for jt in range(8):" in text and "j = tile.linear_id() + jt * 128" in text
    ragged = row_softmax.graph(np.ones((4, 1000), np.float32))
    assert "for j in range(tile.linear_id(), 1000, 128):" in ragged


def test_an_f32_softmax_computes_each_exp_once_and_divides_it_in_place():
    text = row_softmax.graph(np.ones((4, 1024), np.float32))
    assert text.count("math.exp(") == 1
    assert "p1[base + j] = p1[base + j] / total" in text


@pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1", reason="numba-cuda's driver classes"
)
def test_a_gpu_softmax_row_reads_each_element_once_into_registers():
    text = row_softmax.graph(made_up_gpu_array((4, 4096)))  # 256 lanes, 16 elements each
    assert "v15 = f32(p0[base + lane + 3840])" in text and "for jt in range" not in text
    assert text.count("math.exp(") == 16 and text.count("p0[") == 16
    assert text.count("p1[") == 16  # each result written once, never read back
    long_rows = row_softmax.graph(made_up_gpu_array((2, 16384)))  # 64 a lane: the loops stay
    assert "for jt in range(64):" in long_rows
    host = row_softmax.graph(np.ones((4, 4096), np.float32))  # the CPU keeps its loops
    assert "for jt in range(16):" in host
    ptx = row_softmax.inspect("ptx", made_up_gpu_array((4, 4096)))  # NVVM, no GPU needed
    assert ptx.count("ld.global") == 16 and ptx.count("st.global") == 16
    assert "ld.local" not in ptx and "st.local" not in ptx


@pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1", reason="numba-cuda's driver classes"
)
def test_a_gpu_layernorm_row_reads_each_element_once_into_registers():
    layer = graph.module("layer")(lambda x, w, b: op.layernorm(x, w, b))
    args = (made_up_gpu_array((4, 4096)), made_up_gpu_array((4096,)), made_up_gpu_array((4096,)))
    text = layer.graph(*args)
    assert "v15 = f32(p0[base + lane + 3840])" in text and "for jt in range" not in text
    ptx = layer.inspect("ptx", *args)
    assert ptx.count("ld.global") == 3 * 16 and ptx.count("st.global") == 16  # x, w, b
    assert "ld.local" not in ptx and "st.local" not in ptx


@pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1", reason="numba-cuda's driver classes"
)
def test_a_gpu_cross_entropy_row_reads_each_logit_once_into_registers():
    loss = graph.module("loss")(lambda x, t: op.cross_entropy(x, t))
    text = loss.graph(made_up_gpu_array((4, 4096)), made_up_gpu_array((4,), np.int64))
    assert "v15 = f32(p0[base + lane + 3840])" in text and "for jt in range" not in text
