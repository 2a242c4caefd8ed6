"""``tessera.rng.Generator``: dropout masks from a stream whose offset lives in memory, so
every call (and every replay of a captured step) draws a new mask, a call's forward and
backward see one offset, and offset 0 reproduces ``op.dropout(x, p, seed)``."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera import CaptureWarning, graph, jit, op
from tessera.rng import Generator


def test_each_call_draws_a_new_mask_and_advances_the_offset(target):
    x = np.ones(1000, np.float32)
    gen = Generator(7)
    first, second = op.dropout(x, 0.5, gen), op.dropout(x, 0.5, gen)
    assert gen.offset == 2000
    assert (first != second).any()
    np.testing.assert_array_equal(first, op.dropout(x, 0.5, 7))  # offset 0: the int seed
    np.testing.assert_array_equal(second, op.dropout(x, 0.5, Generator(7, offset=1000)))


def test_a_captured_step_draws_a_new_mask_on_every_replay_as_eager_calls_do():
    x = np.ones(512, np.float32)

    def body(gen):
        def step(x):
            h = op.dropout(x, 0.25, gen)
            return op.dropout(h, 0.25, gen) * 1.0

        return step

    replayed_gen, eager_gen = Generator(3), Generator(3)
    step = jit(capture_graph=True)(body(replayed_gen))
    replays = tessera.stats()["graph_replays"]
    outs = [step(x) for _ in range(5)]
    assert tessera.stats()["graph_replays"] == replays + 3
    eager = [body(eager_gen)(x) for _ in range(5)]
    for o, e in zip(outs, eager):
        np.testing.assert_array_equal(o, e)
    assert len({o.tobytes() for o in outs}) == 5
    assert replayed_gen.offset == eager_gen.offset == 5 * 2 * 512


def test_forward_and_backward_see_one_offset():
    gen = Generator(11, offset=123)
    w = np.linspace(1, 2, 64, dtype=np.float32)

    def loss(x, w):
        return op.sum(op.dropout(x, 0.5, gen) * w)

    value_and_grad = graph.value_and_grad(loss, argnums=0)
    x = np.ones(64, np.float32)
    value, dx = value_and_grad(x, w)
    mask = op.dropout(x, 0.5, Generator(11, offset=123))  # the forward's draw
    np.testing.assert_allclose(value, np.sum(mask * w), rtol=1e-6)
    np.testing.assert_array_equal(dx, mask * w)
    assert gen.offset == 123 + 64


def test_an_int_seed_in_a_captured_step_warns_that_its_mask_repeats():
    @jit(capture_graph=True)
    def step(x):
        return op.dropout(x, 0.5, 5)

    with pytest.warns(CaptureWarning, match=r"this mask repeats on every replay"):
        step(np.ones(8, np.float32))


@pytest.mark.parametrize("seed", [-1, 2**63, 1.5, True])
def test_a_bad_seed_is_an_error(seed):
    with pytest.raises(tessera.TesseraError, match=r"seed"):
        Generator(seed)
