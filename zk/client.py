"""kazoo clients made from the configuration, and the plumbing that follows their session.

docs/architecture.md §6.1 and docs/operations.md §9: hosts and an optional chroot
(``ha.zookeeper.quorum`` ``h1:2181,h2:2181/chroot``), the session timeout, digest authentication
(``ha.zookeeper.auth``) and the ACL of every znode we create (``ha.zookeeper.acl``; when it
is not set, ``world:anyone:cdrwa`` without authentication and creator-only ``auth::cdrwa``
with it, as Hadoop's ``ZKUtil`` advises)::

    client = client_from_settings(settings)
    watcher = SessionWatcher(client)           # state, how long suspended, sessions lost
    client.start(timeout=settings.zk.session_timeout)
    client.create(paths.breadcrumb, data)      # carries the configured ACL
    ...
    close_client(client)

Kazoo calls listeners from its own thread, which must never block; ``SessionWatcher`` only
records what happened and wakes whoever waits.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence

import structlog
from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState
from kazoo.retry import KazooRetry
from kazoo.security import (
    ACL,
    CREATOR_ALL_ACL,
    OPEN_ACL_UNSAFE,
    Id,
    make_acl,
    make_digest_acl_credential,
)

from conf import ConfigError, Settings, ZKSettings

__all__ = [
    "SessionWatcher",
    "acl_list",
    "client_from_settings",
    "close_client",
    "describe_acls",
    "make_client",
    "split_quorum",
    "stored_acls",
]

log = structlog.get_logger(__name__)

ACL_KEY = "ha.zookeeper.acl"


def split_quorum(quorum: str) -> tuple[str, str | None]:
    """``("h1:2181,h2:2181", "/chroot")`` from ``"h1:2181,h2:2181/chroot"`` (no chroot: None).

    ZooKeeper's connect string puts the chroot after the last host; ``/`` alone is no chroot.
    """
    hosts, slash, chroot = quorum.strip().partition("/")
    if not hosts:
        raise ConfigError("no ZooKeeper hosts", key="ha.zookeeper.quorum")
    if not slash or not chroot.strip("/"):
        return hosts, None
    return hosts, "/" + chroot.strip("/")


def acl_list(zk: ZKSettings, *, acl_explicit: bool = True) -> list[ACL]:
    """The ACL of every znode we create.

    ``acl_explicit`` says whether ``zk.acl`` was set in the configuration: when it was not and
    ``zk.auth`` names credentials, the znodes belong to their creator (``auth::cdrwa``), so
    that another client without the credentials cannot take the lock or rewrite the
    breadcrumb; with no credentials they are open (``world:anyone:cdrwa``).
    """
    if not acl_explicit:
        return list(CREATOR_ALL_ACL if zk.auth else OPEN_ACL_UNSAFE)
    acls = []
    for item in zk.acl.split(","):
        scheme, _, rest = item.strip().partition(":")
        ident, _, perms = rest.rpartition(":")
        p = perms.lower()
        acls.append(
            make_acl(
                scheme,
                ident,
                read="r" in p,
                write="w" in p,
                create="c" in p,
                delete="d" in p,
                admin="a" in p,
            )
        )
    return acls


def make_client(
    zk: ZKSettings,
    *,
    acl_explicit: bool = True,
    chroot: bool = True,
    logger: logging.Logger | None = None,
) -> KazooClient:
    """A kazoo client (not started) for ``zk``: hosts and chroot, session timeout, auth, ACL.

    ``chroot=False`` connects above the chroot (``hactl format-zk`` creates the chroot
    znode that way); ``logger`` replaces kazoo's own (``kazoo.client``), so one client's
    connection messages can be told, and quietened, apart. Reconnection is retried forever,
    backing off to at most a quarter of the session timeout, so a client finds a restarted
    server before its session expires.
    """
    if not zk.quorum:
        raise ConfigError("not set: automatic failover needs ZooKeeper", key="ha.zookeeper.quorum")
    hosts, chroot_path = split_quorum(zk.quorum)
    connect = hosts + (chroot_path if chroot and chroot_path else "")
    return KazooClient(
        hosts=connect,
        timeout=zk.session_timeout,
        auth_data=list(zk.auth) or None,
        default_acl=acl_list(zk, acl_explicit=acl_explicit),
        logger=logger,
        connection_retry=KazooRetry(
            max_tries=-1,
            delay=0.05,
            backoff=2,
            max_jitter=0.2,
            max_delay=max(0.25, zk.session_timeout / 4),
        ),
    )


def admin_retry(client: KazooClient, deadline: float) -> KazooRetry:
    """A retry for an admin command's ZooKeeper calls (``hactl format-zk``): a lost
    connection (a ping answered late on a loaded machine, a server restarting) is asked
    again, backing off, for up to ``deadline`` seconds, then ``RetryFailedError`` (a
    KazooException). The calls it wraps must be idempotent: ``retry(fn, *args)``."""
    return KazooRetry(
        max_tries=-1,
        delay=0.05,
        backoff=2,
        max_jitter=0.1,
        max_delay=1.0,
        deadline=deadline,
        sleep_func=client.handler.sleep_func,
    )


def client_from_settings(settings: Settings, *, chroot: bool = True) -> KazooClient:
    """``make_client`` for the configuration: ACL explicit iff ``ha.zookeeper.acl`` is set."""
    return make_client(settings.zk, acl_explicit=ACL_KEY in settings.values, chroot=chroot)


def close_client(client: KazooClient, timeout: float = 10.0) -> bool:
    """Close the session (its ephemeral znodes go at once) and free the client's sockets,
    waiting at most ``timeout`` seconds; True if it closed in time.

    Never raises. While ZooKeeper is unreachable kazoo's ``stop`` can block for many seconds
    (it waits for its connection thread, up to the session timeout and more); then it goes on
    in a daemon thread, and the server expires the session after the session timeout. So a
    NameNode stops promptly whatever ZooKeeper's state.
    """

    def close() -> None:
        try:
            client.stop()
        except Exception as exc:
            log.warning("ZooKeeper client did not stop cleanly", error=repr(exc))
        try:
            client.close()
        except Exception as exc:
            log.warning("ZooKeeper client did not close cleanly", error=repr(exc))

    closer = threading.Thread(target=close, name="zk-close", daemon=True)
    closer.start()
    closer.join(timeout)
    if closer.is_alive():
        log.info("ZooKeeper client still closing; the server expires its session",
                 timeout=timeout, zk_state=str(client.state))
        return False
    return True


class SessionWatcher:
    """What happened to one client's connection, recorded from kazoo's listener thread.

    ``state`` is kazoo's (CONNECTED, SUSPENDED: connection lost but the session may live,
    LOST: session expired or closed); ``sessions_lost`` counts LOST after a connection, so a
    caller that remembers it knows whether its session (and its ephemeral znodes) survived;
    ``suspended_for()`` is how long the connection has been down. ``on_change`` is called
    from kazoo's thread and must not block; ``log_context`` is bound to its log lines::

        watcher = SessionWatcher(client, on_change=lambda state: wake.set())
        generation = watcher.sessions_lost
        ...
        if watcher.sessions_lost != generation or watcher.suspended_for() > timeout:
            step_down()
    """

    def __init__(
        self,
        client: KazooClient,
        on_change: Callable[[KazooState], None] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        log_context: Mapping[str, object] | None = None,
    ) -> None:
        self.client = client
        self._log = log.bind(**(log_context or {}))
        self._on_change = on_change
        self._clock = clock
        self._cond = threading.Condition()
        self.state: KazooState = client.state
        self.sessions_lost = 0
        self._ever_connected = False
        self._suspended_at: float | None = None
        client.add_listener(self._listener)

    def _listener(self, state: KazooState) -> None:
        with self._cond:
            previous, self.state = self.state, state
            if state == KazooState.CONNECTED:
                self._ever_connected = True
                self._suspended_at = None
            elif state == KazooState.SUSPENDED:
                if self._suspended_at is None:
                    self._suspended_at = self._clock()
            elif state == KazooState.LOST:
                if self._ever_connected:
                    self.sessions_lost += 1
                self._suspended_at = None
            self._cond.notify_all()
        self._log.info(
            "ZooKeeper connection state changed",
            previous=str(previous),
            state=str(state),
            sessions_lost=self.sessions_lost,
        )
        if self._on_change is not None:
            self._on_change(state)

    @property
    def connected(self) -> bool:
        return self.state == KazooState.CONNECTED

    def suspended_for(self) -> float:
        """Seconds since the connection was lost (0.0 while connected or after LOST)."""
        at = self._suspended_at
        return 0.0 if at is None else self._clock() - at

    def wait_connected(self, timeout: float) -> bool:
        """Block until CONNECTED or ``timeout`` seconds; True if connected."""
        with self._cond:
            return self._cond.wait_for(lambda: self.state == KazooState.CONNECTED, timeout)

    def close(self) -> None:
        self.client.remove_listener(self._listener)


def describe_acls(acls: Sequence[ACL]) -> str:
    """``world:anyone:cdrwa``-style text of an ACL list (for logs and error messages)."""
    return ",".join(
        f"{acl.id.scheme}:{acl.id.id}:" + "".join(
            letter for letter, bit in (("c", 4), ("d", 8), ("r", 1), ("w", 2), ("a", 16))
            if acl.perms & bit
        )
        for acl in acls
    )


def stored_acls(acls: Sequence[ACL], auth: Sequence[tuple[str, str]]) -> list[ACL] | None:
    """What ZooKeeper stores for a znode created with ``acls`` by a client authenticated with
    ``auth``: an ``auth`` entry (``auth::cdrwa``) stands for each digest identity of the
    creator (``digest:user:base64-sha1``), sorted. None when that cannot be told here (an
    ``auth`` entry with credentials other than digest)."""
    stored: set[ACL] = set()
    for acl in acls:
        if acl.id.scheme != "auth":
            stored.add(acl)
            continue
        if not auth or any(scheme != "digest" for scheme, _ in auth):
            return None
        for _, credential in auth:
            user, _, password = credential.partition(":")
            stored.add(ACL(acl.perms, Id("digest", make_digest_acl_credential(user, password))))
    return sorted(stored)
