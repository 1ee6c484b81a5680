"""No two writers ever obtain the same epoch (Hadoop's TestEpochsAreUnique, HDFS-3077 §2.5, §7.1).

Two forms of one race: in the deterministic simulator (many writers, interleaved, with
getJournalState/newEpoch failing before and after the JournalNode acts, one seed per run), and
with real threads against real gRPC JournalNodes (``MiniJournalCluster``) behind a
fault-injecting wrapper of ``GrpcJournalChannel``.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest

from hadev.minicluster import MiniJournalCluster
from journalnode.errors import JournalError, JournalUnavailableError
from journalnode.journal import Journal
from proto.values import NamespaceInfo
from qjm.async_logger import AsyncLogger, AsyncLoggerSet
from qjm.channel import GrpcJournalChannel
from qjm.errors import QJMError
from qjm.journal_manager import QuorumJournalManager
from qjm.sim import run_epoch_race

T = TypeVar("T")

SIM_SEEDS = 100
SIM_WRITERS = 20
THREADS = 4
ATTEMPTS = 15
FAIL_BEFORE = 0.1
FAIL_AFTER = 0.1


# ---------------------------------------------------------------------------- the simulator


def test_epochs_are_unique_in_the_simulator() -> None:
    obtained = contested = faults = 0
    for seed in range(SIM_SEEDS):
        result = run_epoch_race(seed, SIM_WRITERS)
        epochs = [epoch for _, epoch in result.epochs]
        assert result.ok, f"seed={seed}: {result.violation}"
        assert len(set(epochs)) == len(epochs), f"seed={seed}: duplicate epochs {result.epochs}"
        obtained += len(epochs)
        contested += result.contested
        faults += result.faults_injected
    print(
        f"\n{SIM_SEEDS} seeds: {obtained} epochs obtained, {contested} contested, {faults} faults"
    )
    # Not vacuous: writers did propose the same epoch, and faults did happen.
    assert contested >= SIM_SEEDS
    assert faults >= 10 * SIM_SEEDS
    assert obtained >= 5 * SIM_SEEDS


def test_the_race_catches_a_journal_that_promises_an_epoch_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The check bites: a JournalNode that accepts newEpoch(e) when it already promised e
    (``<`` instead of ``<=``, HDFS-3077 §2.5 step 3) lets two writers win the same epoch."""
    real = Journal.new_epoch

    def promises_twice(self: Journal, ns: NamespaceInfo, epoch: int) -> int | None:
        if epoch == self.last_promised_epoch:
            self._promise(epoch - 1)
        return real(self, ns, epoch)

    monkeypatch.setattr(Journal, "new_epoch", promises_twice)
    bad = [r for r in (run_epoch_race(seed, SIM_WRITERS) for seed in range(SIM_SEEDS)) if not r.ok]
    assert bad, "a broken newEpoch went unnoticed"
    assert "epochs-unique" in (bad[0].violation or "")


# ---------------------------------------------------------------------------- real threads


@dataclass(frozen=True)
class Timeouts:
    """``qjm.journal_manager._DefaultTimeouts``'s attributes, small enough for a test."""

    start_segment_timeout: float = 10.0
    prepare_recovery_timeout: float = 10.0
    accept_recovery_timeout: float = 10.0
    finalize_segment_timeout: float = 10.0
    select_input_streams_timeout: float = 10.0
    get_journal_state_timeout: float = 10.0
    new_epoch_timeout: float = 10.0
    write_txns_timeout: float = 10.0
    format_timeout: float = 10.0
    heartbeat_interval: float = 1.0
    queued_edits_limit_bytes: int = 10 * 1024 * 1024


class FlakyChannel:
    """A GrpcJournalChannel whose getJournalState and newEpoch fail before the call leaves
    the writer, or after the JournalNode acted (the answer is lost), from a seeded RNG."""

    def __init__(self, inner: GrpcJournalChannel, rng: random.Random) -> None:
        self._inner = inner
        self._rng = rng
        self.address = inner.address

    def _flaky(self, what: str, call: Callable[[], T]) -> T:
        roll = self._rng.random()
        if roll < FAIL_BEFORE:
            raise JournalUnavailableError(f"injected: {what} to {self.address} lost")
        result = call()
        if roll < FAIL_BEFORE + FAIL_AFTER:
            raise JournalUnavailableError(f"injected: answer of {self.address} to {what} lost")
        return result

    def get_journal_state(self, journal_id: str, cluster_id: str, timeout: float) -> Any:
        return self._flaky(
            "getJournalState",
            lambda: self._inner.get_journal_state(journal_id, cluster_id, timeout),
        )

    def new_epoch(self, journal_id: str, ns: NamespaceInfo, epoch: int, timeout: float) -> Any:
        return self._flaky(
            f"newEpoch({epoch})", lambda: self._inner.new_epoch(journal_id, ns, epoch, timeout)
        )

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


JID = "epochs"
NS = NamespaceInfo("CID-epochs", 77)


@pytest.fixture
def cluster() -> Iterator[MiniJournalCluster]:
    with MiniJournalCluster(3) as c:
        admin = c.qjm(JID, NS, Timeouts())
        try:
            admin.format()
        finally:
            admin.close()
        yield c


def _qjm(addresses: list[str], rng: random.Random) -> QuorumJournalManager:
    timeouts = Timeouts()
    loggers = AsyncLoggerSet(
        AsyncLogger(
            FlakyChannel(GrpcJournalChannel(address), random.Random(rng.random())),
            JID,
            NS,
            timeouts=timeouts,
        )
        for address in addresses
    )
    return QuorumJournalManager(loggers, JID, NS, timeouts)


def test_epochs_are_unique_with_real_threads(cluster: MiniJournalCluster) -> None:
    base_seed = random.randrange(1 << 30)
    print(f"\nbase seed {base_seed} (thread i uses seed {base_seed} + i)")
    obtained: list[tuple[str, int]] = []
    failures: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(THREADS)

    def writer(i: int) -> None:
        rng = random.Random(base_seed + i)
        name = f"writer-{i}"
        try:
            start.wait(timeout=30)
            for attempt in range(ATTEMPTS):
                qjm = _qjm(cluster.addresses, rng)
                try:
                    qjm.create_new_unique_epoch()
                    with lock:
                        obtained.append((f"{name}#{attempt}", qjm.epoch))
                except (QJMError, JournalError) as exc:
                    with lock:
                        failures.append(f"{name}#{attempt}: {type(exc).__name__}")
                finally:
                    qjm.close()
        except BaseException as exc:  # reported below: a thread must not die silently
            with lock:
                errors.append(exc)

    threads = [
        threading.Thread(target=writer, args=(i,), name=f"epoch-writer-{i}") for i in range(THREADS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a writer thread hung"
    assert not errors, f"base seed {base_seed}: {errors!r}"
    epochs = [epoch for _, epoch in obtained]
    duplicates = sorted({e for e in epochs if epochs.count(e) > 1})
    assert not duplicates, f"base seed {base_seed}: epochs obtained twice: {duplicates} {obtained}"
    print(f"{len(obtained)} epochs obtained, {len(failures)} attempts failed")
    assert len(obtained) >= THREADS, f"base seed {base_seed}: too few successes {failures}"
