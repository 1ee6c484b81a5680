"""Why an RPC got no answer, in the words a person acts on (issue 28 item 4; docs/operations.md
§3.4).

gRPC reports a call that never reached the server's code as UNAVAILABLE with its core's last
connection error (``failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:
8020: Failed to connect to remote host: Connection refused``), or as DEADLINE_EXCEEDED. Every
tool (``hafs``, ``hactl``, ``hadev``, ``hapipe``) prints such a failure as one line naming the
daemon and one of these causes instead (``failure_line``)::

    NameNode nn2 at 127.0.0.1:8021: connection refused
    NameNode at 127.0.0.1:9870: TLS mismatch: this client speaks TLS, the server does not
    JournalNode jn1 at 127.0.0.1:8485: TLS mismatch: the server expects TLS, this client does not
    NameNode nn1 at 127.0.0.1:8020: timed out (is the process stopped or overloaded?)
    NameNode nn1 at 127.0.0.1:8020: permission denied: TransitionToActive needs the role admin; ...

``failure_cause`` takes a ``grpc.RpcError`` or an exception an ``ErrorCodec`` made of one
(``conf.rpc``: it keeps the status as ``rpc_status``), and returns None for an answer of the
server's code (a ``PathNotFoundError``, a ``StandbyError``): that is printed as it is. Whether
the client spoke TLS decides what a connection closed in its handshake means.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import grpc
import grpc.aio

__all__ = [
    "NOT_GRPC",
    "REFUSED",
    "TIMED_OUT",
    "TLS_EXPECTED",
    "TLS_MISMATCHES",
    "TLS_NOT_SERVED",
    "TLS_REJECTED",
    "TLS_UNTRUSTED",
    "RpcStatus",
    "failure_cause",
    "failure_line",
    "peer_name",
    "rpc_status",
]

REFUSED = "connection refused"
TIMED_OUT = "timed out (is the process stopped or overloaded?)"
TLS_NOT_SERVED = "TLS mismatch: this client speaks TLS, the server does not"
TLS_EXPECTED = "TLS mismatch: the server expects TLS, this client does not"
TLS_REJECTED = (
    "TLS mismatch: the server closed the TLS handshake (does it trust this client's certificate?)"
)
TLS_UNTRUSTED = "TLS mismatch: this client does not trust the server's certificate"
NOT_GRPC = "not a gRPC port: the server answered in HTTP/1 (its HTTP address?)"
TLS_MISMATCHES = frozenset({TLS_NOT_SERVED, TLS_EXPECTED, TLS_REJECTED, TLS_UNTRUSTED})
"""The causes that are a TLS mismatch between the client and the server."""
UNKNOWN_HOST = "unknown host"
PERMISSION = "permission denied"

_ERROR_CLASS_KEY = "hn-error-class"  # conf.rpc.ERROR_CLASS_KEY (conf.rpc imports this module)

# gRPC core's connection errors, most specific first: (pattern of its text, cause).
_CONNECT_ERRORS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), cause)
    for pattern, cause in (
        (r"connection refused", REFUSED),
        (r"WRONG_VERSION_NUMBER|packet length too long|record overflow", TLS_NOT_SERVED),
        (r"CERTIFICATE_VERIFY_FAILED", TLS_UNTRUSTED),
        (r"ALERT_(UNKNOWN_CA|BAD_CERTIFICATE|CERTIFICATE_REQUIRED|HANDSHAKE_FAILURE)",
         TLS_REJECTED),
        (r"Failed parsing HTTP/2", NOT_GRPC),
        (r"errors resolving|DNS resolution failed|Domain name not found", UNKNOWN_HOST),
        # A new connection gets 1 s to complete its handshakes (conf.rpc's
        # min_reconnect_backoff), or less when the call's deadline comes first; a stopped
        # process completes the TCP one (its kernel does), never the HTTP/2 or TLS one.
        (r"timed out|Deadline Exceeded|Handshake read failed|Endpoint closing|"
         r"handshaker shutdown", TIMED_OUT),
        (r"Connection reset", "connection reset by the server"),
    )
)
_CONNECT_PREFIX = re.compile(r"^[A-Z_]+: (ipv[46]:)?\S+: ")


@dataclass(frozen=True, slots=True)
class RpcStatus:
    """The status a failed call ended with: its code (None when gRPC gave none) and details."""

    code: grpc.StatusCode | None
    details: str

    def cause(self, *, tls: bool | None = None) -> str | None:
        """The cause of a call that got no answer, or None for the server's own refusal.
        ``tls``: whether the client spoke TLS (None: not known)."""
        if self.code is grpc.StatusCode.PERMISSION_DENIED:
            return f"{PERMISSION}: {self.details}" if self.details else PERMISSION
        if self.code is grpc.StatusCode.DEADLINE_EXCEEDED:
            return TIMED_OUT
        if self.code is not grpc.StatusCode.UNAVAILABLE:
            return None
        for pattern, cause in _CONNECT_ERRORS:
            if pattern.search(self.details):
                return cause
        if re.search(r"Socket closed", self.details, re.IGNORECASE):
            if not self.details.startswith("failed to connect"):
                return "the connection was closed (the server stopped?)"
            # Closed by the server in the handshake: a TLS server does that to a plaintext
            # client, and to a client whose certificate it does not trust.
            if tls is None:
                return "the server closed the connection in its handshake (a TLS mismatch?)"
            return TLS_REJECTED if tls else TLS_EXPECTED
        # "... last error: UNKNOWN: ipv4:127.0.0.1:8020: <what happened>": what happened.
        last = _CONNECT_PREFIX.sub("", self.details.rpartition("last error: ")[2])
        return f"unreachable: {last or self.details}"


def rpc_status(error: BaseException) -> RpcStatus | None:
    """The status of a call that failed without an answer of the server's code: from a
    ``grpc.RpcError`` with no error class in its trailers, or from an exception an
    ``ErrorCodec`` made of one (its ``rpc_status``), or from the exception either was
    explicitly raised from (``raise ... from err``).
    A refusal the server answered with one of its error classes is None, except
    PERMISSION_DENIED (a role the caller's certificate lacks), which is a cause too."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        kept = getattr(current, "rpc_status", None)
        if isinstance(kept, RpcStatus):
            return kept
        code = getattr(type(current), "code", None)
        if code is grpc.StatusCode.PERMISSION_DENIED:
            return RpcStatus(code, str(current))
        if isinstance(current, grpc.Call | grpc.aio.AioRpcError):
            status = RpcStatus(current.code(), current.details() or "")
            if status.code is grpc.StatusCode.PERMISSION_DENIED or not _has_error_class(current):
                return status
            return None
        current = current.__cause__
    return None


def _has_error_class(call: grpc.Call | grpc.aio.AioRpcError) -> bool:
    try:
        trailers = call.trailing_metadata() or ()
    except Exception:  # a call object that cannot say is a call without trailers
        return False
    return any(key == _ERROR_CLASS_KEY for key, _ in trailers)


def failure_cause(error: BaseException, *, tls: bool | None = None) -> str | None:
    """The cause phrase of ``error`` when its call got no answer (``rpc_status``), else None."""
    status = rpc_status(error)
    return None if status is None else status.cause(tls=tls)


def peer_name(kind: str, node_id: str, address: str) -> str:
    """``NameNode nn1 at 127.0.0.1:8020``, or ``NameNode at 127.0.0.1:8020`` for a daemon
    known only by its address (``hafs -fs``)."""
    if not node_id or node_id == address:
        return f"{kind} at {address}"
    return f"{kind} {node_id} at {address}"


def failure_line(peer: str, error: BaseException, *, tls: bool | None = None) -> str:
    """``<peer>: <cause>`` for a call that got no answer; the error's own text otherwise."""
    cause = failure_cause(error, tls=tls)
    return str(error) if cause is None else f"{peer}: {cause}"
