"""``ActiveBreadCrumb``: the persistent znode naming the last NameNode that became active
through the election (HDFS's breadcrumb; docs/architecture.md §6.2).

The lock is ephemeral and vanishes with its holder's session; the breadcrumb stays, so the
next winner knows whom to fence. Every write is version-checked against what was read while
holding the lock, so two NameNodes never both believe they wrote it::

    crumb = Breadcrumb(client, paths.breadcrumb, info)
    old, stat = crumb.read(wait)          # wait(result, what): how the caller waits on kazoo
    ...fence old if it names another NameNode...
    crumb.write(stat, wait)               # BreadcrumbChanged if someone wrote it meanwhile
    crumb.delete_own(wait)                # after a clean step-down: nothing to fence next time
    crumb.take_over(wait, fence)          # read, fence(old) if another NameNode, write
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.protocol.states import ZnodeStat

from zk.paths import ActiveNodeInfo

__all__ = ["Breadcrumb", "BreadcrumbChanged", "UnreadableBreadcrumb", "Wait"]

Wait = Callable[[Any, str], Any]
"""Waits for a kazoo async result (``what`` names the request for errors) and returns its
value or raises its error; the elector's waits also end when the session is lost."""


class BreadcrumbChanged(Exception):
    """The breadcrumb changed between our read and our write."""


class UnreadableBreadcrumb(Exception):
    """The breadcrumb holds something that is not an ``ActiveNodeInfo``."""


class Breadcrumb:
    def __init__(self, client: KazooClient, path: str, info: ActiveNodeInfo) -> None:
        self.client = client
        self.path = path
        self.info = info

    def read(self, wait: Wait) -> tuple[ActiveNodeInfo | None, ZnodeStat | None]:
        """Who the breadcrumb names (None, None when there is none)."""
        try:
            data, stat = wait(self.client.get_async(self.path), "reading the breadcrumb")
        except NoNodeError:
            return None, None
        if data is None:
            return None, stat
        try:
            return ActiveNodeInfo.from_bytes(bytes(data)), stat
        except ValueError as exc:
            raise UnreadableBreadcrumb(
                f"cannot read {self.path} ({exc}); after checking that no NameNode is "
                "active, `hactl format-zk --force` clears it"
            ) from None

    def write(self, read_stat: ZnodeStat | None, wait: Wait) -> None:
        """Name this NameNode: create it if ``read`` found none, else overwrite the version
        it read."""
        data = self.info.to_bytes()
        try:
            if read_stat is None:
                wait(self.client.create_async(self.path, data), "creating the breadcrumb")
            else:
                wait(self.client.set_async(self.path, data, version=read_stat.version),
                     "writing the breadcrumb")
        except (NodeExistsError, BadVersionError, NoNodeError) as exc:
            raise BreadcrumbChanged(
                f"the breadcrumb changed while this NameNode held the lock "
                f"({type(exc).__name__})"
            ) from None

    def take_over(self, wait: Wait, fence: Callable[[ActiveNodeInfo], str]) -> str:
        """What the lock holder does before its NameNode becomes active: read the
        breadcrumb, ``fence`` the NameNode it names if that is another one, and name this one
        (``write``). Returns what ``fence`` said, or "nothing to fence"."""
        old, stat = self.read(wait)
        fenced = "nothing to fence"
        if old is not None and old.namenode_id != self.info.namenode_id:
            fenced = fence(old)
        self.write(stat, wait)
        return fenced

    def delete_own(self, wait: Wait) -> bool:
        """Delete the breadcrumb if it names this NameNode (version-checked: one written by
        another NameNode meanwhile stays). True if deleted."""
        try:
            old, stat = self.read(wait)
            if old is None or stat is None or old.namenode_id != self.info.namenode_id:
                return False
            wait(self.client.delete_async(self.path, version=stat.version),
                 "deleting the breadcrumb")
        except (NoNodeError, BadVersionError):
            return False
        return True
