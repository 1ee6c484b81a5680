"""The ZooKeeper launcher (a real server from Debian's jars), the kazoo client factory
(chroot, auth, ACLs on what we create) and the znode layout."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, NoAuthError
from kazoo.security import ACL, Id, Permissions, make_digest_acl_credential

from conf import ConfigError, Settings
from failover.controller import format_zk
from hadev.zookeeper import ZooKeeperServer, find_java, stop_pid_file, zookeeper_classpath
from zk.client import client_from_settings, close_client, split_quorum
from zk.errors import ZooKeeperNotInstalledError
from zk.paths import ActiveNodeInfo, ElectorPaths

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    with ZooKeeperServer(tmp_path_factory.mktemp("zk"), tick_time_ms=100) as zk:
        yield zk


def started(client: KazooClient) -> KazooClient:
    client.start(timeout=10)
    return client


def zk_settings(zk: ZooKeeperServer, **extra: object) -> Settings:
    return Settings.from_mapping(
        {
            "dfs.nameservices": "ns1",
            "dfs.ha.automatic-failover.enabled": "true",
            "ha.zookeeper.quorum": zk.connect_string,
            "ha.zookeeper.session-timeout.ms": "2000",
            **extra,
        }
    )


def test_launcher_starts_serves_and_stops(tmp_path: Path) -> None:
    pid_file = tmp_path / "run" / "zk.pid"
    zk = ZooKeeperServer(tmp_path / "zk", tick_time_ms=100, pid_file=pid_file)
    with zk:
        assert zk.is_serving()
        assert zk.four_letter_word("ruok") == "imok"
        assert "Mode: standalone" in zk.four_letter_word("srvr")
        assert pid_file.read_text() == f"{zk.pid}\n"
        config = zk.config_path.read_text().splitlines()
        for line in ("tickTime=100", "clientPortAddress=127.0.0.1", "admin.enableServer=false",
                     "4lw.commands.whitelist=ruok,srvr,mntr", "maxSessionTimeout=2000"):
            assert line in config
        client = started(KazooClient(zk.connect_string, timeout=2.0))
        try:
            client.create("/launcher", b"x")
        finally:
            close_client(client)
        zk.pause()
        assert not zk.is_serving(timeout=0.3)
        zk.resume()
        assert zk.is_serving(timeout=2.0)
        pid = zk.pid
    assert not zk.running
    assert not pid_file.exists()
    assert not zk.is_serving(timeout=0.3)
    assert not Path(f"/proc/{pid}").exists() or b"zookeeper" not in Path(
        f"/proc/{pid}/cmdline"
    ).read_bytes()
    # Its data stays in its own directory.
    assert (tmp_path / "zk" / "data" / "version-2").is_dir()


def test_stop_by_pid_file(tmp_path: Path) -> None:
    pid_file = tmp_path / "zk.pid"
    zk = ZooKeeperServer(tmp_path / "zk", tick_time_ms=100, pid_file=pid_file).start()
    try:
        zk.pause()  # a paused server is stopped too (SIGCONT first)
        assert stop_pid_file(pid_file, timeout=10)
        assert zk.proc is not None
        assert zk.proc.wait(10) in (143, -signal.SIGTERM, -signal.SIGKILL)
        assert not pid_file.exists()
        assert not stop_pid_file(pid_file)
        pid_file.write_text(f"{os.getpid()}\n")  # not a ZooKeeper: left alone
        assert not stop_pid_file(pid_file)
    finally:
        zk.stop()


def test_missing_java_or_jars_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ZOOKEEPER_HOME", raising=False)
    with pytest.raises(ZooKeeperNotInstalledError) as info:
        zookeeper_classpath(debian_jar=tmp_path / "zookeeper.jar")
    message = str(info.value)
    assert f"{tmp_path / 'zookeeper.jar'} is missing and ZOOKEEPER_HOME is not set" in message
    assert "apt-get install -y zookeeper default-jre-headless" in message
    assert "not zookeeperd" in message

    monkeypatch.setenv("ZOOKEEPER_HOME", str(tmp_path))
    with pytest.raises(ZooKeeperNotInstalledError, match=r"holds no zookeeper\*\.jar"):
        zookeeper_classpath()
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "zookeeper-3.9.2.jar").write_bytes(b"")
    (tmp_path / "lib" / "slf4j-api.jar").write_bytes(b"")
    assert zookeeper_classpath() == os.pathsep.join(
        [str(tmp_path / "lib" / "slf4j-api.jar"), str(tmp_path / "lib" / "zookeeper-3.9.2.jar")]
    )
    monkeypatch.delenv("ZOOKEEPER_HOME")

    with pytest.raises(ZooKeeperNotInstalledError, match="default-jre-headless"):
        find_java(str(tmp_path / "no-java"))
    server = ZooKeeperServer(tmp_path / "zk", java=str(tmp_path / "no-java"))
    with pytest.raises(ZooKeeperNotInstalledError, match="no Java runtime"):
        server.start()
    assert not (tmp_path / "zk").exists()  # failed before taking a port or a directory


def test_format_zk_asks_again_when_the_connection_is_lost(
    zookeeper: ZooKeeperServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A fresh-clone run's dev cluster failed to start: format-zk's session missed a ping
    # under load and its next call got ConnectionLoss. Each call now is asked again.
    lost: list[str] = []

    def once_lost(method: Callable[..., object]) -> Callable[..., object]:
        def call(self: KazooClient, *args: object, **kwargs: object) -> object:
            if method.__name__ not in lost:
                lost.append(method.__name__)
                raise ConnectionLoss()
            return method(self, *args, **kwargs)

        return call

    monkeypatch.setattr(KazooClient, "exists", once_lost(KazooClient.exists))
    monkeypatch.setattr(KazooClient, "ensure_path", once_lost(KazooClient.ensure_path))
    settings = zk_settings(zookeeper, **{"ha.zookeeper.parent-znode": "/lossy"})
    assert format_zk(settings) == "/lossy/ns1"
    assert lost == ["exists", "ensure_path"]
    monkeypatch.undo()
    client = started(KazooClient(zookeeper.connect_string))
    try:
        assert client.exists("/lossy/ns1/members") is not None
    finally:
        close_client(client)


def test_open_acl_without_auth(zookeeper: ZooKeeperServer) -> None:
    settings = zk_settings(zookeeper, **{"ha.zookeeper.parent-znode": "/open"})
    format_zk(settings)
    client = started(KazooClient(zookeeper.connect_string))
    try:
        acls, _ = client.get_acls("/open/ns1/members")
        assert acls == [ACL(Permissions.ALL, Id("world", "anyone"))]
    finally:
        close_client(client)


def test_digest_auth_makes_znodes_creator_only(zookeeper: ZooKeeperServer) -> None:
    settings = zk_settings(
        zookeeper,
        **{"ha.zookeeper.parent-znode": "/private", "ha.zookeeper.auth": "digest:alice:secret"},
    )
    format_zk(settings)
    alice = started(client_from_settings(settings))
    stranger = started(KazooClient(zookeeper.connect_string))
    try:
        alice.create("/private/ns1/members/nn1", b"x", ephemeral=True)
        digest = make_digest_acl_credential("alice", "secret")
        for path in ("/private/ns1", "/private/ns1/members", "/private/ns1/members/nn1"):
            acls, _ = alice.get_acls(path)
            assert acls == [ACL(Permissions.ALL, Id("digest", digest))], path
        assert alice.get("/private/ns1/members/nn1")[0] == b"x"
        with pytest.raises(NoAuthError):
            stranger.get("/private/ns1/members/nn1")
        with pytest.raises(NoAuthError):
            stranger.create("/private/ns1/ActiveBreadCrumb", b"not yours")
    finally:
        close_client(alice)
        close_client(stranger)


def test_explicit_acl(zookeeper: ZooKeeperServer) -> None:
    digest = make_digest_acl_credential("bob", "pw")
    settings = zk_settings(
        zookeeper,
        **{
            "ha.zookeeper.parent-znode": "/common",
            "ha.zookeeper.auth": "digest:bob:pw",
            "ha.zookeeper.acl": f"digest:{digest}:rwcda,world:anyone:r",
        },
    )
    format_zk(settings)
    bob = started(client_from_settings(settings))
    reader = started(KazooClient(zookeeper.connect_string))
    try:
        acls, _ = bob.get_acls("/common/ns1")
        assert sorted(acls) == sorted(
            [
                ACL(Permissions.ALL, Id("digest", digest)),
                ACL(Permissions.READ, Id("world", "anyone")),
            ]
        )
        assert reader.get_children("/common/ns1") == ["members"]
        with pytest.raises(NoAuthError):
            reader.create("/common/ns1/x", b"")
    finally:
        close_client(bob)
        close_client(reader)


def test_chroot_from_the_quorum(zookeeper: ZooKeeperServer) -> None:
    settings = zk_settings(
        zookeeper, **{"ha.zookeeper.quorum": f"{zookeeper.connect_string}/teams/ha"}
    )
    assert split_quorum(settings.zk.quorum) == (zookeeper.connect_string, "/teams/ha")
    assert format_zk(settings) == "/hanamenode/ns1"
    root = started(KazooClient(zookeeper.connect_string))
    chrooted = started(client_from_settings(settings))
    try:
        assert root.exists("/teams/ha/hanamenode/ns1/members") is not None
        assert chrooted.get_children("/hanamenode/ns1") == ["members"]
    finally:
        close_client(root)
        close_client(chrooted)


def test_quorum_and_paths() -> None:
    assert split_quorum("h1:2181,h2:2181") == ("h1:2181,h2:2181", None)
    assert split_quorum("h1:2181/") == ("h1:2181", None)
    with pytest.raises(ConfigError):
        Settings.from_mapping({"ha.zookeeper.quorum": "h1:2181/a//b"})
    paths = ElectorPaths("/", "ns1")
    assert paths.working == "/ns1"
    paths = ElectorPaths("/hanamenode", "ns1")
    assert (paths.lock, paths.breadcrumb, paths.member("nn2")) == (
        "/hanamenode/ns1/ActiveStandbyElectorLock",
        "/hanamenode/ns1/ActiveBreadCrumb",
        "/hanamenode/ns1/members/nn2",
    )
    info = ActiveNodeInfo("ns1", "nn1", "127.0.0.1:8020")
    assert ActiveNodeInfo.from_bytes(info.to_bytes()) == info
    with pytest.raises(ValueError, match="not an ActiveNodeInfo"):
        ActiveNodeInfo.from_bytes(b"\x08\x01garbage")
