"""``ZooKeeperResolver`` against a real ZooKeeper, with the election znodes written by hand
(docs/operations.md §3.5): what it says before ``hactl format-zk``, and how it follows
members coming and going, the lock changing hands and the breadcrumb, through its watches.
tests/process/test_client_zk_resolution.py runs it against NameNodes' electors."""

from __future__ import annotations

import queue

from kazoo.client import KazooClient

from failover.controller import format_zk
from hadev.zookeeper import ZooKeeperServer
from hanamenode.client import NameNodeAddress, Resolution
from hanamenode.client.zk_resolver import ZooKeeperResolver
from tests.zk.test_zk import started, zk_settings, zookeeper
from zk.client import close_client
from zk.paths import ActiveNodeInfo, ElectorPaths

__all__ = ["zookeeper"]  # the module's real ZooKeeper, a fixture shared with test_zk


class Views:
    """The resolutions a resolver hands on, in order."""

    def __init__(self) -> None:
        self.seen: queue.Queue[Resolution] = queue.Queue()

    def next_where(self, what: str, check: object, timeout: float = 10.0) -> Resolution:
        """The first view (from now on) for which ``check(view)`` holds."""
        got: list[Resolution] = []
        while True:
            try:
                view = self.seen.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"no view where {what} within {timeout:g}s: {got}") from None
            got.append(view)
            if check(view):  # type: ignore[operator]
                return view


def at(nn: str) -> NameNodeAddress:
    return NameNodeAddress(nn, f"{nn}.example:8020")


def test_the_resolver_follows_the_election_znodes(zookeeper: ZooKeeperServer) -> None:
    settings = zk_settings(zookeeper, **{
        "ha.zookeeper.parent-znode": "/resolver",
        "dfs.client.failover.zookeeper.quorum": zookeeper.connect_string,
    })
    paths = ElectorPaths.from_settings(settings)
    views = Views()
    resolver = ZooKeeperResolver.from_settings(settings)
    resolver.start(views.seen.put)
    writer = started(KazooClient(zookeeper.connect_string))
    try:
        first = views.next_where("a problem", lambda v: v.problem)
        assert f"{paths.members} does not exist" in first.problem
        assert "`hactl format-zk`" in first.problem
        assert resolver.wait(0) == first

        format_zk(settings)  # the working znode and members; no lock before an elector
        views.next_where("nothing registered", lambda v: v == Resolution())

        def member(nn: str, ns: str = "ns1") -> None:
            writer.create(paths.member(nn), ActiveNodeInfo(ns, nn, at(nn).address).to_bytes(),
                          ephemeral=True)

        member("nn1")
        member("nn3")
        member("nn9", ns="other")  # another nameservice's: not ours
        writer.create(paths.member("junk"), b"not json", ephemeral=True)  # logged, left out
        views.next_where("two members", lambda v: v.namenodes == (at("nn1"), at("nn3")))

        # An elector queues: its lock znode names it. The first contender is the active.
        writer.create(f"{paths.lock}/b__lock__0000000002", b"nn2", ephemeral=True,
                      makepath=True)
        writer.create(f"{paths.lock}/a__lock__0000000003", b"nn1", ephemeral=True)
        member("nn2")
        view = views.next_where("nn2 active", lambda v: v.active == at("nn2"))
        assert view.namenodes == (at("nn2"), at("nn1"), at("nn3"))

        # It gives the lock up: the next contender holds it.
        writer.delete(f"{paths.lock}/b__lock__0000000002")
        views.next_where("nn1 active", lambda v: v.active == at("nn1"))

        # Nobody holds it: the breadcrumb's NameNode, at the breadcrumb's address when it
        # has no member znode (its session expired while it stayed active).
        writer.delete(f"{paths.lock}/a__lock__0000000003")
        writer.delete(paths.member("nn1"))
        writer.create(paths.breadcrumb, ActiveNodeInfo("ns1", "nn1", "10.0.0.1:8020").to_bytes())
        view = views.next_where(
            "the breadcrumb's active", lambda v: v.active == NameNodeAddress("nn1", "10.0.0.1:8020")
        )
        assert view.namenodes[1:] == (at("nn2"), at("nn3"))
    finally:
        resolver.close()
        close_client(writer)
