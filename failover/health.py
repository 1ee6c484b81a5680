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
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import structlog

from hanamenode.errors import NamenodeError

__all__ = ["HealthMonitor"]

log = structlog.get_logger(__name__)


class HealthMonitor:
    """Calls ``check()`` every ``interval`` seconds from thread ``health-monitor-<name>``.

    ``check`` returns when healthy and raises when not (the message is the reason).
    ``on_change(healthy, reason)`` is called from the thread on the first result and on every
    change; ``on_tick()``, if given, after every check (the elector keeps its membership znode
    there). Neither may raise: what they raise is logged.
    """

    def __init__(
        self,
        check: Callable[[], None],
        interval: float,
        on_change: Callable[[bool, str], None],
        *,
        name: str,
        on_tick: Callable[[], None] | None = None,
    ) -> None:
        self._check = check
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

    def check_now(self) -> tuple[bool, str]:
        """Run the check once (in the caller's thread): ``(healthy, reason)``."""
        try:
            self._check()
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
