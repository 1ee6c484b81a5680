"""A gRPC server made by ``conf.rpc`` from settings bounds its connections (issue 25 item 2;
docs/operations.md §9.4): one that never completes its handshake is closed after
``hanamenode.rpc.handshake-timeout.ms`` (gRPC's own default is 120 s), and one that has
carried no call for ``hanamenode.rpc.max-connection-idle.ms`` is closed by the server (a
client's channel goes back to IDLE and reconnects at its next call).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import grpc
import pytest

from conf import Settings
from conf.rpc import bind, make_channel, make_server

pytestmark = pytest.mark.timeout(60)

HANDSHAKE_MS = 1000
IDLE_MS = 1500


@pytest.fixture
def port() -> Iterator[int]:
    settings = Settings.from_mapping(
        {
            "hanamenode.rpc.tls.enabled": False,
            "hanamenode.rpc.handler.count": 2,
            "hanamenode.rpc.handshake-timeout.ms": HANDSHAKE_MS,
            "hanamenode.rpc.max-connection-idle.ms": IDLE_MS,
        }
    )
    server = make_server(settings)
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "hanamenode.test.Echo",
                {"Echo": grpc.unary_unary_rpc_method_handler(lambda request, _context: request)},
            ),
        )
    )
    bound = bind(server, "127.0.0.1:0")
    server.start()
    try:
        yield bound
    finally:
        server.stop(0)


def test_a_connection_without_a_handshake_is_closed(port: int) -> None:
    sockets = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]
    try:
        start = time.monotonic()
        for s in sockets:
            s.settimeout(HANDSHAKE_MS / 1000 + 10)
            while True:  # a plaintext server may send its SETTINGS first; then it closes
                data = s.recv(4096)
                if not data:
                    break
        print(f"20 connections without a handshake closed after {time.monotonic() - start:.2f} s")
    finally:
        for s in sockets:
            s.close()


def test_an_idle_connection_is_closed_by_the_server(port: int) -> None:
    with make_channel(f"127.0.0.1:{port}") as channel:
        echo = channel.unary_unary("/hanamenode.test.Echo/Echo")
        assert echo(b"x", timeout=5) == b"x"
        states: list[grpc.ChannelConnectivity] = []
        went_idle = threading.Event()

        def seen(state: grpc.ChannelConnectivity) -> None:
            states.append(state)
            if state is grpc.ChannelConnectivity.IDLE:
                went_idle.set()

        channel.subscribe(seen)
        assert went_idle.wait(IDLE_MS / 1000 + 10), f"the connection stayed up: {states}"
        channel.unsubscribe(seen)
        assert echo(b"y", timeout=5) == b"y"  # the next call reconnects
