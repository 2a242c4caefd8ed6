"""``tessera pack-repro`` and ``tessera replay`` end to end, in real processes: a script's
out-of-bounds launch and a shared-memory race become packs that reproduce the bug."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

OUT_OF_BOUNDS = """
    from __future__ import annotations
    import numpy as np
    from tessera import f32, kernel, mut, tile

    SCALE = 2.0

    @kernel
    def scale_shifted(x: f32[n], y: mut[f32[n]]):
        i = tile.linear_id()
        y[i + 1] = x[i] * SCALE

    scale_shifted[8](np.arange(8, dtype=np.float32), np.zeros(8, np.float32))
"""

RACE = """
    from __future__ import annotations
    import numpy as np
    from tessera import KiB, f32, kernel, mut, tile, tshared

    @kernel(tile=(8,), shared=1 * KiB)
    def neighbour_exchange(x: f32[n], y: mut[f32[n]]):
        s = tshared.alloc[f32](8)
        lane = tile.linear_id()
        s[lane] = x[lane]
        y[lane] = s[(lane + 1) % 8]

    neighbour_exchange[1](np.arange(8, dtype=np.float32), np.zeros(8, np.float32))
"""


def _tessera(*args, cwd, **env):
    environment = dict(os.environ, PYTHONPATH=ROOT, **env)
    return subprocess.run(
        [sys.executable, "-m", "tessera.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=environment,
        timeout=300,
    )


def _pack(tmp_path, source: str, name: str) -> str:
    script = tmp_path / f"{name}.py"
    script.write_text(textwrap.dedent(source))
    packed = _tessera(
        "pack-repro", str(script), "-o", f"{name}.zip", cwd=tmp_path, TESSERA_TARGET="debug"
    )
    assert packed.returncode == 0, packed.stderr
    return str(tmp_path / f"{name}.zip")


def test_an_out_of_bounds_script_packs_into_a_repro_that_reproduces_it(tmp_path):
    pack = _pack(tmp_path, OUT_OF_BOUNDS, "oob")
    names = set(zipfile.ZipFile(pack).namelist())
    assert {"kernel.py", "metadata.json", "args.npz", "env_hash.txt", "replay.py"} <= names
    replayed = _tessera("replay", pack, cwd=tmp_path)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "OutOfBoundsError" in replayed.stdout and replayed.stdout.endswith("reproduced\n")


def test_a_bounds_error_replays_checked_on_the_cpu_target(tmp_path):
    pack = _pack(tmp_path, OUT_OF_BOUNDS, "oob")
    replayed = _tessera("replay", pack, "--target", "cpu", cwd=tmp_path)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "(TESSERA_BOUNDSCHECK)" in replayed.stdout


def test_a_race_the_debug_target_found_is_found_again_by_python_running_the_pack(tmp_path):
    pack = _pack(tmp_path, RACE, "race")
    env = dict(os.environ, PYTHONPATH=ROOT)
    replayed = subprocess.run(
        [sys.executable, pack], capture_output=True, text=True, env=env, timeout=300
    )
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "RaceError" in replayed.stdout and "reproduced" in replayed.stdout


def test_a_replay_that_does_not_reproduce_says_so_and_fails(tmp_path):
    pack = _pack(tmp_path, RACE, "race")
    replayed = _tessera("replay", pack, "--target", "cpu", cwd=tmp_path)
    assert replayed.returncode == 1
    assert "not reproduced" in replayed.stdout


def test_pack_repro_of_a_directory_without_captures_explains(tmp_path):
    result = _tessera("pack-repro", str(tmp_path), "-o", "x.zip", cwd=tmp_path)
    assert result.returncode == 2 and "holds no crash capture" in result.stderr


def test_the_python_examples_of_the_observability_guide_run(tmp_path):
    guide = open(os.path.join(ROOT, "docs", "observability.md")).read()
    part = guide[guide.index("## Settings") :]  # (the profiling part runs in test_observe_docs)
    blocks = [b.split("```", 1)[0] for b in part.split("```python\n")[1:]]
    assert len(blocks) == 2
    for number, code in enumerate(blocks):
        script = tmp_path / f"example{number}.py"
        script.write_text(code)
        env = dict(os.environ, PYTHONPATH=ROOT)
        result = subprocess.run(
            [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, timeout=300
        )
        assert result.returncode == 0, result.stderr
    assert list((tmp_path / "captures").glob("*-double/outputs.npz"))
