"""Settings files and directories read as untrusted input (issue 26, item 12):
``TESSERA_CONFIG`` naming a FIFO, a device, a huge or deeply nested file, and a crash
directory that is not one, warn clearly and never hang or break ``import tessera``."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tessera.config import get, refresh
from tessera.errors import SettingWarning

posix = pytest.mark.skipif(os.name != "posix", reason="FIFOs and /dev/zero are POSIX")


def _limit_memory() -> None:  # a child that would read /dev/zero fails, not the machine
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


def _import(env: dict, timeout: float = 60) -> subprocess.CompletedProcess:
    """``import tessera`` and read a setting in a fresh process with ``env`` added (its
    memory limited to 4 GiB)."""
    code = "import tessera; from tessera.config import get; print('target', get('target'))"
    return subprocess.run(
        [sys.executable, "-W", "always", "-c", code],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=_limit_memory if os.name == "posix" else None,
    )


@pytest.fixture
def policy(monkeypatch):
    """Point TESSERA_CONFIG at a path for one test; settings re-read before and after."""

    def use(path) -> None:
        monkeypatch.setenv("TESSERA_CONFIG", str(path))
        refresh()

    yield use
    monkeypatch.undo()
    refresh()


@posix
def test_a_fifo_as_the_settings_file_warns_instead_of_hanging(tmp_path):
    fifo = tmp_path / "policy.json"
    os.mkfifo(fifo)
    result = _import({"TESSERA_CONFIG": str(fifo)}, timeout=30)
    assert result.returncode == 0, result.stderr
    assert "target auto" in result.stdout
    assert "not a regular file" in result.stderr


@posix
def test_dev_zero_as_the_settings_file_warns_without_reading_it():
    result = _import({"TESSERA_CONFIG": "/dev/zero"})
    assert result.returncode == 0, result.stderr
    assert "target auto" in result.stdout
    assert "not a regular file" in result.stderr


def test_a_huge_settings_file_is_not_read(policy, tmp_path):
    big = tmp_path / "policy.json"
    big.write_text('{"target": "cpu", "pad": "' + "x" * (2 << 20) + '"}')
    policy(big)
    with pytest.warns(SettingWarning, match="more than"):
        assert get("target") == "auto"


def test_a_deeply_nested_json_settings_file_warns(policy, tmp_path):
    deep = tmp_path / "policy.json"
    deep.write_text('{"target": ' + "[" * 100_000 + "]" * 100_000 + "}")
    policy(deep)
    with pytest.warns(SettingWarning, match="nested"):
        assert get("target") == "auto"


@pytest.mark.skipif(sys.version_info < (3, 11), reason="TOML needs tomllib")
def test_a_deeply_nested_toml_settings_file_warns(policy, tmp_path):
    deep = tmp_path / "policy.toml"
    deep.write_text("target = " + "[" * 100_000 + "]" * 100_000 + "\n")
    policy(deep)
    with pytest.warns(SettingWarning, match="nested"):
        assert get("target") == "auto"


def test_a_regular_settings_file_still_works(policy, tmp_path):
    good = tmp_path / "policy.json"
    good.write_text('{"target": "debug"}')
    policy(good)
    assert get("target") == "debug"


@posix
def test_a_crash_dir_that_is_not_a_directory_warns_at_import():
    result = _import({"TESSERA_CRASH_DIR": "/dev/null"})
    assert result.returncode == 0, result.stderr
    assert "target auto" in result.stdout
    assert "TESSERA_CRASH_DIR" in result.stderr and "Traceback" not in result.stderr


def test_a_crash_dir_under_a_file_warns_at_import(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = _import({"TESSERA_CRASH_DIR": str(blocker / "crashes")})
    assert result.returncode == 0, result.stderr
    assert "TESSERA_CRASH_DIR" in result.stderr and "Traceback" not in result.stderr
