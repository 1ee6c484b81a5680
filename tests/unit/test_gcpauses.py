"""``conf.gcpauses``: every collection of the process is timed into
``python_gc_pause_seconds{generation}``, and the freeze after start moves what is alive to
the permanent generation only when asked (``hanamenode.gc.freeze-after-start``). The live
daemons' figures are checked in ``tests/process/test_metrics_and_traces.py``."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from conf import Settings, gcpauses
from conf.gcpauses import GcPauseCollector, freeze_after_start, install_pause_metrics


@pytest.fixture
def registry() -> CollectorRegistry:
    install_pause_metrics()
    install_pause_metrics()  # idempotent: one hook
    r = CollectorRegistry()
    r.register(GcPauseCollector())
    return r


@pytest.fixture
def unfrozen() -> Iterator[None]:
    yield
    gc.unfreeze()


def value(r: CollectorRegistry, name: str, **labels: str) -> float:
    found = r.get_sample_value(name, labels)
    assert found is not None, (name, labels)
    return found


def test_each_collection_is_timed_in_its_generation(registry: CollectorRegistry) -> None:
    assert sum(1 for cb in gc.callbacks if cb == gcpauses._PAUSES.callback) == 1
    before = {g: value(registry, "python_gc_pause_seconds_count", generation=g) for g in "012"}
    sum_before = value(registry, "python_gc_pause_seconds_sum", generation="2")
    for _ in range(3):
        gc.collect()
    gc.collect(0)
    after = {g: value(registry, "python_gc_pause_seconds_count", generation=g) for g in "012"}
    assert after["2"] - before["2"] >= 3
    assert after["0"] - before["0"] >= 1
    assert value(registry, "python_gc_pause_seconds_sum", generation="2") > sum_before
    # Cumulative buckets end at +Inf with the count.
    assert value(
        registry, "python_gc_pause_seconds_bucket", generation="2", le="+Inf"
    ) == after["2"]
    assert value(
        registry, "python_gc_pause_seconds_bucket", generation="2", le="0.0005"
    ) <= after["2"]


def test_the_freeze_happens_only_when_asked(unfrozen: None) -> None:
    gc.unfreeze()
    assert freeze_after_start(False, "nn1") == 0
    assert gc.get_freeze_count() == 0
    kept = [[i] for i in range(1000)]  # lists are tracked by the collector; object()s are not
    frozen = freeze_after_start(True, "nn1")
    # Not an exact count: frozen objects that other threads drop meanwhile are freed.
    assert frozen >= len(kept) and gc.get_freeze_count() >= len(kept)
    assert all(gc.is_tracked(k) for k in kept[:3])


def test_the_setting_defaults_to_on_and_can_be_turned_off() -> None:
    assert Settings.from_mapping({}).gc_freeze_after_start is True
    off = Settings.from_mapping({"hanamenode.gc.freeze-after-start": False})
    assert off.gc_freeze_after_start is False


class _HeldInCollection:
    """A reference cycle whose finalizer waits on ``release``: while it waits (without the
    GIL), its thread's collection is under way, and CPython turns any other ``gc.collect()``
    into a no-op that collects nothing."""

    def __init__(self, entered: threading.Event, release: threading.Event) -> None:
        self.me = self
        self.entered, self.release = entered, release

    def __del__(self) -> None:
        self.entered.set()
        self.release.wait(10)


def test_the_freeze_waits_for_a_full_collection_another_thread_holds(unfrozen: None) -> None:
    """Another thread's collection in progress made the daemon's one ``gc.collect()`` a no-op
    (a JournalNode of a fresh-clone run served ``python_gc_pause_seconds_count`` 0 for
    generation 2): the freeze asks again until a full collection has run."""
    entered, release = threading.Event(), threading.Event()

    def collect_a_held_cycle() -> None:
        _HeldInCollection(entered, release)
        gc.collect()

    holder = threading.Thread(target=collect_a_held_cycle, name="held-collection")
    holder.start()
    try:
        assert entered.wait(10)  # its collection is under way, waiting in the finalizer
        full_before = gc.get_stats()[2]["collections"]
        threading.Timer(0.2, release.set).start()
        started = time.monotonic()
        assert freeze_after_start(True, "test") > 0
        assert gc.get_stats()[2]["collections"] >= full_before + 1
        assert time.monotonic() - started >= 0.15  # it waited for the other collection
    finally:
        release.set()
        holder.join(10)
