"""The ports the harness gives its daemons (``hadev.daemon.free_ports``) lie outside the
kernel's ephemeral range, so a client reconnecting to a stopped daemon can never be given
that port as its own source port, connect to itself and hold it: the daemon's restart on
the same port (``hadev restart``, the README demo) then always finds it free."""

from __future__ import annotations

import socket
from pathlib import Path

from hadev.daemon import EPHEMERAL_RANGE_FILE, daemon_port_range, free_ports


def ephemeral_range() -> range:
    low, high = (int(part) for part in Path(EPHEMERAL_RANGE_FILE).read_text().split())
    return range(low, high + 1)


def test_free_ports_are_distinct_bindable_and_never_ephemeral() -> None:
    ephemeral = ephemeral_range()
    for _ in range(20):
        ports = free_ports(4)
        assert len(set(ports)) == 4
        for port in ports:
            assert port not in ephemeral, (port, ephemeral)
            assert port in daemon_port_range()
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind(("127.0.0.1", port))  # free: a daemon can take it


def test_a_connection_to_a_stopped_daemons_port_never_holds_it() -> None:
    """Many reconnections to a port nobody listens on, as a client retrying a dead
    daemon does: every one is refused, none connects to itself, and the port stays free."""
    (port,) = free_ports(1)
    for _ in range(2_000):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as client:
            assert client.connect_ex(("127.0.0.1", port)) != 0
            assert client.getsockname()[1] != port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))
