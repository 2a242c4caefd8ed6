"""A captured step's launches as one CUDA graph (targets/cuda/graphs.py), without a GPU:
the driver calls the capture and a replay make, through a recording stand-in for the
driver that counts calls and computes nothing (the kernels are real: NVVM cubins of a
real kernel, launched with the parameter blocks the direct launcher packs)."""

from __future__ import annotations

import os

import numpy as np
import pytest

import tessera as ts
from tessera import f32, kernel, mut, tile
from tessera.capture import replay
from tessera.errors import CaptureError
from tessera.observe import observers
from tessera.ops import plan

pytestmark = pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1", reason="compiles PTX: not in the simulator"
)

from tessera.kernel.targets import TARGETS  # noqa: E402
from tessera.kernel.targets.cuda import memory, streams  # noqa: E402
from tessera.kernel.targets.cuda.driver import use_driver  # noqa: E402
from tessera.kernel.targets.cuda.graphs import CudaGraph  # noqa: E402
from tessera.kernel.targets.cuda.streams import _gpu_work  # noqa: E402


class FakeGPUArray:
    """An array that says it lives on a GPU at a made-up address (nothing reads it)."""

    def __init__(self, pointer: int, shape: tuple, dtype=np.float32):
        self.pointer, self.shape, self.dtype = pointer, tuple(shape), np.dtype(dtype)

    @property
    def __cuda_array_interface__(self):
        return {
            "shape": self.shape,
            "strides": None,
            "typestr": self.dtype.str,
            "data": (self.pointer, False),
            "version": 3,
        }


class RecordingDriver:
    """Stands in for the CUDA driver: records each call and answers with made-up handles
    (a launch or instantiation can be told to fail). It never runs a kernel."""

    def __init__(self, fail_launch: bool = False, fail_instantiate: bool = False):
        self.calls: list = []
        self.fail_launch, self.fail_instantiate = fail_launch, fail_instantiate

    def device(self):
        return "recording stand-in", (9, 0), 227 * 1024

    def multiprocessors(self):
        return 132

    def load(self, cubin, entry):
        assert cubin.startswith(b"\x7fELF")
        self.calls.append(("load", entry))
        return "module", "function"

    def allow_dynamic_shared(self, function, nbytes):
        self.calls.append(("allow_dynamic_shared", nbytes))

    def stream_handle(self, stream):
        return 0 if stream == 0 else 55

    def launcher(self):
        def launch(function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
            self.calls.append(("launch", stream))
            return (1 if self.fail_launch else 0,)

        return launch, 0

    def launch_failed(self, err, kernel):
        return ts.TesseraError(f"kernel '{kernel}': cuLaunchKernel failed ({err})")

    def synchronize(self):
        self.calls.append(("synchronize",))

    def new_stream(self):
        self.calls.append(("new_stream",))
        return "private stream"

    def begin_capture(self, stream):
        self.calls.append(("begin_capture", stream))

    def end_capture(self, stream):
        self.calls.append(("end_capture", stream))
        return "graph"

    def instantiate(self, graph):
        self.calls.append(("instantiate", graph))
        if self.fail_instantiate:
            raise ts.TesseraError("CUDA driver: cuGraphInstantiate failed (stand-in)")
        return "graph exec"

    def graph_launch(self, graph_exec, stream):
        self.calls.append(("graph_launch", graph_exec, stream))

    def destroy_graph(self, graph, graph_exec):
        self.calls.append(("destroy_graph", graph, graph_exec))

    def copy_device(self, dst, src, nbytes, stream):
        self.calls.append(("copy_device", dst, src, nbytes, stream))


def scale(x: mut[f32[n]], y: f32[n], a: f32):
    i = tile.linear_id()
    if i < n:
        x[i] = a * y[i]


def _recorded(driver, steps: int = 3) -> list:
    """The launches of a few kernel calls as tessera.jit's capture records them."""
    k = kernel(scale)
    x, y = FakeGPUArray(0x10000, (1000,)), FakeGPUArray(0x20000, (1000,))
    recorder = replay._Recorder()
    observers.attach(recorder)
    try:
        for s in range(steps):
            k[1000](x, y, float(s))
    finally:
        observers.detach(recorder)
    del driver.calls[:]
    return [(r.program, r.args, r.grid, r.parallel) for r in recorder.launches]


@pytest.fixture
def recording(cache_dir):
    driver = RecordingDriver()
    with use_driver(driver), ts.config(target="auto"):
        yield driver
    _gpu_work[0] = False  # nothing ran on a GPU


def test_the_launches_are_captured_on_a_private_stream_after_all_earlier_work(recording):
    launches = _recorded(recording)
    graph = CudaGraph.capture("step", launches)
    assert recording.calls == [
        ("synchronize",),
        ("new_stream",),
        ("begin_capture", 55),
        ("launch", 55),
        ("launch", 55),
        ("launch", 55),
        ("end_capture", 55),
        ("instantiate", "graph"),
    ]
    assert graph.kernels == 3


def test_a_replay_is_one_graph_launch_on_the_current_stream(recording):
    graph = CudaGraph.capture("step", _recorded(recording))
    del recording.calls[:]
    graph.launch()
    assert recording.calls == [("graph_launch", "graph exec", 0)]


def test_a_launch_failing_while_capturing_ends_the_capture_and_frees_it(recording):
    launches = _recorded(recording)
    recording.fail_launch = True
    with pytest.raises(CaptureError, match="'step'.*cuLaunchKernel failed"):
        CudaGraph.capture("step", launches)
    names = [c[0] for c in recording.calls]
    assert names[-2:] == ["end_capture", "destroy_graph"] and "instantiate" not in names
    assert not streams._local.capturing  # the thread is out of capture mode


def test_an_instantiation_that_fails_frees_the_graph(recording):
    launches = _recorded(recording)
    recording.fail_instantiate = True
    with pytest.raises(CaptureError, match="cuGraphInstantiate failed"):
        CudaGraph.capture("step", launches)
    assert recording.calls[-1] == ("destroy_graph", "graph", None)


def test_launches_while_capturing_do_not_fence():
    streams.fencing_on[0], before = True, streams.fencing_on[0]
    try:
        assert streams.fence_now()
        with streams.capturing("private stream"):
            assert not streams.fence_now()
            assert streams.current_stream() == "private stream"
        assert streams.fence_now()
    finally:
        streams.fencing_on[0] = before


def test_a_replayed_step_with_a_device_graph_launches_it_instead_of_each_kernel(recording):
    launches = _recorded(recording)
    graph = replay.Graph(
        "step", {}, {}, launches, plan.Finish(None, []), [], 0.0, ["scale"] * 3,
        CudaGraph.capture("step", launches),
    )  # fmt: skip
    del recording.calls[:]
    before = ts.stats()["launches"]
    graph.replay([], [])
    assert recording.calls == [("graph_launch", "graph exec", 0)]
    assert ts.stats()["launches"] - before == 3  # the kernels it launched, counted
    graph.close()
    assert recording.calls[-1] == ("destroy_graph", "graph", "graph exec")


def test_the_cpu_target_replays_its_programs_without_a_device_graph():
    assert TARGETS["cpu"].device_graph("step", []) is None


class StridedGPUArray(FakeGPUArray):
    """A made-up GPU array with every other element (numba-cuda copies such arrays)."""

    def __init__(self, pointer: int, shape: tuple):
        super().__init__(pointer, shape)
        self.copied_from = None

    @property
    def __cuda_array_interface__(self):
        return {**super().__cuda_array_interface__, "strides": (8,)}

    def copy_to_device(self, source):
        self.copied_from = source


def test_a_device_copy_of_contiguous_arrays_is_one_asynchronous_driver_copy(recording):
    dst, src = FakeGPUArray(0x10000, (8, 16)), FakeGPUArray(0x20000, (8, 16))
    memory.copy(dst, src)
    assert recording.calls == [("copy_device", 0x10000, 0x20000, 8 * 16 * 4, 0)]


def test_a_device_copy_goes_to_the_current_stream(recording):
    dst, src = FakeGPUArray(0x10000, (100,)), FakeGPUArray(0x20000, (100,))
    with streams.capturing("private stream"):  # (a current stream that does not fence)
        memory.copy(dst, src)
    assert recording.calls == [("copy_device", 0x10000, 0x20000, 400, 55)]


def test_a_device_copy_of_a_strided_array_is_numba_cudas(recording):
    dst, src = StridedGPUArray(0x10000, (100,)), FakeGPUArray(0x20000, (100,))
    memory.copy(dst, src)
    assert dst.copied_from is src and recording.calls == []


def test_a_replay_copies_a_new_input_into_its_buffer_before_launching_the_graph(recording):
    launches = _recorded(recording)
    static = FakeGPUArray(0x30000, (1000,))
    graph = replay.Graph(
        "step", {"y": static}, {}, launches, plan.Finish(None, []), [], 0.0, ["scale"] * 3,
        CudaGraph.capture("step", launches),
    )  # fmt: skip
    del recording.calls[:]
    graph.replay(["y"], [FakeGPUArray(0x40000, (1000,))])
    assert recording.calls == [
        ("copy_device", 0x30000, 0x40000, 4000, 0),
        ("graph_launch", "graph exec", 0),
    ]
