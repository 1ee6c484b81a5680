"""What can go wrong, and how often: the simulator's fault kinds and the one RNG that picks them.

HDFS-3077 §7.3 (``TestQJMWithFaults.testRandomized``): a fault-injecting proxy between
the writers and the JournalNodes fails some percentage of the RPCs, and every choice comes from
one seeded random number generator so that a seed replays the run. ``FaultInjector`` is that
proxy's brain: the simulated channel asks it, once per delivered RPC, what happens to this one
(``RpcFault``), and it counts every fault it injects by ``FaultKind``.

The probabilities (``FaultPlan``) are a budget of about 0.1 per RPC for the plain faults
(fail before the JournalNode acts, fail after it acted, kill the JournalNode at the fault point),
plus the targeted ones that reach the protocol's edge cases: writers that die after the first
batch of a segment reached only some JournalNodes or in the middle of a recovery (HDFS-3845),
a torn append, an acceptRecovery whose decision is lost after its segment was synced
(HDFS-3955).
"""

from __future__ import annotations

import dataclasses
import enum
import random
from collections import Counter
from dataclasses import dataclass


class FaultKind(enum.Enum):
    """Every fault the simulator injects; ``SimResult.fault_counts`` counts them by value."""

    FAIL_BEFORE = "fail-before"
    """The RPC is lost on the way: the JournalNode never acts (JournalUnavailableError)."""
    FAIL_AFTER = "fail-after"
    """The JournalNode acted (durably) but its answer is lost."""
    JN_CRASH = "jn-crash"
    """The JournalNode is killed at the RPC's fault point, before or after acting; it comes
    back later as a new ``Journal`` over the same storage (kill -9 and restart)."""
    POWER_LOSS = "power-loss"
    """A JournalNode crash (of either kind above) was a machine crash: what it had written
    but not fsynced is gone (``MemoryJournalStorage.lose_unsynced``)."""
    JN_RESTART = "jn-restart"
    """A JournalNode is restarted between two steps."""
    TORN_APPEND = "torn-append"
    """The JournalNode dies in the middle of an append: a prefix of the batch's bytes is on
    disk, the rest is not; the next load truncates the torn tail."""
    LOST_ACCEPT = "lost-accept"
    """The JournalNode dies after acceptRecovery synced the segment but before it persisted
    the accepted recovery (HDFS-3077 §2.8 step 3b; HDFS-3955)."""
    FETCH_FAIL = "fetch-fail"
    """acceptRecovery's download of the segment from the recovery source fails."""
    PARTITION = "partition"
    """A JournalNode is cut off from every writer and reader for a few steps, without
    restarting (it keeps its open segment and its edit cache)."""
    READ_FAIL = "read-fail"
    """A reader's getSegment fails, before the first byte or in the middle of the stream."""
    WRITER_CRASH_BATCH = "writer-crash-batch"
    """The writer dies in the middle of sending a batch: it reached only a prefix of the
    JournalNodes, in their fixed order (HDFS-3077 §2.10.1, §2.10.6)."""
    WRITER_CRASH_RECOVERY = "writer-crash-recovery"
    """The writer dies in the middle of taking over: newEpoch, prepareRecovery, acceptRecovery
    or the recovery's finalize reached only some JournalNodes (HDFS-3077 §2.10.7, HDFS-3845)."""
    WRITER_CRASH_OTHER = "writer-crash-other"
    """The writer dies in the middle of another call (startLogSegment, finalize, purge)."""


class RpcFault(enum.Enum):
    """What happens to one delivered RPC (the channel acts on it)."""

    NONE = "none"
    FAIL_BEFORE = "fail-before"
    FAIL_AFTER = "fail-after"
    JN_CRASH_BEFORE = "jn-crash-before"
    JN_CRASH_AFTER = "jn-crash-after"
    TORN_APPEND = "torn-append"
    LOST_ACCEPT = "lost-accept"
    WRITER_CRASH_BEFORE = "writer-crash-before"
    WRITER_CRASH_AFTER = "writer-crash-after"


class RpcContext(enum.Enum):
    """Which part of the protocol an RPC belongs to, for the writer-crash probabilities."""

    FIRST_BATCH = "first-batch"
    """journal() of the first batch of a segment."""
    BATCH = "batch"
    """journal() of a later batch."""
    RECOVERY = "recovery"
    """Any call while the writer is taking over (getJournalState .. recovery's finalize)."""
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """Probabilities of every fault, per delivered RPC unless said otherwise.

    ``fail_before + fail_after + jn_crash`` is the plain budget of about 0.1 per RPC (HDFS-3077
    §7.3: a fixed share of the RPCs fails). The writer-crash
    probabilities are per delivery too, so a crash lands before or after a uniformly random
    JournalNode of the fixed order and the call reaches only a prefix of them.
    """

    fail_before: float = 0.055
    fail_after: float = 0.04
    jn_crash: float = 0.005
    torn_append: float = 0.02
    """Extra, on journal() only."""
    lost_accept: float = 0.04
    """Extra, on acceptRecovery only."""
    jn_crash_after_accept: float = 0.06
    """Extra, on acceptRecovery only: the JournalNode persisted the accepted recovery and
    died before answering. When it is the recovery source the others' downloads fail too
    (HDFS-3077 §2.8, footnote 6), and it may stay down while the next writer takes over."""
    fetch_fail: float = 0.1
    """Per download of a segment by acceptRecovery."""
    read_fail: float = 0.1
    """Per getSegment by a reader; half of them fail in the middle of the stream."""
    writer_crash_first_batch: float = 0.1
    """A writer dies while its segment's first batch reached only some JournalNodes: the
    start of HDFS-3845's sequence."""
    writer_crash_batch: float = 0.01
    writer_crash_recovery: float = 0.01
    """getJournalState, newEpoch, prepareRecovery and the recovery's finalize."""
    writer_crash_accept: float = 0.08
    """A recovering writer dies after its acceptRecovery reached only some JournalNodes
    (HDFS-3077 §2.10.7; the second step of HDFS-3845's sequence)."""
    writer_crash_other: float = 0.01
    writer_crash_recovery_finalize: float = 0.01
    """A recovering writer dies before its finalize reached some JournalNodes: the segment
    stays accepted but unfinalized (between acceptRecovery and finalize)."""
    jn_crash_recovery_finalize: float = 0.0
    """Extra, on a recovery's finalize only: the JournalNode dies before or after it."""
    power_loss: float = 0.0
    """Share of JournalNode crashes that are machine crashes: what was written but not
    fsynced is lost (``MemoryJournalStorage.lose_unsynced``); the rest are kill -9."""
    jn_restart_between_steps: float = 0.01
    """Per JournalNode per step."""
    jn_down_steps: tuple[int, ...] = (1, 1, 2, 2, 3, 4)
    """How many steps a killed JournalNode stays down, chosen uniformly (0: back next step)."""
    interleave: float = 0.03
    """Per delivery: first run one action of another live writer (re-entrant, depth 1)."""
    interleave_new_writer: float = 0.3
    """Share of interleavings that start a brand-new writer's take-over instead."""
    failover: float = 0.04
    """Per step: a new writer takes over although a writer is alive (its NameNode was
    declared dead by ZooKeeper but is still running)."""
    reader: float = 0.05
    """Per step: a reader reads the finalized log over faulty channels."""
    reader_in_recovery: float = 0.0
    """Per delivery of a recovering writer: first a reader reads (finalized log, then the
    in-progress caches), between newEpoch, acceptRecovery and finalize; and once more right
    after a take-over's first batch."""
    partition: float = 0.0
    """Per step, when no JournalNode is cut off: cut one off (``FaultKind.PARTITION``)."""
    partition_steps: tuple[int, ...] = (1, 2, 3, 4, 6)
    """How many steps a partition lasts, chosen uniformly."""
    isolate_longest: float = 0.0
    """Per take-over, when no JournalNode is cut off and one alone holds the highest txid:
    cut that one off for the take-over and a few steps after (``FaultKind.PARTITION``)."""
    late_answer: float = 0.0
    """Per take-over: one JournalNode's prepareRecovery answer arrives after a majority's, and
    the writer decides without it (a quorum call returns once a majority succeeded). Aimed at
    the JournalNode that alone holds the newest segment finalized, when a majority of others
    can answer; else at any JournalNode."""
    read_on_heal: float = 0.0
    """Per healed partition: a reader reads at once, while the JournalNode that was away may
    still hold (and cache) an abandoned writer's edits of txids the others rewrote."""
    max_batch: int = 20
    """A writer's batch holds 1..max_batch transactions."""
    roll: float = 0.14
    """Per action of an active writer: finalize its segment and start the next."""
    purge: float = 0.04
    """Per action of an active writer: purge old segments."""


@dataclass(frozen=True, slots=True)
class Buggify:
    """Per-run choices that make rare situations common (FoundationDB's "buggify").

    Each is switched on for about half of the seeds, from the run's RNG, and sharpens the
    ``FaultPlan`` toward one kind of edge case; a seed still replays exactly.
    """

    crash_in_recovery: bool = False
    """Writers and JournalNodes die between acceptRecovery and the recovery's finalize, and
    writers in the middle of batches (so copies of different lengths need recovering)."""
    writer_change_mid_segment: bool = False
    """Failovers and concurrent writers several times as often, so a writer is replaced in
    the middle of a segment or of a batch."""
    tiny_segments: bool = False
    """Batches of 1-3 transactions and frequent rolls: many segment boundaries."""
    readers_during_recovery: bool = False
    """Readers (and in-progress tailing) often, also in the middle of a take-over."""
    power_loss: bool = False
    """More JournalNode crashes, half of them machine crashes that lose unsynced bytes."""
    partitions: bool = False
    """A JournalNode is often cut off for a few steps while it keeps running: it misses a
    take-over, or half of one, and comes back with its old segment and edit cache."""
    unique_first_txns: bool = False
    """Each segment's first transaction is unique to its writer instead of the canonical
    OP_START_LOG_SEGMENT: two writers' copies of a segment can then have the same length
    and other records."""
    stale_journalnode: bool = False
    """The JournalNode that alone holds an abandoned writer's longer tail is often cut off
    while the next writer takes over, and a reader reads as soon as it is back: it misses
    newEpoch, recovery and startLogSegment, keeps the old tail on disk and in its edit cache,
    and the next recovery or in-progress read meets it beside the new writer's copies of the
    same txids (HDFS-3845; design doc 2.10.7)."""

    slow_journalnode: bool = False
    """The JournalNode that alone finalized the newest segment (a recovery's finalize reached it
    and not the others) answers prepareRecovery after the others, so the next recovery decides
    without it; JournalNodes restart just before a recovery's finalize, and the one holding the
    longest copy misses the take-over: the next recovery must rely on an accepted record kept
    across a restart (design doc 2.10.7)."""
    flaky_downloads: bool = False
    """acceptRecovery's download from the recovery source fails half the time, so a recovery's
    finalize reaches JournalNodes whose acceptRecovery failed; writers die in the middle of a
    segment's first batch, the JournalNode alone holding it misses the next take-over for a
    step or two, and each segment's first transaction is its writer's own (as
    ``unique_first_txns``): two writers' one-transaction copies of a segment, and a finalize
    that reaches the stale one."""

    @classmethod
    def draw(cls, rng: random.Random, share: float = 0.5) -> Buggify:
        """Each choice on with probability ``share`` (in field order: one draw each)."""
        return cls(*(rng.random() < share for _ in dataclasses.fields(cls)))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(self) if getattr(self, f.name))

    def apply(self, plan: FaultPlan) -> FaultPlan:
        """``plan`` sharpened by every choice that is on."""
        changes: dict[str, float | int | tuple[int, ...]] = {}
        if self.crash_in_recovery:
            changes |= {
                "writer_crash_accept": 0.12,
                "writer_crash_recovery_finalize": 0.12,
                "jn_crash_recovery_finalize": 0.05,
                "lost_accept": 0.08,
                # ... after a batch reached only some JournalNodes: the longer copies
                # recovery must decide about (design doc 2.10.7).
                "writer_crash_batch": 0.04,
            }
        if self.writer_change_mid_segment:
            changes |= {"failover": 0.15, "interleave": 0.08}
        if self.tiny_segments:
            changes |= {"max_batch": 3, "roll": 0.4}
        if self.readers_during_recovery:
            changes |= {"reader": 0.3, "reader_in_recovery": 0.25}
        if self.power_loss:
            changes |= {"power_loss": 0.5, "jn_crash": 0.02, "jn_restart_between_steps": 0.04}
        if self.partitions:
            changes |= {"partition": 0.1}
        if self.stale_journalnode:
            changes |= {"isolate_longest": 0.5, "read_on_heal": 0.5}
        if self.slow_journalnode:
            changes |= {
                "late_answer": 0.75,
                "jn_crash_recovery_finalize": 0.25,
                "isolate_longest": 0.5,
            }
        if self.flaky_downloads:
            changes |= {
                "fetch_fail": 0.5,
                "writer_crash_first_batch": 0.2,
                "isolate_longest": 0.5,
                "partition_steps": (1, 1, 2),
            }
        return dataclasses.replace(plan, **changes)  # type: ignore[arg-type]


DEFAULT_FAULT_PLAN = FaultPlan()


class FaultInjector:
    """Draws every fault from the simulation's one ``random.Random`` and counts them."""

    def __init__(self, rng: random.Random, plan: FaultPlan = DEFAULT_FAULT_PLAN) -> None:
        self.rng = rng
        self.plan = plan
        self.enabled = True
        self.counts: Counter[FaultKind] = Counter()

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def count(self, kind: FaultKind) -> None:
        self.counts[kind] += 1

    def chance(self, p: float) -> bool:
        """One draw: True with probability ``p`` (always False while faults are disabled)."""
        return self.enabled and self.rng.random() < p

    def draw_rpc(self, rpc: str, context: RpcContext, *, writer: bool) -> RpcFault:
        """The fault, if any, for one RPC about to be delivered (one or two draws)."""
        if not self.enabled:
            return RpcFault.NONE
        plan = self.plan
        crash_p = 0.0
        recovery_finalize = context is RpcContext.RECOVERY and rpc == "finalize_log_segment"
        if writer and rpc == "accept_recovery":
            crash_p = plan.writer_crash_accept
        elif writer and recovery_finalize:
            crash_p = plan.writer_crash_recovery_finalize
        elif writer:
            crash_p = {
                RpcContext.FIRST_BATCH: plan.writer_crash_first_batch,
                RpcContext.BATCH: plan.writer_crash_batch,
                RpcContext.RECOVERY: plan.writer_crash_recovery,
                RpcContext.OTHER: plan.writer_crash_other,
            }[context]
        extras: tuple[tuple[float, RpcFault], ...] = ()
        if rpc == "journal":
            extras = ((plan.torn_append, RpcFault.TORN_APPEND),)
        elif rpc == "accept_recovery":
            extras = (
                (plan.lost_accept, RpcFault.LOST_ACCEPT),
                (plan.jn_crash_after_accept, RpcFault.JN_CRASH_AFTER),
            )
        elif recovery_finalize:
            extras = ((plan.jn_crash_recovery_finalize, RpcFault.JN_CRASH_BEFORE),)
        # One draw picks at most one fault: the probabilities are stacked on [0, 1).
        r = self.rng.random()
        fault = RpcFault.NONE
        for p, candidate in (
            (crash_p, RpcFault.WRITER_CRASH_BEFORE),
            (plan.fail_before, RpcFault.FAIL_BEFORE),
            (plan.fail_after, RpcFault.FAIL_AFTER),
            (plan.jn_crash, RpcFault.JN_CRASH_BEFORE),
            *extras,
        ):
            if r < p:
                fault = candidate
                break
            r -= p
        if fault is RpcFault.NONE:
            return fault
        # Crashes happen before or after the JournalNode acted, one more draw decides which.
        if fault is RpcFault.WRITER_CRASH_BEFORE:
            self.count(
                {
                    RpcContext.FIRST_BATCH: FaultKind.WRITER_CRASH_BATCH,
                    RpcContext.BATCH: FaultKind.WRITER_CRASH_BATCH,
                    RpcContext.RECOVERY: FaultKind.WRITER_CRASH_RECOVERY,
                    RpcContext.OTHER: FaultKind.WRITER_CRASH_OTHER,
                }[context]
            )
            return RpcFault.WRITER_CRASH_AFTER if self.rng.random() < 0.5 else fault
        if fault is RpcFault.JN_CRASH_BEFORE:
            self.count(FaultKind.JN_CRASH)
            return RpcFault.JN_CRASH_AFTER if self.rng.random() < 0.5 else fault
        if fault is RpcFault.JN_CRASH_AFTER:
            self.count(FaultKind.JN_CRASH)
            return fault
        self.count(
            {
                RpcFault.FAIL_BEFORE: FaultKind.FAIL_BEFORE,
                RpcFault.FAIL_AFTER: FaultKind.FAIL_AFTER,
                RpcFault.TORN_APPEND: FaultKind.TORN_APPEND,
                RpcFault.LOST_ACCEPT: FaultKind.LOST_ACCEPT,
            }[fault]
        )
        return fault

    def down_steps(self) -> int:
        """How long a killed JournalNode stays down."""
        return self.rng.choice(self.plan.jn_down_steps)
