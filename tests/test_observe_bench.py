"""tessera.bench, and events and streams on a machine without a GPU."""

from __future__ import annotations

import time

import numpy as np
import pytest
from observe_kernels import make_axpy

import tessera as ts
from tessera.autotune import timing as autotune_timing
from tessera.kernel import timing


def test_bench_gives_median_min_max_over_the_reps():
    calls = []
    result = ts.bench(lambda v: calls.append(v), 7, warmup=2, reps=5)
    assert calls == [7] * 7  # 2 warm-up calls, 5 timed
    assert len(result.times) == 5
    assert result.min <= result.median <= result.max
    assert not result.events


def test_bench_times_a_sleep_with_the_host_clock():
    result = ts.bench(time.sleep, 0.002, warmup=0, reps=3)
    assert 0.0019 < result.median < 0.05


def test_bench_of_a_kernel_launch_runs_the_kernel():
    axpy = make_axpy()
    x, y = np.ones(256, np.float32), np.zeros(256, np.float32)
    result = ts.bench(axpy[256], x, y, 1.0, warmup=1, reps=4)
    np.testing.assert_array_equal(y, np.full(256, 5.0, np.float32))
    assert result.median > 0 and "median" in str(result)


def test_bench_with_events_uses_host_timed_events_without_a_gpu():
    result = ts.bench(time.sleep, 0.002, warmup=0, reps=2, events=True)
    assert result.events and result.min > 0.0019


@pytest.mark.parametrize("bad", [{"reps": 0}, {"warmup": -1}, {"reps": 2.5}])
def test_bench_refuses_bad_rep_counts(bad):
    with pytest.raises(ts.TesseraError, match="bench"):
        ts.bench(lambda: None, **bad)


def test_the_autotuner_times_with_the_same_loop():
    assert autotune_timing.time_calls is timing.time_calls
    restored = []
    times = autotune_timing.time_launches(lambda: None, lambda: restored.append(1), 2, 2)
    assert len(times) == 2 and restored == [1, 1]


def test_events_are_ordered_and_host_timed_without_a_gpu():
    begin = ts.event().record()
    time.sleep(0.005)
    end = ts.event().record()
    end.synchronize()
    assert begin.elapsed_ms(end) >= 4.5


def test_an_event_must_be_recorded_before_it_is_timed():
    with pytest.raises(ts.TesseraError, match="record"):
        ts.event().elapsed_ms(ts.event().record())


def test_a_named_stream_works_without_a_gpu_and_is_the_same_each_time():
    axpy = make_axpy()
    x, y = np.ones(8, np.float32), np.zeros(8, np.float32)
    with ts.stream("compute") as first:
        axpy[8](x, y, 2.0)
        first.synchronize()
    with ts.stream("compute") as again:
        assert again is first
    np.testing.assert_array_equal(y, np.full(8, 2.0, np.float32))
