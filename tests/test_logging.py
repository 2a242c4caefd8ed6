"""The ``tessera`` logger: compile records with seconds, cache hits and misses, TESSERA_LOG,
the tail a crash capture keeps, and no records on the launch path."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import numpy as np
import pytest

import tessera
from tessera import f32, kernel, mut, tile
from tessera.observe import log

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _fresh_kernel():
    """A new Kernel object each call: its first launch builds again."""

    def add_one(x: f32[n], y: mut[f32[n]]):  # noqa: F821 - n is a symbol
        i = tile.linear_id()
        y[i] = x[i] + 1.0

    return kernel(add_one)


def test_a_cold_cpu_compile_says_how_many_seconds_it_took(caplog):
    x, y = np.ones(4, np.float32), np.zeros(4, np.float32)
    with caplog.at_level(logging.INFO, logger="tessera"), tessera.config(target="cpu", cache="off"):
        _fresh_kernel()[4](x, y)
    done = [r.getMessage() for r in caplog.records if "compiled kernel 'add_one'" in r.getMessage()]
    assert done and done[0].startswith("compiled kernel 'add_one' for cpu") and " s" in done[0]


def test_the_disk_cache_logs_a_miss_then_a_hit(caplog, cache_dir):
    x, y = np.ones(4, np.float32), np.zeros(4, np.float32)
    with caplog.at_level(logging.DEBUG, logger="tessera"), tessera.config(target="cpu"):
        _fresh_kernel()[4](x, y)
        _fresh_kernel()[4](x, y)
    text = caplog.text
    assert "disk cache miss: kernel 'add_one'" in text
    assert "disk cache hit: kernel 'add_one'" in text


def test_warm_launches_make_no_log_records(caplog):
    x, y = np.ones(4, np.float32), np.zeros(4, np.float32)
    k = _fresh_kernel()
    with tessera.config(target="cpu"):
        k[4](x, y)
        with caplog.at_level(logging.DEBUG, logger="tessera"):
            for _ in range(50):
                k[4](x, y)
    assert caplog.records == []


def test_tessera_log_info_prints_compiles_to_stderr(tmp_path):
    script = tmp_path / "one_launch.py"
    script.write_text(
        "from __future__ import annotations\n"
        "import numpy as np\n"
        "from tessera import f32, kernel, mut, tile\n"
        "@kernel\n"
        "def twice(x: f32[n], y: mut[f32[n]]):\n"
        "    y[tile.linear_id()] = 2.0 * x[tile.linear_id()]\n"
        "twice[4](np.ones(4, np.float32), np.zeros(4, np.float32))\n"
    )
    env = dict(os.environ, TESSERA_LOG="info", TESSERA_CACHE="off", PYTHONPATH=ROOT)
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert "INFO: compiled kernel 'twice' for cpu" in result.stderr


def test_a_tessera_warning_still_reaches_stderr_without_handlers():
    code = "import logging, tessera; logging.getLogger('tessera').warning('look here')"
    env = dict(os.environ, PYTHONPATH=ROOT)
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.stderr.strip() == "look here"


def test_the_tail_keeps_the_latest_records_oldest_first():
    logger = logging.getLogger("tessera")
    for k in range(log.TAIL_RECORDS + 5):
        logger.warning("tail record %d", k)
    lines = log.tail()
    assert len(lines) == log.TAIL_RECORDS
    assert lines[-1].endswith(f"tail record {log.TAIL_RECORDS + 4}")
    assert lines[0].endswith("tail record 5")


@pytest.mark.parametrize("level", ["info", "DEBUG"])
def test_tessera_log_takes_a_level_in_any_case(level, monkeypatch):
    monkeypatch.setenv("TESSERA_LOG", level)
    tessera_config = sys.modules["tessera.config"]
    tessera_config.refresh()
    try:
        log.install()
        assert logging.getLogger("tessera").isEnabledFor(getattr(logging, level.upper()))
    finally:
        monkeypatch.delenv("TESSERA_LOG")
        tessera_config.refresh()
        log.install()
        logging.getLogger("tessera").setLevel(logging.NOTSET)


@pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") != "1", reason="runs in the simulator process"
)
def test_a_kernel_first_run_by_the_cuda_simulator_says_so(caplog):
    x, y = np.ones(4, np.float32), np.zeros(4, np.float32)
    with caplog.at_level(logging.INFO, logger="tessera"), tessera.config(target="cuda"):
        _fresh_kernel()[4](x, y)
    said = [r.getMessage() for r in caplog.records if "kernel 'add_one' for cuda" in r.getMessage()]
    assert said == ["kernel 'add_one' for cuda: numba-cuda's simulator runs it"]
