"""docs/embedding.md's build examples are the files of examples/embedding/, and they build
and run: the Makefile and the CMake project."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from aot_build import need_cc

ROOT = Path(__file__).parent.parent
EXAMPLE = ROOT / "examples" / "embedding"
TESSERA = f"{sys.executable} -m tessera.cli"
WANT = "sum 495000.0 (want 495000.0)"


@pytest.mark.parametrize("name", ["Makefile", "CMakeLists.txt", "main.c"])
def test_the_chapter_shows_the_example_files_as_they_are(name):
    doc = (ROOT / "docs" / "embedding.md").read_text()
    assert (EXAMPLE / name).read_text().rstrip() in doc


def test_the_makefile_example_builds_and_runs(tmp_path):
    need_cc()
    if shutil.which("make") is None:
        pytest.skip("no make here")
    work = tmp_path / "embedding"
    shutil.copytree(EXAMPLE, work)
    done = subprocess.run(
        ["make", f"TESSERA={TESSERA}"], cwd=work, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    run = subprocess.run([str(work / "app")], capture_output=True, text=True, timeout=60)
    assert run.stdout.strip() == WANT, run.stdout + run.stderr


def test_the_cmake_example_builds_and_runs(tmp_path):
    need_cc()
    if shutil.which("cmake") is None:
        pytest.skip("no cmake here")
    build = tmp_path / "build"
    for command in (
        ["cmake", "-S", str(EXAMPLE), "-B", str(build), f"-DTESSERA={TESSERA}"],
        ["cmake", "--build", str(build)],
    ):
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
    run = subprocess.run([str(build / "app")], capture_output=True, text=True, timeout=60)
    assert run.stdout.strip() == WANT, run.stdout + run.stderr
