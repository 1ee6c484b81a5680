"""Where the failover znodes live (docs/architecture.md §6.1), and what the breadcrumb holds.

Everything of one nameservice is under its *working znode* ``<parent_znode>/<nameservice>``
(below the chroot of ``ha.zookeeper.quorum``, if it has one)::

    /hanamenode/ns1/ActiveStandbyElectorLock   kazoo Lock: one ephemeral sequential child per
                                               contender; the lowest holds the lock
    /hanamenode/ns1/ActiveBreadCrumb           persistent: who became active last (JSON)
    /hanamenode/ns1/members/nn1                ephemeral: nn1 runs an elector (JSON)

    paths = ElectorPaths.from_settings(settings)
    client.get(paths.breadcrumb)
    ActiveNodeInfo.from_bytes(data).namenode_id

The names of the lock and the breadcrumb are HDFS's (``ActiveStandbyElectorLock``,
``ActiveBreadCrumb``), so an operator who knows ``hdfs zkfc`` finds them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from conf import Settings

__all__ = ["BREADCRUMB_NAME", "LOCK_NAME", "MEMBERS_NAME", "ActiveNodeInfo", "ElectorPaths"]

LOCK_NAME = "ActiveStandbyElectorLock"
BREADCRUMB_NAME = "ActiveBreadCrumb"
MEMBERS_NAME = "members"


def join(parent: str, *names: str) -> str:
    """``join("/", "a", "b")`` is ``/a/b``; ``join("/x", "a")`` is ``/x/a``."""
    return "/".join((parent.rstrip("/"), *names))


@dataclass(frozen=True, slots=True)
class ElectorPaths:
    """The znodes of one nameservice's election under ``parent_znode``."""

    parent_znode: str
    nameservice: str

    @classmethod
    def from_settings(cls, settings: Settings) -> ElectorPaths:
        return cls(settings.zk.parent_znode, settings.nameservice)

    @property
    def working(self) -> str:
        """``<parent>/<nameservice>``: ``hactl format-zk`` creates it, the electors need it."""
        return join(self.parent_znode, self.nameservice)

    @property
    def lock(self) -> str:
        return join(self.working, LOCK_NAME)

    @property
    def breadcrumb(self) -> str:
        return join(self.working, BREADCRUMB_NAME)

    @property
    def members(self) -> str:
        return join(self.working, MEMBERS_NAME)

    def member(self, nn_id: str) -> str:
        return join(self.members, nn_id)


@dataclass(frozen=True, slots=True)
class ActiveNodeInfo:
    """What the breadcrumb and a member znode say about a NameNode (HDFS ``ActiveNodeInfo``):
    enough to fence it without the configuration of whoever wrote it."""

    nameservice: str
    namenode_id: str
    address: str
    """``host:port`` of its HAServiceProtocol (the NameNode's RPC address)."""

    def to_bytes(self) -> bytes:
        return json.dumps(
            {"nameservice": self.nameservice, "namenode_id": self.namenode_id,
             "address": self.address},
            sort_keys=True,
        ).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> ActiveNodeInfo:
        """ValueError naming what is wrong when ``data`` is not what ``to_bytes`` wrote."""
        try:
            fields = json.loads(data.decode())
            info = cls(
                str(fields["nameservice"]), str(fields["namenode_id"]), str(fields["address"])
            )
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ValueError(f"not an ActiveNodeInfo ({exc}): {data[:100]!r}") from None
        if not info.namenode_id:
            raise ValueError(f"ActiveNodeInfo without a namenode id: {data[:100]!r}")
        return info
