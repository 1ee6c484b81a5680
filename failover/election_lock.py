"""``ActiveStandbyElectorLock`` as the elector uses it (docs/architecture.md §6.1-6.2): kazoo's
``Lock`` recipe (one ephemeral sequential child per contender), who holds it (kazoo's
``Lock.contenders()``), and this NameNode's own znode in it, checked and given back::

    election = ElectionLock(client, paths.lock, "nn1", watcher, wait, log, wake=wake,
                            max_delay=2.5)
    lock = election.contender()       # a fresh kazoo Lock for one round
    lock.acquire()                    # blocking; lock.cancel() from another thread ends it
    election.owns(stat_of_our_znode)  # is it this session's?
    election.watch                    # LockNodeWatch: was our znode deleted while active?
    election.give_back(lock, stopping, pause, backoff=1.0)
    election.holder()                 # "nn2", or None when nobody holds it
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NoNodeError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.lock import Lock
from kazoo.retry import KazooRetry

from failover.breadcrumb import Wait
from failover.lock_watch import LockNodeWatch
from hanamenode.errors import ServiceFailedError
from zk.client import SessionWatcher

__all__ = ["ElectionLock", "ElectorLock"]

_POLL = 0.1
"""How often a wait for a deletion looks at ``stopping`` (seconds)."""


class ElectorLock(Lock):
    """kazoo's Lock whose retries (while disconnected) back off to at most ``max_delay``
    instead of a minute, and end at once when the wait is cancelled."""

    def __init__(self, client: KazooClient, path: str, identifier: str, max_delay: float):
        super().__init__(client, path, identifier)
        self._retry = KazooRetry(
            max_tries=None,
            delay=0.05,
            backoff=2,
            max_delay=max_delay,
            sleep_func=client.handler.sleep_func,
            interrupt=lambda: self.cancelled,
        )


class ElectionLock:
    """The election lock of one NameNode's elector.

    ``wait(result, what)`` waits for a kazoo async result with a time bound (raising
    ``TimeoutError``). Threads: ``contender``, ``owns`` and ``give_back`` run in the elector
    thread; ``holder`` in any thread (RPC, health monitor, elector): it makes its blocking
    requests in a thread of kazoo's handler and waits a bounded time.
    """

    def __init__(
        self,
        client: KazooClient,
        path: str,
        nn_id: str,
        watcher: SessionWatcher,
        wait: Wait,
        log: Any,
        *,
        wake: Callable[[], None],
        max_delay: float,
    ) -> None:
        self.client = client
        self.path = path
        self.nn_id = nn_id
        self.watcher = watcher
        self.max_delay = max_delay
        self._wait = wait
        self._log = log
        self.watch = LockNodeWatch(client, wake)
        """The watch on the znode held while active (``wake`` rouses the elector thread)."""

    def contender(self) -> ElectorLock:
        return ElectorLock(self.client, self.path, self.nn_id, max_delay=self.max_delay)

    def node_path(self, lock: Lock) -> str:
        return f"{self.path}/{lock.node}"

    def owns(self, stat: ZnodeStat | None) -> bool:
        """Whether a lock znode with this ``stat`` belongs to the current session."""
        client_id = self.client.client_id
        return stat is not None and client_id is not None and stat.ephemeralOwner == client_id[0]

    def holder(self) -> str | None:
        """Who holds the lock (the first contender), None when nobody does;
        ServiceFailedError when ZooKeeper does not answer."""
        lock = Lock(self.client, self.path, self.nn_id)
        lock.assured_path = True  # never create the lock path: `hactl format-zk` does
        # contenders() makes blocking requests, which kazoo queues while disconnected: run
        # it in a thread of the client's handler and wait a bounded time.
        result = self.client.handler.async_result()

        def list_contenders() -> None:
            try:
                result.set(lock.contenders())
            except Exception as exc:
                result.set_exception(exc)

        self.client.handler.spawn(list_contenders)
        try:
            contenders = self._wait(result, "listing the lock")
        except TimeoutError as exc:
            raise ServiceFailedError(str(exc)) from None
        except NoNodeError:
            return None
        except KazooException as exc:
            raise ServiceFailedError(
                f"cannot read the election lock {self.path}: {type(exc).__name__} {exc}"
            ) from None
        return contenders[0] or None if contenders else None

    def give_back(
        self,
        lock: Lock,
        stopping: Callable[[], bool],
        pause: Callable[[float], None],
        backoff: float,
    ) -> None:
        """Delete our lock znode and wait until it is gone (or the session ended, or we are
        stopping: closing the session deletes it). Never gives up while the session lives:
        a lock znode left behind would block every contender, ourselves included."""
        node = lock.node
        if not node:
            return
        path = f"{self.path}/{node}"
        while not stopping():
            result = self.client.delete_async(path)
            while not result.wait(_POLL):
                if stopping():
                    return
            try:
                result.get(block=False)
            except NoNodeError:
                pass
            except ConnectionClosedError:
                return
            except (ConnectionLoss, SessionExpiredError, OperationTimeoutError) as exc:
                self._log.info("lock znode not deleted yet; retrying", node=node,
                               error=type(exc).__name__)
                self.watcher.wait_connected(0.5)
                continue
            except KazooException as exc:
                self._log.error("cannot delete the lock znode; retrying", node=node,
                                error=f"{type(exc).__name__} {exc}")
                pause(backoff)
                continue
            lock.node = None
            lock.is_acquired = False
            self._log.info("gave the election lock back", node=node)
            return
