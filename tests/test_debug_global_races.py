"""The debug target race-checks global memory: two different lanes of a group touching
one element between two barriers, or two different groups touching one element at any
time, at least one of them writing, is a RaceError naming both sides and both lines.
Atomic adds do not race with each other; every lane storing the same bits (a uniform
store) is not a race; a read-modify-write of one element by every lane is."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera import KiB, cp_async, f32, group_linear_id, i64, kernel, mut, tbarrier, tile, tshared

THIS_FILE = __file__


def line_of(marker: str) -> int:
    with open(THIS_FILE) as f:
        for number, text in enumerate(f, 1):
            if text.rstrip().endswith(f"# {marker}"):
                return number
    raise AssertionError(marker)


def at(marker: str) -> str:
    return f"{THIS_FILE}:{line_of(marker)}"


@pytest.fixture
def debug():
    with ts.config(target="debug"):
        yield


@kernel(tile=(4,))
def uniform_increment(x: mut[f32[n]]):
    v = x[0]  # rmw-read
    v += 1
    x[0] = v  # rmw-write


@kernel(tile=(4,))
def lane_zero_increment(x: mut[f32[n]]):
    if tile.linear_id() == 0:
        v = x[0]
        v += 1
        x[0] = v


@kernel(tile=(4,))
def uniform_total(x: f32[n], out: mut[f32[grid_groups]]):
    total = tile.sum(x[group_linear_id() * 4 + tile.linear_id()])
    out[group_linear_id()] = total  # every lane stores the same bits


@kernel(tile=(4,))
def lanes_store_their_own(x: f32[n], out: mut[f32[m]]):
    out[0] = x[tile.linear_id()]  # own-value


@kernel(tile=(8,))
def neighbour_through_global(x: f32[n], y: mut[f32[n]], z: mut[f32[n]], sync: ts.constexpr):
    lane = tile.linear_id()
    y[lane] = x[lane]  # global-write
    if sync:
        tbarrier()
    z[lane] = y[(lane + 1) % 8]  # global-read


@kernel(tile=(2,))
def groups_write_one_element(y: mut[f32[n]]):
    if tile.linear_id() == 0:
        y[0] = group_linear_id() * 1.0 + 1.0  # group-write


@kernel(tile=(2,))
def groups_read_anothers_element(y: mut[f32[n]], z: mut[f32[n]]):
    g = group_linear_id()
    if tile.linear_id() == 0:
        y[g] = 1.0  # own-element-write
    tbarrier()  # a barrier orders one group's lanes, never two groups
    if tile.linear_id() == 0:
        z[g] = y[0]  # other-group-read


@kernel(tile=(4,))
def count_with_atomics(count: mut[f32[n]]):
    tile.atomic_add(count, 0, 1.0)


@kernel(tile=(4,))
def atomic_then_plain_read(count: mut[f32[n]], seen: mut[f32[m]]):
    tile.atomic_add(count, 0, 1.0)  # atomic
    seen[tile.linear_id()] = count[0]  # plain-read


@kernel
def flat_accumulate(x: f32[n], total: mut[f32[m]]):
    i = tile.linear_id()
    total[0] += x[i]  # flat-rmw


@kernel(tile=(8,), shared=1 * KiB)
def copy_what_lanes_wrote(x: mut[f32[n]], y: mut[f32[n]], sync: ts.constexpr):
    s = tshared.alloc[f32](8)
    lane = tile.linear_id()
    x[lane] = lane * 2.0  # lane-write
    if sync:
        tbarrier()
    cp_async.shared.global_(s, x[0:8])  # group-copy
    tbarrier()
    y[lane] = s[lane]


@kernel(tile=(4,))
def block_after_lanes(x: mut[f32[n]], y: mut[f32[n]], sync: ts.constexpr):
    lane = tile.linear_id()
    x[lane] = lane * 1.0  # before-block
    if sync:
        tbarrier()
    t = tile.load_block(x, (0,), (4,))  # block-read
    tile.store_block(y, (0,), t + 1.0)
    y[lane] = y[lane] * 2.0  # the tile statement is over for every lane


def test_uniform_read_modify_write_is_a_race_naming_both_lanes_and_lines(debug):
    x = np.zeros(4, np.float32)
    with pytest.raises(ts.RaceError) as info:
        uniform_increment[1](x)
    text = str(info.value)
    assert "race" in text and "global array 'x'" in text and "element 0" in text
    assert "lane 0 of group 0" in text and "lane 1 of group 0" in text
    assert at("rmw-write") in text and at("rmw-read") in text
    assert not x.any()  # a launch that reports a bug writes nothing back


def test_read_modify_write_by_one_lane_is_race_free_and_matches_cpu(debug):
    x = np.zeros(4, np.float32)
    lane_zero_increment[1](x)
    with ts.config(target="cpu"):
        y = np.zeros(4, np.float32)
        lane_zero_increment[1](y)
    assert x[0] == 1.0 and y[0] == 1.0


def test_uniform_store_of_the_same_value_by_every_lane_is_not_a_race(debug):
    x = np.arange(8, dtype=np.float32)
    out = np.zeros(2, np.float32)
    uniform_total[2](x, out)
    np.testing.assert_array_equal(out, [6.0, 22.0])


def test_lanes_storing_different_values_to_one_element_race(debug):
    x, out = np.arange(4, dtype=np.float32), np.zeros(1, np.float32)
    with pytest.raises(ts.RaceError) as info:
        lanes_store_their_own[1](x, out)
    text = str(info.value)
    assert "write by lane 0 of group 0" in text and "write by lane 1 of group 0" in text
    assert text.count(at("own-value")) == 2


def test_read_of_another_lanes_global_write_without_barrier_is_a_race(debug):
    x, y, z = np.arange(8, dtype=np.float32), np.zeros(8, np.float32), np.zeros(8, np.float32)
    with pytest.raises(ts.RaceError) as info:
        neighbour_through_global[1](x, y, z, False)
    text = str(info.value)
    assert "global array 'y'" in text and "lane 0" in text and "lane 1" in text
    assert at("global-write") in text and at("global-read") in text
    assert not y.any() and not z.any()


def test_barrier_orders_global_accesses_within_a_group(debug):
    x, y, z = np.arange(8, dtype=np.float32), np.zeros(8, np.float32), np.zeros(8, np.float32)
    neighbour_through_global[1](x, y, z, True)
    np.testing.assert_array_equal(z, np.roll(x, -1))


def test_two_groups_writing_one_element_race(debug):
    y = np.zeros(1, np.float32)
    with pytest.raises(ts.RaceError) as info:
        groups_write_one_element[2](y)
    text = str(info.value)
    assert "lane 0 of group 0" in text and "lane 0 of group 1" in text
    assert "group" in text and at("group-write") in text


def test_a_group_reading_what_another_group_wrote_races_even_after_a_barrier(debug):
    y, z = np.zeros(2, np.float32), np.zeros(2, np.float32)
    with pytest.raises(ts.RaceError) as info:
        groups_read_anothers_element[2](y, z)
    text = str(info.value)
    assert "group 0" in text and "group 1" in text
    assert at("own-element-write") in text and at("other-group-read") in text


def test_one_group_reading_its_own_writes_after_a_barrier_is_race_free(debug):
    y, z = np.zeros(1, np.float32), np.zeros(1, np.float32)
    groups_read_anothers_element[1](y, z)
    assert z[0] == 1.0


def test_atomic_adds_by_lanes_and_groups_do_not_race(debug):
    count = np.zeros(1, np.float32)
    count_with_atomics[3](count)
    assert count[0] == 12.0


def test_plain_read_of_an_element_other_lanes_add_to_atomically_is_a_race(debug):
    count, seen = np.zeros(1, np.float32), np.zeros(4, np.float32)
    with pytest.raises(ts.RaceError) as info:
        atomic_then_plain_read[1](count, seen)
    text = str(info.value)
    assert "atomic update" in text and at("atomic") in text and at("plain-read") in text


def test_flat_kernel_instances_updating_one_element_race(debug):
    x, total = np.ones(4, np.float32), np.zeros(1, np.float32)
    with pytest.raises(ts.RaceError) as info:
        flat_accumulate[4](x, total)
    assert at("flat-rmw") in str(info.value)
    assert total[0] == 0.0


def test_async_copy_of_elements_lanes_wrote_without_barrier_is_a_race(debug):
    x, y = np.zeros(8, np.float32), np.zeros(8, np.float32)
    with pytest.raises(ts.RaceError) as info:
        copy_what_lanes_wrote[1](x, y, False)
    text = str(info.value)
    assert "the whole group" in text and at("lane-write") in text and at("group-copy") in text


def test_async_copy_after_a_barrier_sees_the_lanes_writes(debug):
    x, y = np.zeros(8, np.float32), np.zeros(8, np.float32)
    copy_what_lanes_wrote[1](x, y, True)
    np.testing.assert_array_equal(y, np.arange(8) * 2.0)


# ------------------------------------------------------------------ generated patterns
LANES = 4
NONE, READ, WRITE, ATOMIC = 0, 1, 2, 3


@kernel(tile=(4,))
def access_pattern(
    kind: i64[s, a], where: i64[s, a], bar: i64[s], x: mut[f32[m]], sink: mut[f32[a]]
):
    me = group_linear_id() * 4 + tile.linear_id()
    for t in range(s):
        k = kind[t, me]
        if k == 1:
            sink[me] += x[where[t, me]]
        elif k == 2:
            x[where[t, me]] = me * 16.0 + t + 1.0  # a value no other write stores
        elif k == 3:
            tile.atomic_add(x, where[t, me], 1.0)
        if bar[t] != 0:
            tbarrier()


def races(kind: np.ndarray, where: np.ndarray, bar: np.ndarray) -> bool:
    """The rule: one element touched by two lanes of a group between two barriers, or by
    two groups, at least one writing, not both atomic."""
    steps, agents = kind.shape
    events = []
    for agent in range(agents):
        group, lane = divmod(agent, LANES)
        epoch = 0
        for t in range(steps):
            if kind[t, agent] != NONE:
                events.append((group, lane, epoch, kind[t, agent], where[t, agent]))
            epoch += bool(bar[t])
    for i, (g1, l1, e1, k1, w1) in enumerate(events):
        for g2, l2, e2, k2, w2 in events[i + 1 :]:
            if w1 != w2 or (k1 == READ and k2 == READ) or (k1 == ATOMIC and k2 == ATOMIC):
                continue
            if g1 != g2 or (l1 != l2 and e1 == e2):
                return True
    return False


@st.composite
def patterns(draw):
    groups = draw(st.integers(1, 2))
    steps = draw(st.integers(1, 3))
    agents = groups * LANES
    cells = st.lists(st.integers(0, 3), min_size=steps * agents, max_size=steps * agents)
    kind = np.array(draw(cells), np.int64).reshape(steps, agents)
    idle = draw(st.lists(st.booleans(), min_size=kind.size, max_size=kind.size))
    kind[np.array(idle).reshape(kind.shape)] = NONE  # so that race-free patterns are common
    spots = st.lists(st.integers(0, 2), min_size=steps * agents, max_size=steps * agents)
    where = np.array(draw(spots), np.int64).reshape(steps, agents)
    bar = np.array(draw(st.lists(st.integers(0, 1), min_size=steps, max_size=steps)), np.int64)
    return groups, kind, where, bar


@settings(
    max_examples=150,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(patterns())
def test_race_reported_exactly_when_the_rule_says(pattern):
    groups, kind, where, bar = pattern
    x, sink = np.zeros(3, np.float32), np.zeros(kind.shape[1], np.float32)
    with ts.config(target="debug"):
        try:
            access_pattern[groups](kind, where, bar, x, sink)
            reported = False
        except ts.RaceError:
            reported = True
    assert reported == races(kind, where, bar)


def test_tile_statement_after_lane_writes_without_barrier_is_a_race(debug):
    x, y = np.zeros(4, np.float32), np.zeros(4, np.float32)
    with pytest.raises(ts.RaceError) as info:
        block_after_lanes[1](x, y, False)
    text = str(info.value)
    assert "the whole group" in text and at("before-block") in text and at("block-read") in text


def test_lanes_after_a_tile_statement_see_its_writes(debug):
    x, y = np.zeros(4, np.float32), np.zeros(4, np.float32)
    block_after_lanes[1](x, y, True)
    np.testing.assert_array_equal(y, (np.arange(4) + 1.0) * 2.0)
