"""Writer-side metrics after Hadoop's IPCLoggerChannelMetrics (HDFS-3077 §6).

One set of Prometheus metrics per process, labelled by journal, JournalNode (its configured
id, ``jn1``, or its address when no id is configured) and address, so any number of
QuorumJournalManagers (tests run several) share them without clashing. They live in
``QJM_REGISTRY``, which a NameNode's ``/metrics`` serves beside its own registry.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_LATENCY_BUCKETS = (
    0.0001,
    0.0002,
    0.0003,
    0.0005,
    0.00075,
    0.001,
    0.002,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.5,
    1,
    5,
)


QJM_REGISTRY = CollectorRegistry(auto_describe=True)
"""The writer's metrics of this process (every QuorumJournalManager in it)."""


def contact_threshold(heartbeat_interval: float) -> float:
    """Seconds without any answer after which a JournalNode is out of contact: three missed
    heartbeats (an idle writer heartbeats every interval), and never under 2 s.

    >>> contact_threshold(0.2), contact_threshold(1.0)
    (2.0, 3.0)
    """
    return max(2.0, 3 * heartbeat_interval)


@dataclass(frozen=True)
class LoggerMetricHandles:
    """The label-bound metrics of one AsyncLogger."""

    out_of_sync: Gauge
    since_contact: Gauge
    queued_bytes: Gauge
    lag_txns: Gauge
    lag_seconds: Gauge
    rpc_seconds: Histogram
    write_seconds: Histogram


class LoggerMetrics:
    def __init__(self) -> None:
        labels = ["journal", "journalnode", "address"]
        r = QJM_REGISTRY
        self.out_of_sync = Gauge(
            "qjm_logger_out_of_sync",
            "1 while the JournalNode is out of sync (its edits refused until the next segment) "
            "or out of contact (no answer for 3 heartbeat intervals, at least 2 s)",
            labels,
            registry=r,
        )
        self.since_contact = Gauge(
            "qjm_logger_seconds_since_last_contact",
            "Seconds since the JournalNode last answered the writer (a batch or a heartbeat; "
            "since the logger started when it never has); NaN once the writer closed it",
            labels,
            registry=r,
        )
        self.queued_bytes = Gauge(
            "qjm_logger_queued_edits_bytes", "Edit bytes queued for the JN", labels, registry=r
        )
        self.lag_txns = Gauge(
            "qjm_logger_lag_txns", "Txns the JN is behind the quorum", labels, registry=r
        )
        self.lag_seconds = Gauge(
            "qjm_logger_lag_seconds", "Seconds since the lagging JN last acked", labels, registry=r
        )
        self.rpc_seconds = Histogram(
            "qjm_logger_journal_rpc_seconds",
            "Journal RPC round trip",
            labels,
            buckets=_LATENCY_BUCKETS,
            registry=QJM_REGISTRY,
        )
        self.write_seconds = Histogram(
            "qjm_logger_write_seconds",
            "Journal batch latency including queueing",
            labels,
            buckets=_LATENCY_BUCKETS,
            registry=QJM_REGISTRY,
        )

    def for_logger(self, journal_id: str, node_id: str, address: str) -> LoggerMetricHandles:
        labels = (journal_id, node_id, address)
        return LoggerMetricHandles(
            self.out_of_sync.labels(*labels),
            self.since_contact.labels(*labels),
            self.queued_bytes.labels(*labels),
            self.lag_txns.labels(*labels),
            self.lag_seconds.labels(*labels),
            self.rpc_seconds.labels(*labels),
            self.write_seconds.labels(*labels),
        )


LOGGER_METRICS = LoggerMetrics()

QUORUM_SYNC_SECONDS = Histogram(
    "qjm_quorum_sync_seconds",
    "Time for a batch to be acked by a quorum",
    ["journal"],
    buckets=_LATENCY_BUCKETS,
    registry=QJM_REGISTRY,
)

READ_INDEX_ROUNDS = Counter(
    "qjm_read_index_rounds",
    "Read-index rounds (a quorum confirming the writer's epoch), by outcome",
    ["journal", "outcome"],
    registry=QJM_REGISTRY,
)

READ_INDEX_ROUND_SECONDS = Histogram(
    "qjm_read_index_round_seconds",
    "Time for a read-index round to be answered by a quorum (or to fail)",
    ["journal"],
    buckets=_LATENCY_BUCKETS,
    registry=QJM_REGISTRY,
)
