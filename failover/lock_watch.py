"""Whether the lock znode the active holds was deleted (``hactl format-zk --force``, an
operator), learnt from a kazoo watch (docs/architecture.md §6.2). Kazoo drops watches when
the connection drops, so the watch is disarmed then and armed again once connected::

    watch = LockNodeWatch(client, wake)      # wake(): rouse the elector thread
    watch.watch("/hanamenode/ns1/ActiveStandbyElectorLock/_c_...-lock-0000000003")
    watch.keep_armed(connected=True)         # each poll while active
    watch.lost                               # True once the znode was found deleted
    watch.stop()
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.protocol.states import EventType, WatchedEvent

__all__ = ["LockNodeWatch"]

log = structlog.get_logger(__name__)


class LockNodeWatch:
    """Threads: ``watch``, ``keep_armed`` and ``stop`` run in the elector thread; the watch
    and result callbacks in kazoo's callback thread, ``disarm`` in the session listener.
    Those only set a flag and call ``wake``: they never block. A callback for a path no
    longer watched (an earlier tenure) changes nothing."""

    def __init__(self, client: KazooClient, wake: Callable[[], None]) -> None:
        self._client = client
        self._wake = wake
        self._path: str | None = None
        self._armed = False
        self.lost = False
        """The watched znode was found deleted."""

    def watch(self, path: str) -> None:
        """Watch ``path`` from the next ``keep_armed`` on. A watch left armed by an earlier
        tenure watches another znode (whose deletion, our own give-back, is ignored): it
        does not count."""
        self.lost = False
        self._armed = False
        self._path = path

    def stop(self) -> None:
        self._path = None

    def disarm(self) -> None:
        """The connection dropped, and kazoo with it the watch."""
        self._armed = False

    def keep_armed(self, connected: bool) -> None:
        path = self._path
        if not self._armed and connected and path is not None:
            self._arm(path)

    def _arm(self, path: str) -> None:
        self._armed = True

        def on_event(event: WatchedEvent) -> None:
            if path != self._path:
                return
            if event.type == EventType.DELETED:
                self.lost = True
            else:
                self._armed = False
            self._wake()

        def on_result(result: Any) -> None:
            if path != self._path:
                return
            try:
                exists = result.get(block=False) is not None
            except KazooException as exc:
                # Armed again at the elector's next poll while connected; the lock is not
                # taken as lost on a failed question.
                log.warning(
                    "could not check the lock znode; its watch is re-armed at the next poll",
                    path=path,
                    error=f"{type(exc).__name__}: {exc}",
                )
                self._armed = False
            else:
                if not exists:
                    self.lost = True
            self._wake()

        self._client.exists_async(path, watch=on_event).rawlink(on_result)
