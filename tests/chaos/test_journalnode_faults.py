"""JournalNode faults under load (real processes, real signals).

- One JournalNode killed (kill -9, then restarted) or frozen (SIGSTOP, then SIGCONT): a
  quorum is left, so clients see no error at all.
- Two killed or frozen: no quorum, so writes fail; clients get a clear error (no active
  NameNode: the active left the active state, and no NameNode can become active without a
  quorum), and nothing acknowledged before is lost. Once they are back, a NameNode becomes
  active by itself and writing resumes.
"""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Callable

import pytest

from hadev.devcluster import LOAD_POLICY, DevCluster, MkdirLoad
from hanamenode.client import RetryPolicy
from tests.chaos.conftest import STATUS_TIMEOUT, Timeline
from tests.chaos.journal_audit import JournalAudit

pytestmark = pytest.mark.timeout(600)

SHORT_POLICY = RetryPolicy(max_attempts=30, sleep_base=0.05, sleep_max=0.2, rpc_timeout=5.0)
"""A client that gives up after a few seconds without an active NameNode."""


def _check(dev: DevCluster, load: MkdirLoad, audit: JournalAudit, when: str) -> None:
    with dev.client(LOAD_POLICY) as fs:
        missing = load.missing(fs)
    assert not missing, f"{when}: acknowledged mkdirs lost: {missing[:10]}"
    report = audit.check()
    assert report.ok, f"{when}: {report.describe()}"


def test_one_journalnode_down_or_frozen_is_invisible_to_clients(
    dev: DevCluster, timeline: Timeline, rng: random.Random
) -> None:
    audit = JournalAudit(dev)
    ids = [jn.jn_id for jn in dev.journalnodes]
    with MkdirLoad(dev.settings(), "/onejn", writers=4, pause=0.005) as load:
        assert load.wait_acks(50, 20)
        victim = rng.choice(ids)
        timeline.add(f"kill -9 {victim}")
        dev.kill(victim)
        assert load.wait_acks(300, 30), f"writes stalled with {victim} dead"
        timeline.add(f"{load.ack_count} acks; restarting {victim}")
        dev.restart(victim)
        assert load.wait_acks(100, 30)
        frozen = rng.choice(ids)
        timeline.add(f"SIGSTOP {frozen}")
        dev.kill(frozen, signal.SIGSTOP)
        try:
            assert load.wait_acks(300, 30), f"writes stalled with {frozen} frozen"
            time.sleep(rng.uniform(1.0, 3.0))
        finally:
            dev.kill(frozen, signal.SIGCONT)
        timeline.add(f"SIGCONT {frozen}; {load.ack_count} acks")
        assert load.wait_acks(100, 30)
        load.stop()
    timeline.add(f"{load.ack_count} acks, failures: {load.failures[:3]}")
    assert not load.failures, f"a client saw an error: {load.failures[:5]}"
    _check(dev, load, audit, "after one JournalNode's faults")


@pytest.mark.parametrize("fault", ["kill", "stop"])
def test_two_journalnodes_down_fail_writes_and_lose_nothing(
    dev: DevCluster, timeline: Timeline, rng: random.Random, fault: str
) -> None:
    audit = JournalAudit(dev)
    ids = [jn.jn_id for jn in dev.journalnodes]
    victims = rng.sample(ids, 2)
    with MkdirLoad(
        dev.settings(), f"/twojn-{fault}", writers=3, pause=0.01, policy=SHORT_POLICY
    ) as load:
        assert load.wait_acks(50, 20)
        before = dev.wait_active(15)
        timeline.add(f"{fault} {victims} ({before} active, {load.ack_count} acks)")
        failures = len(load.failures)
        revive: Callable[[str], None]
        if fault == "kill":
            for jn in victims:
                dev.kill(jn)
            revive = dev.restart
        else:
            for jn in victims:
                dev.kill(jn, signal.SIGSTOP)
            revive = lambda jn: dev.kill(jn, signal.SIGCONT)  # noqa: E731
        try:
            deadline = time.monotonic() + 30
            while len(load.failures) <= failures and time.monotonic() < deadline:
                time.sleep(0.1)
            assert len(load.failures) > failures, "writes went on without a quorum"
            error = load.failures[-1].error
            timeline.add(f"clients fail: {error}")
            assert "no active NameNode answered" in error, error
            # Failing, not stalled: each further call fails within the client's budget.
            stalled_from = time.time()
            time.sleep(2.0)
            assert load.acks_since(stalled_from) == 0, "a write was acknowledged without quorum"
            active = dev.active(timeout=STATUS_TIMEOUT)
            assert active is None, f"an active NameNode without a quorum: {dev.states()}"
        finally:
            for jn in victims:
                revive(jn)
        timeline.add(f"{victims} back")
        after = dev.wait_active(60)
        timeline.add(f"{after} active again")
        assert load.wait_acks(50, 60), "writing did not resume"
        timeline.add(f"writing resumed: {load.ack_count} acks")
        load.stop()
    _check(dev, load, audit, f"after {fault} of two JournalNodes")
