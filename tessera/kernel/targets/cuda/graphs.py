"""A captured step's launches as one CUDA graph (docs/capture.md, CAPTURE.md §6).

``tessera.jit(capture_graph=True)`` records the launches of its capture call (the programs,
the values they were called with, their grids: capture/replay.py). On a GPU those launches
are then enqueued once more on a private stream in thread-local capture mode
(``cuStreamBeginCapture``): nothing runs, the driver records each ``cuLaunchKernel`` with
its parameter values as a kernel node; ``cuStreamEndCapture`` gives the graph and
``cuGraphInstantiate`` its executable. A replay is one ``cuGraphLaunch`` on the caller's
current stream instead of one driver call per kernel.

The capture is ordered after all earlier work (the device is synchronised first) and its
launches do not fence (a wait on an event recorded outside the capture would end it);
every buffer the launches use exists already (the recording keeps the capture call's
buffers: the graph's arena), so nothing allocates while capturing. A capture that fails
ends the stream's capture and frees what it made before the error reaches the user.
"""

from __future__ import annotations

from ....errors import CaptureError, TesseraError
from . import driver as driver_module
from .streams import capturing, current_stream


class CudaGraph:
    """The executable graph of a list of recorded launches."""

    def __init__(self, name: str, graph, graph_exec, kernels: int) -> None:
        self.name = name
        self.kernels = kernels
        self._graph, self._exec = graph, graph_exec

    @classmethod
    def capture(cls, name: str, launches: list) -> CudaGraph:
        """Capture ``launches`` ((program, values, grid, parallel) each) into a graph."""
        driver = driver_module.DRIVER
        driver.synchronize()  # the capture comes after everything enqueued before it
        private = driver.new_stream()
        handle = driver.stream_handle(private)
        driver.begin_capture(handle)
        graph = graph_exec = None
        failed = None
        try:
            with capturing(private):
                for program, values, grid, parallel in launches:
                    program.run(values, grid, parallel)
        except TesseraError as exc:
            failed = exc
        finally:
            graph = driver.end_capture(handle)  # (also when a launch failed: no half capture)
        if failed is None:
            try:
                graph_exec = driver.instantiate(graph)
            except TesseraError as exc:
                failed = exc
        if failed is not None:
            driver.destroy_graph(graph, graph_exec)
            raise CaptureError(
                f"tessera.jit '{name}': capturing its launches into a CUDA graph failed: {failed}"
            ) from None
        return cls(name, graph, graph_exec, len(launches))

    def launch(self) -> None:
        """Enqueue the graph on this thread's current stream."""
        driver = driver_module.DRIVER
        driver.graph_launch(self._exec, driver.stream_handle(current_stream()))

    def close(self) -> None:
        """Free the graph (the step forgot its capture)."""
        if self._exec is not None or self._graph is not None:
            driver_module.DRIVER.destroy_graph(self._graph, self._exec)
            self._graph = self._exec = None
