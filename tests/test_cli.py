"""The ``tessera`` command line."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import tessera
from tessera.cli import main

HERE = os.path.dirname(os.path.abspath(__file__))


def test_info_lists_versions_and_targets(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    for word in ("tessera", "numba", "llvmlite", "numpy", "cpu", "cuda simulator", "mpi"):
        assert word in out


def test_demo_checks_every_kernel_against_numpy():
    result = subprocess.run(
        [sys.executable, "-m", "tessera.cli", "demo"], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr
    rows = [
        ln
        for ln in result.stdout.splitlines()
        if ln.split()[:1] in (["scale"], ["group_sum"], ["axpy_tiled"], ["matmul"])
    ]
    assert len(rows) == 4 and all(" ok " in ln for ln in rows)


def test_demo_prints_numpys_time_beside_each_kernel():
    from tessera.cli import demo

    lines = []
    assert demo.run(out=lines.append)
    header = next(ln for ln in lines if ln.startswith("kernel"))
    assert header.split()[-1] == "NumPy"
    rows = [ln for ln in lines if ln.split()[:1] in (["scale"], ["matmul"])]
    assert all(ln.rstrip().endswith("ms") and ln.count("ms") == 3 for ln in rows)


def test_tune_prints_the_table_of_every_sweep(tmp_path):
    script = tmp_path / "tune_me.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {HERE!r})\n"
        "from autotune_kernels import run_add_into\n"
        "run_add_into()\n"
    )
    env = dict(os.environ, TESSERA_CACHE_DIR=str(tmp_path / "cache"))
    result = subprocess.run(
        [sys.executable, "-m", "tessera.cli", "tune", str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert "autotune add_into:" in result.stderr and "<- winner" in result.stderr


def test_info_lists_every_setting_with_where_its_value_came_from():
    env = dict(os.environ, TESSERA_TARGET="Debug", PYTHONPATH=os.path.dirname(HERE))
    result = subprocess.run(
        [sys.executable, "-m", "tessera.cli", "info"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    rows = {ln.split()[0]: ln.split()[1:] for ln in result.stdout.splitlines() if "TESSERA_" in ln}
    assert rows["TESSERA_TARGET"] == ["debug", "environment"]
    assert rows["TESSERA_TRACEBACK"] == ["short", "default"]
    assert len(rows) >= 20


def test_version_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"tessera {tessera.__version__}"
