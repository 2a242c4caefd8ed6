"""Processes of one node that reach the same CPU kernel at once compile it once: the
first takes the disk-cache entry's lock, the others wait for its entry and load it (as
the CUDA target's cubins, tests/test_cuda_direct_launch.py)."""

from __future__ import annotations

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def test_processes_of_one_node_compile_a_cpu_kernel_once(tmp_path):
    ready = tmp_path / "ready"
    ready.mkdir()
    env = dict(os.environ, TESSERA_CACHE_DIR=str(tmp_path / "cache"), TESSERA_CACHE="on")
    script = os.path.join(HERE, "cpu_compile_once_script.py")
    procs = [
        subprocess.Popen(
            [sys.executable, script, str(ready), "3"],
            cwd=HERE,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    counts = [tuple(map(int, p.communicate(timeout=240)[0].split())) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sum(c for c, _ in counts) == 1, counts  # one compiled, the others loaded it
    assert sorted(counts) == [(0, 1), (0, 1), (1, 0)]
