"""Strict TESSERA_* settings: spellings, warnings, the policy file, and where values come from."""

from __future__ import annotations

import json
import logging
import sys

import pytest

import tessera
from tessera.config import get, launch_settings, refresh, report, source
from tessera.errors import SettingError, SettingWarning


@pytest.fixture
def env(monkeypatch):
    """Set TESSERA_* variables for one test; settings are re-read before and after."""

    def set_env(**values: str) -> None:
        for name, value in values.items():
            monkeypatch.setenv(name, value)
        refresh()

    yield set_env
    monkeypatch.undo()
    refresh()


@pytest.mark.parametrize("spelling", ["1", "true", "TRUE", "Yes", "on", " On "])
def test_boolean_settings_accept_every_true_spelling(env, spelling):
    env(TESSERA_BOUNDSCHECK=spelling, TESSERA_CACHE=spelling)
    assert get("boundscheck") == "1" and launch_settings()[1] is True
    assert get("cache") == "on"


@pytest.mark.parametrize("spelling", ["0", "false", "False", "NO", "off"])
def test_boolean_settings_accept_every_false_spelling(env, spelling):
    env(TESSERA_DETERMINISTIC=spelling, TESSERA_DIST_SHARED_MEMORY=spelling)
    assert get("deterministic") == "0" and get("dist_shared_memory") == "off"


def test_a_target_name_is_lower_cased(env):
    env(TESSERA_TARGET="Debug")
    assert launch_settings()[0] == "debug"


def test_a_bad_value_warns_naming_the_accepted_values_and_keeps_the_default(env, caplog):
    env(TESSERA_BOUNDSCHECK="maybe")
    with pytest.warns(SettingWarning, match=r"TESSERA_BOUNDSCHECK='maybe'.*true/false"):
        assert get("boundscheck") == "0"
    assert "TESSERA_BOUNDSCHECK='maybe'" in caplog.text
    assert source("boundscheck") == "default"


def test_an_unknown_tessera_name_warns_with_the_closest_setting(env):
    env(TESSERA_BOUNDCHECK="1")
    with pytest.warns(SettingWarning, match="TESSERA_BOUNDCHECK.*did you mean TESSERA_BOUNDSCHECK"):
        get("target")


def test_an_integer_setting_refuses_text(env):
    env(TESSERA_PARALLEL_THRESHOLD="lots")
    with pytest.warns(SettingWarning, match="an integer"):
        assert launch_settings()[2] == 32768


def test_config_scope_parses_like_the_environment_and_says_so():
    with tessera.config(boundscheck=True, target="CPU"):
        assert get("boundscheck") == "1" and get("target") == "cpu"
        assert source("boundscheck") == "config()"


def test_config_scope_refuses_a_bad_value_at_once():
    with pytest.raises(SettingError, match="boundscheck.*true/false"):
        with tessera.config(boundscheck="maybe"):
            raise AssertionError("the block must not run")


@pytest.mark.skipif(sys.version_info < (3, 11), reason="TOML needs tomllib")
def test_a_toml_policy_file_supplies_settings_and_the_environment_overrides_it(env, tmp_path):
    policy = tmp_path / "policy.toml"
    policy.write_text('[tessera]\nboundscheck = true\nkernel_cache_size = 9\ntarget = "Debug"\n')
    env(TESSERA_CONFIG=str(policy), TESSERA_TARGET="cpu")
    assert get("boundscheck") == "1" and get("kernel_cache_size") == "9"
    assert source("boundscheck") == f"file {policy}"
    assert get("target") == "cpu" and source("target") == "environment"


def test_a_json_policy_file_with_an_unknown_name_warns(env, tmp_path):
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"debug_nan": "on", "colour": "blue"}))
    env(TESSERA_CONFIG=str(policy))
    with pytest.warns(SettingWarning, match="'colour' is not a Tessera setting"):
        assert get("debug_nan") == "1"


def test_report_names_every_setting_with_its_source(env):
    env(TESSERA_DEBUG_NAN="yes")
    rows = {name: (value, where) for name, value, where in report()}
    assert rows["TESSERA_DEBUG_NAN"] == ("1", "environment")
    assert rows["TESSERA_TRACEBACK"] == ("short", "default")


def test_a_setting_warning_is_also_a_log_record(env, caplog):
    env(TESSERA_TRACEBACK="long")
    with caplog.at_level(logging.WARNING, logger="tessera"):
        with pytest.warns(SettingWarning):
            get("traceback")
    assert any("TESSERA_TRACEBACK='long'" in r.getMessage() for r in caplog.records)


def test_a_bad_value_warns_only_once(env, recwarn):
    env(TESSERA_DEBUG_NAN="sometimes")
    get("debug_nan")
    refresh_count = len([w for w in recwarn if issubclass(w.category, SettingWarning)])
    get("debug_nan"), get("debug_nan")
    assert refresh_count == 1 == len([w for w in recwarn if issubclass(w.category, SettingWarning)])
