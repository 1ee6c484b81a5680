"""The JournalNode's error hierarchy and its one mapping to and from gRPC status codes.

The servicer turns a ``JournalError`` into a status with ``to_status``; the QJM client turns
the status back into the same exception class with ``from_rpc_error`` (a unary call's status)
or ``from_status`` (a JournalStream answer carries the same three parts), so a writer sees
``EpochError`` whether the Journal ran in-process (the simulator) or behind gRPC.
"""

from __future__ import annotations

import grpc

ERROR_CLASS_KEY = "hn-error-class"


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
    segment (design doc section 2.2)."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class JournalStateError(JournalError):
    """The request would break an invariant: overwrite or un-finalize a finalized segment,
    re-finalize with another end txid, or on-disk state that contradicts an accepted recovery."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class CorruptSegmentError(JournalError):
    """A finalized segment failed its checksum or framing; the message names file and offset."""

    code = grpc.StatusCode.DATA_LOSS


class StorageError(JournalError):
    """The local storage could not be read or written (disk full, permissions, lock held)."""

    code = grpc.StatusCode.UNAVAILABLE


class StorageLockedError(StorageError):
    """Another live JournalNode holds ``in_use.lock`` of this storage directory."""


class JournalUnavailableError(JournalError):
    """The JournalNode could not be reached or did not answer in time: not a verdict of its
    Journal, so the caller may retry it or count it as a failed quorum member."""

    code = grpc.StatusCode.UNAVAILABLE


_BY_NAME: dict[str, type[JournalError]] = {
    cls.__name__: cls
    for cls in (
        JournalError,
        InvalidRequestError,
        JournalNotFormattedError,
        JournalNotEmptyError,
        NamespaceMismatchError,
        EpochError,
        JournalOutOfSyncError,
        JournalStateError,
        CorruptSegmentError,
        StorageError,
        StorageLockedError,
        JournalUnavailableError,
    )
}


def to_status(exc: JournalError) -> tuple[grpc.StatusCode, str, tuple[tuple[str, str], ...]]:
    """Status code, details and trailing metadata that carry ``exc`` over gRPC."""
    return exc.code, str(exc), ((ERROR_CLASS_KEY, type(exc).__name__),)


def from_status(
    code: grpc.StatusCode | None, details: str, error_class: str | None = None
) -> Exception:
    """The exception for a failed status: the JournalError class named ``error_class`` (what
    ``to_status`` put in the trailing metadata), else ``JournalUnavailableError``."""
    if error_class is not None and error_class in _BY_NAME:
        return _BY_NAME[error_class](details)
    return JournalUnavailableError(f"{code.name if code else 'RPC failed'}: {details}")


def from_rpc_error(err: grpc.RpcError) -> Exception:
    """The JournalError a servicer raised, rebuilt from its status; other failures
    (unreachable node, deadline) come back as ``JournalUnavailableError``."""
    call = err if isinstance(err, grpc.Call) else None
    if call is None:
        return from_status(None, str(err))
    error_class = None
    for key, value in call.trailing_metadata() or ():
        if key == ERROR_CLASS_KEY:
            error_class = str(value)
    return from_status(call.code(), call.details(), error_class)


def status_code(value: int) -> grpc.StatusCode:
    """The StatusCode whose number is ``value`` (UNKNOWN for a number gRPC does not define)."""
    return _CODES.get(value, grpc.StatusCode.UNKNOWN)


_CODES = {code.value[0]: code for code in grpc.StatusCode}
