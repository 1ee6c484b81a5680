"""The JournalNode's error hierarchy and its one mapping to and from gRPC status codes.

The servicer turns a ``JournalError`` into a status with ``to_status``; the QJM client turns
the status back into the same exception class with ``from_rpc_error`` (a unary call's status)
or ``from_status`` (a JournalStream answer carries the same three parts), so a writer sees
``EpochError`` whether the Journal ran in-process (the simulator) or behind gRPC.
"""

from __future__ import annotations

import grpc

from conf.rpc import ERROR_CLASS_KEY as ERROR_CLASS_KEY
from conf.rpc import ErrorCodec
from conf.rpc import status_code as status_code


class JournalError(Exception):
    """Base of every error a Journal reports to a caller."""

    code = grpc.StatusCode.INTERNAL


class InvalidRequestError(JournalError):
    """The request itself is malformed: bad journal id, bad records, counts that disagree."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class JournalNotFormattedError(JournalError):
    """The journal has never been formatted on this JournalNode."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class JournalNotEmptyError(JournalError):
    """Format was asked of a journal that holds data, without force."""

    code = grpc.StatusCode.ALREADY_EXISTS


class JournalInUseError(JournalError):
    """Format was asked of a journal a writer holds (a live writer called it recently)."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class NamespaceMismatchError(JournalError):
    """The caller's cluster id is not the one this journal was formatted with."""

    code = grpc.StatusCode.PERMISSION_DENIED


class EpochError(JournalError):
    """The caller's epoch is stale (below the promise), or newEpoch was not strictly higher.

    This is the fence: a writer that sees it has been superseded and must stop.
    """

    code = grpc.StatusCode.FAILED_PRECONDITION


class JournalOutOfSyncError(JournalError):
    """The writer and this JournalNode disagree: a txid gap, a replayed IPC serial, no open
    segment, another segment open. The writer marks this logger out of sync until its next
    segment (HDFS-3077 §2.2)."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class JournalStateError(JournalError):
    """The request would break an invariant: overwrite or un-finalize a finalized segment,
    re-finalize with another end txid, or on-disk state that contradicts an accepted recovery."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class JournalInconsistentError(JournalStateError):
    """This JournalNode's own durable records contradict each other: the segment on disk is
    not the one its accepted recovery record describes, or is missing. No correct sequence of
    calls leads here (Hadoop asserts the same in prepareRecovery), so it is a bug, not a
    refusal of the caller: the node takes no part in the recovery until an operator looks."""

    code = grpc.StatusCode.INTERNAL


class CorruptSegmentError(JournalError):
    """A finalized segment failed its checksum or framing; the message names file and offset."""

    code = grpc.StatusCode.DATA_LOSS


class SegmentDigestError(CorruptSegmentError):
    """A finalized segment's records no longer have the md5 recorded when it was finalized
    (docs/protocol.md §8.7): its records each pass their checksum, but the copy changed. The
    message names the file and both digests; the copy is moved aside, never served."""


class StorageError(JournalError):
    """The local storage could not be read or written (disk full, permissions, lock held).

    ``errno`` is the failed system call's errno when there was one (ENOSPC: disk full).
    """

    code = grpc.StatusCode.UNAVAILABLE

    def __init__(self, message: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno


class StorageLockedError(StorageError):
    """Another live JournalNode holds ``in_use.lock`` of this storage directory."""


class JournalSyncingError(JournalError):
    """This JournalNode formatted itself to rejoin and lacks segments it may have
    acknowledged before; it does not vote in elections or recoveries until it has synced
    them (docs/protocol.md §10.3). Like an unreachable node, it just does not count."""

    code = grpc.StatusCode.UNAVAILABLE


class AccessDeniedError(JournalError):
    """The caller's certificate does not carry the role the call needs (conf.guard)."""

    code = grpc.StatusCode.PERMISSION_DENIED


class JournalUnavailableError(JournalError):
    """The JournalNode could not be reached or did not answer in time: not a verdict of its
    Journal, so the caller may retry it or count it as a failed quorum member."""

    code = grpc.StatusCode.UNAVAILABLE


CODEC: ErrorCodec[JournalError] = ErrorCodec(
    (
        JournalError,
        InvalidRequestError,
        JournalNotFormattedError,
        JournalNotEmptyError,
        JournalInUseError,
        NamespaceMismatchError,
        EpochError,
        JournalOutOfSyncError,
        JournalStateError,
        JournalInconsistentError,
        CorruptSegmentError,
        SegmentDigestError,
        StorageError,
        StorageLockedError,
        JournalSyncingError,
        AccessDeniedError,
        JournalUnavailableError,
    ),
    JournalUnavailableError,
)


def to_status(exc: JournalError) -> tuple[grpc.StatusCode, str, tuple[tuple[str, str], ...]]:
    """Status code, details and trailing metadata that carry ``exc`` over gRPC."""
    return CODEC.to_status(exc)


def from_status(
    code: grpc.StatusCode | None, details: str, error_class: str | None = None
) -> JournalError:
    """The exception for a failed status: the JournalError class named ``error_class`` (what
    ``to_status`` put in the trailing metadata), else ``JournalUnavailableError``."""
    return CODEC.from_status(code, details, error_class)


def from_rpc_error(err: grpc.RpcError) -> JournalError:
    """The JournalError a servicer raised, rebuilt from its status; other failures
    (unreachable node, deadline) come back as ``JournalUnavailableError``."""
    return CODEC.from_rpc_error(err)
