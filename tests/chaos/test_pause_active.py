"""SIGSTOP of the active NameNode for longer than the ZooKeeper session timeout, under load,
then SIGCONT: the other NameNode takes over while the old one is frozen; once it runs again
the old one acknowledges nothing (a client pinned to it gets only errors: its edits are
refused by the JournalNodes, which promised the new active's epoch) and ends up standby;
every mkdir acknowledged by anyone is in the final namespace."""

from __future__ import annotations

import random
import signal
import time

import pytest

from hadev.devcluster import LOAD_POLICY, DevCluster, MkdirLoad
from hanamenode.client import HaFsClient, RetryPolicy
from hanamenode.errors import NamenodeError
from hanamenode.ha import HAState
from tests.chaos.conftest import SESSION_TIMEOUT, STATUS_TIMEOUT, Timeline
from tests.chaos.journal_audit import JournalAudit

pytestmark = pytest.mark.timeout(600)

PINNED = RetryPolicy(max_attempts=1, rpc_timeout=3.0)
"""One attempt, on the old active only: no failover to hide what it answers."""


def test_paused_active_is_replaced_and_acknowledges_nothing_after(
    dev: DevCluster, chaos_rounds: int, timeline: Timeline, rng: random.Random
) -> None:
    rounds = max(2, chaos_rounds // 10)
    audit = JournalAudit(dev)
    pinned_acks: list[str] = []
    with MkdirLoad(dev.settings(), "/pause", writers=3, pause=0.005) as load:
        assert load.wait_acks(50, 20)
        for round_no in range(1, rounds + 1):
            old = dev.wait_active(15)
            with HaFsClient(
                [dev.namenode(old).address], policy=PINNED, tls=dev.settings().tls
            ) as pinned:
                path = f"/pause/r{round_no}-before"
                pinned.mkdirs(path)  # the pinned client does reach the active
                pinned_acks.append(path)
                timeline.add(f"round {round_no}: SIGSTOP {old} (pid {dev.namenode(old).pid})")
                stopped_at = time.monotonic()
                dev.kill(old, signal.SIGSTOP)
                try:
                    new = dev.wait_active(SESSION_TIMEOUT + 15, exclude=old)
                    timeline.add(
                        f"round {round_no}: {new} active {time.monotonic() - stopped_at:.2f}s "
                        "after the SIGSTOP"
                    )
                    assert load.wait_acks(20, 20), f"round {round_no}: no acks through {new}"
                    pause = SESSION_TIMEOUT * rng.uniform(1.5, 3.0)
                    time.sleep(max(0.0, stopped_at + pause - time.monotonic()))
                finally:
                    dev.kill(old, signal.SIGCONT)
                timeline.add(
                    f"round {round_no}: SIGCONT {old} after {time.monotonic() - stopped_at:.2f}s"
                )
                refused = 0
                deadline = time.monotonic() + 10
                attempt = 0
                while time.monotonic() < deadline:
                    attempt += 1
                    path = f"/pause/r{round_no}-after-{attempt}"
                    try:
                        pinned.mkdirs(path)
                    except NamenodeError:
                        refused += 1
                    else:
                        pinned_acks.append(path)
                        pytest.fail(f"round {round_no}: {old} acknowledged {path} after SIGCONT")
                    if refused >= 5 and _state(dev, old) is HAState.STANDBY:
                        break
                timeline.add(f"round {round_no}: {old} refused {refused} mkdirs after SIGCONT")
            dev.wait_state(old, HAState.STANDBY, 20)
            assert dev.active(timeout=STATUS_TIMEOUT) == new, f"round {round_no}: {dev.states()}"
            timeline.add(f"round {round_no}: {old} is standby, {new} active")
            with dev.client(LOAD_POLICY) as fs:
                missing = load.missing(fs) + [p for p in pinned_acks if not _exists(fs, p)]
            assert not missing, f"round {round_no}: acknowledged mkdirs lost: {missing[:10]}"
            report = audit.check()
            assert report.ok, f"round {round_no}: {report.describe()}"
        load.stop()
    timeline.add(f"{rounds} rounds, {load.ack_count} acks, {len(load.failures)} failed calls")
    assert not load.failures, f"calls failed: {load.failures[:5]}"


def _state(dev: DevCluster, nn_id: str) -> HAState | None:
    try:
        return dev.namenode(nn_id).state(1.0)
    except NamenodeError:
        return None


def _exists(fs: HaFsClient, path: str) -> bool:
    try:
        return fs.stat(path).is_dir
    except NamenodeError:
        return False
