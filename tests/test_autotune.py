"""The autotuner (AUTOTUNE.md): safe for in-place kernels, checked, cached across
processes, and the same on every rank."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from autotune_kernels import N, add_into, add_into_grid, count_into

import tessera as ts
from tessera import KiB, f32, group_linear_id, mut, tile, tshared
from tessera.autotune import Config, store
from tessera.config import refresh
from tessera.kernel import disk_cache
from tessera.observe.metrics import read as read_metrics

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path))
    refresh()
    add_into._winners.clear()
    count_into._winners.clear()
    yield tmp_path
    refresh()


def test_in_place_kernel_changes_its_output_exactly_once(fresh_cache):
    x = np.arange(N, dtype=np.float32)
    y = np.ones(N, np.float32)
    before = ts.stats()["autotune_trials"]
    add_into[add_into_grid](x, y)
    assert ts.stats()["autotune_trials"] - before >= 6  # every config ran trials
    np.testing.assert_array_equal(y, x + 1)


def test_tuned_output_equals_the_untuned_launch_bitwise(fresh_cache, rng):
    x = rng.random(N, dtype=np.float32)
    y0 = rng.random(N, dtype=np.float32)
    tuned = y0.copy()
    add_into[add_into_grid](x, tuned)
    best = Config(add_into.best_config(x, tuned))
    plain = y0.copy()
    add_into.kernel_for(best)[add_into_grid(best)](x, plain)
    assert tuned.tobytes() == plain.tobytes()


def test_a_config_that_computes_something_else_is_excluded(fresh_cache):
    x = np.arange(N, dtype=np.int32)
    y = np.zeros(N, np.int32)
    count_into[lambda c: -(-N // c.BM)](x, y)
    np.testing.assert_array_equal(y, x)
    best = count_into.best_config(x, y)
    assert best["WRONG"] == 0
    statuses = {json.dumps(r["config"]): r["status"] for r in count_into.last_table}
    assert "different result" in statuses[json.dumps({"BM": 64, "WRONG": 1})]


def test_every_config_failing_is_an_error_listing_every_reason():
    def too_big(x: f32[n]):
        s = tshared.alloc[f32](S)  # more than the 1 KiB every config declares
        s[tile.linear_id()] = x[0]

    with pytest.raises(ts.AutotuneError) as info:
        ts.kernel.autotune(space=dict(S=[4096, 8192]), tile=(64,), shared=1 * KiB)(too_big)
    text = str(info.value)
    assert "S=4096" in text and "S=8192" in text and "over budget" in text


def test_autotune_off_runs_no_trial(fresh_cache):
    x = np.arange(N, dtype=np.float32)
    y = np.ones(N, np.float32)
    before = ts.stats()["autotune_trials"]
    with ts.config(autotune="off"):
        add_into[add_into_grid](x, y)
    assert ts.stats()["autotune_trials"] == before
    np.testing.assert_array_equal(y, x + 1)


def _run_child(cache_dir, extra_env=None):
    env = dict(os.environ, TESSERA_CACHE_DIR=str(cache_dir), **(extra_env or {}))
    return subprocess.run(
        [sys.executable, os.path.join(HERE, "autotune_kernels.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=HERE,
    )


def test_second_process_reads_the_cache_and_runs_no_trial(tmp_path):
    first = _run_child(tmp_path)
    assert first.returncode == 0, first.stderr
    second = _run_child(tmp_path)
    assert second.returncode == 0, second.stderr
    stats_first = eval(first.stdout.split("} {")[0] + "}")  # noqa: S307 - our own output
    stats_second = eval(second.stdout.split("} {")[0] + "}")  # noqa: S307
    assert stats_first["autotune_trials"] > 0
    assert stats_second["autotune_trials"] == 0
    assert stats_second["compiles"] == 0  # no losing config was even compiled


def test_concurrent_processes_share_one_cache_file(tmp_path):
    env = dict(os.environ, TESSERA_CACHE_DIR=str(tmp_path))
    procs = [
        subprocess.Popen(
            [sys.executable, os.path.join(HERE, "autotune_kernels.py")],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=HERE,
        )
        for _ in range(3)
    ]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    files = list((tmp_path / "autotune").glob("*.json"))
    assert len(files) == 1
    entry = store.read(files[0], disk_cache.mac_key(tmp_path))  # whole, sealed, checked
    assert entry["kernel"] == "add_into"


def test_corrupt_cache_file_is_ignored_with_a_warning_and_rewritten(fresh_cache):
    x = np.arange(N, dtype=np.float32)
    add_into[add_into_grid](x, np.ones(N, np.float32))
    (path,) = (fresh_cache / "autotune").glob("*.json")
    path.write_text("{ not json")
    add_into._winners.clear()
    with pytest.warns(ts.CacheWarning, match="autotune cache"):
        add_into[add_into_grid](x, np.ones(N, np.float32))
    assert store.read(path, disk_cache.mac_key(fresh_cache))["kernel"] == "add_into"


def test_random_strategy_measures_its_budget_and_user_strategies_drive_the_search(fresh_cache):
    seen = []

    class Reversed:
        def search(self, configs, measure):
            for c in reversed(configs[-2:]):
                seen.append(dict(c.items()))
                measure(c)

    tuned = ts.kernel.autotune(
        space=dict(BM=[32, 64, 128]), tile=lambda c: (c.BM,), strategy=Reversed()
    )(_plain_add)
    x = np.arange(N, dtype=np.float32)
    y = np.ones(N, np.float32)
    tuned[lambda c: -(-N // c.BM)](x, y)
    assert seen == [{"BM": 128}, {"BM": 64}]
    assert sum("median_s" in r for r in tuned.last_table) == 2
    picky = ts.kernel.autotune(
        space=dict(BM=[32, 64, 128, 256]), tile=lambda c: (c.BM,), strategy="random", budget=2
    )(_plain_add)
    picky[lambda c: -(-N // c.BM)](x, np.ones(N, np.float32))
    assert sum("median_s" in r for r in picky.last_table) == 2


def test_prune_keeps_only_the_configs_it_accepts():
    tuned = ts.kernel.autotune(
        space=dict(BM=[32, 64, 128]), tile=lambda c: (c.BM,), prune=lambda c: c.BM >= 64
    )(_plain_add)
    assert [c.BM for c in tuned.configs] == [64, 128]


def test_a_planted_autotune_entry_is_refused(fresh_cache):
    store.save("other", {"k": 1}, {"BM": 64}, [])  # the user has a cache (and a key)
    x = np.arange(N, dtype=np.int32)
    y = np.zeros(N, np.int32)
    key = count_into.key((x, y))
    planted = {  # a winner the sweep would exclude: it computes something else
        "format": store.FORMAT,
        "kernel": "count_into",
        "key": key,
        "config": {"BM": 64, "WRONG": 1},
        "table": [],
        "created": "2024-01-01 00:00:00",
    }
    path = store.path_for("count_into", store.key_digest(key))
    path.write_text(json.dumps(planted))
    with pytest.warns(ts.CacheWarning, match="autotune cache"):
        count_into[lambda c: -(-N // c.BM)](x, y)
    np.testing.assert_array_equal(y, x)


def _plain_add(x: f32[n], y: mut[f32[n]]):
    i = group_linear_id() * BM + tile.linear_id()
    if i < n:
        y[i] += x[i]


def test_autotune_works_on_every_target(target, fresh_cache):
    tuned = ts.kernel.autotune(space=dict(BM=[32, 64]), tile=lambda c: (c.BM,))(_plain_add)
    x = np.arange(200, dtype=np.float32)
    y = np.ones(200, np.float32)
    tuned[lambda c: -(-200 // c.BM)](x, y)
    np.testing.assert_array_equal(y, x + 1)
    assert tuned.best_config(x, y)["BM"] in (32, 64)


STALE_WINNERS = {
    "float where the space has an int": {"BM": 64.0},
    "value not in the space": {"BM": 48},
    "string value": {"BM": "64"},
    "another parameter": {"BK": 64},
    "no parameter": {},
}


@pytest.mark.parametrize("stored", STALE_WINNERS.values(), ids=STALE_WINNERS.keys())
def test_a_stored_winner_outside_the_space_is_a_warning_and_a_retune(fresh_cache, stored):
    tuned = ts.kernel.autotune(space=dict(BM=[32, 64]), tile=lambda c: (c.BM,))(_plain_add)
    x = np.arange(200, dtype=np.float32)
    y = np.ones(200, np.float32)
    key = tuned.key((x, y))
    store.save(tuned.name, key, stored, [])
    before = ts.stats()["autotune_trials"]
    with pytest.warns(ts.CacheWarning, match="autotune cache.*tuning again"):
        tuned[lambda c: -(-200 // c.BM)](x, y)
    np.testing.assert_array_equal(y, x + 1)
    assert ts.stats()["autotune_trials"] > before
    assert store.load(tuned.name, key)["config"] in ({"BM": 32}, {"BM": 64})  # rewritten


def _sized(x: f32[n], y: mut[f32[n]]):
    s = tshared.alloc[f32](S)
    lane = tile.linear_id()
    i = group_linear_id() * 64 + lane
    s[lane] = x[i] if i < n else 0.0
    if i < n:
        y[i] += s[lane]


def test_a_stored_winner_that_no_longer_compiles_is_a_warning_and_a_retune(fresh_cache):
    tuned = ts.kernel.autotune(space=dict(S=[64, 8192]), tile=(64,), shared=1 * KiB)(_sized)
    x = np.arange(200, dtype=np.float32)
    y = np.ones(200, np.float32)
    key = tuned.key((x, y))
    store.save(tuned.name, key, {"S": 8192}, [])  # over the 1 KiB budget: does not compile
    with pytest.warns(ts.CacheWarning, match="autotune cache.*tuning again"):
        tuned[-(-200 // 64)](x, y)
    np.testing.assert_array_equal(y, x + 1)
    assert store.load(tuned.name, key)["config"] == {"S": 64}


def test_flops_reach_every_config_and_the_metrics_show_gflops(fresh_cache, tmp_path):
    tuned = ts.kernel.autotune(
        space=dict(BM=[32, 64]), tile=lambda c: (c.BM,), flops=lambda n: 2 * n
    )(_plain_add)
    assert all(tuned.kernel_for(c).flops is not None for c in tuned.configs)
    x = np.arange(200, dtype=np.float32)
    y = np.ones(200, np.float32)
    tuned[lambda c: -(-200 // c.BM)](x, y)  # tunes
    with ts.metrics(tmp_path / "m.jsonl"):
        tuned[lambda c: -(-200 // c.BM)](x, y)
    (record,) = [r for r in read_metrics(tmp_path / "m.jsonl") if r["kind"] == "launch"]
    assert record["gflops"] == pytest.approx(400 / record["seconds"] / 1e9, rel=1e-3)
