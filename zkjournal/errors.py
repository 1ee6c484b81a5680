"""The ZooKeeper journal's errors (docs/architecture.md §9.2).

They sit in the QJM's hierarchy, so the NameNode treats both backends alike: a failed append
is a ``QJMError`` the edit log fails on, and a writer fenced by a newer epoch gets a
``QuorumException`` carrying the JournalNode's ``EpochError``, the class every layer above
(the edit log, ``hanamenode.transitions.journal_fenced``) reads as "fenced".
"""

from __future__ import annotations

from journalnode.errors import EpochError
from qjm.errors import QJMError, QuorumException

__all__ = ["ZKJournalError", "ZKJournalFencedError", "ZKJournalNotFormattedError", "fenced"]


class ZKJournalError(QJMError):
    """Something of the ZooKeeper journal is not as it must be: a malformed znode, a gap in
    the live log, a ZooKeeper call that failed. The message names the znode or the call."""


class ZKJournalNotFormattedError(ZKJournalError):
    """The journal's znodes do not exist, or hold another cluster's namespace."""


class ZKJournalFencedError(QuorumException):
    """A newer writer bumped the epoch znode: this writer may never append again."""


def fenced(uri: str, what: str, epoch: int, detail: str) -> ZKJournalFencedError:
    """The error of writer ``epoch`` whose ``what`` found the epoch znode moved on."""
    return ZKJournalFencedError(
        f"ZooKeeper journal {uri} fenced writer epoch {epoch} ({what})",
        exceptions={uri: EpochError(detail)},
    )
