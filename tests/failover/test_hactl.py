"""``hactl`` as a subprocess against real NameNodes (in this process) with automatic failover
on a real ZooKeeper: exact outputs and exit statuses, in the habit of ``hdfs haadmin`` and
``hdfs zkfc -formatZK``."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from conf import write_xml
from hadev.daemon import CODE_ROOT, child_environment
from hadev.zookeeper import ZooKeeperServer
from hanamenode.errors import HealthCheckFailedError
from hanamenode.ha import HAState
from hanamenode.peers import connect_address
from tests.failover.zkcluster import (
    SESSION_TIMEOUT,
    active_ids,
    auto_cluster,
    elector,
    failover_conf,
)
from tests.namenode.cluster import NameNodeCluster, wait_for

pytestmark = pytest.mark.timeout(90)

REFUSAL = (
    "Refusing to manually manage HA state, since it may cause\n"
    "a split-brain scenario or other incorrect state.\n"
    "If you are very sure you know what you are doing, please\n"
    "specify the --forcemanual flag.\n"
)


def hactl(conf: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "failover.hactl", "--conf", str(conf), *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=CODE_ROOT,
        env=child_environment(),
        timeout=60,
    )


@dataclass
class Env:
    cluster: NameNodeCluster
    conf: Path
    marker: Path
    mapping: dict[str, object]

    def address(self, nn: str) -> str:
        assert self.cluster.settings is not None
        return connect_address(self.cluster.settings.namenode(nn).rpc_address)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, zookeeper: ZooKeeperServer) -> Iterator[Env]:
    base = tmp_path_factory.mktemp("hactl")
    marker = base / "fenced"
    conf = failover_conf(zookeeper, fencing=f"shell(touch {marker})")
    with auto_cluster(base / "cluster", conf) as c:
        conf_path = base / "hdfs-site.xml"
        write_xml(c.mapping, conf_path)
        yield Env(c, conf_path, marker, dict(c.mapping))


@pytest.fixture
def nn1_active(env: Env) -> Env:
    """Each test starts with nn1 active and nn2 queued for the lock."""
    c = env.cluster
    wait_for(lambda: active_ids(c) == ["nn1"], 10, "nn1 active")
    wait_for(lambda: elector(c, "nn2").state.value == "waiting", 10, "nn2 queued")
    return env


def test_get_service_state(nn1_active: Env) -> None:
    result = hactl(nn1_active.conf, "get-service-state", "nn1")
    assert (result.returncode, result.stdout, result.stderr) == (0, "active\n", "")
    result = hactl(nn1_active.conf, "get-service-state", "nn2")
    assert (result.returncode, result.stdout, result.stderr) == (0, "standby\n", "")


def test_get_all_service_state(nn1_active: Env) -> None:
    """One line per NameNode: its id (what every other command takes), its address, its
    state, in aligned columns (issue 28 item 2)."""
    a1, a2 = nn1_active.address("nn1"), nn1_active.address("nn2")
    width = max(len(a1), len(a2))
    result = hactl(nn1_active.conf, "get-all-service-state")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"nn1  {a1:<{width}}  active\nnn2  {a2:<{width}}  standby\n"


def test_unknown_namenode_is_an_illegal_argument(nn1_active: Env) -> None:
    result = hactl(nn1_active.conf, "get-service-state", "nn9")
    assert result.returncode == 255
    assert result.stdout == ""
    assert result.stderr == (
        "Illegal argument: Unable to determine service address for namenode 'nn9'\n"
    )


def test_check_health(nn1_active: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    result = hactl(nn1_active.conf, "check-health", "nn1")
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")

    def unhealthy() -> None:
        raise HealthCheckFailedError("the name dir's disk is full (test)")

    c = nn1_active.cluster
    monkeypatch.setattr(c.fsn("nn2"), "check_health", unhealthy)
    result = hactl(nn1_active.conf, "check-health", "nn2")
    assert result.returncode == 255
    assert result.stderr == "Health check failed: the name dir's disk is full (test)\n"
    monkeypatch.undo()
    wait_for(lambda: elector(c, "nn2").state.value == "waiting", 10, "nn2 back in the queue")


def test_manual_transitions_are_refused_with_automatic_failover(nn1_active: Env) -> None:
    c = nn1_active.cluster
    result = hactl(nn1_active.conf, "transition-to-active", "nn2")
    assert result.returncode == 255
    assert result.stderr == (
        f"Automatic failover is enabled for NameNode nn2 at {nn1_active.address('nn2')}\n"
        + REFUSAL
    )
    result = hactl(nn1_active.conf, "transition-to-standby", "nn1")
    assert result.returncode == 255
    assert result.stderr.endswith(REFUSAL)
    # --forcemanual asks first; "n" aborts.
    result = hactl(nn1_active.conf, "transition-to-standby", "--forcemanual", "nn1", stdin="n\n")
    assert result.returncode == 255
    assert "--forcemanual flag. This flag is dangerous" in result.stderr
    assert result.stderr.endswith("Aborted.\n")
    assert active_ids(c) == ["nn1"]
    assert c.fsn("nn2").state is HAState.STANDBY


def test_graceful_failover_and_back_without_fencing(nn1_active: Env) -> None:
    c = nn1_active.cluster
    result = hactl(nn1_active.conf, "failover", "nn1", "nn2")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"Failover to NameNode nn2 at {nn1_active.address('nn2')} successful\n"
    assert active_ids(c) == ["nn2"]
    assert c.fsn("nn1").state is HAState.STANDBY
    assert hactl(nn1_active.conf, "get-service-state", "nn2").stdout == "active\n"
    # nn1 ceded and is told to rejoin at once: it queues again, as the standby.
    wait_for(lambda: elector(c, "nn1").state.value == "waiting", 2 * SESSION_TIMEOUT)
    assert c.mkdir("nn2", "/after-graceful-failover").txid > 0

    result = hactl(nn1_active.conf, "failover", "nn2", "nn1")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"Failover to NameNode nn1 at {nn1_active.address('nn1')} successful\n"
    assert active_ids(c) == ["nn1"]
    # The ceding active deleted its breadcrumb: nothing was fenced, not even gracefully.
    assert not nn1_active.marker.exists()
    for nn in ("nn1", "nn2"):
        metrics = c.server(nn).metrics
        assert metrics.value("hanamenode_elector_step_downs_total", {"reason": "ceded"}) == 1
        for method in ("graceful", "shell"):
            for outcome in ("success", "failure"):
                labels = {"method": method, "outcome": outcome}
                assert metrics.value("hanamenode_elector_fencing_attempts_total", labels) == 0


def test_format_zk(nn1_active: Env, zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    # The running cluster's znode exists: refused without --force, the cluster undisturbed.
    result = hactl(nn1_active.conf, "format-zk", "--non-interactive")
    parent = nn1_active.mapping["ha.zookeeper.parent-znode"]
    assert result.returncode == 2
    assert result.stderr == (
        f"format-zk: {parent}/ns1 already exists; not clearing it (use --force, or answer yes)\n"
    )
    assert active_ids(nn1_active.cluster) == ["nn1"]

    # Another parent znode, formatted from scratch, then again.
    fresh = f"/format-{uuid.uuid4().hex[:8]}"
    conf = tmp_path / "fresh.xml"
    write_xml({**nn1_active.mapping, "ha.zookeeper.parent-znode": fresh}, conf)
    result = hactl(conf, "format-zk", "--non-interactive")
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        f"Successfully created {fresh}/ns1 in ZooKeeper {zookeeper.connect_string}\n"
    )
    client = KazooClient(zookeeper.connect_string, timeout=SESSION_TIMEOUT)
    client.start(timeout=10)
    try:
        assert client.get_children(f"{fresh}/ns1") == ["members"]
        client.create(f"{fresh}/ns1/ActiveBreadCrumb", b"stale")
        result = hactl(conf, "format-zk", stdin="n\n")  # asks, told no
        assert result.returncode == 2
        assert f"The configured parent znode {fresh}/ns1 already exists." in result.stderr
        assert "Proceed formatting? [y/N]" in result.stderr
        assert client.exists(f"{fresh}/ns1/ActiveBreadCrumb") is not None
        result = hactl(conf, "format-zk", "--force", "--non-interactive")
        assert result.returncode == 0, result.stderr
        assert client.get_children(f"{fresh}/ns1") == ["members"]
        client.create(f"{fresh}/ns1/ActiveBreadCrumb", b"stale")
        result = hactl(conf, "format-zk", stdin="y\n")  # asks, told yes
        assert result.returncode == 0, result.stderr
        assert client.get_children(f"{fresh}/ns1") == ["members"]
    finally:
        client.stop()
        client.close()

    # Without automatic failover there is nothing to format (hdfs zkfc's exit status 5).
    manual = tmp_path / "manual.xml"
    write_xml({**nn1_active.mapping, "dfs.ha.automatic-failover.enabled": "false"}, manual)
    result = hactl(manual, "format-zk", "--non-interactive")
    assert result.returncode == 5
    assert result.stderr == (
        "Automatic failover is not enabled for nameservice ns1 "
        "(dfs.ha.automatic-failover.enabled)\n"
    )


def test_manual_failover_without_zookeeper(tmp_path: Path) -> None:
    marker = tmp_path / "fenced"
    with NameNodeCluster(
        tmp_path / "cluster", conf={"dfs.ha.fencing.methods": f"shell(touch {marker})"}
    ) as c:
        c.transition_to_active("nn1")
        conf = tmp_path / "hdfs-site.xml"
        write_xml(c.mapping, conf)
        result = hactl(conf, "failover", "nn1", "nn2")
        assert result.returncode == 0, result.stderr
        assert result.stdout == "Failover from nn1 to nn2 successful\n"
        assert active_ids(c) == ["nn2"]
        assert not marker.exists()  # nn1 stepped down when asked
        # Manual control is allowed without automatic failover; nn2 is active already.
        result = hactl(conf, "transition-to-active", "nn1")
        assert result.returncode == 255
        assert result.stderr == "transition-to-active: NameNode nn2 is already active\n"
        # A NameNode that cannot be reached is fenced with the configured method.
        c.stop_nn("nn2")
        result = hactl(conf, "failover", "nn2", "nn1")
        assert result.returncode == 0, result.stderr
        assert marker.exists()
        assert active_ids(c) == ["nn1"]


def test_an_active_slow_to_step_down_is_named_with_its_timeout(
    tmp_path: Path, zookeeper: ZooKeeperServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ceding active waits up to new-active.rpc-timeout to step down and then says so;
    hactl shows that answer, not the asking NameNode's own deadline running out."""
    conf = failover_conf(
        zookeeper, extra={"ha.failover-controller.new-active.rpc-timeout.ms": "1500"}
    )
    with auto_cluster(tmp_path / "cluster", conf) as c:
        fsn = c.fsn("nn1")
        step_down = fsn.transition_to_standby_async

        async def slow_step_down(*args: Any) -> None:  # the cause, for the history
            await asyncio.sleep(3.0)
            await step_down(*args)

        monkeypatch.setattr(fsn, "transition_to_standby_async", slow_step_down)
        wait_for(lambda: elector(c, "nn2").state.value == "waiting", 10, "nn2 queued")
        conf_path = tmp_path / "hdfs-site.xml"
        write_xml(c.mapping, conf_path)
        result = hactl(conf_path, "failover", "nn1", "nn2")
        assert result.returncode == 255, result.stdout
        assert result.stderr == (
            "Failover failed: Unable to get the active NameNode nn1 to cede: "
            "NameNode nn1 did not step down within 1.5s\n"
        )
        # Late, but it steps down all the same, and nn2 takes over.
        wait_for(lambda: active_ids(c) == ["nn2"], 10, "nn2 active")
