"""The errors of ``failover`` that stay on this side of an RPC (``hactl``, ``format-zk``).

What the elector refuses over HAServiceProtocol (cede, graceful failover) is a
``hanamenode.errors.NamenodeError`` instead, so that it travels through the NameNode's one
status mapping and ``hactl`` rebuilds the same class.
"""

from __future__ import annotations

__all__ = [
    "FailoverError",
    "FailoverFailedError",
    "FencingFailedError",
    "FormatDeniedError",
    "UnknownNameNodeError",
    "ZooKeeperUnavailableError",
]


class FailoverError(Exception):
    """Base of the errors of ``failover``."""


class UnknownNameNodeError(FailoverError, ValueError):
    """An id that is not a NameNode of the nameservice (``hactl`` prints it as HDFS does:
    "Illegal argument: Unable to determine service address for namenode 'nn9'")."""

    def __init__(self, nn_id: str, known: tuple[str, ...] = ()) -> None:
        super().__init__(f"Unable to determine service address for namenode '{nn_id}'")
        self.nn_id = nn_id
        self.known = known


class FailoverFailedError(FailoverError):
    """A manual or graceful failover did not complete; the message names the step."""


class FencingFailedError(FailoverError):
    """Neither the graceful fence nor any fencing method made the old active step down."""


class FormatDeniedError(FailoverError):
    """``format-zk`` found the working znode and was not allowed to clear it."""


class ZooKeeperUnavailableError(FailoverError):
    """ZooKeeper could not be reached (or refused us) within the timeout."""
