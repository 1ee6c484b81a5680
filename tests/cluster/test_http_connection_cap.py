"""The HTTP port is a bounded resource (issue 25 item 2; docs/operations.md §9.4): a
``conf.web.WebServer`` with idle connections beyond its workers closes the extra ones at
once and counts them, runs no thread per connection, frees a worker from a connection that
stays silent, and serves ``/metrics`` again once they are gone.

Real sockets against the server in this process (the server is ``conf.web``'s own); the
daemons' processes are in ``tests/process/test_idle_connection_flood.py``.
"""

from __future__ import annotations

import socket
import threading
import time
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from conf import connections
from conf.web import HTTP_IDLE_SECONDS, HTTP_WORKERS, WebServer

pytestmark = pytest.mark.timeout(60)

EXTRA = 24


@pytest.fixture
def server() -> Iterator[WebServer]:
    registry = CollectorRegistry()
    connections.watch("captest", registry)
    web = WebServer(
        "127.0.0.1:0", registry, status=lambda: {"ok": True}, render=lambda s: "ok", title="t"
    ).start()
    try:
        yield web
    finally:
        web.stop()


def _sample(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise AssertionError(f"{name} not served")


def _closed_by_server(sock: socket.socket, within: float) -> bool:
    sock.settimeout(within)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def test_idle_connections_beyond_the_workers_are_refused_not_threaded(server: WebServer) -> None:
    refused_before = _sample(server.port, "captest_http_connections_refused_total")
    threads_before = threading.active_count()
    held = [
        socket.create_connection(("127.0.0.1", server.port)) for _ in range(HTTP_WORKERS)
    ]
    extra: list[socket.socket] = []
    try:
        time.sleep(0.3)  # the workers took the first ones
        extra = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(EXTRA)]
        refused = sum(_closed_by_server(s, within=2.0) for s in extra)
        assert refused == EXTRA, f"{refused} of {EXTRA} extra connections closed at once"
        # A fixed pool: no thread per connection (the pool has HTTP_WORKERS at most).
        assert threading.active_count() <= threads_before + HTTP_WORKERS
        # A silent connection frees its worker after the idle timeout.
        assert all(_closed_by_server(s, within=HTTP_IDLE_SECONDS + 5) for s in held)
    finally:
        for s in held + extra:
            s.close()
    refused_after = _sample(server.port, "captest_http_connections_refused_total")
    assert refused_after - refused_before >= EXTRA
