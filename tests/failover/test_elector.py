"""The elector embedded in real NameNodes (in this process) on a real ZooKeeper and real
JournalNodes: automatic election, takeover with fencing through the breadcrumb, refusal to
become active when fencing fails, stepping down when the ZooKeeper session is lost, and
leaving the election when unhealthy."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from failover.elector import ElectorState
from hadev.zookeeper import ZooKeeperServer
from hanamenode.errors import HealthCheckFailedError, ServiceFailedError
from hanamenode.ha import HAState
from tests.failover.zkcluster import (
    SESSION_TIMEOUT,
    TICK_MS,
    active_ids,
    auto_cluster,
    elector,
    failover_conf,
)
from tests.namenode.cluster import wait_for
from zk.paths import ActiveNodeInfo, ElectorPaths

pytestmark = pytest.mark.timeout(60)


def zk_client(zk: ZooKeeperServer) -> KazooClient:
    client = KazooClient(zk.connect_string, timeout=SESSION_TIMEOUT)
    client.start(timeout=10)
    return client


def breadcrumb(client: KazooClient, paths: ElectorPaths) -> str:
    data, _ = client.get(paths.breadcrumb)
    return ActiveNodeInfo.from_bytes(data).namenode_id


def test_one_namenode_becomes_active_the_other_waits(
    tmp_path: Path, zookeeper: ZooKeeperServer
) -> None:
    conf = failover_conf(zookeeper)
    client = zk_client(zookeeper)
    try:
        with auto_cluster(tmp_path, conf) as c:
            paths = ElectorPaths(str(conf["ha.zookeeper.parent-znode"]), "ns1")
            wait_for(lambda: elector(c, "nn2").state is ElectorState.WAITING, 5, "nn2 queued")
            assert active_ids(c) == ["nn1"]
            assert c.fsn("nn2").state is HAState.STANDBY
            assert breadcrumb(client, paths) == "nn1"
            wait_for(
                lambda: sorted(client.get_children(paths.members)) == ["nn1", "nn2"],
                5,
                "both members registered",
            )
            # The holder and one waiting (nn2 says WAITING just before its contender znode
            # is made: a loaded machine shows the gap).
            wait_for(lambda: len(client.get_children(paths.lock)) == 2, 5, "two contenders")
            # Writes work on the elected active.
            assert c.mkdir("nn1", "/elected").txid > 0
            metrics = c.server("nn1").metrics
            assert metrics.value("hanamenode_elector_became_active_total") == 1
            assert metrics.value("hanamenode_elector_state", {"state": "active"}) == 1
            assert metrics.value("hanamenode_elector_zk_state", {"state": "connected"}) == 1
    finally:
        client.stop()
        client.close()


def test_the_standby_takes_over_and_fences_through_the_breadcrumb(
    tmp_path: Path, zookeeper: ZooKeeperServer
) -> None:
    marker = tmp_path / "fenced"
    fencing = f'shell(echo "$HANAMENODE_TARGET_ID $target_host $target_port" >> {marker})'
    conf = failover_conf(zookeeper, fencing=fencing)
    client = zk_client(zookeeper)
    try:
        with auto_cluster(tmp_path, conf) as c:
            paths = ElectorPaths(str(conf["ha.zookeeper.parent-znode"]), "ns1")
            acked = c.mkdir("nn1", "/before-failover").txid
            assert c.settings is not None
            nn1_port = c.settings.namenode("nn1").rpc_address.rsplit(":", 1)[1]
            started = time.monotonic()
            # The active stops: it leaves the active state holding the lock, then closes its
            # session; nn2 wins, cannot reach nn1 (graceful fence fails), runs the shell.
            c.stop_nn("nn1")
            wait_for(lambda: c.fsn("nn2").state is HAState.ACTIVE, 3 * SESSION_TIMEOUT,
                     "nn2 to take over")
            took = time.monotonic() - started
            assert took < 3 * SESSION_TIMEOUT
            assert marker.read_text() == f"nn1 127.0.0.1 {nn1_port}\n"
            assert breadcrumb(client, paths) == "nn2"
            metrics = c.server("nn2").metrics
            labels = {"method": "graceful", "outcome": "failure"}
            assert metrics.value("hanamenode_elector_fencing_attempts_total", labels) == 1
            labels = {"method": "shell", "outcome": "success"}
            assert metrics.value("hanamenode_elector_fencing_attempts_total", labels) == 1
            assert c.fsn("nn2").last_applied_txid >= acked
            assert c.mkdir("nn2", "/after-failover").txid > acked
    finally:
        client.stop()
        client.close()


def test_no_active_when_every_fencing_method_fails(
    tmp_path: Path, zookeeper: ZooKeeperServer
) -> None:
    conf = failover_conf(zookeeper, fencing="shell(/bin/false)")
    with auto_cluster(tmp_path, conf) as c:
        c.stop_nn("nn1")  # unreachable now: the graceful fence fails too
        nn2 = elector(c, "nn2")
        metrics = c.server("nn2").metrics
        wait_for(lambda: metrics.value("hanamenode_elector_failed_attempts_total") >= 2, 10,
                 "two failed attempts")
        attempt = nn2.last_attempt
        assert attempt is not None and not attempt.succeeded
        assert "cannot fence nn1" in attempt.message
        assert "shell(/bin/false): exit status 1" in attempt.message
        assert c.fsn("nn2").state is HAState.STANDBY
        assert metrics.value(
            "hanamenode_elector_fencing_attempts_total",
            {"method": "shell", "outcome": "failure"},
        ) >= 2


def test_the_active_keeps_serving_while_zookeeper_is_paused(tmp_path: Path) -> None:
    # A ZooKeeper of its own: it is paused (SIGSTOP) three times the session timeout. Neutral
    # mode: the active stays active and serves, the standby stays standby, a graceful
    # failover fails at once naming the reason; afterwards exactly one NameNode is active.
    with ZooKeeperServer(tmp_path / "zk", tick_time_ms=TICK_MS) as zk:
        conf = failover_conf(zk)
        with auto_cluster(tmp_path / "cluster", conf) as c:
            nn1, nn2 = elector(c, "nn1"), elector(c, "nn2")
            wait_for(lambda: nn2.state is ElectorState.WAITING, 5)
            zk.pause()
            try:
                paused = time.monotonic()
                wait_for(lambda: nn1.zk_state != "CONNECTED", 3 * SESSION_TIMEOUT,
                         "nn1 to notice")
                assert nn1.failover_note == "ZooKeeper unreachable: automatic failover suspended"
                txids = []
                while time.monotonic() - paused < 3 * SESSION_TIMEOUT:
                    txids.append(c.mkdir("nn1", f"/neutral-{len(txids)}").txid)
                    assert active_ids(c) == ["nn1"]
                    time.sleep(0.1)
                assert txids == sorted(txids) and len(txids) >= 10
                started = time.monotonic()
                with pytest.raises(ServiceFailedError, match="ZooKeeper unreachable"):
                    nn2.graceful_failover()
                assert time.monotonic() - started < SESSION_TIMEOUT  # fails fast, no wait
                neutral = c.server("nn1").metrics.value(
                    "hanamenode_elector_neutral_seconds_total")
                assert neutral >= 2 * SESSION_TIMEOUT
            finally:
                zk.resume()
            wait_for(lambda: nn1.zk_state == "CONNECTED" and nn2.zk_state == "CONNECTED",
                     6 * SESSION_TIMEOUT, "both to reconnect")
            wait_for(lambda: {nn1.state, nn2.state} == {ElectorState.ACTIVE,
                                                        ElectorState.WAITING},
                     6 * SESSION_TIMEOUT, "one NameNode elected, the other queued")
            assert len(active_ids(c)) == 1
            assert nn1.failover_note == ""
            step_downs = c.server("nn1").metrics.value(
                "hanamenode_elector_step_downs_total", {"reason": "disconnected"})
            assert step_downs == 0
            survivor = active_ids(c)[0]
            assert c.mkdir(survivor, "/after-zookeeper-returned").txid > txids[-1]


def test_an_unhealthy_active_leaves_the_election(
    tmp_path: Path, zookeeper: ZooKeeperServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = failover_conf(zookeeper)
    with auto_cluster(tmp_path, conf) as c:
        fsn1 = c.fsn("nn1")

        def unhealthy() -> None:
            raise HealthCheckFailedError("the name dir's disk is full (test)")

        monkeypatch.setattr(fsn1, "check_health", unhealthy)
        wait_for(lambda: c.fsn("nn2").state is HAState.ACTIVE, 10, "nn2 to take over")
        assert fsn1.state is HAState.STANDBY
        nn1 = elector(c, "nn1")
        assert nn1.state is ElectorState.OUT
        assert c.server("nn1").metrics.value(
            "hanamenode_elector_step_downs_total", {"reason": "unhealthy"}
        ) == 1
        # Healthy again: back in the queue, as the standby.
        monkeypatch.undo()
        wait_for(lambda: nn1.state is ElectorState.WAITING, 5, "nn1 to rejoin")
        assert active_ids(c) == ["nn2"]


def test_an_active_in_its_second_tenure_steps_down_when_its_lock_znode_is_deleted(
    tmp_path: Path, zookeeper: ZooKeeperServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # nn1 holds the lock twice (a graceful failover there and back): the watch on its first
    # lock znode fired when it gave that one back; its second one must be watched too. nn2
    # is unhealthy meanwhile, so only that watch can make nn1 step down.
    conf = failover_conf(zookeeper)
    client = zk_client(zookeeper)
    try:
        with auto_cluster(tmp_path, conf) as c:
            paths = ElectorPaths(str(conf["ha.zookeeper.parent-znode"]), "ns1")
            nn1, nn2 = elector(c, "nn1"), elector(c, "nn2")
            wait_for(lambda: nn2.state is ElectorState.WAITING, 5, "nn2 queued")
            assert nn2.graceful_failover() == "nn1"
            wait_for(lambda: nn1.state is ElectorState.WAITING, 2 * SESSION_TIMEOUT,
                     "nn1 queued")
            assert nn1.graceful_failover() == "nn2"
            assert nn1.state is ElectorState.ACTIVE
            wait_for(lambda: nn2.state is ElectorState.WAITING, 2 * SESSION_TIMEOUT,
                     "nn2 to rejoin")

            def unhealthy() -> None:
                raise HealthCheckFailedError("kept out of the election (test)")

            monkeypatch.setattr(c.fsn("nn2"), "check_health", unhealthy)
            wait_for(lambda: nn2.state is ElectorState.OUT, 5, "nn2 to leave the queue")
            mine = [node for node in client.get_children(paths.lock)
                    if client.get(f"{paths.lock}/{node}")[0] == b"nn1"]
            assert len(mine) == 1
            client.delete(f"{paths.lock}/{mine[0]}")
            wait_for(lambda: c.fsn("nn1").state is HAState.STANDBY, 5, "nn1 to step down")
            assert c.server("nn1").metrics.value(
                "hanamenode_elector_step_downs_total", {"reason": "lock_lost"}
            ) == 1
    finally:
        client.stop()
        client.close()
