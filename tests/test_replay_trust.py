"""``tessera replay`` runs a pack's Python code only when the pack was sealed by this user on
this machine, or with --trust / an interactive yes (issue 26, item 11)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from replay_helpers import crafted, made_here, marker_kernel

import tessera
from tessera.observe.repro import ReplayRefused, replay


def test_a_pack_made_here_replays_without_asking(tmp_path):
    path, _ = made_here(tmp_path)
    lines = []
    assert replay(path, out=lines.append) == 0
    assert "arg1: identical" in lines


def test_an_edited_pack_is_refused_and_its_code_never_runs(tmp_path):
    _, files = made_here(tmp_path)
    marker = tmp_path / "ran"
    edited = crafted(tmp_path, files, **{"kernel.py": marker_kernel(marker)})
    with pytest.raises(ReplayRefused, match="--trust"):
        replay(edited, out=lambda line: None)
    assert not marker.exists()


def test_an_unsealed_pack_is_refused(tmp_path):
    _, files = made_here(tmp_path)
    with pytest.raises(ReplayRefused, match="not made on this machine by this user"):
        replay(crafted(tmp_path, files, **{"seal.txt": None}), out=lambda line: None)


def test_a_pack_sealed_by_another_cache_key_is_refused(tmp_path):
    with tessera.config(cache_dir=str(tmp_path / "elsewhere")):
        path, _ = made_here(tmp_path)
    with pytest.raises(ReplayRefused):
        replay(path, out=lambda line: None)


def test_an_unsealed_pack_runs_with_trust(tmp_path):
    _, files = made_here(tmp_path)
    lines = []
    unsealed = crafted(tmp_path, files, **{"seal.txt": None})
    assert replay(unsealed, trust=True, out=lines.append) == 0
    assert "arg1: identical" in lines


def test_an_unsealed_pack_runs_after_a_yes_and_not_after_a_no(tmp_path):
    _, files = made_here(tmp_path)
    unsealed = crafted(tmp_path, files, **{"seal.txt": None})
    asked = []
    assert replay(unsealed, confirm=lambda q: asked.append(q) or True, out=asked.append) == 0
    assert "Python code" in asked[0]
    with pytest.raises(ReplayRefused):
        replay(unsealed, confirm=lambda q: False, out=lambda line: None)


def _cli(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tessera.cli", *map(str, args)],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TESSERA_TARGET": "cpu"},
    )


def test_the_command_refuses_a_foreign_pack_without_a_terminal(tmp_path):
    _, files = made_here(tmp_path)
    marker = tmp_path / "ran"
    edited = crafted(tmp_path, files, **{"kernel.py": marker_kernel(marker)})
    result = _cli("replay", edited, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("tessera replay: ") and "--trust" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert not marker.exists()


def test_the_command_runs_a_foreign_pack_with_trust(tmp_path):
    _, files = made_here(tmp_path)
    result = _cli("replay", crafted(tmp_path, files, **{"seal.txt": None}), "--trust", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "arg1: identical" in result.stdout


def test_the_help_says_a_replay_runs_the_packs_code():
    result = subprocess.run(
        [sys.executable, "-m", "tessera.cli", "replay", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "runs the pack's kernel.py" in " ".join(result.stdout.split())
    assert "--trust" in result.stdout
