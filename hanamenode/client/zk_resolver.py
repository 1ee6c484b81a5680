"""The client finds its NameNodes in the election znodes (docs/operations.md §3.5,
docs/architecture.md §5.6), as the 2011 "Name Node Redundancy" design has clients do, instead
of a configured list.

What each NameNode's elector publishes (``zk.paths``, docs/architecture.md §6.1) is enough:

- ``ActiveStandbyElectorLock``: kazoo's lock, one ephemeral sequential child per contender,
  each holding its NameNode's id; the lowest is the holder, which is the active or is about
  to be (it is fencing the old one). Observers never queue for it;
- ``ActiveBreadCrumb``: the last NameNode made active through the election, with its
  address; while nobody holds the lock (an active whose session expired stays active until
  another NameNode wins, docs/architecture.md §6.2) it is the best guess;
- ``members/<nn>``: one ephemeral znode per NameNode whose elector runs (observers too),
  with its id and RPC address. Which members are observers the client asks them, as it does
  with a configured list (``FailoverProxy`` probes ``GetServiceStatus``).

Reading needs ZooKeeper's READ permission on those znodes and nothing else: the client never
writes, and it authenticates with its own credentials (``dfs.client.failover.zookeeper.auth``),
never the NameNodes' ``ha.zookeeper.auth``. With an ACL that grants only the NameNodes'
identity, ZooKeeper refuses the client, and the resolution says so naming the keys.

``resolve`` is the decision, pure; ``ZooKeeperResolver`` is the shell: one thread
``zk-resolver`` reads the three places, with one-shot watches that wake it again, and hands
each new ``Resolution`` to the failover proxy::

    resolver = ZooKeeperResolver.from_settings(settings)
    resolver.start(on_change)       # on_change(Resolution), from thread zk-resolver
    resolver.wait(5.0)              # the first Resolution (None if none yet)
    resolver.close()
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoAuthError, NoNodeError
from kazoo.protocol.states import KazooState

from conf import ConfigError, Settings
from conf.settings import ZKSettings
from hanamenode.client.resolver import NameNodeAddress, Resolution
from zk.client import SessionWatcher, close_client, make_client
from zk.paths import ActiveNodeInfo, ElectorPaths

__all__ = ["KAZOO_LOGGER", "QUORUM_KEY", "ZooKeeperResolver", "first_contender", "resolve"]

log = structlog.get_logger(__name__)

KAZOO_LOGGER = "hanamenode.client.zk_resolver.kazoo"
"""The stdlib logger of the resolver's kazoo client (its reconnect attempts, at warning)."""
QUORUM_KEY = "dfs.client.failover.zookeeper.quorum"
AUTH_KEY = "dfs.client.failover.zookeeper.auth"

RETRY_AFTER = 0.5
"""Seconds before reading again after a failed read (a watch or a reconnection wakes it
sooner)."""

CLOSE_WAIT = 2.0
"""Seconds ``close`` waits for kazoo to end the session."""

_LOCK_MARK = "__lock__"


def first_contender(children: Sequence[str]) -> str | None:
    """The lock's holder among its children: the lowest sequence number (kazoo's ``Lock``
    names them ``<uuid>__lock__<10 digits>``); None when there is none.

    >>> first_contender(["b__lock__0000000007", "a__lock__0000000012"])
    'b__lock__0000000007'
    """
    contenders = [c for c in children if _LOCK_MARK in c]
    return min(contenders, key=lambda c: c.rsplit(_LOCK_MARK, 1)[1], default=None)


def resolve(
    nameservice: str,
    holder: str | None,
    breadcrumb: ActiveNodeInfo | None,
    members: Sequence[ActiveNodeInfo],
) -> Resolution:
    """The NameNodes the election znodes name, the active first.

    ``holder`` is the id in the lock's first contender (None: nobody holds the lock), the
    active is that NameNode, else the one the breadcrumb names; its address is its member
    znode's, else the breadcrumb's when that names it (an active whose session expired has no
    member znode). Members of another nameservice are not ours and are left out.
    """
    ours = {m.namenode_id: m for m in members if m.nameservice == nameservice}
    crumb = breadcrumb if breadcrumb is not None and breadcrumb.nameservice == nameservice else None
    active_id = holder or (crumb.namenode_id if crumb is not None else None)
    active: NameNodeAddress | None = None
    if active_id is not None:
        if active_id in ours:
            active = NameNodeAddress(active_id, ours[active_id].address)
        elif crumb is not None and crumb.namenode_id == active_id:
            active = NameNodeAddress(active_id, crumb.address)
    others = tuple(
        NameNodeAddress(nn, ours[nn].address)
        for nn in sorted(ours)
        if active is None or nn != active.nn_id
    )
    return Resolution(others if active is None else (active, *others), active)


class _Unreadable(Exception):
    """A round could not read the election znodes; the message says why."""


class _Moved(Exception):
    """A znode went between two reads of a round: its watch fired, read again."""


class ZooKeeperResolver:
    """Follows the NameNodes of one nameservice in ZooKeeper (see the module docstring).
    ``zk`` holds the quorum, session timeout and the client's own credentials; ``paths`` the
    election znodes. It only reads: nothing it does creates or changes a znode."""

    def __init__(self, zk: ZKSettings, paths: ElectorPaths) -> None:
        if not zk.quorum:
            raise ConfigError("not set: the client needs a ZooKeeper to resolve from",
                              key=QUORUM_KEY)
        self.zk = zk
        self.paths = paths
        self.client: KazooClient = make_client(zk, logger=logging.getLogger(KAZOO_LOGGER))
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._first = threading.Event()
        self._lock = threading.Lock()
        self._resolution: Resolution | None = None
        self._on_change: Callable[[Resolution], None] = lambda _r: None
        self._watcher = SessionWatcher(self.client, on_change=self._state_changed,
                                       log_context={"resolver": paths.working})
        self._thread = threading.Thread(target=self._run, name="zk-resolver", daemon=True)
        self._log = log.bind(zookeeper=zk.quorum, znode=paths.working)

    @classmethod
    def from_settings(cls, settings: Settings) -> ZooKeeperResolver:
        """From ``dfs.client.failover.zookeeper.quorum`` and ``.auth``, the session timeout
        and parent znode of ``ha.zookeeper.*`` and the nameservice; the NameNodes'
        ``ha.zookeeper.auth`` is never used."""
        client = settings.client
        if not client.zookeeper_quorum:
            raise ConfigError("not set: the client needs a ZooKeeper to resolve from",
                              source=str(settings.source), key=QUORUM_KEY)
        zk = ZKSettings(
            quorum=client.zookeeper_quorum,
            session_timeout=settings.zk.session_timeout,
            parent_znode=settings.zk.parent_znode,
            auth=client.zookeeper_auth,
        )
        return cls(zk, ElectorPaths(settings.zk.parent_znode, settings.nameservice))

    def describe(self) -> str:
        return f"ZooKeeper {self.zk.quorum} {self.paths.working}"

    # -- lifetime ------------------------------------------------------------------------------

    def start(self, on_change: Callable[[Resolution], None]) -> None:
        """Connect (in the background: kazoo retries until ZooKeeper answers) and start
        following; ``on_change`` gets every new ``Resolution`` from thread ``zk-resolver``."""
        self._on_change = on_change
        self.client.start_async()
        self._thread.start()

    def wait(self, timeout: float) -> Resolution | None:
        self._first.wait(timeout)
        with self._lock:
            return self._resolution

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(5.0)
        self._watcher.close()
        # Never held up by an unreachable ZooKeeper: the server expires the session.
        close_client(self.client, timeout=CLOSE_WAIT)

    # -- kazoo's threads: record and wake, never block -----------------------------------------

    def _state_changed(self, state: KazooState) -> None:
        self._wake.set()

    def _watched(self, _event: Any) -> None:
        self._wake.set()

    # -- thread zk-resolver --------------------------------------------------------------------

    def _run(self) -> None:
        self._wake.set()  # the first round as soon as connected
        while not self._stop.is_set():
            self._wake.wait()
            if self._stop.is_set():
                return
            self._wake.clear()
            if not self._watcher.connected:
                # A state change (or close) wakes it; kazoo keeps reconnecting meanwhile.
                if not self._wake.wait(self.zk.session_timeout):
                    self._publish(None, f"no answer from {self.describe()}")
                continue
            try:
                resolution = self._read()
            except _Moved:
                self._wake.set()
                continue
            except _Unreadable as exc:
                self._publish(None, str(exc))
                self._stop.wait(RETRY_AFTER)
                self._wake.set()
                continue
            self._publish(resolution, "")

    def _read(self) -> Resolution:
        """One round: the lock's holder, the breadcrumb and the members, each with a watch
        that wakes the thread when it changes."""
        paths = self.paths
        path = paths.lock
        try:
            # The first elector makes the lock's znode: until then nobody holds it.
            children: list[str] = []
            if self.client.exists(paths.lock, watch=self._watched) is not None:
                children = self.client.get_children(paths.lock, watch=self._watched)
            first = first_contender(children)
            holder = None
            if first is not None:
                path = f"{paths.lock}/{first}"
                holder = self.client.get(path)[0].decode(errors="replace") or None
            path = paths.breadcrumb
            breadcrumb = None
            if self.client.exists(paths.breadcrumb, watch=self._watched) is not None:
                breadcrumb = self._info(paths.breadcrumb)
            path = paths.members
            members = []
            for child in sorted(self.client.get_children(paths.members, watch=self._watched)):
                path = paths.member(child)
                info = self._info(path)
                if info is not None:
                    members.append(info)
        except NoAuthError:
            raise _Unreadable(
                f"ZooKeeper refuses this client read access to {path} (NoAuth): "
                f"ha.zookeeper.acl must grant the identity of {AUTH_KEY} the r permission "
                "(docs/operations.md §3.5)"
            ) from None
        except NoNodeError:
            if path == paths.members:
                raise _Unreadable(
                    f"{path} does not exist: no election there (is automatic failover on, "
                    "`hactl format-zk` run, and are dfs.nameservices and "
                    "ha.zookeeper.parent-znode the NameNodes'?)"
                ) from None
            raise _Moved(path) from None
        except KazooException as exc:
            raise _Unreadable(f"reading {path}: {type(exc).__name__} {exc}".strip()) from None
        return resolve(paths.nameservice, holder, breadcrumb, members)

    def _info(self, path: str) -> ActiveNodeInfo | None:
        """The ``ActiveNodeInfo`` at ``path``; None, logged, when it holds something else."""
        data, _ = self.client.get(path)
        try:
            return ActiveNodeInfo.from_bytes(bytes(data or b""))
        except ValueError as exc:
            self._log.warning("ignored a znode that names no NameNode", path=path, error=str(exc))
            return None

    def _publish(self, resolution: Resolution | None, problem: str) -> None:
        """Keep and hand on a new resolution; with a ``problem``, the NameNodes known before
        stay (ZooKeeper down does not make the NameNodes go)."""
        with self._lock:
            previous = self._resolution
            if resolution is None:
                known = previous if previous is not None else Resolution()
                resolution = Resolution(known.namenodes, known.active, problem)
            changed = resolution != previous
            self._resolution = resolution
        self._first.set()
        if not changed:
            return
        if problem:
            self._log.warning("cannot resolve the NameNodes from ZooKeeper", problem=problem)
        else:
            self._log.info(
                "NameNodes resolved from ZooKeeper",
                active=None if resolution.active is None else str(resolution.active),
                namenodes=[str(nn) for nn in resolution.namenodes],
            )
        try:
            self._on_change(resolution)
        except Exception as exc:  # the proxy's bug must not stop the following
            self._log.exception("resolution listener failed", error=repr(exc))
