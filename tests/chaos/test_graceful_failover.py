"""``hactl failover`` back and forth under load (real ``hactl`` processes): the target asks
the active to cede and wins the election itself; clients see no error beyond retries,
and every acknowledged mkdir is present."""

from __future__ import annotations

import time

import pytest

from hadev.devcluster import LOAD_POLICY, DevCluster, MkdirLoad
from hanamenode.ha import HAState
from tests.chaos.conftest import STATUS_TIMEOUT, Timeline
from tests.chaos.journal_audit import JournalAudit

pytestmark = pytest.mark.timeout(600)


def test_hactl_failover_back_and_forth_under_load(
    dev: DevCluster, chaos_rounds: int, timeline: Timeline
) -> None:
    failovers = max(4, chaos_rounds // 5)
    audit = JournalAudit(dev)
    with MkdirLoad(dev.settings(), "/graceful", writers=4, pause=0.005) as load:
        assert load.wait_acks(50, 20)
        for number in range(1, failovers + 1):
            active = dev.wait_active(15)
            target = next(nn for nn in dev.namenode_ids if nn != active)
            started = time.monotonic()
            result = dev.hactl("failover", active, target)
            took = time.monotonic() - started
            timeline.add(
                f"failover {number}: hactl failover {active} {target} -> {result.returncode} "
                f"in {took:.2f}s: {(result.stdout + result.stderr).strip()}"
            )
            assert result.returncode == 0, result.stderr
            assert dev.active(timeout=STATUS_TIMEOUT) == target, dev.states()
            dev.wait_state(active, HAState.STANDBY, 10)
            assert load.wait_acks(50, 15), f"failover {number}: no acks through {target}"
        load.stop()
    assert not load.failures, f"a client saw an error: {load.failures[:5]}"
    with dev.client(LOAD_POLICY) as fs:
        missing = load.missing(fs)
    assert not missing, f"acknowledged mkdirs lost: {missing[:10]}"
    report = audit.check()
    assert report.ok, report.describe()
    timeline.add(f"{failovers} failovers, {load.ack_count} acks; {report.describe()}")
