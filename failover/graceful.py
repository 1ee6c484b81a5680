"""Graceful failover to this NameNode (``hactl failover nn1 nn2``; HDFS
``gracefulFailoverToYou``), as steps over the other NameNodes, apart from ZooKeeper::

    previous = graceful_failover(
        "nn2", holder="nn1", others=["nn1", "nn3"], cede=cede, rejoin=rejoin,
        wait_won=lambda: elector.wait_attempt(seq, timeout), log=log, within=timeout,
    )

1. The lock holder cedes (steps down, deletes its own breadcrumb, gives the lock back and
   stays out for a while); if it cannot, the failover fails and nothing else was changed.
2. Every other NameNode cedes too (best effort), so that this one is next in the queue.
3. Wait until this NameNode's elector made an attempt to become active.
4. Whatever happened, the ceded NameNodes are asked to rejoin the election.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from hanamenode.errors import NamenodeError, ServiceFailedError

__all__ = ["Attempt", "graceful_failover"]

Attempt = tuple[bool, str]
"""(succeeded, message) of this NameNode's attempt to become active."""


def graceful_failover(
    nn_id: str,
    *,
    holder: str | None,
    others: Iterable[str],
    cede: Callable[[str], None],
    rejoin: Callable[[str], None],
    wait_won: Callable[[], Attempt | None],
    log: Any,
    within: float,
    why_not_won: Callable[[], str] = lambda: "",
) -> str:
    """Returns the previous holder ("" if none); ServiceFailedError naming the step that
    failed. ``cede(nn)``/``rejoin(nn)`` raise NamenodeError (or UnknownNameNodeError for an
    unknown holder) when the NameNode does not answer; ``wait_won()`` returns None when no
    attempt was made within ``within`` seconds; ``why_not_won()`` adds to that message."""
    ceded: list[str] = []
    if holder is not None and holder != nn_id:
        try:
            cede(holder)
        except Exception as exc:
            raise ServiceFailedError(
                f"Unable to get the active NameNode {holder} to cede: {exc}"
            ) from None
        ceded.append(holder)
    for other in others:
        if other in (nn_id, holder):
            continue
        try:
            cede(other)
            ceded.append(other)
        except NamenodeError as exc:
            log.warning("another NameNode did not cede", other=other, error=str(exc))
    attempt = wait_won()
    for peer in ceded:
        try:
            rejoin(peer)
        except NamenodeError as exc:
            log.warning("could not ask a NameNode to rejoin the election", other=peer,
                        error=str(exc))
    if attempt is None:
        raise ServiceFailedError(
            f"Unable to become active: NameNode {nn_id} did not win the election "
            f"within {within:g}s{why_not_won()}"
        )
    succeeded, message = attempt
    if not succeeded:
        raise ServiceFailedError(f"Unable to become active: {message}")
    return holder or ""
