"""What Python 3.10 (the oldest Python Tessera supports) meets: TOML policy files read
with ``tomli`` where there is no ``tomllib``, and the Numba range that pyproject.toml
allows being the one the warm-start loader is tested with."""

from __future__ import annotations

import importlib
import re
import sys
import types
from pathlib import Path

import pytest

from tessera import policy_file
from tessera.kernel.targets.cpu import native

ROOT = Path(__file__).parent.parent
tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")


def test_without_tomllib_a_toml_policy_file_is_read_with_tomli(tmp_path, monkeypatch):
    policy = tmp_path / "policy.toml"
    policy.write_text('target = "debug"\n[trace]\npath = "t.json"\n')
    monkeypatch.setitem(sys.modules, "tomllib", None)  # import tomllib fails, as on 3.10
    monkeypatch.setitem(sys.modules, "tomli", types.SimpleNamespace(loads=tomllib.loads))
    try:
        reloaded = importlib.reload(policy_file)
        assert reloaded.read(str(policy)) == {"target": "debug", "trace": {"path": "t.json"}}
    finally:
        monkeypatch.undo()
        importlib.reload(policy_file)


def test_pyprojects_numba_range_is_the_warm_start_loaders():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (numba,) = [d for d in project["dependencies"] if re.match(r"numba\b", d)]
    low, high = re.fullmatch(r"numba>=(\d+\.\d+),<(\d+\.\d+)", numba).group(1, 2)
    first, last = native.TESTED_NUMBA
    assert tuple(map(int, low.split("."))) == first
    assert tuple(map(int, high.split("."))) == (last[0], last[1] + 1)  # the tested minors only
