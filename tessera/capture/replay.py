"""Capture and replay of one traced step (docs/capture.md): the launches
a step makes are recorded once and replayed by calling their compiled programs directly.

The *capture* call runs the step's plan (ops/plan.py) on static buffers of its own: a
copy of each read-only argument, the very arrays it writes, and the intermediates the
plan allocates, which the recording keeps alive (the graph's arena: stable addresses from
call to call). An observer records every launch of the capturing thread: its program,
the values it was called with, its grid. A *replay* copies the arguments into the static
buffers, runs the recorded programs in order (no tracing, binding, checks or dispatch:
each ran, with those very values, at the capture), then the plan's host step (outputs
computed aside copied into written arguments), and returns the outputs.

This is how the CPU target (and numba-cuda's simulator, which has no CUDA graphs) replays.
On a GPU the recorded launches are captured once more into a CUDA graph
(targets/cuda/graphs.py) and a replay launches that graph. The debug target never replays:
every call runs eagerly, with its sanitizers.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import numpy as np

from ..arrays import is_device_array
from ..errors import CaptureError
from ..observe import observers, stats
from ..ops import plan, recording


class _Recorder(observers.Observer):
    """Records the launches of one thread."""

    def __init__(self) -> None:
        self.thread = threading.get_ident()
        self.launches: list = []  # LaunchRecords, and HostSteps in their places

    def launch(self, record: observers.LaunchRecord) -> None:
        if threading.get_ident() == self.thread:
            self.launches.append(record)


@dataclass
class Graph:
    """One captured step: its static buffers, launches and host step."""

    name: str
    inputs: dict  # parameter name → its static buffer (read-only arguments)
    bound: dict  # parameter name → the argument it writes, bound by address
    launches: list  # (program, call values, grid, parallel), or a HostStep (a collective)
    finish: plan.Finish
    outputs: list  # the step's results, in the graph's buffers
    capture_seconds: float
    kernels: list = field(default_factory=list)  # the kernels launched, by name
    device: object = None  # the launches as one graph of the device's (CUDA graphs), if any

    @property
    def arena_bytes(self) -> int:
        seen, total = set(), 0
        for item in self.launches:
            if isinstance(item, recording.HostStep):
                continue
            for v in item[1]:
                if hasattr(v, "nbytes") and id(v) not in seen:
                    seen.add(id(v))
                    total += int(v.nbytes)
        return total

    def replay(self, names: list[str], arrays: list) -> list:
        """Run the captured step on ``arrays`` (by parameter ``names``); its outputs."""
        for name, a in zip(names, arrays):
            static = self.inputs.get(name)
            if static is not None:
                if a is not static:
                    _copy_into(static, a)
                    stats.bump("graph_input_copies")
            elif a is not self.bound[name]:
                raise CaptureError(
                    f"tessera.jit '{self.name}': parameter '{name}' is written by the step, "
                    f"so it is bound by address at the capture (array at "
                    f"{_address(self.bound[name]):#x}), but this call passes another array "
                    f"(at {_address(a):#x}): pass the same array on every call"
                )
        if self.device is not None:  # one launch of the device's graph
            self.device.launch()
            stats.bump("launches", self.device.kernels)
        else:
            launches = 0
            for item in self.launches:
                if isinstance(item, recording.HostStep):  # a collective, in its place
                    item.run()
                else:
                    program, values, grid, parallel = item
                    program.run(values, grid, parallel)
                    launches += 1
            stats.bump("launches", launches)
        self.finish.run()
        stats.bump("graph_replays")
        return list(self.outputs)

    def close(self) -> None:
        """Free what the capture holds on the device (its CUDA graph)."""
        if self.device is not None:
            self.device.close()
            self.device = None


def capture(
    name: str, lowered, names: list[str], arrays: list, written: set[str], target=None
) -> Graph:
    """Run ``lowered`` once on static buffers, recording its launches; on a ``target``
    with graphs of its own (CUDA), the launches then become one such graph (none where a
    collective with host steps sits among them: those replay one by one)."""
    inputs, bound, run_with = {}, {}, []
    for n, a in zip(names, arrays):
        if n in written:
            if isinstance(a, np.ndarray) and not a.flags.c_contiguous:
                raise CaptureError(
                    f"tessera.jit '{name}': parameter '{n}' is written by the step and is "
                    "not contiguous: a captured step writes arrays in place"
                )
            bound[n] = a
            run_with.append(a)
        else:
            static = _static_copy(a)
            inputs[n] = static
            run_with.append(static)
    recorder = _Recorder()
    start = time.perf_counter()
    observers.attach(recorder)
    try:
        with recording.recording(recorder.launches):  # collectives, among the launches
            outputs, finish = plan.start(lowered, run_with)
    finally:
        observers.detach(recorder)
    finish.run()
    stats.bump("graph_captures")
    launches = [
        r if isinstance(r, recording.HostStep) else (r.program, r.args, r.grid, r.parallel)
        for r in recorder.launches
    ]
    names = [
        r.name if isinstance(r, recording.HostStep) else r.kernel.name for r in recorder.launches
    ]
    device = None
    if target is not None and not any(isinstance(r, recording.HostStep) for r in launches):
        device = target.device_graph(name, launches)
    return Graph(
        name, inputs, bound, launches, finish, outputs, time.perf_counter() - start, names, device
    )


def _static_copy(a):
    if is_device_array(a):
        return plan.memory([a]).from_host(a.copy_to_host())  # the target's own memory
    return np.array(a, copy=True, order="C")


def _copy_into(static, a) -> None:
    if is_device_array(static):
        plan.memory([static]).copy(static, a)  # (CUDA: one asynchronous copy)
    else:
        np.copyto(static, a)


def _address(a) -> int:
    if isinstance(a, np.ndarray):
        return a.__array_interface__["data"][0]
    face = getattr(a, "__cuda_array_interface__", None)
    return face["data"][0] if face else id(a)
