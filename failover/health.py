"""The health monitor of the elector (docs/architecture.md §6.2; HDFS ``HealthMonitor``): a named
thread that runs the NameNode's health check every interval and reports each change.

A NameNode that cannot serve (its check raises, e.g. ``HealthCheckFailedError``: the edit log
failed, the standby cannot apply the log, the NameNode is stopping) leaves the election until
it is healthy again::

    monitor = HealthMonitor(fsn.check_health, 1.0, on_change, name="nn1")
    monitor.start()            # checks once at once, then every second
    monitor.healthy, monitor.reason
    monitor.status             # (healthy, reason) as of the last change: what the elector reads
    monitor.stop()

The check runs in the NameNode's process and would pass while nobody else can reach it (its
descriptors exhausted by idle connections, issue 25 item 2). So a ``FreshConnectionProbe``
follows each check when ``ha.health-monitor.rpc-timeout.ms`` is not 0: it opens a new
connection to the NameNode's RPC address, as a client or another NameNode would, and calls
``GetServiceStatus``; no answer within the timeout is unhealthy, and the active leaves the
election (HDFS's ZKFC makes its whole check over RPC, HADOOP-7455).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import grpc
import structlog

from conf import ConfigError, TLSSettings
from conf.rpc import make_channel
from hanamenode.errors import HealthCheckFailedError, NamenodeError
from proto import namenode_pb2, namenode_pb2_grpc

__all__ = ["PROBE_MIN_INTERVAL", "FreshConnectionProbe", "HealthMonitor"]

PROBE_MIN_INTERVAL = 1.0
"""Seconds between two fresh-connection probes of a NameNode that answered the last one."""

log = structlog.get_logger(__name__)


class FreshConnectionProbe:
    """Calls ``GetServiceStatus`` of ``address`` on a channel made for that call alone (a new
    TCP connection and handshake: the project's channels keep their own subchannels), and
    raises ``HealthCheckFailedError`` when no answer comes within ``timeout`` seconds."""

    def __init__(self, address: str, tls: TLSSettings | None, timeout: float) -> None:
        self.address = address
        self.tls = tls
        self.timeout = timeout

    def __call__(self) -> None:
        try:
            channel = make_channel(self.address, self.tls)
        except (ConfigError, OSError) as exc:  # no descriptor left to read the TLS files
            raise HealthCheckFailedError(
                f"cannot open a fresh connection to {self.address}: {exc}"
            ) from None
        try:
            stub = namenode_pb2_grpc.HAServiceProtocolStub(channel)
            stub.GetServiceStatus(namenode_pb2.HAEmpty(), timeout=self.timeout)
        except grpc.RpcError as err:
            code = err.code() if isinstance(err, grpc.Call) else None
            details = err.details() if isinstance(err, grpc.Call) else str(err)
            raise HealthCheckFailedError(
                f"unreachable on a fresh connection to {self.address} within "
                f"{self.timeout:g} s: {code.name if code else 'RPC failed'}: {details}"
            ) from None
        finally:
            channel.close()


class HealthMonitor:
    """Calls ``check()`` every ``interval`` seconds from thread ``health-monitor-<name>``.

    ``check`` returns when healthy and raises when not (the message is the reason).
    ``on_change(healthy, reason)`` is called from the thread on the first result and on every
    change; ``on_tick()``, if given, after every check (the elector keeps its membership znode
    there). Neither may raise: what they raise is logged. ``probe``, if given, runs after a
    check that passed and may fail it the same way (a ``FreshConnectionProbe``).
    """

    def __init__(
        self,
        check: Callable[[], None],
        interval: float,
        on_change: Callable[[bool, str], None],
        *,
        name: str,
        on_tick: Callable[[], None] | None = None,
        probe: Callable[[], None] | None = None,
    ) -> None:
        self._check = check
        self._probe = probe
        self._last_probe: float | None = None
        self.interval = interval
        self._on_change = on_change
        self._on_tick = on_tick
        self.name = name
        self.healthy: bool | None = None
        self.reason = "not checked yet"
        self.status: tuple[bool, str] = (False, "not checked yet")
        """``(healthy, reason)`` as of the last change (False before the first check), set
        before ``on_change`` is called. One attribute, so that another thread reads a
        consistent pair; its reason is not refreshed at every check, so that a message that
        changes at each check (a txid, a time) is not a new decision each time."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._log = log.bind(nn=name)

    def _probe_due(self) -> bool:
        # A new connection (and TLS handshake) costs the NameNode more than the check:
        # at most one a second while they answer, at every check once one did not.
        last = self._last_probe
        return last is None or time.monotonic() - last >= PROBE_MIN_INTERVAL

    def check_now(self) -> tuple[bool, str]:
        """Run the check once (in the caller's thread): ``(healthy, reason)``."""
        try:
            self._check()
            if self._probe is not None and self._probe_due():
                self._last_probe = None  # until it answers: probed again at the next check
                self._probe()
                self._last_probe = time.monotonic()
        except NamenodeError as exc:
            return False, str(exc) or type(exc).__name__
        except Exception as exc:
            self._log.exception("health check raised unexpectedly", error=repr(exc))
            return False, f"health check failed: {type(exc).__name__}: {exc}"
        return True, "healthy"

    def _run(self) -> None:
        while True:
            healthy, reason = self.check_now()
            if healthy != self.healthy:
                if healthy:
                    self._log.info("NameNode is healthy")
                else:
                    self._log.warning("NameNode is unhealthy", reason=reason)
                self.healthy, self.reason = healthy, reason
                self.status = (healthy, reason)
                try:
                    self._on_change(healthy, reason)
                except Exception as exc:
                    self._log.exception("health change callback failed", error=repr(exc))
            self.reason = reason
            if self._on_tick is not None:
                try:
                    self._on_tick()
                except Exception as exc:
                    self._log.exception("health monitor tick failed", error=repr(exc))
            if self._stop.wait(self.interval):
                return

    def start(self) -> HealthMonitor:
        if self._thread is not None:
            raise RuntimeError(f"health monitor {self.name} already started")
        self._thread = threading.Thread(
            target=self._run, name=f"health-monitor-{self.name}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread; waits up to ``timeout`` for a check or tick in progress."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            if thread.is_alive():
                self._log.warning("health monitor did not stop in time", timeout=timeout)
