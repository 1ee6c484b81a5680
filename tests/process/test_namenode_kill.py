"""kill -9 of the active NameNode process under a write load, then a manual
``transition_to_active`` of the other (issue "NameNode": no ZooKeeper involved): nothing that
was acknowledged is lost, and the new active keeps writing. Real processes, real signals."""

from __future__ import annotations

import random
import signal
import threading
import time
from pathlib import Path

import pytest

from hadev.namenodes import NameNodeProcessCluster
from hanamenode.client import HaFsClient
from hanamenode.errors import NamenodeError
from hanamenode.ha import HAState

pytestmark = pytest.mark.timeout(180)

FAST_CONF: dict[str, str | int | float | bool] = {
    "dfs.ha.tail-edits.period": "0.1",
    "dfs.ha.log-roll.period": "0.5",
    "dfs.qjournal.heartbeat.interval.ms": "200",
    "dfs.client.failover.max.attempts": 4,
    "dfs.client.failover.sleep.max.millis": 200,
}


def writer(client: HaFsClient, prefix: str, acked: list[str], stop: threading.Event) -> None:
    """mkdirs until stopped; a path is recorded only once the NameNode acknowledged it."""
    n = 0
    while not stop.is_set():
        path = f"{prefix}/d{n}"
        try:
            client.mkdirs(path, parents=True)
        except NamenodeError:
            time.sleep(0.05)  # no active NameNode right now: the test is failing over
            continue
        acked.append(path)
        n += 1


def test_kill_9_of_the_active_then_manual_transition_loses_nothing(tmp_path: Path) -> None:
    seed = random.SystemRandom().randrange(2**32)
    rng = random.Random(seed)
    print(f"seed={seed}")
    with NameNodeProcessCluster(tmp_path, extra_conf=FAST_CONF) as cluster:
        cluster.transition_to_active("nn1")
        stop = threading.Event()
        acked: list[list[str]] = [[] for _ in range(4)]
        clients = [HaFsClient(cluster.settings()) for _ in acked]
        threads = [
            threading.Thread(target=writer, args=(c, f"/load/w{i}", acked[i], stop), name=f"w{i}")
            for i, c in enumerate(clients)
        ]
        for t in threads:
            t.start()
        try:
            time.sleep(rng.uniform(1.0, 2.0))
            before_kill = sum(len(a) for a in acked)
            cluster["nn1"].kill(signal.SIGKILL)
            assert before_kill > 0, "no write was acknowledged before the kill"
            cluster.transition_to_active("nn2")
            assert cluster["nn2"].state() is HAState.ACTIVE
            after_transition = sum(len(a) for a in acked)
            time.sleep(1.0)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=30)
        total = sum(len(a) for a in acked)
        assert total > after_transition, "the new active acknowledged no write"
        with HaFsClient(cluster.settings()) as check:
            missing = [p for a in acked for p in a if not _exists(check, p)]
        assert not missing, (
            f"seed={seed}: {len(missing)} acknowledged mkdirs lost, e.g. {missing[:5]}"
        )
        for c in clients:
            c.close()


def _exists(client: HaFsClient, path: str) -> bool:
    try:
        return client.stat(path).is_dir
    except NamenodeError:
        return False
