"""The NameNode's error hierarchy and its one mapping to and from gRPC status codes.

Every refusal a client can see is a ``NamenodeError`` subclass with its own status code. The
servicer turns it into a status with ``to_status``; the client (``hafs``, the failover proxy)
turns the status back into the same class with ``from_rpc_error``, so code written against
the in-process ``Namespace`` catches the same exceptions as code talking to a remote NameNode.

The class travels in the trailing metadata key ``hn-error-class`` (as the JournalNode's
errors do): status codes alone are too coarse (three different refusals are
FAILED_PRECONDITION), and the failover proxy must tell ``StandbyError`` (try the other
NameNode) from any other UNAVAILABLE.
"""

from __future__ import annotations

import grpc

from conf.rpc import ERROR_CLASS_KEY as ERROR_CLASS_KEY
from conf.rpc import ErrorCodec


class NamenodeError(Exception):
    """Base of every error the NameNode reports to a caller."""

    code = grpc.StatusCode.INTERNAL


class InvalidArgumentError(NamenodeError):
    """An argument is out of range: permission bits, replication, length, owner name."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class InvalidPathError(InvalidArgumentError):
    """A path is not absolute and normalized, or breaks a length/depth limit (``paths``)."""


class RetryCallMismatchError(InvalidArgumentError):
    """A mutation reused the (client id, call id) of a different, remembered call: a retry
    must repeat its call, and the first call's answer is no answer to another one."""


class PathNotFoundError(NamenodeError):
    """The path, or the parent a new inode needs, does not exist (HDFS FileNotFoundException)."""

    code = grpc.StatusCode.NOT_FOUND


class PathExistsError(NamenodeError):
    """The path to be created already exists (HDFS FileAlreadyExistsException)."""

    code = grpc.StatusCode.ALREADY_EXISTS


class ParentNotDirectoryError(NamenodeError):
    """An ancestor of the path to be created is a file (HDFS ParentNotDirectoryException)."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class PathIsDirectoryError(NamenodeError):
    """A file operation named a directory, e.g. create over an existing directory."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class DirectoryNotEmptyError(NamenodeError):
    """Non-recursive delete of a non-empty directory (HDFS PathIsNotEmptyDirectoryException)."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class InvalidOperationError(NamenodeError):
    """The operation can never succeed on this path, whatever the namespace holds: deleting
    the root directory, renaming the root, moving a directory into its own subtree."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class InvalidRenameError(InvalidOperationError):
    """A rename that is refused by its shape: the root, the same path, or into its own subtree."""


class StandbyError(NamenodeError):
    """This NameNode is not active; the client should try another one.

    The message follows HDFS's StandbyException ("Operation category WRITE is not supported in
    state standby"), which is what operators grep logs for.
    """

    code = grpc.StatusCode.UNAVAILABLE

    @classmethod
    def for_category(cls, category: str, state: str) -> StandbyError:
        return cls(f"Operation category {category} is not supported in state {state}")


class ObserverBehindError(StandbyError):
    """An observer has not applied the txid the client has seen within
    ``dfs.namenode.observer.read.max-wait.ms``: the client asks another NameNode (HDFS's
    ObserverRetryOnActiveException plays this part). A ``StandbyError``, so that a client
    that knows nothing of observers fails over as from a standby."""


class EditLogError(NamenodeError):
    """The edit could not be made durable (quorum of JournalNodes lost, writer fenced). The
    NameNode stops writing; whether the mutation survived is decided by the next active."""

    code = grpc.StatusCode.UNAVAILABLE


class SegmentOverrunError(EditLogError):
    """Edits were logged after a segment's end marker, before its finalize: a bug in this
    NameNode (something wrote while a roll or a close had the write gate shut). The edit log
    fails at once instead of asking the JournalNodes to finalize the segment short of what
    they hold; the message names the segment and the txids."""

    code = grpc.StatusCode.INTERNAL


class EditLogReplayError(NamenodeError):
    """An already-logged op did not apply: the log and the namespace disagree. Never a user
    error: it means corruption or a bug, and the message names the txid and the op."""

    code = grpc.StatusCode.INTERNAL

    def __init__(self, message: str, txid: int = 0) -> None:
        super().__init__(message)
        self.txid = txid


class FSImageError(NamenodeError):
    """An fsimage could not be read or is not a valid image (missing table, bad tree)."""

    code = grpc.StatusCode.INTERNAL


class ImageNotFoundError(FSImageError):
    """No fsimage for the txid asked (GetImage of a txid this NameNode does not keep)."""

    code = grpc.StatusCode.NOT_FOUND


class CorruptImageError(FSImageError):
    """An fsimage does not match its ``.md5`` file, or the md5 file is missing or malformed."""

    code = grpc.StatusCode.DATA_LOSS


class CheckpointCancelledError(FSImageError):
    """A standby's checkpoint stopped reading the namespace because the NameNode is leaving
    the standby state (a transition, a shutdown): no image is written."""

    code = grpc.StatusCode.ABORTED


class NameDirError(NamenodeError):
    """The local name directory is not formatted, is in use by another NameNode, or holds a
    VERSION file that cannot be read."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class ServiceFailedError(NamenodeError):
    """An HA state transition could not be made (HDFS ServiceFailedException): the message
    names the step that failed; the NameNode stays (or returns to) standby."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class HealthCheckFailedError(NamenodeError):
    """MonitorHealth: the NameNode cannot serve in its state (HDFS HealthCheckFailedException)."""

    code = grpc.StatusCode.UNAVAILABLE


class AccessControlError(NamenodeError):
    """The caller may not do this, e.g. a manual transition while automatic failover is on
    (HDFS AccessControlException: "Manual HA control for this NameNode is disallowed")."""

    code = grpc.StatusCode.PERMISSION_DENIED


class NamenodeUnavailableError(NamenodeError):
    """The NameNode could not be reached or did not answer in time: not a verdict of the
    namespace, so the failover proxy may retry this call elsewhere."""

    code = grpc.StatusCode.UNAVAILABLE


class SessionExhaustedError(NamenodeError):
    """A client session already holds ``dfs.namenode.session.max-unanswered-calls``
    unanswered calls: this one was not run (docs/protocol.md §13.3); the client may send it
    again once answers have drained."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


CODEC: ErrorCodec[NamenodeError] = ErrorCodec(
    (
        NamenodeError,
        InvalidArgumentError,
        InvalidPathError,
        RetryCallMismatchError,
        PathNotFoundError,
        PathExistsError,
        ParentNotDirectoryError,
        PathIsDirectoryError,
        DirectoryNotEmptyError,
        InvalidOperationError,
        InvalidRenameError,
        StandbyError,
        ObserverBehindError,
        EditLogError,
        SegmentOverrunError,
        EditLogReplayError,
        FSImageError,
        ImageNotFoundError,
        CorruptImageError,
        CheckpointCancelledError,
        NameDirError,
        ServiceFailedError,
        HealthCheckFailedError,
        AccessControlError,
        NamenodeUnavailableError,
        SessionExhaustedError,
    ),
    NamenodeUnavailableError,
)


MULTI_INDEX_KEY = "hn-multi-index"
"""Trailer of a refused multi: the index of its first op that was refused (``multi_index``)."""


def to_status(exc: NamenodeError) -> tuple[grpc.StatusCode, str, tuple[tuple[str, str], ...]]:
    """Status code, details and trailing metadata that carry ``exc`` over gRPC."""
    code, details, trailers = CODEC.to_status(exc)
    index = getattr(exc, "multi_index", None)
    if isinstance(index, int):
        trailers = (*trailers, (MULTI_INDEX_KEY, str(index)))
    return code, details, trailers


def from_rpc_error(err: grpc.RpcError) -> NamenodeError:
    """The NamenodeError a servicer raised, rebuilt from its status; other failures
    (unreachable node, deadline) come back as ``NamenodeUnavailableError``. A refused
    multi's error has ``multi_index``."""
    error = CODEC.from_rpc_error(err)
    call = err if isinstance(err, grpc.Call | grpc.aio.AioRpcError) else None
    trailers = call.trailing_metadata() if call is not None else None
    for key, value in trailers or ():
        if key == MULTI_INDEX_KEY and str(value).isdigit():
            error.multi_index = int(value)  # type: ignore[attr-defined]
    return error
