"""The elector's Prometheus metrics, in the NameNode's registry (docs/operations.md §5):
elections won, failed attempts, fencing by method and outcome, step-downs by reason, the time
from winning the lock to active, the seconds spent without ZooKeeper (neutral mode), and
gauges of the ZooKeeper connection and election state::

    metrics = ElectorMetrics(registry, lambda: "waiting", lambda: "CONNECTED")
    metrics.step_downs.labels("unhealthy").inc()
    metrics.unregister()          # when the elector closes
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["ELECTOR_STATES", "ElectorMetrics"]

log = structlog.get_logger(__name__)

ELECTOR_STATES = ("stopped", "out", "waiting", "becoming_active", "active")
ZK_STATES = ("CONNECTED", "SUSPENDED", "LOST")


class ElectorMetrics:
    """Counters updated by the elector; gauges read from ``state()`` (an ``ElectorState``
    value) and ``zk_state()`` (kazoo's CONNECTED, SUSPENDED or LOST) at scrape time."""

    def __init__(
        self,
        registry: CollectorRegistry,
        state: Callable[[], str],
        zk_state: Callable[[], str],
        neutral_seconds: Callable[[], float] = lambda: 0.0,
    ) -> None:
        self.registry = r = registry
        self.became_active = Counter(
            "hanamenode_elector_became_active",
            "Times this NameNode won the election and became active",
            registry=r,
        )
        self.failed_attempts = Counter(
            "hanamenode_elector_failed_attempts",
            "Times this NameNode won the lock but did not become active (fencing or "
            "transition failed)",
            registry=r,
        )
        self.fencing_attempts = Counter(
            "hanamenode_elector_fencing_attempts",
            "Fencing of an old active: graceful (RPC) or a configured method",
            ["method", "outcome"],
            registry=r,
        )
        self.step_downs = Counter(
            "hanamenode_elector_step_downs",
            "Times the active left the election, by reason",
            ["reason"],
            registry=r,
        )
        self.become_active_seconds = Histogram(
            "hanamenode_elector_become_active_seconds",
            "From winning the lock to active: breadcrumb, fencing, transition",
            registry=r,
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60),
        )
        gauges = _StateCollector(state, zk_state, neutral_seconds)
        r.register(gauges)
        self._collectors: list[Any] = [
            self.became_active,
            self.failed_attempts,
            self.fencing_attempts,
            self.step_downs,
            self.become_active_seconds,
            gauges,
        ]

    def unregister(self) -> None:
        """Remove every metric from the registry (a new elector may register them again)."""
        for collector in self._collectors:
            try:
                self.registry.unregister(collector)
            except KeyError:
                log.warning("elector metric was not registered", collector=repr(collector))


class _StateCollector(Collector):
    def __init__(
        self,
        state: Callable[[], str],
        zk_state: Callable[[], str],
        neutral_seconds: Callable[[], float],
    ) -> None:
        self._state = state
        self._zk_state = zk_state
        self._neutral_seconds = neutral_seconds

    def collect(self) -> Iterator[Any]:
        zk = GaugeMetricFamily(
            "hanamenode_elector_zk_state", "1 for the ZooKeeper connection state", labels=["state"]
        )
        current = self._zk_state()
        for name in ZK_STATES:
            zk.add_metric([name.lower()], 1.0 if current == name else 0.0)
        yield zk
        election = GaugeMetricFamily(
            "hanamenode_elector_state", "1 for the elector's state", labels=["state"]
        )
        state = self._state()
        for name in ELECTOR_STATES:
            election.add_metric([name], 1.0 if state == name else 0.0)
        yield election
        yield CounterMetricFamily(
            "hanamenode_elector_neutral_seconds",
            "Seconds the elector spent without ZooKeeper (neutral mode: automatic failover "
            "suspended, the NameNode keeps its state)",
            value=self._neutral_seconds(),
        )
