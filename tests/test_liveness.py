"""Seeing that another rank's process has exited (tessera/mesh/liveness.py): what ends a
wait on a collective whose member on this node is gone."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tessera.mesh import liveness

linux_only = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")


def test_a_running_process_has_not_exited():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        member = (liveness.identity()[0], child.pid, liveness._start_time(child.pid))
        assert not liveness.exited(member, liveness.identity())
    finally:
        child.kill()
        child.wait()


def test_a_reaped_process_has_exited():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    member = (liveness.identity()[0], child.pid, liveness._start_time(child.pid))
    child.wait()
    assert liveness.exited(member, liveness.identity())


@linux_only
def test_a_zombie_has_exited():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    member = (liveness.identity()[0], child.pid, liveness._start_time(child.pid))
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # ended, not reaped
    try:
        assert liveness.exited(member, liveness.identity())
    finally:
        child.wait()


@linux_only
def test_a_process_id_used_again_is_not_the_rank():
    node, pid, start = liveness.identity()
    assert start  # a start time is known on Linux
    assert liveness.exited((node, os.getppid(), "0"), (node, pid, start))


def test_this_process_and_other_nodes_are_never_seen_exiting():
    mine = liveness.identity()
    assert not liveness.exited(mine, mine)
    assert not liveness.exited(("another-node", 1, ""), mine)
