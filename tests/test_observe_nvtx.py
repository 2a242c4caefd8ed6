"""NVTX ranges: the phase of each launch and collective, and the push/pop pairs the
observer makes (the ``nvtx`` package is not installed here: a recorder with its API
stands in for it)."""

from __future__ import annotations

import numpy as np
import pytest
from observe_kernels import make_axpy, make_group_sum

from tessera import dist
from tessera.kernel.targets import TARGETS
from tessera.observe.nvtx import PHASES, NvtxRanges, phase
from tessera.observe.observers import attach, detach


class Recorder:
    """Records calls made with the nvtx package's push_range/pop_range signature."""

    def __init__(self):
        self.calls = []

    def push_range(self, message=None, color=None, domain=None, category=None, payload=None):
        self.calls.append(("push", message, domain, category))

    def pop_range(self, domain=None):
        self.calls.append(("pop", domain))


@pytest.mark.parametrize(
    "kind, primitives, expected",
    [
        ("launch", frozenset({"tile.dot", "tile.sum"}), "mma"),
        ("launch", frozenset({"reduce_sum"}), "reduce"),
        ("launch", frozenset({"tile.atomic_add"}), "reduce"),
        ("launch", frozenset({"tile.linear_id"}), "copy"),
        ("collective", frozenset(), "comm"),
        ("compile", frozenset(), "host"),
        ("graph module", frozenset(), "host"),
    ],
)
def test_the_phase_follows_what_the_kernel_calls(kind, primitives, expected):
    assert phase(kind, primitives) == expected in PHASES


def test_a_kernel_knows_the_primitives_it_calls():
    assert "reduce_sum" in make_group_sum().primitives
    assert phase("launch", make_axpy().primitives) == "copy"


def test_a_gpu_launch_gets_a_range_named_after_its_kernel_in_its_phase():
    recorder = Recorder()
    ranges = NvtxRanges(recorder)
    gpu = next(t for t in TARGETS.values() if t.device_arrays)
    ranges.enter("launch", "group_sum", make_group_sum().primitives, gpu)
    ranges.leave()
    assert recorder.calls == [("push", "group_sum", "tessera", "reduce"), ("pop", "tessera")]


def test_host_target_launches_get_no_range():
    recorder = Recorder()
    ranges = NvtxRanges(recorder)
    attach(ranges)
    try:
        make_axpy()[4](np.ones(4, np.float32), np.zeros(4, np.float32), 1.0)
    finally:
        detach(ranges)
    assert all(c[0] != "push" or c[3] == "host" for c in recorder.calls)


def test_a_collective_is_a_comm_range():
    dist.Mesh(axes=("dp",), shape=(1,))
    recorder = Recorder()
    ranges = NvtxRanges(recorder)
    attach(ranges)
    try:
        dist.all_reduce(np.ones(4), axis="dp")
    finally:
        detach(ranges)
    assert recorder.calls == [("push", "all_reduce", "tessera", "comm"), ("pop", "tessera")]
