"""``members/<nn>``: an ephemeral znode per NameNode whose elector runs, so an operator (and
``hactl``) sees which NameNodes take part in the election (docs/architecture.md §6.2).

kazoo's ``Party``/``ShallowParty`` would name the znodes ``<uuid>__party__`` and join once;
we want one znode per NameNode id, created again in every new session, and one left by an
earlier run of the same NameNode (whose session has not expired yet) replaced::

    members = Membership(client, paths, "nn1", info, wait, log)
    members.keep(session_id)      # each health-monitor tick while connected; cheap when done
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError

from zk.paths import ActiveNodeInfo, ElectorPaths

__all__ = ["Membership"]


class Membership:
    """``wait(result, what)`` waits for a kazoo async result with a time bound (raising
    ``TimeoutError``) and returns its value."""

    def __init__(
        self,
        client: KazooClient,
        paths: ElectorPaths,
        nn_id: str,
        info: ActiveNodeInfo,
        wait: Callable[[Any, str], Any],
        log: Any,
    ) -> None:
        self.client = client
        self.paths = paths
        self.path = paths.member(nn_id)
        self.info = info
        self._wait = wait
        self._log: structlog.typing.FilteringBoundLogger = log
        self.session: int | None = None
        """The session the znode was created in (None: not registered)."""
        self._problem: str | None = None

    def keep(self, session: int) -> None:
        """Register in ``session`` unless already done; a failure is logged once per distinct
        problem and retried at the next call."""
        if session == self.session:
            return
        try:
            registered = self._register(session)
        except NoNodeError:
            problem = f"{self.paths.members} does not exist: run `hactl format-zk`"
        except (KazooException, TimeoutError) as exc:
            problem = f"{type(exc).__name__} {exc}".strip()
        else:
            if registered:
                self.session, self._problem = session, None
                self._log.info("registered membership", path=self.path, session=hex(session))
            return
        if problem != self._problem:
            self._log.warning("membership not registered; retrying", problem=problem)
        self._problem = problem

    def _register(self, session: int) -> bool:
        try:
            self._wait(
                self.client.create_async(self.path, self.info.to_bytes(), ephemeral=True),
                "creating the membership znode",
            )
            return True
        except NodeExistsError:
            pass
        stat = self._wait(self.client.exists_async(self.path), "reading membership")
        if stat is None or stat.ephemeralOwner == session:
            return stat is not None
        # Left by an earlier run of this NameNode whose session has not expired yet.
        self._log.info("replacing a stale membership znode", path=self.path,
                       owner=hex(stat.ephemeralOwner))
        with contextlib.suppress(NoNodeError, BadVersionError):
            self._wait(self.client.delete_async(self.path, version=stat.version),
                       "deleting a stale membership znode")
        return False  # created at the next call
