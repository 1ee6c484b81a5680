"""``conf.rpc_failures``: gRPC's own words for a call that got no answer, as one cause a person
acts on (issue 28 item 4). The details are what grpcio 1.85 gave against real servers on
loopback (the experiments behind tests/process/test_cli_errors.py, which checks the tools'
lines against real daemons); each row is one way a call fails, and the cause it is named by."""

from __future__ import annotations

import grpc
import pytest

from conf.rpc import ERROR_CLASS_KEY
from conf.rpc_failures import (
    NOT_GRPC,
    REFUSED,
    TIMED_OUT,
    TLS_EXPECTED,
    TLS_MISMATCHES,
    TLS_NOT_SERVED,
    TLS_REJECTED,
    TLS_UNTRUSTED,
    RpcStatus,
    failure_cause,
    failure_line,
    peer_name,
    rpc_status,
)
from hanamenode.client.session import SessionCallError
from hanamenode.errors import AccessControlError, NamenodeUnavailableError, from_rpc_error
from journalnode.errors import JournalUnavailableError
from journalnode.errors import from_rpc_error as journal_from_rpc_error

UNAVAILABLE = grpc.StatusCode.UNAVAILABLE
LAST = "failed to connect to all addresses; last error: "

# (what happened, client speaks TLS, code, details, cause)
CASES: list[tuple[str, bool | None, grpc.StatusCode, str, str | None]] = [
    (
        "nothing listens on the port",
        True,
        UNAVAILABLE,
        LAST + "UNKNOWN: ipv4:127.0.0.1:32847: Failed to connect to remote host: "
        "Connection refused",
        REFUSED,
    ),
    (
        "a plaintext client, a TLS server: the server closes the connection",
        False,
        UNAVAILABLE,
        LAST + "UNAVAILABLE: ipv4:127.0.0.1:38623: Socket closed",
        TLS_EXPECTED,
    ),
    (
        "a TLS client whose certificate the server does not trust: closed the same way",
        True,
        UNAVAILABLE,
        LAST + "UNAVAILABLE: ipv4:127.0.0.1:38623: Socket closed",
        TLS_REJECTED,
    ),
    (
        "a TLS client, a plaintext gRPC or HTTP server (hafs -fs at the HTTP port)",
        True,
        UNAVAILABLE,
        LAST + "UNKNOWN: ipv4:127.0.0.1:45223: Tls handshake failed (TSI_PROTOCOL_FAILURE): "
        "SSL_ERROR_SSL: error:100000f7:SSL routines:OPENSSL_internal:WRONG_VERSION_NUMBER: "
        "Invalid certificate verification context: OK",
        TLS_NOT_SERVED,
    ),
    (
        "the server's certificate is from another CA",
        True,
        UNAVAILABLE,
        LAST + "UNKNOWN: ipv4:127.0.0.1:38623: Tls handshake failed (TSI_PROTOCOL_FAILURE): "
        "SSL_ERROR_SSL: error:1000007d:SSL routines:OPENSSL_internal:CERTIFICATE_VERIFY_FAILED"
        ": unable to get local issuer certificate: OK",
        TLS_UNTRUSTED,
    ),
    (
        "a plaintext client at an HTTP port",
        False,
        UNAVAILABLE,
        LAST + "UNAVAILABLE: ipv4:127.0.0.1:38505: Failed parsing HTTP/2 (Expected SETTINGS "
        "frame as the first frame, got frame type 79)",
        NOT_GRPC,
    ),
    (
        "a stopped process, plaintext: its kernel accepts, nothing answers",
        False,
        UNAVAILABLE,
        LAST + "UNKNOWN: ipv4:127.0.0.1:42309: connection attempt timed out before "
        "receiving SETTINGS frame",
        TIMED_OUT,
    ),
    (
        "a stopped process, TLS",
        True,
        UNAVAILABLE,
        LAST + "UNAVAILABLE: ipv4:127.0.0.1:47997: Handshake read failed (Endpoint closing)",
        TIMED_OUT,
    ),
    ("a stalled connection", True, grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded",
     TIMED_OUT),
    (
        "a certificate without the method's role",
        True,
        grpc.StatusCode.PERMISSION_DENIED,
        "Format needs the role admin; the caller's certificate presents client",
        "permission denied: Format needs the role admin; the caller's certificate presents "
        "client",
    ),
    (
        "a name that does not resolve",
        None,
        UNAVAILABLE,
        "errors resolving nosuchhost.invalid:1: [field:hostname lookup error:address lookup "
        "failed for nosuchhost.invalid:1: Domain name not found]",
        "unknown host",
    ),
    (
        "a connection broken after it was made (the server died)",
        True,
        UNAVAILABLE,
        "Socket closed",
        "the connection was closed (the server stopped?)",
    ),
    (
        "closed in the handshake, TLS not known",
        None,
        UNAVAILABLE,
        LAST + "UNAVAILABLE: ipv4:127.0.0.1:1: Socket closed",
        "the server closed the connection in its handshake (a TLS mismatch?)",
    ),
    (
        "something else while connecting: what gRPC said, without its prefixes",
        True,
        UNAVAILABLE,
        LAST + "UNKNOWN: ipv4:127.0.0.1:9: No route to host",
        "unreachable: No route to host",
    ),
    ("an answer of the server's code", True, grpc.StatusCode.NOT_FOUND, "/x", None),
]


def failed_call(
    code: grpc.StatusCode, details: str, trailers: tuple[tuple[str, str], ...] = ()
) -> SessionCallError:
    """A failed call as grpc raises it (an RpcError that is the finished Call): code, details,
    trailers. A session call's error is one, built from exactly those."""
    return SessionCallError(code, details, trailers)


@pytest.mark.parametrize(
    ("tls", "code", "details", "cause"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_each_failure_has_its_cause(
    tls: bool | None, code: grpc.StatusCode, details: str, cause: str | None
) -> None:
    assert RpcStatus(code, details).cause(tls=tls) == cause
    # The same from the raw error and from the errors each service's codec makes of it.
    call = failed_call(code, details)
    assert failure_cause(call, tls=tls) == cause
    if code is not grpc.StatusCode.PERMISSION_DENIED:
        made = from_rpc_error(call)
        assert type(made) is NamenodeUnavailableError
        assert failure_cause(made, tls=tls) == cause
        assert failure_cause(journal_from_rpc_error(call), tls=tls) == cause


def test_a_refusal_with_an_error_class_is_no_failure_but_a_role_refusal_is() -> None:
    standby = failed_call(UNAVAILABLE, "Operation category READ is not supported in state standby",
                       ((ERROR_CLASS_KEY, "StandbyError"),))
    assert rpc_status(standby) is None and failure_cause(from_rpc_error(standby)) is None
    # The server's own "try later" is an answer too, although it is UNAVAILABLE.
    later = failed_call(UNAVAILABLE, "busy", ((ERROR_CLASS_KEY, "NamenodeUnavailableError"),))
    assert failure_cause(later) is None and failure_cause(from_rpc_error(later)) is None
    denied = failed_call(grpc.StatusCode.PERMISSION_DENIED, "Mkdirs needs the role client; the "
                      "caller's certificate presents journalnode",
                      ((ERROR_CLASS_KEY, "AccessControlError"),))
    made = from_rpc_error(denied)
    assert type(made) is AccessControlError
    assert failure_cause(made) == failure_cause(denied) == (
        "permission denied: Mkdirs needs the role client; the caller's certificate presents "
        "journalnode"
    )


def test_the_cause_is_found_through_explicit_chaining_only() -> None:
    refused = JournalUnavailableError("UNAVAILABLE: ...")
    assert failure_cause(refused) is None  # not made by a codec: no status kept
    made = from_rpc_error(failed_call(*CASES[0][2:4]))
    try:
        raise RuntimeError("wrapped") from made
    except RuntimeError as exc:
        assert failure_cause(exc) == REFUSED
    try:
        try:
            raise made
        except NamenodeUnavailableError:
            raise RuntimeError("another failure while handling it") from None
    except RuntimeError as exc:
        assert failure_cause(exc) is None


def test_the_line_names_the_daemon_and_the_cause() -> None:
    made = from_rpc_error(failed_call(*CASES[0][2:4]))
    peer = peer_name("NameNode", "nn2", "127.0.0.1:8021")
    assert failure_line(peer, made) == "NameNode nn2 at 127.0.0.1:8021: connection refused"
    assert peer_name("NameNode", "127.0.0.1:9870", "127.0.0.1:9870") == (
        "NameNode at 127.0.0.1:9870"
    )
    answered = from_rpc_error(failed_call(grpc.StatusCode.NOT_FOUND, "/x",
                                       ((ERROR_CLASS_KEY, "PathNotFoundError"),)))
    assert failure_line(peer, answered) == "/x"
    assert {TLS_NOT_SERVED, TLS_EXPECTED, TLS_REJECTED, TLS_UNTRUSTED} == TLS_MISMATCHES
    assert all(cause.startswith("TLS mismatch: ") for cause in TLS_MISMATCHES)
