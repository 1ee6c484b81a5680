"""``hactl``'s HAServiceProtocol calls survive a connection dropped before the call was sent
(seen as "Handshake read failed" from a loaded NameNode in the graceful failover test), and
still fail fast when nothing listens. A real NameNode process behind a TCP relay that drops
the first connections it accepts."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from failover.controller import HAServiceTarget
from hadev.daemon import free_ports
from hadev.namenodes import NameNodeProcessCluster
from hadev.pki import ADMIN
from hanamenode.errors import NamenodeUnavailableError
from hanamenode.ha import HAState

pytestmark = pytest.mark.timeout(120)


class DroppingRelay:
    """Listens on a loopback port; closes the first ``drop`` connections at once, then relays
    each connection to ``target``."""

    def __init__(self, target: str, drop: int) -> None:
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.drop = drop
        self.dropped = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # closed
            if self.dropped < self.drop:
                self.dropped += 1
                conn.close()
                continue
            upstream = socket.create_connection(self.target)
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass  # the other side closed; the pump of the other direction ends too
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):  # already closed
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[NameNodeProcessCluster]:
    with NameNodeProcessCluster(tmp_path, namenodes=1) as c:
        yield c


def test_a_dropped_connection_is_tried_again(cluster: NameNodeProcessCluster) -> None:
    relay = DroppingRelay(cluster["nn1"].address, drop=2)
    try:
        target = HAServiceTarget("nn1", relay.address, cluster.tls_for(ADMIN))
        assert target.state(timeout=10) is HAState.STANDBY
        assert relay.dropped == 2
    finally:
        relay.close()


def test_a_refused_connection_fails_at_once() -> None:
    (port,) = free_ports(1)
    target = HAServiceTarget("nn9", f"127.0.0.1:{port}")
    started = time.monotonic()
    with pytest.raises(NamenodeUnavailableError):
        target.state(timeout=10)
    assert time.monotonic() - started < 5, "a refused connection waited for the timeout"
