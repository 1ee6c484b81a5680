"""HA states and the small pure rules of the NameNode's HA machinery (docs/architecture.md §5.3).

``HAState`` is the NameNode's state (HDFS ``HAServiceState``); the transitions themselves are
``FSNamesystem.transition_to_active``/``transition_to_standby``. The decisions that need no
I/O live here as plain functions over plain values, so they are tested without a cluster:

- ``next_segment_txid``: where the new active's first segment starts, given what it has
  applied and where recovery says the log ends;
- ``min_txid_to_keep``: the purge bound — keep every edit that the newest image of *any*
  NameNode does not cover, and purge nothing while one NameNode's newest image is unknown.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from hanamenode.errors import InvalidArgumentError, ServiceFailedError

SEEN_TXID_KEY = "hn-seen-txid"
"""gRPC request metadata: the highest txid the client has seen (docs/consistency.md §9)."""
STATE_TXID_KEY = "hn-state-txid"
"""gRPC trailing metadata of every ClientProtocol answer: the txid of the state it reflects."""
ACTIVE_HINT_KEY = "hn-active"
"""gRPC trailing metadata of a session ended by a step-down: the id of the NameNode that
holds the election lock now, when one does (the client asks it first)."""
MAX_TXID = 2**63 - 1


def parse_txid(key: str, text: str) -> int:
    """A txid carried in gRPC metadata; InvalidArgumentError naming the key otherwise.

    >>> parse_txid(SEEN_TXID_KEY, "42")
    42
    """
    if not text.isascii() or not text.isdigit() or int(text) > MAX_TXID:
        raise InvalidArgumentError(
            f"{key}: expected a txid (an integer from 0 to {MAX_TXID}), got {text[:40]!r}"
        )
    return int(text)


class HAState(enum.Enum):
    INITIALIZING = "initializing"
    STANDBY = "standby"
    ACTIVE = "active"
    STOPPING = "stopping"
    OBSERVER = "observer"
    """Tails the log as a standby does and answers reads once it has applied the txid the
    client has seen; never elected, never made active (HDFS-12943, docs/consistency.md §9)."""


TAILING_STATES = frozenset({HAState.STANDBY, HAState.OBSERVER})
"""The states in which the NameNode tails the shared log and checkpoints."""


@dataclass(frozen=True, slots=True)
class ServiceStatus:
    """What ``GetServiceStatus`` reports (HDFS HAServiceStatus plus the txid and epoch)."""

    namenode_id: str
    state: HAState
    ready_to_become_active: bool
    not_ready_reason: str
    last_applied_txid: int
    epoch: int


@dataclass(frozen=True, slots=True)
class CheckpointInfo:
    """The newest fsimage of one NameNode."""

    txid: int
    md5: str
    size: int


def next_segment_txid(last_applied_txid: int, recovered_end_txid: int | None) -> int:
    """The first txid of the new active's first segment.

    ``recovered_end_txid`` is what ``recover_unfinalized_segments`` returned (None for a
    journal without segments). The namespace must have applied exactly the recovered log:
    behind it means edits are missing from the JournalNodes' finalized segments; ahead of it
    means this NameNode holds edits the log does not (never durable), and it must reload.
    """
    if recovered_end_txid is None:
        return last_applied_txid + 1
    if last_applied_txid < recovered_end_txid:
        raise ServiceFailedError(
            f"cannot become active: the log ends at txid {recovered_end_txid} but only "
            f"txids up to {last_applied_txid} could be read and applied"
        )
    if last_applied_txid > recovered_end_txid:
        raise ServiceFailedError(
            f"cannot become active: this NameNode applied txids up to {last_applied_txid}, "
            f"beyond the end of the recovered log ({recovered_end_txid})"
        )
    return recovered_end_txid + 1


def min_txid_to_keep(newest_images: Mapping[str, int | None]) -> int | None:
    """The purge bound over every NameNode's newest image txid (by NameNode id).

    Every NameNode must be able to restart from its newest image and replay the edits after
    it, and a standby tails from at or above its newest image, so the bound is the lowest
    newest-image txid plus one — never more. A NameNode whose newest image is unknown (None:
    unreachable) might need any edit: then nothing is purged (None).
    """
    if not newest_images or any(txid is None for txid in newest_images.values()):
        return None
    return min(txid for txid in newest_images.values() if txid is not None) + 1
