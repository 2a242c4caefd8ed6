"""One process of tests/test_cuda_direct_launch.py's node test: launch a kernel through a
recording stand-in for the driver (no GPU) and print how many kernels this process
compiled; the processes share TESSERA_CACHE_DIR."""

from __future__ import annotations

import numpy as np
from test_cuda_direct_launch import FakeGPUArray, RecordingDriver, scale

import tessera as ts
from tessera.kernel.targets.cuda.driver import use_driver

if __name__ == "__main__":
    with use_driver(RecordingDriver()):
        x = FakeGPUArray(0x10000, (256,), np.float32)
        ts.kernel(scale)[256](x, x, 2.0)
    print(ts.stats()["compiles"], ts.stats()["disk_cache_hits"])
