"""ZooKeeper ACLs on the HA znodes (issue 25 item 6, docs/operations.md §9.3), against a real
ZooKeeper:

- ``hadev``'s cluster authenticates its electors with a generated digest secret and puts an
  ACL on the lock, the breadcrumb and ``members``: an anonymous kazoo client can neither
  delete the lock's znode nor write (or make) the breadcrumb, while the electors still elect
  and fail over;
- a tree made before an ACL was configured (open to the world) is brought under it in place
  by the first elector that starts with one; an elector whose credentials the tree refuses
  stays out of the election and says why;
- ``ha.zookeeper.auth`` and ``ha.zookeeper.acl`` read ``@/path`` files (Hadoop's
  indirection), so the XML files need not hold the secret.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import ACL, Id, Permissions, make_digest_acl_credential
from structlog.testing import capture_logs

from conf import ConfigError, Settings
from failover.controller import format_zk
from failover.zk_session import ElectorSession
from hadev.devcluster import DevCluster
from hadev.zookeeper import ZooKeeperServer
from hanamenode.ha import HAState
from tests.zk.test_zk import started, zk_settings, zookeeper
from zk.client import client_from_settings, close_client
from zk.paths import ActiveNodeInfo, ElectorPaths

__all__ = ["zookeeper"]  # the module's real ZooKeeper, a fixture shared with test_zk

pytestmark = pytest.mark.timeout(240)


def acl_settings(zk: ZooKeeperServer, parent: str, **extra: object) -> Settings:
    return zk_settings(zk, **{"ha.zookeeper.parent-znode": parent, **extra})


def session(settings: Settings) -> ElectorSession:
    s = ElectorSession(
        settings, "nn1", structlog.get_logger("test"),
        nn_state=lambda: HAState.STANDBY, on_change=lambda _state: None,
    )
    s.start()
    assert s.watcher.wait_connected(10)
    return s


def test_an_anonymous_client_cannot_touch_the_lock_or_the_breadcrumb(tmp_path: Path) -> None:
    with DevCluster(tmp_path, session_timeout=1.0, quorum_timeout="4s") as dev:
        first = dev.wait_active()
        settings = dev.admin_settings()
        paths = ElectorPaths.from_settings(settings)
        assert settings.zk.auth and settings.zk.auth[0][0] == "digest"
        assert dev.zk_auth_path.stat().st_mode & 0o077 == 0
        assert "zk-auth" in dev.conf_path.read_text()
        secret = dev.zk_auth_path.read_text().strip().rpartition(":")[2]
        assert secret not in dev.conf_path.read_text()
        owner = started(client_from_settings(settings))
        anonymous = started(KazooClient(dev.zookeeper.connect_string))
        try:
            (contender, *_) = sorted(owner.get_children(paths.lock))
            crumb, _ = owner.get(paths.breadcrumb)
            assert ActiveNodeInfo.from_bytes(crumb).namenode_id == first
            user, _, password = settings.zk.auth[0][1].partition(":")
            ours = Id("digest", make_digest_acl_credential(user, password))
            # Every permission for the NameNodes; r for the clients' identity (§3.5).
            ((_, reading),) = settings.client.zookeeper_auth
            reader = Id("digest", make_digest_acl_credential(*reading.split(":", 1)))
            only_us = sorted([ACL(Permissions.ALL, ours), ACL(Permissions.READ, reader)])
            for path in (paths.working, paths.lock, paths.members, paths.breadcrumb):
                assert sorted(owner.get_acls(path)[0]) == only_us, path

            with pytest.raises(NoAuthError):
                anonymous.delete(f"{paths.lock}/{contender}")
            with pytest.raises(NoAuthError):
                anonymous.set(paths.breadcrumb, ActiveNodeInfo("ns1", "evil", "x:1").to_bytes())
            with pytest.raises(NoAuthError):
                anonymous.delete(paths.breadcrumb)
            with pytest.raises(NoAuthError):
                anonymous.get_children(paths.lock)
            with pytest.raises(NoAuthError):
                anonymous.create(f"{paths.members}/evil", b"", ephemeral=True)
            assert owner.exists(f"{paths.lock}/{contender}") is not None
        finally:
            close_client(owner)
            close_client(anonymous)

        # The electors, authenticated, still fail over: the standby takes the lock and the
        # breadcrumb, fencing the killed active it names.
        dev.kill(first)
        second = dev.wait_active(exclude=first)
        crumb_owner = started(client_from_settings(settings))
        try:
            crumb, _ = crumb_owner.get(paths.breadcrumb)
            assert ActiveNodeInfo.from_bytes(crumb).namenode_id == second
        finally:
            close_client(crumb_owner)


def test_an_open_tree_is_brought_under_the_configured_acl(zookeeper: ZooKeeperServer) -> None:
    """The upgrade: a tree formatted, and used, before any ACL was configured."""
    open_settings = acl_settings(zookeeper, "/upgrade")
    paths = ElectorPaths.from_settings(open_settings)
    format_zk(open_settings)
    world = [ACL(Permissions.ALL, Id("world", "anyone"))]
    anonymous = started(KazooClient(zookeeper.connect_string))
    anonymous.ensure_path(paths.lock)
    anonymous.create(paths.breadcrumb, ActiveNodeInfo("ns1", "nn2", "h:1").to_bytes())
    assert anonymous.get_acls(paths.breadcrumb)[0] == world

    digest = make_digest_acl_credential("hdfs", "s3cret")
    secured = acl_settings(
        zookeeper, "/upgrade",
        **{"ha.zookeeper.auth": "digest:hdfs:s3cret", "ha.zookeeper.acl": f"digest:{digest}:rwcda"},
    )
    elector = session(secured)
    try:
        with capture_logs() as logs:
            assert elector.znodes_protected(paths)
        applied = [e for e in logs if e["event"].startswith("applied the configured ACL")]
        assert sorted(e["znode"] for e in applied) == sorted(
            [paths.working, paths.lock, paths.members, paths.breadcrumb]
        ), logs
        assert all(e["before"] == "world:anyone:cdrwa" for e in applied), applied
        only_hdfs = [ACL(Permissions.ALL, Id("digest", digest))]
        for path in (paths.working, paths.lock, paths.members, paths.breadcrumb):
            assert elector.client.get_acls(path)[0] == only_hdfs, path
        with pytest.raises(NoAuthError):
            anonymous.set(paths.breadcrumb, b"rewritten")
        with pytest.raises(NoAuthError):
            anonymous.delete(paths.breadcrumb)
        with capture_logs() as again:  # once per session, and nothing left to apply
            assert elector.znodes_protected(paths)
        assert not again
    finally:
        elector.close(5)
        close_client(anonymous)


def test_an_elector_whose_credentials_the_tree_refuses_stays_out(
    zookeeper: ZooKeeperServer,
) -> None:
    alice = acl_settings(zookeeper, "/alices", **{"ha.zookeeper.auth": "digest:alice:a"})
    format_zk(alice)  # creator-only: alice's digest
    paths = ElectorPaths.from_settings(alice)
    bob = session(acl_settings(zookeeper, "/alices", **{"ha.zookeeper.auth": "digest:bob:b"}))
    try:
        with capture_logs() as logs:
            assert not bob.znodes_protected(paths)
        (error,) = [e for e in logs if e["log_level"] == "error"]
        assert error["znode"] == paths.working
        assert "ha.zookeeper.auth must match" in error["event"]
    finally:
        bob.close(5)


def test_auth_and_acl_are_read_from_files(tmp_path: Path, zookeeper: ZooKeeperServer) -> None:
    auth_file, acl_file = tmp_path / "zk-auth", tmp_path / "zk-acl"
    auth_file.write_text("digest:carol:from-a-file\n")
    digest = make_digest_acl_credential("carol", "from-a-file")
    acl_file.write_text(f"digest:{digest}:rwcda\n")
    settings = acl_settings(
        zookeeper, "/files",
        **{"ha.zookeeper.auth": f"@{auth_file}", "ha.zookeeper.acl": f"@{acl_file}"},
    )
    assert settings.zk.auth == (("digest", "carol:from-a-file"),)
    assert settings.zk.acl == f"digest:{digest}:rwcda"
    format_zk(settings)
    carol = started(client_from_settings(settings))
    try:
        paths = ElectorPaths.from_settings(settings)
        assert carol.get_acls(paths.working)[0] == [ACL(Permissions.ALL, Id("digest", digest))]
    finally:
        close_client(carol)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("@relative/file", "expected @/absolute/path"),
        ("@/no/such/file", "cannot read /no/such/file"),
    ],
)
def test_a_bad_indirection_names_the_key(value: str, says: str) -> None:
    for key in ("ha.zookeeper.auth", "ha.zookeeper.acl"):
        with pytest.raises(ConfigError) as info:
            Settings.from_mapping({key: value})
        assert key in str(info.value) and says in str(info.value), info.value
