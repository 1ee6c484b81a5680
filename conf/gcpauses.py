"""The garbage collector of a daemon process: its pauses on ``/metrics`` (what Hadoop's
JvmMetrics ``GcTimeMillis`` tells an HDFS operator), and the freeze after start.

CPython stops every thread of the process while its cyclic collector runs. A full
(generation 2) collection visits every tracked object, so its pause grows with the heap: in a
NameNode under 32 writers it measured 40-80 ms, longer than the calls it delays
(docs/operations.md §5). ``freeze_after_start`` moves what start made (modules, the image's
inodes, gRPC and protobuf machinery) to the collector's permanent generation
(``gc.freeze``): full collections then visit only what was made since, and nothing is
lost, since reference counting still frees every frozen object nobody holds (only a frozen
reference cycle would stay, and inodes hold no cycle: a directory holds its children, a
child not its parent).

    install_pause_metrics()                 # once per process: gc.callbacks
    registry.register(GcPauseCollector())   # python_gc_pause_seconds{generation}
    freeze_after_start(settings.gc_freeze)  # after the servers are up
"""

from __future__ import annotations

import bisect
import gc
import time
from collections.abc import Iterator
from typing import Any

import structlog
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector

log = structlog.get_logger(__name__)

BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0)
"""Upper bounds (seconds) of the pause histogram; ``+Inf`` follows."""

GENERATIONS = (0, 1, 2)


class _Pauses:
    """Counts per generation and bucket, kept by a ``gc.callbacks`` hook. The hook takes no
    lock (a collection can start in any thread, inside any lock); a scrape may read a count
    one collection behind, never a torn one (each update is one assignment under the GIL)."""

    def __init__(self) -> None:
        self.started = 0.0
        self.buckets = {g: [0] * (len(BUCKETS) + 1) for g in GENERATIONS}
        self.sums = dict.fromkeys(GENERATIONS, 0.0)
        self.longest = 0.0

    def callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self.started = time.perf_counter()
            return
        elapsed = time.perf_counter() - self.started
        generation = int(info.get("generation", 2))
        self.buckets[generation][bisect.bisect_left(BUCKETS, elapsed)] += 1
        self.sums[generation] += elapsed
        if elapsed > self.longest:
            self.longest = elapsed


_PAUSES = _Pauses()


def install_pause_metrics() -> None:
    """Time every collection of this process from now on (idempotent)."""
    if _PAUSES.callback not in gc.callbacks:
        gc.callbacks.append(_PAUSES.callback)


def longest_pause() -> float:
    """The longest collection pause seen since ``install_pause_metrics``, in seconds."""
    return _PAUSES.longest


class GcPauseCollector(Collector):
    """``python_gc_pause_seconds{generation}``: how long each collection stopped the process."""

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(
            "python_gc_pause_seconds",
            "Garbage-collector pauses of this process (every thread stops), by generation",
            labels=["generation"],
        )
        for generation in GENERATIONS:
            counts = list(_PAUSES.buckets[generation])
            cumulative, running = [], 0
            for bound, count in zip((*BUCKETS, float("inf")), counts, strict=True):
                running += count
                cumulative.append((_bound_text(bound), running))
            family.add_metric(
                [str(generation)], buckets=cumulative, sum_value=_PAUSES.sums[generation]
            )
        yield family


def _bound_text(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


def freeze_after_start(enabled: bool, daemon: str) -> int:
    """With ``enabled`` (``hanamenode.gc.freeze-after-start``), collect once, then move every
    object alive to the permanent generation; the number of objects frozen (0 when not)."""
    if not enabled:
        return 0
    started = time.perf_counter()
    _collect_fully(daemon)
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info(
        "garbage collector settled: objects alive at start frozen",
        daemon=daemon,
        frozen_objects=frozen,
        seconds=round(time.perf_counter() - started, 3),
    )
    return frozen


FULL_COLLECTION_WAIT = 5.0
"""How long ``freeze_after_start`` waits for another thread's collection to end."""


def _collect_fully(daemon: str) -> None:
    """One full collection. While another thread's collection is under way (a finalizer it
    runs can release the GIL), CPython makes ``gc.collect()`` return without collecting: ask
    again until a generation-2 collection has run, for up to ``FULL_COLLECTION_WAIT``."""
    before = gc.get_stats()[2]["collections"]
    deadline = time.monotonic() + FULL_COLLECTION_WAIT
    while True:
        gc.collect()
        if gc.get_stats()[2]["collections"] > before:
            return
        if time.monotonic() >= deadline:
            log.warning(
                "no full collection before the freeze: another thread's collection did not end",
                daemon=daemon,
                waited_seconds=FULL_COLLECTION_WAIT,
            )
            return
        time.sleep(0.01)


__all__ = [
    "BUCKETS",
    "GcPauseCollector",
    "freeze_after_start",
    "install_pause_metrics",
    "longest_pause",
]
