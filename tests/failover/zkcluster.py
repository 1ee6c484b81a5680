"""In-process NameNodes with automatic failover on a real ZooKeeper (``hadev.zookeeper``), for the
elector and ``hactl`` tests::

    conf = failover_conf(zookeeper, fencing=f"shell(touch {marker})")
    with auto_cluster(tmp_path, conf) as c:      # ZooKeeper formatted, nn1 active
        c.stop_nn("nn1")
        wait_for(lambda: c.fsn("nn2").state is HAState.ACTIVE, 3 * SESSION_TIMEOUT)

Sessions time out after 2 s (the server's tickTime is 100 ms, so it grants that), the health
monitor checks every 0.2 s; each cluster gets a parent znode of its own.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from conf import Settings
from failover.controller import format_zk
from failover.elector import ActiveStandbyElector
from hadev.zookeeper import ZooKeeperServer
from hanamenode.ha import HAState
from tests.namenode.cluster import NameNodeCluster, wait_for

SESSION_TIMEOUT = 2.0
TICK_MS = 100


def failover_conf(
    zk: ZooKeeperServer,
    *,
    parent: str | None = None,
    fencing: str = "shell(/bin/true)",
    extra: dict[str, object] | None = None,
) -> dict[str, object]:
    """Automatic failover on ``zk`` under a fresh parent znode (unless ``parent``)."""
    return {
        "dfs.ha.automatic-failover.enabled": "true",
        "ha.zookeeper.quorum": zk.connect_string,
        "ha.zookeeper.session-timeout.ms": str(int(SESSION_TIMEOUT * 1000)),
        "ha.zookeeper.parent-znode": parent or f"/test-{uuid.uuid4().hex[:8]}",
        "ha.health-monitor.check-interval.ms": "200",
        "ha.failover-controller.graceful-fence.rpc-timeout.ms": "2000",
        "ha.failover-controller.new-active.rpc-timeout.ms": "20000",
        "ha.failover-controller.cli-check.rpc-timeout.ms": "5000",
        "dfs.ha.fencing.methods": fencing,
        **(extra or {}),
    }


def format_parent(conf: dict[str, object]) -> str:
    return format_zk(Settings.from_mapping({"dfs.nameservices": "ns1", **conf}))


@contextmanager
def auto_cluster(base: Path, conf: dict[str, object]) -> Iterator[NameNodeCluster]:
    """ZooKeeper formatted, two NameNodes started: nn1 (started first) wins the election."""
    format_parent(conf)
    with NameNodeCluster(base, conf=conf) as c:
        wait_for(lambda: c.fsn("nn1").state is HAState.ACTIVE, 10, "nn1 to win the election")
        yield c


def elector(c: NameNodeCluster, nn: str) -> ActiveStandbyElector:
    found = c.server(nn).elector
    assert isinstance(found, ActiveStandbyElector), f"{nn} runs no elector"
    return found


def active_ids(c: NameNodeCluster) -> list[str]:
    return [
        nn for nn, server in c.servers.items()
        if server is not None and server.state is HAState.ACTIVE
    ]
