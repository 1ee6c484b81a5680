"""The ZooKeeper journal's metrics (docs/operations.md §5), in ``qjm.metrics.QJM_REGISTRY``,
which a NameNode's ``/metrics`` serves: how long an append takes, how much of the live log
ZooKeeper holds, and how far each NameNode packed."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from qjm.metrics import QJM_REGISTRY

__all__ = [
    "APPEND_SECONDS", "DELETED_THROUGH", "FETCHED_TXNS", "LIVE_BATCHES", "LIVE_BYTES",
    "PACKED_TXID",
]

APPEND_SECONDS = Histogram(
    "zkjournal_append_seconds",
    "Time for ZooKeeper to commit one append (a multi) of the active",
    ["journal"],
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1, 5),
    registry=QJM_REGISTRY,
)
LIVE_BATCHES = Gauge(
    "zkjournal_live_batches",
    "Batch znodes the live log holds, after the active's publisher's last round",
    ["journal"],
    registry=QJM_REGISTRY,
)
LIVE_BYTES = Gauge(
    "zkjournal_live_bytes",
    "Bytes of the batch znodes the live log holds, after the publisher's last round",
    ["journal"],
    registry=QJM_REGISTRY,
)
DELETED_THROUGH = Gauge(
    "zkjournal_deleted_through_txid",
    "The last txid whose batch the active's publisher deleted",
    ["journal"],
    registry=QJM_REGISTRY,
)
PACKED_TXID = Gauge(
    "zkjournal_packed_txid",
    "The last txid this NameNode packed into a segment on its disk",
    ["journal"],
    registry=QJM_REGISTRY,
)
FETCHED_TXNS = Counter(
    "zkjournal_fetched_txns",
    "Txids this NameNode fetched from another's packed segments (ZooKeeper had deleted them)",
    ["journal"],
    registry=QJM_REGISTRY,
)
