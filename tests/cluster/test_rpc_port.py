"""conf.rpc.bind: a busy port is a clear PortInUseError naming the address, never a shared port."""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterator

import grpc
import pytest

from conf import ConfigError
from conf.rpc import BindError, PortInUseError, bind, make_server


@pytest.fixture
def running_server() -> Iterator[int]:
    server = make_server(max_workers=1)
    port = bind(server, "127.0.0.1:0", None)
    server.start()
    try:
        yield port
    finally:
        server.stop(grace=None).wait(10)


def assert_port_in_use(server: grpc.Server, address: str) -> None:
    with pytest.raises(PortInUseError) as info:
        bind(server, address, None)
    err = info.value
    assert str(err) == f"cannot listen on {address}: address already in use"
    assert err.address == address
    assert isinstance(err, OSError) and err.errno == errno.EADDRINUSE
    assert isinstance(err, ConfigError)


def test_second_grpc_server_on_the_same_port(running_server: int) -> None:
    # grpc's default SO_REUSEPORT would let this bind succeed and share the port.
    assert_port_in_use(make_server(max_workers=1), f"127.0.0.1:{running_server}")


def test_port_held_by_another_socket() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        assert_port_in_use(make_server(max_workers=1), f"127.0.0.1:{port}")


def test_port_is_free_again_after_the_server_stops() -> None:
    first = make_server(max_workers=1)
    port = bind(first, "127.0.0.1:0", None)
    first.start()
    first.stop(grace=None).wait(10)
    second = make_server(max_workers=1)
    assert bind(second, f"127.0.0.1:{port}", None) == port
    second.start()
    second.stop(grace=None).wait(10)


def test_bad_addresses() -> None:
    server = make_server(max_workers=1)
    with pytest.raises(BindError, match="expected host:port, got 'nonsense'"):
        bind(server, "nonsense", None)
    with pytest.raises(BindError) as info:
        bind(server, "192.0.2.1:0", None)  # TEST-NET-1: not an address of this host
    assert not isinstance(info.value, PortInUseError)
    assert str(info.value).startswith("cannot listen on 192.0.2.1:0: ")
