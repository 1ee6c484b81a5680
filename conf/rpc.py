"""The one place gRPC servers and channels are made (docs/operations.md §9: mutual TLS everywhere).

Every daemon and client gets the same options from here: no SO_REUSEPORT (so a second
server on a busy port fails instead of silently sharing it), bounded message sizes,
keepalives both sides agree on, fast reconnects, and mutual TLS when configured::

    server = make_server(settings)
    journal_pb2_grpc.add_QJournalServiceServicer_to_server(servicer, server)
    port = bind(server, "127.0.0.1:0", settings.tls)
    server.start()

    channel = make_channel(f"127.0.0.1:{port}", settings.tls)
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
import weakref
from collections.abc import Sequence
from concurrent import futures
from pathlib import Path
from typing import Any, Generic, TypeVar

import grpc
import grpc.aio
import structlog

from conf.connections import raise_fd_limit
from conf.keys import parse_address
from conf.rpc_failures import RpcStatus
from conf.settings import RPCSettings, Settings, TLSSettings
from conf.xmlconf import ConfigError

__all__ = [
    "ERROR_CLASS_KEY",
    "BindError",
    "ErrorCodec",
    "PortInUseError",
    "bind",
    "channel_options",
    "daemon_settings",
    "make_aio_server",
    "make_channel",
    "make_server",
    "server_options",
    "status_code",
]

log = structlog.get_logger(__name__)

_DEFAULTS = RPCSettings()

# The TLS a server was made with, so that bind() cannot silently open a plaintext port on a
# server whose settings ask for mutual TLS.
AnyServer = grpc.Server | grpc.aio.Server
_SERVER_TLS: weakref.WeakKeyDictionary[AnyServer, TLSSettings] = weakref.WeakKeyDictionary()


class BindError(ConfigError):
    """A server could not listen on its configured address."""


class PortInUseError(BindError, OSError):
    """The address is already in use by another process (or another server in this one)."""

    def __init__(self, address: str) -> None:
        super().__init__(f"cannot listen on {address}: address already in use")
        self.address = address
        self.errno = errno.EADDRINUSE


def server_options(
    max_message_bytes: int = _DEFAULTS.max_message_bytes,
    max_receive_bytes: int | None = None,
    rpc: RPCSettings = _DEFAULTS,
) -> list[tuple[str, Any]]:
    """gRPC server channel arguments shared by every server of the project.

    ``rpc`` gives the connection bounds (docs/operations.md §9.4): a connection whose TLS (or
    plaintext HTTP/2) handshake has not completed within ``rpc.handshake_timeout`` seconds is
    closed (gRPC's own default is 120 s, long enough for an idle flood of plain TCP
    connections, no certificate needed, to exhaust the daemon's descriptors), and one without
    any call for ``rpc.max_connection_idle`` seconds is sent GOAWAY (a client's channel
    reconnects at its next call).

    ``max_receive_bytes`` (default ``max_message_bytes``) bounds each request message: gRPC
    refuses a longer one with RESOURCE_EXHAUSTED from its length prefix, before decoding it;
    when it is below ``max_message_bytes`` the request window stays fixed too (see
    ``_small_request_window``), so a flood of oversized requests costs the server no memory."""
    receive = max_message_bytes if max_receive_bytes is None else max_receive_bytes
    return [
        # grpc sets SO_REUSEPORT by default: two servers could then share one port and split
        # its connections between them; a JournalNode started twice must fail to bind instead.
        ("grpc.so_reuseport", 0),
        ("grpc.max_receive_message_length", receive),
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.keepalive_time_ms", 30_000),
        ("grpc.keepalive_timeout_ms", 10_000),
        # Accept the clients' keepalive pings (below) instead of answering GOAWAY too_many_pings.
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_recv_ping_interval_without_data_ms", 10_000),
        ("grpc.http2.max_ping_strikes", 0),
        ("grpc.server_handshake_timeout_ms", round(rpc.handshake_timeout * 1000)),
        ("grpc.max_connection_idle_ms", round(rpc.max_connection_idle * 1000)),
        *_small_request_window(receive, max_message_bytes),
    ]


def _small_request_window(receive: int, max_message_bytes: int) -> list[tuple[str, Any]]:
    """Flow control for a server whose requests are bounded well below its responses.

    gRPC refuses an oversized request from its length prefix, but the bytes the client already
    sent under the HTTP/2 window keep arriving and are buffered before they are dropped. With
    bandwidth-delay probing on, that window grows to megabytes per stream, so a flood of
    oversized requests left the NameNode hundreds of MiB larger for good (glibc keeps the
    freed arenas). A fixed window bounds what a refused request can make the server hold."""
    if receive >= max_message_bytes:
        return []
    return [("grpc.http2.bdp_probe", 0)]


def channel_options(max_message_bytes: int = _DEFAULTS.max_message_bytes) -> list[tuple[str, Any]]:
    """gRPC client channel arguments shared by every channel of the project."""
    return [
        ("grpc.optimization_target", "latency"),
        ("grpc.enable_http_proxy", 0),
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.keepalive_time_ms", 30_000),
        ("grpc.keepalive_timeout_ms", 10_000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        # Each channel owns its connection: closing or breaking one (a fenced writer, a test's
        # injected fault) must not affect another channel to the same JournalNode.
        ("grpc.use_local_subchannel_pool", 1),
        # A restarted JournalNode or NameNode is reachable again within a second or two; the
        # default backoff grows to two minutes, longer than any failover we want to measure.
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 2_000),
        # gRPC's core also takes this as the least time a connection attempt gets to finish
        # its TCP, TLS and HTTP/2 handshakes. At 100 ms a loaded machine's TLS handshake
        # failed ("Handshake read failed"): a healthy active's fresh-connection health probe
        # failed and it gave up the lock, and tools named a TLS mismatch as a timeout. A
        # call's own deadline still ends it sooner; a refused connection fails at once.
        ("grpc.min_reconnect_backoff_ms", 1_000),
    ]


def make_server(
    settings: Settings | None = None,
    *,
    tls: TLSSettings | None = None,
    max_workers: int | None = None,
    max_message_bytes: int | None = None,
    max_receive_bytes: int | None = None,
    interceptors: Sequence[grpc.ServerInterceptor] = (),
    options: Sequence[tuple[str, Any]] = (),
) -> grpc.Server:
    """A gRPC server with the project's options; not yet bound (see ``bind``) nor started.

    Arguments given explicitly win over ``settings`` (``settings.tls``,
    ``settings.rpc.handler_count``, ``settings.rpc.max_message_bytes``), which win over the
    defaults (no TLS, 16 workers, 16 MiB). ``max_receive_bytes`` is the request limit of the
    services the server hosts, when smaller than ``max_message_bytes`` (the NameNode's);
    ``interceptors`` run before every servicer (``conf.guard.RequestGuard``).
    """
    rpc = settings.rpc if settings is not None else _DEFAULTS
    if tls is None and settings is not None:
        tls = settings.tls
    workers = max_workers if max_workers is not None else rpc.handler_count
    max_bytes = max_message_bytes if max_message_bytes is not None else rpc.max_message_bytes
    raise_fd_limit()  # a server holds a descriptor per connection
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="grpc-handler"),
        options=[*server_options(max_bytes, max_receive_bytes, rpc), *options],
        interceptors=list(interceptors) or None,
    )
    _SERVER_TLS[server] = tls if tls is not None else TLSSettings()
    return server


def make_aio_server(
    settings: Settings | None = None,
    *,
    tls: TLSSettings | None = None,
    max_message_bytes: int | None = None,
    max_receive_bytes: int | None = None,
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    options: Sequence[tuple[str, Any]] = (),
    rpc: RPCSettings | None = None,
) -> grpc.aio.Server:
    """``make_server`` for grpc.aio: the same options, limits and TLS, no worker pool (every
    call is a coroutine on the running event loop, which must be the caller's). ``rpc`` wins
    over ``settings.rpc`` (a JournalNode has its values, not the whole settings)."""
    if rpc is None:
        rpc = settings.rpc if settings is not None else _DEFAULTS
    if tls is None and settings is not None:
        tls = settings.tls
    max_bytes = max_message_bytes if max_message_bytes is not None else rpc.max_message_bytes
    raise_fd_limit()  # a server holds a descriptor per connection
    server = grpc.aio.server(
        options=[*server_options(max_bytes, max_receive_bytes, rpc), *options],
        interceptors=list(interceptors) or None,
    )
    _SERVER_TLS[server] = tls if tls is not None else TLSSettings()
    return server


def bind(server: AnyServer, address: str, tls: TLSSettings | None = None) -> int:
    """Listen on ``address`` (``host:port``, port 0 for any free one); return the bound port.

    With ``tls`` enabled the port requires mutual TLS; without ``tls`` the TLS the server was
    made with applies (pass ``TLSSettings()`` to listen in plaintext deliberately). A busy
    port raises ``PortInUseError`` naming the address; other failures raise ``BindError``.
    """
    try:
        address = parse_address(address)
    except ValueError as err:
        raise BindError(str(err)) from None
    if tls is None:
        tls = _SERVER_TLS.get(server, TLSSettings())
    try:
        if tls.enabled:
            port = server.add_secure_port(address, _server_credentials(tls))
        else:
            port = server.add_insecure_port(address)
    except RuntimeError:
        # grpc raises RuntimeError("Failed to bind to address ...") without the reason.
        port = 0
    if port == 0:
        raise _bind_failure(address)
    return port


def make_channel(
    target: str,
    tls: TLSSettings | None = None,
    *,
    max_message_bytes: int = _DEFAULTS.max_message_bytes,
    options: Sequence[tuple[str, Any]] = (),
) -> grpc.Channel:
    """A channel to ``target`` (``host:port``), with mutual TLS when ``tls.enabled``.

    The server's certificate must name the host of ``target`` (a DNS name or IP address).
    """
    all_options = [*channel_options(max_message_bytes), *options]
    if tls is not None and tls.enabled:
        return grpc.secure_channel(target, _channel_credentials(tls), options=all_options)
    return grpc.insecure_channel(target, options=all_options)


UVLOOP_ENV = "HANAMENODE_UVLOOP"
"""``HANAMENODE_UVLOOP=1`` in a process's environment: its event loops run on uvloop."""


def new_event_loop(use_uvloop: bool | None = None) -> asyncio.AbstractEventLoop:
    """A new event loop for grpc.aio code: uvloop's when ``use_uvloop`` (None: when the
    environment says ``HANAMENODE_UVLOOP=1``, read at each call), else asyncio's own."""
    if use_uvloop is None:
        use_uvloop = os.environ.get(UVLOOP_ENV, "") == "1"
    if use_uvloop:
        import uvloop

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def make_aio_channel(
    target: str,
    tls: TLSSettings | None = None,
    *,
    max_message_bytes: int = _DEFAULTS.max_message_bytes,
    options: Sequence[tuple[str, Any]] = (),
) -> grpc.aio.Channel:
    """``make_channel`` for grpc.aio: the same options and mutual TLS. Create it on the event
    loop that will use it."""
    all_options = [*channel_options(max_message_bytes), *options]
    if tls is not None and tls.enabled:
        return grpc.aio.secure_channel(target, _channel_credentials(tls), options=all_options)
    return grpc.aio.insecure_channel(target, options=all_options)


def daemon_settings(settings: Settings, daemon_id: str) -> Settings:
    """The settings daemon ``daemon_id`` serves with (``Settings.for_daemon``: its own
    certificate). Mutual TLS is the default: without it, a daemon starts only when the file
    asks for plaintext (``hanamenode.rpc.tls.enabled`` false), and then warns once."""
    if settings.tls.enabled:
        return settings.for_daemon(daemon_id)
    if not settings.plaintext_requested:
        raise ConfigError(
            "mutual TLS is not configured: set hanamenode.rpc.tls.ca-file, cert-file and "
            "key-file (docs/operations.md §9), or set this key to false to serve plaintext",
            source=str(settings.source),
            key="hanamenode.rpc.tls.enabled",
        )
    log.warning(
        "serving plaintext RPC as asked (hanamenode.rpc.tls.enabled is false): any process "
        "that reaches this daemon may call every RPC, Format and HA transitions included",
        daemon=daemon_id,
    )
    return settings.for_daemon(daemon_id)


def _read(path: Path | None) -> bytes:
    assert path is not None, "TLSSettings checks its files when enabled"
    try:
        return path.read_bytes()
    except OSError as err:
        raise ConfigError(f"cannot read TLS file: {err.strerror}", source=str(path)) from None


def _server_credentials(tls: TLSSettings) -> grpc.ServerCredentials:
    return grpc.ssl_server_credentials(
        [(_read(tls.key_file), _read(tls.cert_file))],
        root_certificates=_read(tls.ca_file),
        require_client_auth=True,
    )


def _channel_credentials(tls: TLSSettings) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(
        root_certificates=_read(tls.ca_file),
        private_key=_read(tls.key_file),
        certificate_chain=_read(tls.cert_file),
    )


def _bind_failure(address: str) -> BindError:
    """Find out why grpc could not bind (it does not say) by trying the same bind ourselves."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        infos = socket.getaddrinfo(
            host, int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as err:
        return BindError(f"cannot listen on {address}: {err.strerror}")
    for family, kind, proto, _, sockaddr in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(sockaddr)
            except OSError as err:
                if err.errno == errno.EADDRINUSE:
                    return PortInUseError(address)
                return BindError(f"cannot listen on {address}: {err.strerror}")
    return BindError(f"cannot listen on {address} (grpc gave no reason)")


# ---------------------------------------------------------------------------------------------
# Errors over gRPC.
# ---------------------------------------------------------------------------------------------

ERROR_CLASS_KEY = "hn-error-class"
"""Trailing-metadata key naming the exception class a servicer raised."""

E = TypeVar("E", bound=Exception)

_STATUS_CODES = {code.value[0]: code for code in grpc.StatusCode}


def status_code(value: int) -> grpc.StatusCode:
    """The StatusCode whose number is ``value`` (UNKNOWN for a number gRPC does not define)."""
    return _STATUS_CODES.get(value, grpc.StatusCode.UNKNOWN)


class ErrorCodec(Generic[E]):
    """One service's exceptions to and from gRPC statuses.

    A servicer turns an exception into (code, details, trailers) with ``to_status``; the
    trailers name its class, so the client rebuilds the same class with ``from_rpc_error``
    (or ``from_status`` for an answer that carries the three parts in a message, as the
    JournalStream does). Status codes alone are too coarse: several refusals share
    FAILED_PRECONDITION. A class the codec does not know, or a failure with no class (an
    unreachable server, a deadline), becomes ``unavailable`` with the code in its message.
    """

    def __init__(self, classes: Sequence[type[E]], unavailable: type[E]) -> None:
        self._by_name: dict[str, type[E]] = {cls.__name__: cls for cls in classes}
        self._by_name.setdefault(unavailable.__name__, unavailable)
        self.unavailable = unavailable

    @property
    def classes(self) -> tuple[type[E], ...]:
        """Every class this codec carries, by name."""
        return tuple(self._by_name[name] for name in sorted(self._by_name))

    def to_status(self, exc: E) -> tuple[grpc.StatusCode, str, tuple[tuple[str, str], ...]]:
        """Status code (the class's ``code`` attribute), details and trailing metadata."""
        code: grpc.StatusCode = getattr(exc, "code", grpc.StatusCode.INTERNAL)
        return code, str(exc), ((ERROR_CLASS_KEY, type(exc).__name__),)

    def from_status(
        self, code: grpc.StatusCode | None, details: str, error_class: str | None = None
    ) -> E:
        if error_class is not None and error_class in self._by_name:
            return self._by_name[error_class](details or "")
        error = self.unavailable(f"{code.name if code else 'RPC failed'}: {details}")
        # The status, for conf.rpc_failures to name the cause (refused, TLS, timeout).
        error.rpc_status = RpcStatus(code, details or "")  # type: ignore[attr-defined]
        return error

    def from_rpc_error(self, err: grpc.RpcError) -> E:
        # A grpc.aio error carries the same code, details and trailers, but is no grpc.Call.
        call = err if isinstance(err, grpc.Call | grpc.aio.AioRpcError) else None
        if call is None:
            return self.from_status(None, str(err))
        error_class = None
        for key, value in call.trailing_metadata() or ():
            if key == ERROR_CLASS_KEY:
                error_class = str(value)
        return self.from_status(call.code(), call.details() or "", error_class)
