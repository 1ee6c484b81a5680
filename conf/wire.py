"""Length-prefixed protobuf frames on a plain asyncio connection, with mutual TLS when
configured: the transport of the JournalNodes' edits wire (docs/protocol.md §13.8).

A frame is a 4-byte big-endian length and that many bytes of one serialized message. The
wire exists because a message costs far less here than on a gRPC stream: a grpc.aio
message crosses from gRPC's poller thread to the event loop and through its completion
queue, which measured 200-250 µs of a JournalNode's CPU per batch, where a frame read from
an ``asyncio.Protocol`` costs tens of microseconds. Everything about who may connect stays
the same as for gRPC: the same CA, the same key pair, the caller's role read from its
certificate (``conf.guard.roles_of_certificate``), and a connection whose TLS handshake does
not complete within ``hanamenode.rpc.handshake-timeout.ms`` is closed.
"""

from __future__ import annotations

import asyncio
import ssl
import struct
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from conf.guard import roles_of_certificate
from conf.settings import TLSSettings

__all__ = [
    "HEADER",
    "KIND_JOURNAL",
    "KIND_STATE",
    "KIND_SUBSCRIBE",
    "FrameReader",
    "FrameTooLargeError",
    "client_ssl_context",
    "frame",
    "open_within",
    "peer_roles",
    "server_ssl_context",
]

T = TypeVar("T")

HEADER = struct.Struct(">I")
"""The length in front of every frame."""

KIND_JOURNAL = b"J"
"""The first byte of a writer's connection: JournalStream's batches follow."""

KIND_SUBSCRIBE = b"S"
"""The first byte of a reader's connection: one SubscribeEdits request follows."""

KIND_STATE = b"Q"
"""The first byte of a writer's read-index connection: GetJournalState requests follow."""


class FrameTooLargeError(Exception):
    """A frame announced more bytes than the receiver accepts in one message."""


def frame(payload: bytes) -> bytes:
    """``payload`` with its length in front."""
    return HEADER.pack(len(payload)) + payload


class FrameReader:
    """Cuts the bytes of a connection into frames, as they arrive in any pieces."""

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        """The frames ``data`` completes (none, or several), in order; raises
        ``FrameTooLargeError`` at a length above the limit, before its bytes arrive."""
        buffer = self._buffer
        buffer += data
        frames: list[bytes] = []
        pos = 0
        end = len(buffer)
        while end - pos >= HEADER.size:
            (length,) = HEADER.unpack_from(buffer, pos)
            if length > self._max_bytes:
                raise FrameTooLargeError(
                    f"a frame of {length} bytes, above the limit of {self._max_bytes}"
                )
            start = pos + HEADER.size
            if end - start < length:
                break
            frames.append(bytes(buffer[start : start + length]))
            pos = start + length
        if pos:
            del buffer[:pos]
        return frames

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame held."""
        return len(self._buffer)


def _context(tls: TLSSettings, purpose: ssl.Purpose) -> ssl.SSLContext:
    assert tls.ca_file is not None and tls.cert_file is not None and tls.key_file is not None
    context = ssl.create_default_context(purpose, cafile=str(tls.ca_file))
    context.load_cert_chain(str(tls.cert_file), str(tls.key_file))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def server_ssl_context(tls: TLSSettings | None) -> ssl.SSLContext | None:
    """The server side of mutual TLS (a client certificate required), or None for
    plaintext."""
    if tls is None or not tls.enabled:
        return None
    return _context(tls, ssl.Purpose.CLIENT_AUTH)


def client_ssl_context(tls: TLSSettings | None) -> ssl.SSLContext | None:
    """The client side of mutual TLS: the server's certificate checked against the CA and
    the host dialed, as gRPC checks it; None for plaintext."""
    if tls is None or not tls.enabled:
        return None
    return _context(tls, ssl.Purpose.SERVER_AUTH)


def peer_roles(transport: Any) -> frozenset[str]:
    """The roles of the certificate the other end presented on ``transport`` (none on a
    plaintext connection)."""
    ssl_object = transport.get_extra_info("ssl_object")
    if ssl_object is None:
        return frozenset()
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return frozenset()
    return roles_of_certificate(ssl.DER_cert_to_PEM_cert(der).encode())


async def open_within(
    connect: Awaitable[T], timeout: float, on_late: Callable[[T], None]
) -> T:
    """``connect`` (opening a connection) awaited for at most ``timeout`` seconds; raises
    ``TimeoutError`` after that.

    Unlike ``asyncio.wait_for``, neither the timeout nor a cancellation of the caller waits
    for ``connect`` to end: a TLS connect on uvloop, cancelled in its handshake on a loaded
    machine, was seen never to end, which held a standby's transition to active for 20 s
    (the subscriptions it was stopping waited on it). ``connect`` is cancelled and left;
    should it still succeed, ``on_late`` gets what it made, to close it."""
    task = asyncio.ensure_future(connect)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    except asyncio.CancelledError:
        _abandon(task, on_late)
        raise
    if not done:
        _abandon(task, on_late)
        raise TimeoutError(f"not connected within {timeout:g}s")
    return task.result()


def _abandon(task: asyncio.Future[T], on_late: Callable[[T], None]) -> None:
    def late(done: asyncio.Future[T]) -> None:
        if done.cancelled():
            return
        if done.exception() is None:
            on_late(done.result())

    task.cancel()
    task.add_done_callback(late)
