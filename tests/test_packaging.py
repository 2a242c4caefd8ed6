"""What a user installs and meets first: the distribution's name and contents, the install
lines in the docs, ``tessera --version``, a closed pipe, ``bench --plot`` without
matplotlib."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import tessera

ROOT = Path(__file__).parent.parent
DISTRIBUTION = "tessera-kernels"


def _texts():
    """Every file whose words a user may copy: README, docs, messages in the package."""
    for path in [ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("tessera/**/*.py")]:
        yield path, path.read_text()


def test_every_install_line_names_the_distribution_not_the_taken_name():
    wrong = []
    for path, text in _texts():
        for line in re.findall(r"pip install[^\n`]*", text):
            if re.search(r"""(?<![\w-])['"]?tessera(\[|['"\s]|$)""", line):
                wrong.append(f"{path.relative_to(ROOT)}: {line}")
    assert not wrong


def test_the_project_is_named_tessera_kernels_with_a_cuda12_extra():
    project = (ROOT / "pyproject.toml").read_text()
    assert f'name = "{DISTRIBUTION}"' in project
    assert 'cuda12 = ["numba-cuda[cu12]' in project


def test_the_changelog_has_this_version():
    assert f"## {tessera.__version__}" in (ROOT / "CHANGELOG.md").read_text()


@pytest.mark.slow
def test_the_wheel_carries_the_license_and_the_typing_marker(tmp_path):
    source = tmp_path / "src"
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        source.mkdir(exist_ok=True)
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "tessera", source / "tessera", ignore=shutil.ignore_patterns("__pycache__")
    )
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "-w", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if built.returncode and "No matching distribution found for setuptools" in built.stderr:
        pytest.skip("pip cannot fetch the build requirements here (no package index)")
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = tmp_path.glob("tessera_kernels-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "tessera/py.typed" in names
    for runtime in ("tessera_rt.c", "tessera_rt.h", "tessera_rt_launch.inc", "dlpack.h"):
        assert f"tessera/aot/runtime/{runtime}" in names  # the C runtime, as package data
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA")))
    assert b"Name: tessera-kernels" in metadata and b"Provides-Extra: cuda12" in metadata


def _cli(*argv, **kwargs):
    return subprocess.run(
        [sys.executable, "-m", "tessera.cli", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        **kwargs,
    )


def test_version_prints_the_version():
    result = _cli("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"tessera {tessera.__version__}"


def test_a_closed_pipe_ends_cache_list_without_a_traceback(tmp_path):
    read, write = os.pipe()
    os.close(read)  # as `| head` does once it has its lines
    env = dict(os.environ, TESSERA_CACHE_DIR=str(tmp_path / "cache"))
    result = subprocess.run(
        [sys.executable, "-m", "tessera.cli", "cache", "list"],
        stdout=write,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        env=env,
    )
    os.close(write)
    assert result.returncode == 141 and result.stderr == ""


def test_bench_plot_without_matplotlib_says_so_before_running(tmp_path):
    code = (
        "import sys; sys.modules['matplotlib'] = None  # absent, as where it is not installed\n"
        "from bench.__main__ import main; main(['--plot', 'axpy'])"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert result.returncode == 2
    assert "--plot needs matplotlib" in result.stderr and "running axpy" not in result.stderr
