"""The client's resolution from ZooKeeper, without ZooKeeper (docs/operations.md §3.5): the
decision ``resolve`` from a table, the lock's first contender, the configuration's errors
naming the key, and the failover proxy following a resolver's views. The real thing, on a
real cluster, is tests/process/test_client_zk_resolution.py."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from click.testing import CliRunner

from conf import ConfigError, Settings
from hanamenode.client import FailoverProxy, HaFsClient, NameNodeAddress, Resolution, RetryPolicy
from hanamenode.client.shell import main as hafs
from hanamenode.client.zk_resolver import (
    KAZOO_LOGGER,
    ZooKeeperResolver,
    first_contender,
    resolve,
)
from hanamenode.errors import NamenodeUnavailableError
from zk.paths import ActiveNodeInfo

NS = "ns1"


def info(nn: str, ns: str = NS) -> ActiveNodeInfo:
    return ActiveNodeInfo(ns, nn, f"{nn}.example:8020")


def at(nn: str) -> NameNodeAddress:
    return NameNodeAddress(nn, f"{nn}.example:8020")


@dataclass(frozen=True)
class Row:
    says: str
    holder: str | None
    breadcrumb: ActiveNodeInfo | None
    members: tuple[ActiveNodeInfo, ...]
    active: NameNodeAddress | None
    order: tuple[str, ...]


ROWS = [
    Row("the lock's holder is the active, listed first; the others by id",
        "nn2", info("nn1"), (info("nn1"), info("nn2"), info("nn3")), at("nn2"),
        ("nn2", "nn1", "nn3")),
    Row("the holder that has written the breadcrumb: the same answer",
        "nn2", info("nn2"), (info("nn1"), info("nn2")), at("nn2"), ("nn2", "nn1")),
    Row("nobody holds the lock: the breadcrumb's NameNode, a member",
        None, info("nn1"), (info("nn1"), info("nn2")), at("nn1"), ("nn1", "nn2")),
    Row("nobody holds the lock and the breadcrumb's NameNode has no member znode (its "
        "session expired while it stays active): its breadcrumb address",
        None, info("nn1"), (info("nn2"),), at("nn1"), ("nn1", "nn2")),
    Row("a holder without a member znode yet, the breadcrumb naming another: no active",
        "nn2", info("nn1"), (info("nn1"),), None, ("nn1",)),
    Row("no lock holder, no breadcrumb: the members, no active",
        None, None, (info("nn3"), info("nn1")), None, ("nn1", "nn3")),
    Row("members and a breadcrumb of another nameservice are not ours",
        None, info("nn9", "other"), (info("nn1"), info("nn8", "other")), None, ("nn1",)),
    Row("nothing registered", None, None, (), None, ()),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.says for r in ROWS])
def test_resolve(row: Row) -> None:
    resolution = resolve(NS, row.holder, row.breadcrumb, row.members)
    assert resolution.active == row.active
    assert tuple(nn.nn_id for nn in resolution.namenodes) == row.order
    assert resolution.problem == ""


def test_the_first_contender_is_the_lowest_sequence_not_the_lowest_name() -> None:
    children = ["zz__lock__0000000003", "aa__lock__0000000010", "not-a-contender"]
    assert first_contender(children) == "zz__lock__0000000003"
    assert first_contender(["not-a-contender"]) is None
    assert first_contender([]) is None


# -- configuration ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("dfs.client.failover.zookeeper.quorum", "zk1", "expected host:port"),
        ("dfs.client.failover.zookeeper.quorum", "zk1:2181,zk2:http", "zk2:http"),
        ("dfs.client.failover.zookeeper.auth", "digest", "expected scheme:credential"),
        ("dfs.client.failover.zookeeper.auth", "@relative", "expected @/absolute/path"),
    ],
)
def test_a_bad_value_names_the_key(key: str, value: str, says: str) -> None:
    with pytest.raises(ConfigError) as err:
        Settings.from_mapping({key: value}, source="client.xml")
    assert f"client.xml: {key}: " in str(err.value) and says in str(err.value), err.value


def test_a_client_with_neither_namenodes_nor_zookeeper_names_both_keys() -> None:
    with pytest.raises(ConfigError) as err:
        FailoverProxy.from_settings(Settings.from_mapping({"dfs.nameservices": NS}))
    assert err.value.key == "dfs.ha.namenodes.ns1"
    assert "dfs.client.failover.zookeeper.quorum" in str(err.value)


def test_resolving_from_zookeeper_settings() -> None:
    s = Settings.from_mapping({
        "dfs.nameservices": NS,
        "dfs.client.failover.zookeeper.quorum": "zk1:2181, zk2:2181/chroot",
        "dfs.client.failover.zookeeper.auth": "digest:reader:pw",
        "ha.zookeeper.auth": "digest:namenodes:secret",
        "ha.zookeeper.session-timeout.ms": 3000,
    })
    assert s.client.zookeeper_quorum == "zk1:2181,zk2:2181/chroot"
    assert s.client.observer_reads  # observers are found, so reads go to them by default
    resolver = ZooKeeperResolver.from_settings(s)
    try:
        # The client's own credentials, never the NameNodes' ha.zookeeper.auth.
        assert resolver.zk.auth == (("digest", "reader:pw"),)
        assert resolver.client.auth_data == {("digest", "reader:pw")}
        assert resolver.zk.session_timeout == 3.0
        assert resolver.paths.working == "/hanamenode/ns1"
        assert resolver.describe() == "ZooKeeper zk1:2181,zk2:2181/chroot /hanamenode/ns1"
    finally:
        resolver.client.close()
    configured = Settings.from_mapping({
        "dfs.nameservices": NS,
        "dfs.client.failover.zookeeper.quorum": "zk1:2181",
        "dfs.client.failover.proxy.provider.ns1": "ConfiguredFailoverProxyProvider",
    })
    assert not configured.client.observer_reads


def test_hafs_names_a_bad_zookeeper_option() -> None:
    kazoo_levels = [logging.getLogger(n).level for n in ("kazoo", "kazoo.client")]
    result = CliRunner().invoke(hafs, ["--zookeeper", "zk1", "ls", "/"])
    # hafs quietens its resolver's kazoo logger alone: kazoo's own stays as it was for
    # everything else in the process (test_conf logs through kazoo.client after it).
    assert logging.getLogger(KAZOO_LOGGER).level == logging.ERROR
    assert [logging.getLogger(n).level for n in ("kazoo", "kazoo.client")] == kazoo_levels
    assert result.exit_code == 2
    assert "--zookeeper" in result.output and "expected host:port" in result.output
    both = CliRunner().invoke(hafs, ["--zookeeper", "zk1:2181", "-fs", "nn:8020", "ls", "/"])
    assert both.exit_code == 2 and "give one, not both" in both.output, both.output


# -- the proxy following a resolver -----------------------------------------------------------


class HandResolver:
    """A resolver whose views the test hands in (``publish``)."""

    def __init__(self) -> None:
        self.on_change: Callable[[Resolution], None] | None = None
        self.closed = False

    def start(self, on_change: Callable[[Resolution], None]) -> None:
        self.on_change = on_change

    def wait(self, timeout: float) -> Resolution | None:
        return None

    def describe(self) -> str:
        return "ZooKeeper by hand"

    def close(self) -> None:
        self.closed = True

    def publish(self, resolution: Resolution) -> None:
        assert self.on_change is not None
        self.on_change(resolution)


POLICY = RetryPolicy(max_attempts=3, sleep_base=0.0, sleep_max=0.0, rpc_timeout=0.05)


def test_the_proxy_follows_the_resolutions() -> None:
    resolver = HandResolver()
    proxy = FailoverProxy((), POLICY, resolver=resolver, sessions=False)
    with proxy:
        with pytest.raises(NamenodeUnavailableError) as err:
            _ = proxy.current
        assert "ZooKeeper by hand names no NameNode (no answer yet)" in str(err.value)
        resolver.publish(Resolution((at("nn1"), at("nn2")), at("nn1")))
        assert proxy.current == at("nn1") and proxy.namenodes == (at("nn1"), at("nn2"))
        resolver.publish(Resolution((at("nn2"), at("nn1"), at("nn3")), at("nn2")))
        assert proxy.current == at("nn2")
        # A view without an active keeps the current NameNode while it is still named...
        resolver.publish(Resolution((at("nn1"), at("nn2")), None))
        assert proxy.current == at("nn2")
        # ...and moves to the first named when it is not.
        resolver.publish(Resolution((at("nn3"),), None))
        assert proxy.current == at("nn3")
    assert resolver.closed


def test_a_call_with_nothing_resolved_says_why() -> None:
    resolver = HandResolver()
    with FailoverProxy((), POLICY, resolver=resolver, sessions=False) as proxy:
        resolver.publish(Resolution(problem="ZooKeeper refuses this client read access"))
        fs = HaFsClient(proxy)
        with pytest.raises(NamenodeUnavailableError) as err:
            fs.mkdirs("/a")
    message = str(err.value)
    assert "no active NameNode answered in 3 attempt(s)" in message, message
    assert "ZooKeeper refuses this client read access" in message, message


def test_a_call_waits_for_the_first_resolution() -> None:
    resolver = HandResolver()
    patient = RetryPolicy(max_attempts=1, sleep_base=0.0, sleep_max=0.0, rpc_timeout=30.0)
    with FailoverProxy((), patient, resolver=resolver, sessions=False) as proxy:
        asked: list[str] = []

        def invoke(stub: object, header: object, timeout: float) -> str:
            asked.append(proxy.current.nn_id)
            return "answer"

        threading.Timer(0.05, resolver.publish, [Resolution((at("nn2"),), at("nn2"))]).start()
        assert proxy.call("probe", invoke) == "answer"
        assert asked == ["nn2"]
