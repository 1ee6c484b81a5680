"""The elector's ZooKeeper session (docs/architecture.md §6.2): kazoo's client, the watcher
that follows its state and counts the sessions lost, and neutral mode's clock
(docs/consistency.md §6)::

    session = ElectorSession(settings, "nn1", log, nn_state=lambda: fsn.state,
                             on_change=on_change)
    session.start()                       # connects in the background
    session.connected, session.state, session.sessions_lost
    session.wait(session.client.exists_async(path), "reading the lock")
    session.working_znode_exists(paths.working)   # False, logged, until `hactl format-zk`
    session.close(10.0)                   # ends the session: its ephemeral znodes go
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kazoo.exceptions import KazooException
from kazoo.protocol.states import KazooState

from conf import Settings
from failover.neutral import NeutralClock
from hanamenode.ha import HAState
from zk.client import SessionWatcher, client_from_settings, close_client

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
