"""kill -9 of the active NameNode under a steady write load, ``--chaos-rounds`` times
(default 20): after each kill the other NameNode becomes active by itself (its elector wins
the ZooKeeper lock once the dead one's session expires); the killed one is restarted and
rejoins as standby. After every round: every acknowledged mkdir is present through the new
active, no txid was finalized twice, finalized segments of the same name are identical on
every JournalNode, and no mkdir ran twice."""

from __future__ import annotations

import random
import time

import pytest

from hadev.devcluster import LOAD_POLICY, DevCluster, MkdirLoad
from hanamenode.ha import HAState
from tests.chaos.conftest import SESSION_TIMEOUT, Timeline
from tests.chaos.journal_audit import JournalAudit

pytestmark = pytest.mark.timeout(900)

WRITERS = 4
TAKEOVER_TIMEOUT = SESSION_TIMEOUT + 14.0


def test_kill_active_under_load(
    dev: DevCluster, chaos_rounds: int, timeline: Timeline, rng: random.Random
) -> None:
    audit = JournalAudit(dev)
    takeovers: list[float] = []
    with MkdirLoad(dev.settings(), "/kill", writers=WRITERS, pause=0.005) as load:
        assert load.wait_acks(50, 20), "the load got no acknowledgements"
        for round_no in range(1, chaos_rounds + 1):
            active = dev.wait_active(15)
            time.sleep(rng.uniform(0.05, 0.5))  # kill at a random point of the load
            timeline.add(
                f"round {round_no}: kill -9 {active} (pid {dev.namenode(active).pid}), "
                f"{load.ack_count} acks so far"
            )
            killed_at = time.time()
            dev.kill(active)
            survivor = dev.wait_active(TAKEOVER_TIMEOUT, exclude=active)
            took = time.time() - killed_at
            takeovers.append(took)
            timeline.add(f"round {round_no}: {survivor} active {took:.2f}s after the kill")
            assert load.wait_acks(20, 15), f"round {round_no}: no acks through {survivor}"
            first_ack = load.first_ack_after(killed_at)
            assert first_ack is not None
            timeline.add(f"round {round_no}: first ack {first_ack - killed_at:.2f}s after the kill")
            dev.restart(active)
            dev.wait_state(active, HAState.STANDBY, 30)
            timeline.add(f"round {round_no}: {active} restarted, standby")
            with dev.client(LOAD_POLICY) as fs:
                missing = load.missing(fs)
            assert not missing, f"round {round_no}: acknowledged mkdirs lost: {missing[:10]}"
            report = audit.check()
            timeline.add(f"round {round_no}: audit {report.describe()}")
            assert report.ok, f"round {round_no}: {report.describe()}"
        load.stop()
    assert not load.failures, f"calls failed: {load.failures[:5]}"
    with dev.client(LOAD_POLICY) as fs:
        assert not load.missing(fs)
    takeovers.sort()
    timeline.add(
        f"{chaos_rounds} rounds, {load.ack_count} acks; takeover median "
        f"{takeovers[len(takeovers) // 2]:.2f}s, max {takeovers[-1]:.2f}s"
    )
