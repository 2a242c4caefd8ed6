"""Pictures: ``tessera tune --plot``, ``tessera.profile().plot(path)`` and ``python -m
bench --plot`` each write a PNG that opens, is large enough and is not blank; without
matplotlib each says so in one line."""

from __future__ import annotations

import builtins
import os
import subprocess
import sys
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest
from observe_kernels import make_axpy

import tessera
from tessera.cli import main
from tessera.config import refresh
from tessera.observe.plots import machine_roofs

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PNG = b"\x89PNG\r\n\x1a\n"


def opens_as_a_picture(path: Path) -> None:
    assert path.read_bytes()[:8] == PNG
    pixels = matplotlib.image.imread(path)
    height, width = pixels.shape[:2]
    assert height >= 200 and width >= 300
    assert pixels[..., :3].std() > 0.05  # lines and text on white, not an empty canvas


def test_tune_plot_draws_every_sweep(tmp_path):
    script = tmp_path / "tune_me.py"
    script.write_text(
        f"import sys\nsys.path.insert(0, {str(HERE)!r})\n"
        "from autotune_kernels import run_add_into\nrun_add_into()\n"
    )
    out = tmp_path / "sweeps" / "tune.png"
    result = subprocess.run(
        [sys.executable, "-m", "tessera.cli", "tune", "--plot", str(out), str(script)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "<- winner" in result.stderr and f"plot: {out}" in result.stderr
    opens_as_a_picture(out)


def test_tune_plot_of_a_script_without_sweeps_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TESSERA_AUTOTUNE", "retune")  # restored after the test
    monkeypatch.setenv("TESSERA_AUTOTUNE_VERBOSE", "1")
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    script = tmp_path / "plain.py"
    script.write_text("x = 1\n")
    try:
        assert main(["tune", "--plot", str(tmp_path / "t.png"), str(script)]) == 1
    finally:  # tune sets TESSERA_AUTOTUNE for the process: the test's values go back
        monkeypatch.undo()
        refresh()
    assert "no autotune sweep; nothing to plot" in capsys.readouterr().err
    assert not (tmp_path / "t.png").exists()


def test_profile_plot_draws_a_roofline(tmp_path, rng):
    with_flops = make_axpy(flops=lambda n: 2 * n)
    without = make_axpy()
    x, y = rng.standard_normal(256).astype(np.float32), np.zeros(256, np.float32)
    with tessera.profile() as p:
        for _ in range(3):
            with_flops[256](x, y, 2.0)
            without[256](x, y, 2.0)
    written = p.plot(tmp_path / "roofline.png")
    assert written == tmp_path / "roofline.png"
    opens_as_a_picture(written)
    gbps, gflops = machine_roofs()
    assert gbps > 0.1 and gflops > 0.1
    given = p.plot(tmp_path / "given.png", peak_gbps=900.0, peak_gflops=20_000.0)
    opens_as_a_picture(given)


def test_profile_plot_of_an_empty_profile_still_draws_the_roofs(tmp_path):
    with tessera.profile() as p:
        pass
    opens_as_a_picture(p.plot(tmp_path / "empty.png", peak_gbps=10.0, peak_gflops=100.0))


def test_bench_plot_draws_the_side_by_side_tables(tmp_path):
    env = dict(os.environ, BENCH_RESULTS=str(tmp_path))  # not the checkout's results
    result = subprocess.run(
        [sys.executable, "-m", "bench", "axpy", "--quick", "--plot"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "axpy.json").exists()
    opens_as_a_picture(tmp_path / "bench.png")


@pytest.fixture
def no_matplotlib(monkeypatch):
    """Every import of matplotlib fails, as where it is not installed."""
    real = builtins.__import__

    def refuse(name, *args, **kwargs):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", refuse)


def test_profile_plot_without_matplotlib_is_a_tessera_error(tmp_path, no_matplotlib):
    with tessera.profile() as p:
        pass
    with pytest.raises(tessera.TesseraError) as error:
        p.plot(tmp_path / "x.png")
    assert str(error.value) == "Profile.plot needs matplotlib: pip install matplotlib"
    assert not (tmp_path / "x.png").exists()


def test_tune_plot_without_matplotlib_says_so_before_running(tmp_path, capsys, no_matplotlib):
    script = tmp_path / "never.py"
    script.write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\n")
    assert main(["tune", "--plot", str(tmp_path / "t.png"), str(script)]) == 2
    err = capsys.readouterr().err
    assert err == "tessera tune --plot needs matplotlib: pip install matplotlib\n"
    assert not (tmp_path / "ran").exists()
