"""The QJM client's error hierarchy (HDFS-3077 §2.11 and §5.1.2).

A writer that cannot reach a quorum must stop writing, exactly as if its local edits directory
had failed: ``QuorumException`` (and its ``QuorumTimeout``) say which loggers answered and how
the others failed, so one line in the NameNode log explains why it aborted. ``RecoveryError``
is the recovery's sanity checks (HDFS-3077 §2.9): it means the JournalNodes' states contradict the
protocol's invariants, and recovery must not proceed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class QJMError(Exception):
    """Base of every error raised by the QJM client."""


class QuorumException(QJMError):
    """A quorum call could not reach its quorum; carries every logger's outcome.

    ``successes`` maps logger -> result, ``exceptions`` maps logger -> the exception it raised.
    The message lists both, ordered by logger so two runs print the same line::

        Got too many exceptions to achieve quorum size 2/3 for newEpoch(5). 1 successful
        responses: 127.0.0.1:3. 2 exceptions thrown: 127.0.0.1:1: EpochError: ...;
        127.0.0.1:2: TimeoutError: timed out
    """

    def __init__(
        self,
        simple_message: str,
        successes: Mapping[Any, object] | None = None,
        exceptions: Mapping[Any, BaseException] | None = None,
    ) -> None:
        self.simple_message = simple_message
        self.successes: dict[Any, object] = dict(successes or {})
        self.exceptions: dict[Any, BaseException] = dict(exceptions or {})
        super().__init__(_format(simple_message, self.successes, self.exceptions))

    def __reduce__(self) -> tuple[object, ...]:
        # The default would call cls(full_message) and lose the per-logger outcomes; the Spark
        # soak job pickles failures across processes.
        return (type(self), (self.simple_message, self.successes, self.exceptions))


class QuorumTimeout(QuorumException):
    """The deadline passed before the quorum call decided; carries the outcomes seen so far."""


class RecoveryError(QJMError):
    """A recovery sanity check failed: the JournalNodes' answers break a protocol invariant.

    For example two finalized copies of one segment with different lengths (HDFS-3077
    §2.8: every finalized copy has one length and one content), or a chosen recovery
    length that would drop a txid some JournalNode knows was committed.
    """


def describe_exception(exc: BaseException) -> str:
    """``"EpochError: epoch 3 is less than the last promised epoch 4"``, or the bare class name."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _format(
    simple_message: str,
    successes: Mapping[Any, object],
    exceptions: Mapping[Any, BaseException],
) -> str:
    parts = [simple_message]
    if successes:
        names = ", ".join(sorted(str(k) for k in successes))
        parts.append(f"{len(successes)} successful responses: {names}")
    ordered = sorted(exceptions.items(), key=lambda item: str(item[0]))
    thrown = "; ".join(f"{k}: {describe_exception(e)}" for k, e in ordered)
    parts.append(f"{len(exceptions)} exceptions thrown" + (f": {thrown}" if thrown else ""))
    return ". ".join(parts)
