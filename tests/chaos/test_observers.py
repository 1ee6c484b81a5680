"""Observer NameNodes in the dev cluster with automatic failover (issue 14 §1,
docs/consistency.md §9): three electable NameNodes and one observer (``hadev up
--observers 1``), a real ZooKeeper, real signals.

- ``hactl get-all-service-state`` shows the observer, and ``hactl failover`` to it is refused;
- ``hafs`` sends its reads to the observer with no flag;
- SIGKILL of the observer while clients write and read their own writes through it: no client
  call fails, and every read sees the reader's own write;
- kill -9 of the active, twice: a standby is elected each time, never the observer, whose
  elector never becomes active (the elector's failover among three NameNodes plus an
  observer).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from hadev.devcluster import LOAD_POLICY, DevCluster, MkdirLoad
from hadev.namenodes import run_hafs
from hadev.scrape import metric_value
from hanamenode.client import HaFsClient
from hanamenode.ha import HAState
from tests.chaos.conftest import QUORUM_TIMEOUT, SESSION_TIMEOUT

pytestmark = pytest.mark.timeout(600)

OBSERVER = "nn4"
TAKEOVER_TIMEOUT = SESSION_TIMEOUT + 14.0


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    with DevCluster(
        tmp_path_factory.mktemp("observers"),
        namenodes=3,
        observers=1,
        session_timeout=SESSION_TIMEOUT,
        quorum_timeout=QUORUM_TIMEOUT,
    ) as cluster:
        cluster.wait_state(OBSERVER, HAState.OBSERVER)
        yield cluster


def metric(dev: DevCluster, nn: str, name: str, **labels: str) -> float:
    return metric_value(dev.namenode(nn).metrics_url, name, **labels)


class ReadYourWrites:
    """``readers`` threads, each with its own client (observer reads on, from the dev
    cluster's configuration): make a directory, then ``stat`` it and ``list`` its parent,
    which must show it. Every call that raised and every read that missed its own write is
    recorded."""

    def __init__(self, dev: DevCluster, readers: int) -> None:
        self.settings = dev.settings()
        self.readers = readers
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.reads = 0
        self.failures: list[str] = []
        self.threads = [
            threading.Thread(target=self._run, args=(i,), name=f"ryw-{i}", daemon=True)
            for i in range(readers)
        ]

    def __enter__(self) -> ReadYourWrites:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        for thread in self.threads:
            thread.join(60)

    def _run(self, index: int) -> None:
        base = f"/ryw/r{index}"
        with HaFsClient(self.settings, policy=LOAD_POLICY) as fs:
            assert fs.proxy.observer_reads
            n = 0
            while not self.stop_event.is_set():
                path = f"{base}/d{n:06d}"
                n += 1
                try:
                    fs.mkdirs(path, parents=True)
                    seen = fs.stat(path).is_dir and path in {s.path for s in fs.list(base)}
                except Exception as exc:
                    with self.lock:
                        self.failures.append(f"{path}: {type(exc).__name__}: {exc}")
                    continue
                with self.lock:
                    self.reads += 2
                    if not seen:
                        self.failures.append(f"{path}: a read missed the reader's own write")

    def wait_reads(self, count: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        start = self.reads
        while self.reads < start + count:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True


def test_hactl_shows_the_observer_and_never_fails_over_to_it(dev: DevCluster) -> None:
    states = dev.hactl("get-all-service-state")
    assert states.returncode == 0, states.stderr
    lines = states.stdout.splitlines()
    assert len(lines) == 4
    assert lines[3].endswith("  observer"), states.stdout
    assert sum(line.endswith("  active") for line in lines) == 1, states.stdout
    active = dev.wait_active()
    refused = dev.hactl("failover", active, OBSERVER)
    assert refused.returncode == 255
    assert "is an observer, which never becomes active" in refused.stderr
    assert dev.wait_active() == active


def test_hafs_reads_from_the_observer_with_no_flag(dev: DevCluster) -> None:
    """Each ``hafs`` command is a new client: msync on the active, then its read goes to the
    observer (which answers once it has applied that txid, or refuses and the active
    answers); its write goes to the active."""
    assert run_hafs(dev.conf_path, "mkdir", "-p", "/hafs/a").returncode == 0
    before = [
        metric(dev, OBSERVER, "hanamenode_observer_reads_total", outcome=outcome)
        for outcome in ("served", "behind")
    ]
    listing = run_hafs(dev.conf_path, "ls", "/hafs")
    assert listing.returncode == 0, listing.stderr
    assert "/hafs/a" in listing.stdout
    after = [
        metric(dev, OBSERVER, "hanamenode_observer_reads_total", outcome=outcome)
        for outcome in ("served", "behind")
    ]
    # hafs ls reads twice (stat, then list): each went to the observer first.
    assert sum(after) >= sum(before) + 1, (before, after)


def test_killing_the_observer_under_load_fails_no_call(dev: DevCluster) -> None:
    dev.wait_active()
    with MkdirLoad(dev.settings(), "/obs-load", writers=2, pause=0.005) as load, ReadYourWrites(
        dev, readers=3
    ) as readers:
        assert load.wait_acks(20, 30) and readers.wait_reads(40, 30)
        served = metric(dev, OBSERVER, "hanamenode_observer_reads_total", outcome="served")
        assert served > 0, "the observer answered no read"
        dev.kill(OBSERVER)
        assert readers.wait_reads(40, 30), "reads stopped after the observer was killed"
        assert load.wait_acks(20, 30), "writes stopped after the observer was killed"
        dev.restart(OBSERVER)
        dev.wait_state(OBSERVER, HAState.OBSERVER, 30)
        assert readers.wait_reads(40, 30)
        load.stop()
    assert not readers.failures, readers.failures[:5]
    assert not load.failures, load.failures[:5]
    with dev.client(LOAD_POLICY) as fs:
        assert not load.missing(fs)


def test_a_standby_is_elected_never_the_observer(dev: DevCluster) -> None:
    with MkdirLoad(dev.settings(), "/obs-kill", writers=2, pause=0.01) as load:
        assert load.wait_acks(10, 30)
        for _ in range(2):
            active = dev.wait_active()
            dev.kill(active)
            survivor = dev.wait_active(TAKEOVER_TIMEOUT, exclude=active)
            assert survivor != OBSERVER
            assert metric(dev, survivor, "hanamenode_elector_became_active_total") >= 1
            assert dev.namenode(OBSERVER).state() is HAState.OBSERVER
            assert load.wait_acks(10, 30), f"no acks through {survivor}"
            dev.restart(active)
            dev.wait_state(active, HAState.STANDBY, 30)
        load.stop()
    assert not load.failures, load.failures[:5]
    assert metric(dev, OBSERVER, "hanamenode_elector_became_active_total") == 0
    assert metric(dev, OBSERVER, "hanamenode_elector_step_downs_total") == 0
    with dev.client(LOAD_POLICY) as fs:
        assert not load.missing(fs)
