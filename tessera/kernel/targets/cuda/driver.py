"""The few CUDA driver calls the direct launch path makes, through ``cuda.bindings``.

Loading a cubin, finding its entry, opting in to large dynamic shared memory,
``cuLaunchKernel``, a device-to-device copy, and the stream capture of a captured step
into a CUDA graph (begin, end, instantiate, launch, destroy) — nothing else. numba-cuda
owns the context (its primary context, the one CuPy and PyTorch use too) and the memory;
:func:`ensure_context` makes that context current in a thread before its first launch.

The module-level :data:`DRIVER` is what every launch calls. Tests replace it with a
recording stand-in (``use_driver``) to count the calls of the hot path; such a stand-in
never produces results (docs/targets.md, "The launch path").
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from collections.abc import Iterator

from ....errors import TesseraError
from .runtime import cuda_module


class DriverError(TesseraError):
    """A CUDA driver call failed; the message names the call and the driver's error."""


class Driver:
    """The driver calls of the launch path (``cuda.bindings.driver``, imported lazily)."""

    def __init__(self) -> None:
        self._cu = None
        self._local = threading.local()

    @property
    def cu(self):
        if self._cu is None:
            from cuda.bindings import driver

            self._cu = driver
        return self._cu

    def _check(self, result, what: str):
        err = result[0] if isinstance(result, tuple) else result
        if err != self.cu.CUresult.CUDA_SUCCESS:
            name = self.cu.cuGetErrorName(err)
            label = name[1].decode() if name[0] == self.cu.CUresult.CUDA_SUCCESS else str(err)
            raise DriverError(f"CUDA driver: {what} failed ({label})")
        return result[1] if isinstance(result, tuple) and len(result) > 1 else None

    def ensure_context(self) -> None:
        """Make numba-cuda's (primary) context current in this thread, once per thread."""
        if not getattr(self._local, "ready", False):
            cuda_module().current_context()
            self._local.ready = True

    def device(self) -> tuple[str, tuple[int, int], int]:
        """The current GPU: its name, compute capability and the most shared memory a
        block may opt in to."""
        device = cuda_module().get_current_device()
        name = device.name.decode() if isinstance(device.name, bytes) else str(device.name)
        return name, tuple(device.compute_capability), device.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN

    def multiprocessors(self) -> int:
        """How many SMs the current GPU has."""
        return int(cuda_module().get_current_device().MULTIPROCESSOR_COUNT)

    def load(self, cubin: bytes, entry: str):
        """Load ``cubin`` into the current context; its ``entry`` as a CUfunction (the
        module stays loaded as long as the function is used: it is kept with it)."""
        self.ensure_context()
        image = ctypes.create_string_buffer(cubin, len(cubin))  # the driver reads it here
        module = self._check(self.cu.cuModuleLoadData(ctypes.addressof(image)), "cuModuleLoadData")
        function = self._check(
            self.cu.cuModuleGetFunction(module, entry.encode()), "cuModuleGetFunction"
        )
        return module, function

    def attribute(self, function, name: str) -> int:
        """A CUfunction attribute (``"NUM_REGS"``, ``"LOCAL_SIZE_BYTES"``…)."""
        attr = getattr(self.cu.CUfunction_attribute, f"CU_FUNC_ATTRIBUTE_{name}")
        return int(self._check(self.cu.cuFuncGetAttribute(attr, function), "cuFuncGetAttribute"))

    def allow_dynamic_shared(self, function, nbytes: int) -> None:
        """Opt ``function`` in to ``nbytes`` of dynamic shared memory (above 48 KiB)."""
        attr = self.cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        self._check(self.cu.cuFuncSetAttribute(function, attr, nbytes), "cuFuncSetAttribute")

    def launcher(self):
        """The launch function itself and its success code, fetched once: the hot path
        calls ``launch(f, gx, gy, gz, bx, by, bz, shared, stream, params, 0)``."""
        return self.cu.cuLaunchKernel, self.cu.CUresult.CUDA_SUCCESS

    def launch_failed(self, err, kernel: str):
        """The error to raise for a failed ``cuLaunchKernel``."""
        name = self.cu.cuGetErrorName(err)
        label = name[1].decode() if name[0] == self.cu.CUresult.CUDA_SUCCESS else str(err)
        return DriverError(f"kernel '{kernel}': cuLaunchKernel failed ({label})")

    # ---- CUDA graphs (a captured step: tessera.jit(capture_graph=True), graphs.py)
    def new_stream(self):
        """A new stream of numba-cuda's context (a capture's private stream)."""
        self.ensure_context()
        return cuda_module().stream()

    def synchronize(self) -> None:
        """Wait until all work queued on the device is done."""
        cuda_module().synchronize()

    def begin_capture(self, stream: int) -> None:
        """Start capturing the work enqueued on CUstream ``stream`` into a graph, in
        thread-local mode (only this thread's unsafe calls end the capture)."""
        mode = self.cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        self._check(self.cu.cuStreamBeginCapture(stream, mode), "cuStreamBeginCapture")

    def end_capture(self, stream: int):
        """End ``stream``'s capture: the CUgraph of what was enqueued."""
        return self._check(self.cu.cuStreamEndCapture(stream), "cuStreamEndCapture")

    def instantiate(self, graph):
        """An executable graph (CUgraphExec) of ``graph``."""
        return self._check(self.cu.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")

    def graph_launch(self, graph_exec, stream: int) -> None:
        """Enqueue the executable graph on CUstream ``stream``."""
        self._check(self.cu.cuGraphLaunch(graph_exec, stream), "cuGraphLaunch")

    def destroy_graph(self, graph, graph_exec) -> None:
        """Free a graph and its executable (either may be None)."""
        if graph_exec is not None:
            self._check(self.cu.cuGraphExecDestroy(graph_exec), "cuGraphExecDestroy")
        if graph is not None:
            self._check(self.cu.cuGraphDestroy(graph), "cuGraphDestroy")

    def copy_device(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        """Enqueue a copy of ``nbytes`` from device address ``src`` to ``dst`` on CUstream
        ``stream`` (``cuMemcpyDtoDAsync``)."""
        self._check(self.cu.cuMemcpyDtoDAsync(dst, src, nbytes, stream), "cuMemcpyDtoDAsync")

    def stream_handle(self, stream) -> int:
        """The CUstream of a numba-cuda stream (0: the default stream)."""
        if stream == 0 or stream is None:
            return 0
        handle = getattr(stream, "handle", stream)
        return int(handle) if handle else 0


DRIVER = Driver()


@contextlib.contextmanager
def use_driver(driver) -> Iterator[None]:
    """Launch through ``driver`` inside this block (tests: a recording stand-in)."""
    global DRIVER
    previous, DRIVER = DRIVER, driver
    try:
        yield
    finally:
        DRIVER = previous
