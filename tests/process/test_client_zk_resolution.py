"""Clients that find the NameNodes in ZooKeeper (issue 29 item 2, docs/operations.md §3.5) on
the dev cluster's real processes: nn1 and nn2 elect, nn3 is an observer, one JournalNode.

The clients' configuration names no NameNode: only the nameservice, the TLS files and
``dfs.client.failover.zookeeper.quorum``, with the dev cluster's read-only ZooKeeper identity
(``conf/zk-reader``), which the HA znodes' ACL grants ``r`` beside the NameNodes' ``rwcda``.
The tests:

- a call in flight on an active frozen with SIGSTOP (an RPC deadline of 10 minutes) is
  answered by the new active while the old one is still frozen: the client followed the
  election and sent the call again, same ids, without waiting for the frozen one;
- under a write load, ``hactl failover`` moves the client's next calls to the new active
  before it makes any (the watch, not a failed call), ``kill -9`` of the active is ridden
  through, reads are served by the observer, and nothing acknowledged is lost;
- the reader identity cannot write the election znodes, and a client without it is told
  which keys to set; ``hafs`` works from a file that names no NameNode;
- while ZooKeeper is frozen, a client keeps the NameNodes it knew, and one that never
  reached it says so; once it is back, the client follows the election again.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from conf import Settings, load_settings
from conf.xmlconf import ConfigValue, write_xml
from hadev.devcluster import ZK_READER, DevCluster, MkdirLoad
from hadev.namenodes import run_hafs
from hadev.scrape import metric_value
from hanamenode.client import HaFsClient, RetryPolicy
from hanamenode.client.zk_resolver import ZooKeeperResolver
from hanamenode.errors import NamenodeUnavailableError
from hanamenode.ha import HAState
from zk.client import close_client
from zk.paths import ActiveNodeInfo, ElectorPaths

pytestmark = pytest.mark.timeout(300)

OBSERVER = "nn3"
ELECTED = ("nn1", "nn2")
POLICY = RetryPolicy(max_attempts=60, sleep_base=0.01, sleep_max=0.25, rpc_timeout=10.0)


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    with DevCluster(
        tmp_path_factory.mktemp("zk-clients"), journalnodes=1, namenodes=2, observers=1,
        session_timeout=1.0,
    ) as cluster:
        yield cluster


def client_conf(dev: DevCluster, path: Path, **extra: ConfigValue) -> Settings:
    """A client's file with no NameNode in it: the nameservice, TLS, and ZooKeeper."""
    users = dev.settings()
    tls = {k: v for k, v in users.raw.items() if k.startswith("hanamenode.rpc.tls.")
           and k.rsplit(".", 1)[-1] in ("enabled", "ca-file", "cert-file", "key-file")}
    conf: dict[str, ConfigValue] = {
        "dfs.nameservices": users.nameservice,
        **tls,
        "dfs.client.failover.zookeeper.quorum": dev.zookeeper.connect_string,
        "dfs.client.failover.zookeeper.auth": f"@{dev.zk_reader_path}",
        **extra,
    }
    settings = load_settings(write_xml(conf, path))
    assert settings.namenode_ids == ()
    return settings


def wait_for(what: str, predicate: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g}s")
        time.sleep(0.02)


def stopped(pid: int) -> bool:
    """The process is stopped by a signal (state T in /proc)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rpartition(")")[2].split()[0] == "T"


def test_a_call_on_a_frozen_active_is_answered_by_the_new_one(
    dev: DevCluster, tmp_path: Path
) -> None:
    settings = client_conf(dev, tmp_path / "client.xml")
    slow = RetryPolicy(max_attempts=60, sleep_base=0.01, sleep_max=0.25, rpc_timeout=600.0)
    with HaFsClient(settings, policy=slow) as fs, ThreadPoolExecutor(1) as pool:
        fs.mkdirs("/frozen")
        frozen = dev.wait_active()
        assert fs.proxy.current.nn_id == frozen
        dev.kill(frozen, signal.SIGSTOP)
        try:
            pending = pool.submit(fs.mkdirs, "/frozen/a")
            successor = dev.wait_active(exclude=[frozen, OBSERVER])
            # Its deadline is ten minutes: only the move to the new active answers it now.
            assert pending.result(timeout=60) is True
            assert fs.proxy.current.nn_id == successor
            assert stopped(dev.namenode(frozen).pid)  # the new active answered, not it
        finally:
            dev.kill(frozen, signal.SIGCONT)
        dev.wait_state(frozen, HAState.STANDBY)
        assert fs.stat("/frozen/a").is_dir


def test_a_zookeeper_only_client_follows_failovers_and_reads_from_the_observer(
    dev: DevCluster, tmp_path: Path
) -> None:
    settings = client_conf(dev, tmp_path / "client.xml")
    assert settings.client.observer_reads  # on by default when resolving from ZooKeeper
    served_before = metric_value(
        dev.namenode(OBSERVER).metrics_url, "hanamenode_observer_reads_total", outcome="served"
    )
    with MkdirLoad(settings, "/zk", writers=2, policy=POLICY) as load, HaFsClient(
        settings, policy=POLICY
    ) as fs:
        assert load.wait_acks(30, timeout=60)
        # Reads go to the observer the client found among the members.
        for _ in range(20):
            assert fs.stat("/zk").is_dir
        served = metric_value(
            dev.namenode(OBSERVER).metrics_url, "hanamenode_observer_reads_total",
            outcome="served",
        )
        assert served >= served_before + 20

        # A graceful failover: the idle client learns of the new active from the watch.
        first = dev.wait_active()
        (second,) = [nn for nn in ELECTED if nn != first]
        assert fs.proxy.current.nn_id == first
        result = dev.hactl("failover", first, second)
        assert result.returncode == 0, result.stderr
        wait_for("the idle client follows the election",
                 lambda: fs.proxy.current.nn_id == second)
        # Its session moved with it, before any call: open to the new active, given up on
        # the old one, kept on the observer.
        address = {nn: dev.namenode(nn).address for nn in (first, second, OBSERVER)}
        wait_for("the session follows the election",
                 lambda: address[second] in fs.proxy.open_sessions)
        assert address[first] not in fs.proxy.open_sessions
        assert address[OBSERVER] in fs.proxy.open_sessions
        assert load.wait_acks(30, timeout=60)

        # kill -9 of the active: the client rides through to the other one.
        dev.kill(second)
        assert dev.wait_active(exclude=[second]) == first
        wait_for("the client follows the election", lambda: fs.proxy.current.nn_id == first)
        assert load.wait_acks(30, timeout=60)
        fs.mkdirs("/zk/after-kill")
        load.stop()
        assert load.failures == []
        # Reads go to the observer: msync first, so that they see every write the load's
        # own clients had acknowledged (docs/consistency.md §9).
        fs.msync()
        assert load.missing(fs) == []


def test_the_reader_identity_reads_but_cannot_write(dev: DevCluster, tmp_path: Path) -> None:
    settings = dev.settings()
    paths = ElectorPaths.from_settings(settings)
    assert settings.client.zookeeper_auth[0][1].startswith(f"{ZK_READER}:")
    reader = KazooClient(dev.zookeeper.connect_string,
                         auth_data=list(settings.client.zookeeper_auth))
    reader.start(timeout=10)
    try:
        members = reader.get_children(paths.members)
        assert OBSERVER in members
        data, _ = reader.get(paths.member(OBSERVER))
        assert ActiveNodeInfo.from_bytes(data).address == dev.namenode(OBSERVER).rpc_address
        for write in (
            lambda: reader.set(paths.breadcrumb, ActiveNodeInfo("ns1", "evil", "x:1").to_bytes()),
            lambda: reader.create(f"{paths.lock}/evil__lock__0000000000", b"evil"),
            lambda: reader.create(paths.member("evil"), b"", ephemeral=True),
        ):
            with pytest.raises(NoAuthError):
                write()
    finally:
        close_client(reader)

    # hafs with a file that names no NameNode.
    client_conf(dev, tmp_path / "client.xml")
    made = run_hafs(tmp_path / "client.xml", "-mkdir", "-p", "/via-hafs/a")
    assert made.returncode == 0, made.stderr
    listed = run_hafs(tmp_path / "client.xml", "-ls", "/via-hafs")
    assert listed.returncode == 0 and "/via-hafs/a" in listed.stdout, listed.stderr
    # hafs --zookeeper with the dev cluster's own file (its reader identity in it).
    flagged = run_hafs(dev.conf_path, "--zookeeper", dev.zookeeper.connect_string,
                       "-ls", "/via-hafs")
    assert flagged.returncode == 0 and "/via-hafs/a" in flagged.stdout, flagged.stderr

    # Without the reader identity the client cannot read, and is told what to set.
    anonymous: dict[str, ConfigValue] = {
        "dfs.client.failover.zookeeper.auth": "", "dfs.client.failover.max.attempts": 2,
    }
    settings = client_conf(dev, tmp_path / "anonymous.xml", **anonymous)
    refused = run_hafs(tmp_path / "anonymous.xml", "-ls", "/")
    assert refused.returncode == 1
    assert "NoAuth" in refused.stderr and "ha.zookeeper.acl" in refused.stderr, refused.stderr
    few = RetryPolicy(max_attempts=2, sleep_base=0.01, sleep_max=0.01, rpc_timeout=5.0)
    with HaFsClient(settings, policy=few) as fs, pytest.raises(NamenodeUnavailableError) as info:
        fs.mkdirs("/anonymous")
    message = str(info.value)
    assert "NoAuth" in message and "dfs.client.failover.zookeeper.auth" in message, message
    assert "ha.zookeeper.acl" in message, message
    assert isinstance(fs.proxy.resolver, ZooKeeperResolver)


def test_a_zookeeper_outage_leaves_a_client_the_namenodes_it_knew(
    dev: DevCluster, tmp_path: Path
) -> None:
    """Last: it freezes ZooKeeper, after which the election may run again."""
    for nn in ELECTED:  # the one killed before comes back as a standby
        if not dev.namenode(nn).running:
            dev.restart(nn)
    settings = client_conf(dev, tmp_path / "client.xml")
    with HaFsClient(settings, policy=POLICY) as fs:
        fs.mkdirs("/outage")
        dev.kill("zk", signal.SIGSTOP)
        try:
            for n in range(5):  # the active keeps serving (docs/operations.md §8.3)
                fs.mkdirs(f"/outage/{n}")
            few: dict[str, ConfigValue] = {"dfs.client.failover.max.attempts": 2}
            late = client_conf(dev, tmp_path / "late.xml", **few)
            with HaFsClient(late) as newcomer, pytest.raises(NamenodeUnavailableError) as info:
                newcomer.stat("/outage")
            assert f"no answer from ZooKeeper {dev.zookeeper.connect_string}" in str(
                info.value
            ), info.value
        finally:
            dev.kill("zk", signal.SIGCONT)
        assert [st.path for st in fs.list("/outage")] == [f"/outage/{n}" for n in range(5)]

        # It follows the election again once ZooKeeper is back (on a new session if the old
        # one expired meanwhile: the watches are set again).
        active = dev.wait_active(exclude=[OBSERVER])
        (other,) = [nn for nn in ELECTED if nn != active]
        deadline = time.monotonic() + 60
        while (result := dev.hactl("failover", active, other)).returncode != 0:
            # The electors may still be finding ZooKeeper again ("failover suspended").
            assert time.monotonic() < deadline, result.stderr
            time.sleep(0.5)
        wait_for("the client follows the election after the outage",
                 lambda: fs.proxy.current.nn_id == other)
        fs.mkdirs("/outage/after")
