"""The NameNode's Prometheus metrics (docs/operations.md §5), one ``CollectorRegistry`` per
NameNode so that several NameNodes in one process (tests) do not share counters.

Counters and histograms are updated where things happen (the edit log, the tailer, the
checkpointer, transitions); gauges that describe the current state (HA state, last applied
txid, tailer lag) are read at scrape time from a ``snapshot`` callable::

    metrics = NameNodeMetrics()
    metrics.watch(namesystem.metrics_snapshot)
    start_http_server(port, registry=metrics.registry)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from conf.gcpauses import GcPauseCollector, install_pause_metrics
from conf.process_metrics import install_process_metrics
from qjm.metrics import QJM_REGISTRY

_LATENCY_BUCKETS = (
    0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)


@dataclass(frozen=True, slots=True)
class StateSnapshot:
    """What the scrape-time gauges report, read from the namesystem in one go."""

    ha_state: str
    last_applied_txid: int
    synced_txid: int
    tailer_lag_txns: int
    seconds_since_last_tail: float
    newest_image_txid: int
    inodes: int
    retry_cache_entries: int
    journals: tuple[tuple[str, str, str], ...] = ()
    """The active writer's JournalNodes: (configured id or address, address, why it is out of
    sync, "" when in sync)."""
    startup_complete: bool = False
    startup_phases: tuple[tuple[str, str, float, int | None], ...] = ()
    """The startup phases begun (hanamenode.startup): (phase, status, elapsed seconds, count:
    inodes loaded or edits applied, None for a phase without one)."""


HA_STATES = ("initializing", "standby", "active", "stopping", "observer")


class NameNodeMetrics:
    """Every metric of one NameNode, in ``registry``."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.sync_seconds = Histogram(
            "hanamenode_edit_log_sync_seconds",
            "logSync: one batch made durable on a quorum of JournalNodes",
            registry=r,
            buckets=_LATENCY_BUCKETS,
        )
        self.syncs = Counter(
            "hanamenode_edit_log_syncs", "logSync batches sent to the JournalNodes", registry=r
        )
        self.txns_synced = Counter(
            "hanamenode_edit_log_txns_synced", "Transactions made durable", registry=r
        )
        self.sync_batch_txns = Histogram(
            "hanamenode_edit_log_sync_batch_txns",
            "Transactions per logSync batch (group commit)",
            registry=r,
            buckets=_BATCH_BUCKETS,
        )
        self.edit_log_failures = Counter(
            "hanamenode_edit_log_failures",
            "Fatal edit log failures (quorum lost or writer fenced) that ended an active period",
            registry=r,
        )
        self.rolls = Counter("hanamenode_edit_log_rolls", "Edit log segments rolled", registry=r)
        self.transitions = Counter(
            "hanamenode_ha_transitions", "HA state transitions made", ["to_state"], registry=r
        )
        self.transition_seconds = Histogram(
            "hanamenode_ha_transition_seconds",
            "Duration of HA state transitions",
            ["to_state"],
            registry=r,
            buckets=_LATENCY_BUCKETS,
        )
        self.tailed_txns = Counter(
            "hanamenode_tailer_txns_applied", "Transactions applied by the standby tailer",
            registry=r,
        )
        self.pushed_txns_applied = Counter(
            "hanamenode_tailer_pushed_txns_applied",
            "Transactions the tailer applied from edits the JournalNodes pushed (SubscribeEdits)",
            registry=r,
        )
        self.edit_subscriptions = Gauge(
            "hanamenode_tailer_edit_subscriptions",
            "JournalNodes whose edits are pushed to this tailer now",
            registry=r,
        )
        self.push_fallbacks = Counter(
            "hanamenode_tailer_push_fallbacks",
            "Rounds of reading from the segments or caches started because a subscription "
            "ended or a push was refused, by reason",
            ["reason"],
            registry=r,
        )
        self.tail_errors = Counter(
            "hanamenode_tailer_errors", "Tailer rounds that failed", registry=r
        )
        self.roll_requests = Counter(
            "hanamenode_tailer_roll_requests", "Edit log rolls asked of the active", ["outcome"],
            registry=r,
        )
        self.checkpoints = Counter(
            "hanamenode_checkpoints", "fsimage checkpoints saved by this standby", registry=r
        )
        self.checkpoint_seconds = Histogram(
            "hanamenode_checkpoint_seconds",
            "Saving one fsimage checkpoint",
            registry=r,
            buckets=_LATENCY_BUCKETS,
        )
        self.checkpoint_errors = Counter(
            "hanamenode_checkpoint_errors", "Checkpoints (or their upload/purge) that failed",
            registry=r,
        )
        self.purges = Counter(
            "hanamenode_edit_log_purges", "PurgeLogs calls made to the JournalNodes", registry=r
        )
        self.observer_reads = Counter(
            "hanamenode_observer_reads",
            "Reads an observer held for the client's txid: served, or refused as behind",
            ["outcome"],
            registry=r,
        )
        self.rpc_seconds = Histogram(
            "hanamenode_rpc_seconds",
            "Server-side handling time of NameNode RPCs",
            ["method"],
            registry=r,
            buckets=_LATENCY_BUCKETS,
        )
        self.sessions_opened = Counter(
            "hanamenode_sessions_opened",
            "Client sessions (ClientProtocol/Session streams) opened on this NameNode",
            registry=r,
        )
        self.sessions_ended = Counter(
            "hanamenode_sessions_ended_by_step_down",
            "Client sessions this NameNode ended because it left the active state",
            registry=r,
        )
        self.session_unanswered = Gauge(
            "hanamenode_session_unanswered_calls",
            "Calls received on open client sessions and not answered yet (running or queued "
            "to be written), over all sessions",
            registry=r,
        )
        self._collector: _StateCollector | None = None
        # The writer's per-JournalNode metrics (qjm.metrics) are per process: serve them here.
        r.register(_Forward(QJM_REGISTRY))
        install_pause_metrics()
        r.register(GcPauseCollector())
        install_process_metrics(r, "hanamenode")  # process_*, hanamenode_build_info

    def watch(self, snapshot: Callable[[], StateSnapshot]) -> None:
        """Export the gauges of ``snapshot()`` at every scrape (once per registry)."""
        if self._collector is not None:
            self.registry.unregister(self._collector)
        self._collector = _StateCollector(snapshot)
        self.registry.register(self._collector)

    def value(self, name: str, labels: dict[str, str] | None = None) -> float:
        """The current value of one sample (tests): 0.0 when it was never set."""
        found = self.registry.get_sample_value(name, labels or {})
        return 0.0 if found is None else float(found)


class _Forward(Collector):
    """Another registry's metrics, collected into this one at scrape time."""

    def __init__(self, source: CollectorRegistry) -> None:
        self._source = source

    def describe(self) -> list[Any]:
        return []  # no names claimed: the source registry already keeps them unique

    def collect(self) -> Iterator[Any]:
        yield from self._source.collect()


class _StateCollector(Collector):
    def __init__(self, snapshot: Callable[[], StateSnapshot]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterator[Any]:
        s = self._snapshot()
        state = GaugeMetricFamily(
            "hanamenode_ha_state", "1 for the NameNode's current HA state", labels=["state"]
        )
        for name in HA_STATES:
            state.add_metric([name], 1.0 if s.ha_state == name else 0.0)
        yield state
        for name, doc, value in (
            ("hanamenode_last_applied_txid", "Last transaction applied to the namespace",
             s.last_applied_txid),
            ("hanamenode_edit_log_synced_txid", "Last transaction durable on a quorum (active)",
             s.synced_txid),
            ("hanamenode_tailer_lag_txns",
             "Transactions on the JournalNodes not yet applied by this standby",
             s.tailer_lag_txns),
            ("hanamenode_tailer_seconds_since_last_load",
             "Seconds since the tailer last applied edits or found none missing",
             s.seconds_since_last_tail),
            ("hanamenode_newest_image_txid", "Txid of the newest fsimage in the name dir",
             s.newest_image_txid),
            ("hanamenode_inodes", "Files and directories in the namespace", s.inodes),
            ("hanamenode_retry_cache_entries", "Entries in the retry cache",
             s.retry_cache_entries),
        ):
            yield GaugeMetricFamily(name, doc, value=float(value))
        journals = GaugeMetricFamily(
            "hanamenode_journal_out_of_sync",
            "1 while the active's logger for a JournalNode is out of sync; cause is disk-full"
            " or the error's class",
            labels=["journalnode", "address", "cause"],
        )
        for node_id, address, cause in s.journals:
            journals.add_metric([node_id, address, cause_kind(cause)], 1.0 if cause else 0.0)
        yield journals
        yield GaugeMetricFamily(
            "hanamenode_startup_complete",
            "1 once the startup is complete: image and edits loaded, in an HA state",
            value=1.0 if s.startup_complete else 0.0,
        )
        seconds = GaugeMetricFamily(
            "hanamenode_startup_phase_seconds",
            "Elapsed time of each startup phase begun (growing while it runs)",
            labels=["phase"],
        )
        complete = GaugeMetricFamily(
            "hanamenode_startup_phase_complete",
            "1 when a startup phase is complete, 0 while it runs or after it failed",
            labels=["phase"],
        )
        count = GaugeMetricFamily(
            "hanamenode_startup_phase_count",
            "Items done by a startup phase: inodes of the fsimage, edits applied",
            labels=["phase"],
        )
        for phase, status, elapsed, done in s.startup_phases:
            seconds.add_metric([phase], elapsed)
            complete.add_metric([phase], 1.0 if status == "complete" else 0.0)
            if done is not None:
                count.add_metric([phase], float(done))
        yield seconds
        yield complete
        yield count


def cause_kind(cause: str) -> str:
    """A short, bounded label for an out-of-sync cause: "disk-full" when the JournalNode ran
    out of space (its StorageError names ENOSPC or EDQUOT), else the error's class name."""
    if not cause:
        return ""
    if "[ENOSPC]" in cause or "[EDQUOT]" in cause:
        return "disk-full"
    head = cause.split(":", 1)[0]
    return head if head.isidentifier() else "other"
