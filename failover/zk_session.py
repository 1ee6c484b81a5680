"""The elector's ZooKeeper session (docs/architecture.md §6.2): kazoo's client, the watcher
that follows its state and counts the sessions lost, and neutral mode's clock
(docs/consistency.md §6)::

    session = ElectorSession(settings, "nn1", log, nn_state=lambda: fsn.state,
                             on_change=on_change)
    session.start()                       # connects in the background
    session.connected, session.state, session.sessions_lost
    session.wait(session.client.exists_async(path), "reading the lock")
    session.working_znode_exists(paths.working)   # False, logged, until `hactl format-zk`
    session.znodes_protected(paths)       # the HA znodes carry ha.zookeeper.acl (applied)
    session.close(10.0)                   # ends the session: its ephemeral znodes go
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kazoo.exceptions import KazooException, NoAuthError, NoNodeError
from kazoo.protocol.states import KazooState

from conf import Settings
from failover.neutral import NeutralClock
from hanamenode.ha import HAState
from zk.client import (
    SessionWatcher,
    client_from_settings,
    close_client,
    describe_acls,
    stored_acls,
)
from zk.paths import ElectorPaths

__all__ = ["ElectorSession"]

UNREACHABLE_WAIT = 0.1
"""How long stopping waits for a thread or the session's close without ZooKeeper."""


class ElectorSession:
    """Threads: ``start`` and ``close`` run in the owner's thread; kazoo's session listener
    updates the neutral clock and calls ``on_change(state)``, which must not block; ``wait``
    runs in any thread."""

    def __init__(
        self,
        settings: Settings,
        nn_id: str,
        log: Any,
        *,
        nn_state: Callable[[], HAState],
        on_change: Callable[[KazooState], None],
    ) -> None:
        self.client = client_from_settings(settings)
        self._auth = settings.zk.auth
        self._protected_session: int | None = None
        self.op_timeout = max(5.0, settings.zk.session_timeout)
        """How long a request made outside the lock is waited for."""
        self.neutral = NeutralClock(log)
        self._log = log
        self._nn_state = nn_state
        self._on_change = on_change
        self._started = False
        self.watcher = SessionWatcher(self.client, on_change=self._changed,
                                      log_context={"nn": nn_id})

    @property
    def connected(self) -> bool:
        return self.watcher.connected

    @property
    def state(self) -> str:
        """kazoo's CONNECTED, SUSPENDED or LOST."""
        return str(self.watcher.state)

    @property
    def sessions_lost(self) -> int:
        return self.watcher.sessions_lost

    def start(self) -> None:
        self._started = True
        self.neutral.start()
        self.client.start_async()

    def _changed(self, state: KazooState) -> None:
        self.neutral.update(state == KazooState.CONNECTED, self._nn_state())
        self._on_change(state)

    def wait(self, result: Any, what: str) -> Any:
        """The value of a kazoo async result, waiting up to ``op_timeout``."""
        if not result.wait(self.op_timeout):
            raise TimeoutError(f"{what}: no answer from ZooKeeper in {self.op_timeout:g}s")
        return result.get(block=False)

    def working_znode_exists(self, path: str) -> bool:
        """Whether ZooKeeper is formatted for automatic failover (``hactl format-zk``); a
        missing znode is logged as an error, an unanswered check as a warning."""
        try:
            stat = self.wait(self.client.exists_async(path), "checking the working znode")
        except (KazooException, TimeoutError) as exc:
            self._log.warning("cannot check the working znode", error=f"{type(exc).__name__}")
            return False
        if stat is None:
            self._log.error(
                "ZooKeeper is not formatted for automatic failover: run `hactl format-zk`",
                missing=path,
            )
            return False
        return True

    def znodes_protected(self, paths: ElectorPaths) -> bool:
        """Whether the HA znodes (the working znode, the lock, ``members`` and the
        breadcrumb) carry the configured ACL (``ha.zookeeper.acl``, docs/operations.md §9.3),
        once per session. A znode with another ACL, from a tree made before the ACL was
        configured, gets this one (``setACL``: the tree is brought under it in place, logged
        with both ACLs). False, logged as an error naming the znode, when ZooKeeper refuses
        this session's credentials there or does not answer: the elector then stays out."""
        session = self.client.client_id
        if session is not None and session[0] == self._protected_session:
            return True
        wanted = list(self.client.default_acl)
        expected = stored_acls(wanted, self._auth)
        if expected is None:  # credentials other than digest: what ZooKeeper stores is its own
            return True
        for path in (paths.working, paths.lock, paths.members, paths.breadcrumb):
            try:
                found, _ = self.wait(self.client.get_acls_async(path), f"reading the ACL of {path}")
                if sorted(found) == expected:
                    continue
                self.wait(self.client.set_acls_async(path, wanted), f"setting the ACL of {path}")
            except NoNodeError:
                continue  # made with the configured ACL when it is made
            except NoAuthError:
                self._log.error(
                    "ZooKeeper refuses this NameNode's credentials on an HA znode: "
                    "ha.zookeeper.auth must match the ACL it carries (or, with every NameNode "
                    "stopped, `hactl format-zk --force` makes the tree again)",
                    znode=path,
                    configured_acl=describe_acls(wanted),
                )
                return False
            except (KazooException, TimeoutError) as exc:
                self._log.warning("cannot check the ACL of an HA znode", znode=path,
                                  error=f"{type(exc).__name__} {exc}")
                return False
            self._log.warning("applied the configured ACL to an HA znode that carried another",
                              znode=path, before=describe_acls(found),
                              after=describe_acls(expected))
        self._protected_session = session[0] if session is not None else None
        return True

    def join_timeout(self, timeout: float) -> float:
        """How long stopping waits for a thread: without ZooKeeper a thread blocked in a
        ZooKeeper request (kazoo queues them until it reconnects) would only wait for
        ZooKeeper; nothing it could still do needs waiting for (it checks ``stopping``
        before any step), so a NameNode stops promptly whatever ZooKeeper's state."""
        return timeout if self.connected else min(timeout, UNREACHABLE_WAIT)

    def close(self, timeout: float) -> None:
        """Stop following the state and close the session (waiting up to ``timeout``)."""
        self.watcher.close()
        if self._started:
            close_client(self.client, timeout)
