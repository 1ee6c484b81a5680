"""The deterministic simulation of a QJM cluster under faults (HDFS-3077 §7.3, FoundationDB-style).

``run_simulation(seed, steps)`` builds ``n_journalnodes`` simulated JournalNodes and lets
writers take over from each other for ``steps`` steps while ``FaultInjector`` breaks RPCs,
JournalNodes and writers. One ``random.Random(seed)`` makes every choice (faults, which writer
acts, batch sizes, interleavings), nothing reads the machine's clock (the run hands its
``StepClock`` to the QJM and the JournalNodes with ``conf.clock.use_clock``) or iterates a
set, and everything runs in the calling thread, so a seed is a complete description of a
run: the trace, and its ``trace_digest``, are the same on every machine. Invariants
(``qjm.sim.invariants``) are checked after every step; the first violation ends the run, and
``SimResult.replay_command`` replays it.

A step: restart JournalNodes whose downtime is over, maybe restart or read, maybe start a new
writer (a failover while the old one is alive), then one action of one live writer:

* a new writer takes over: ``recover_unfinalized_segments`` (getJournalState, newEpoch,
  prepareRecovery, acceptRecovery, finalize: HDFS-3077 §2.5, §2.8), then ``start_log_segment``
  and the segment's lone first transaction (HDFS writes OP_START_LOG_SEGMENT alone);
* an active writer writes a batch of 1..20 transactions and flushes it, rolls its segment
  (finalize, start the next), or purges old segments.

A writer whose call fails to reach its quorum is dead, as a NameNode aborts (HDFS-3077 §2.11
step 5); fenced writers stay alive until their next write fails. Concurrency without threads:
before any delivery, with a small probability, the network first runs one action of another
writer (depth 1), e.g. the old writer sends a batch while the new one is halfway through
newEpoch, or a new writer takes over while the old one is halfway through a batch.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import multiprocessing
import random
import shlex
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import structlog

from conf.clock import use_clock
from conf.mutants import planted
from journalnode.errors import JournalError
from journalnode.journal import Journal
from journalnode.subscriptions import EditSubscription
from proto import edits_pb2
from proto.values import NamespaceInfo
from qjm.async_logger import AsyncLogger, AsyncLoggerSet, DirectExecutor
from qjm.errors import QJMError, RecoveryError
from qjm.journal_manager import QuorumJournalManager, QuorumOutputStream
from qjm.quorum import majority
from qjm.reader import EditLogReadError, journaled_edits_quorum
from qjm.recovery import RecoveryCandidate, choose_recovery_source
from qjm.sim.cluster import Client, SimJournalNode, SimNetwork, batch_key, new_epoch_key
from qjm.sim.faults import DEFAULT_FAULT_PLAN, Buggify, FaultInjector, FaultKind, FaultPlan
from qjm.sim.invariants import (
    ACKED_DURABLE,
    FINALIZED_IDENTICAL,
    NO_UNEXPECTED_ERROR,
    RECOVERABLE,
    RECOVERY_SANE,
    CompletedEpoch,
    History,
    InvariantViolation,
)
from qjm.sim.trace import Trace, short
from qjm.subscriber import FeedError, PushedFeeds

R = TypeVar("R")
"""What one seed's run returns (``map_seeds``)."""

JOURNAL_ID = "simjournal"
NAMESPACE = NamespaceInfo("CID-sim", 4242)
PURGE_KEEP = 40
MAX_TAILED = 1000  # most edits one in-progress read asks for

# What a writer's failed call may raise: the protocol's own verdicts. Anything else escaping
# the QJM is a bug (invariant no-unexpected-error).
_PROTOCOL_ERRORS = (QJMError, JournalError)


class _PushReader:
    """The pushed-edits reader of the simulation: one subscription per JournalNode (the
    Journal's own, ``Journal.subscribe_edits``), drained when the reader reads. A node down
    or cut off delivers nothing meanwhile (its pushes arrive late, as over a slow network);
    a restarted node lost its subscriptions and what they had not delivered, and is
    subscribed again."""

    def __init__(self, net: SimNetwork) -> None:
        self.net = net
        self.feeds: PushedFeeds[str] = PushedFeeds([node.address for node in net.nodes])
        self.next_txid = 1
        self._subs: dict[str, tuple[int, EditSubscription]] = {}

    def read(self, since: int) -> tuple[int, list[edits_pb2.EditOp]] | None:
        """Drain every reachable node's pushes, then (epoch, ops) that the majority rule
        allows from ``since``, or None."""
        self.next_txid = max(self.next_txid, since)
        for node in self.net.nodes:
            if node.journal is None or node.address in self.net.partitioned:
                continue
            self._drain(node.address, node.incarnation, node.journal)
        answers = self.feeds.answers(self.next_txid)
        choice = journaled_edits_quorum(answers, cluster_size=len(self.net.nodes))
        ops = self.feeds.decide(self.next_txid)
        if choice is None or not ops:
            return None
        self.next_txid = ops[-1].txid + 1
        return answers[choice[0]].epoch, ops

    def _drain(self, address: str, incarnation: int, journal: Journal) -> None:
        held = self._subs.get(address)
        if held is None or held[0] != incarnation or held[1].ended is not None:
            if held is not None and held[1].ended is None:
                journal.subscribers.remove(held[1])
            try:
                sub = journal.subscribe_edits(NAMESPACE.cluster_id, self.next_txid, _no_wake)
            except JournalError:
                self._subs.pop(address, None)
                return
            self.feeds.reset(address, self.next_txid)
            held = self._subs[address] = (incarnation, sub)
        batches, _ = held[1].take()  # an end is seen at the next read: subscribe again
        try:
            for batch in batches:
                self.feeds.add(address, batch)
        except FeedError:
            journal.subscribers.remove(held[1])
            self._subs.pop(address, None)


def _no_wake() -> None:
    """The simulation drains subscriptions when its reader reads; nothing to wake."""


@dataclass(frozen=True, slots=True)
class SimResult:
    """The outcome of one run: small and picklable (the Spark soak job collects thousands).

    ``verdict`` is "ok" or "violation"; on a violation ``violated_invariant`` names it (one of
    ``qjm.sim.invariants.INVARIANTS``), ``message`` says what broke and ``trace_tail`` holds
    the last trace lines. ``replay_command`` reruns exactly this simulation.
    """

    seed: int
    steps: int
    verdict: str
    failovers: int
    txns_acknowledged: int
    faults_injected: int
    violated_invariant: str | None
    message: str | None
    wall_seconds: float
    replay_command: str
    trace_digest: str
    fault_counts: tuple[tuple[str, int], ...] = ()
    """(FaultKind value, count) for every kind, in FaultKind order."""
    writers: int = 0
    interleavings: int = 0
    trace_tail: tuple[str, ...] = ()
    buggify: tuple[str, ...] = ()
    """The ``Buggify`` choices that were on for this seed."""
    refused: bool = False
    """The violation was caught and refused by the protocol's own check (``InvariantViolation``):
    the run failed, but nothing wrong was written."""

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"

    def summary(self) -> str:
        """One line for people."""
        head = f"seed={self.seed} steps={self.steps} verdict={self.verdict}"
        stats = (
            f"failovers={self.failovers} writers={self.writers} "
            f"txns_acknowledged={self.txns_acknowledged} faults_injected={self.faults_injected} "
            f"interleavings={self.interleavings} digest={self.trace_digest[:12]} "
            f"({self.wall_seconds:.2f}s)"
        )
        if self.ok:
            return f"{head} {stats}"
        return f"{head} invariant={self.violated_invariant} {stats}"


def replay_command(
    seed: int,
    steps: int,
    n_journalnodes: int = 3,
    mutants: tuple[str, ...] = (),
    unique_first_txn: bool = False,
    buggify: bool = True,
) -> str:
    """The one command line that replays a simulation (``mutants`` by switch name)."""
    argv = [
        "python",
        "-m",
        "qjm.sim",
        "--seed",
        str(seed),
        "--steps",
        str(steps),
        "--journalnodes",
        str(n_journalnodes),
    ]
    for name in sorted(mutants):
        argv += ["--mutant", name]
    if unique_first_txn:
        argv.append("--unique-first-txn")
    if not buggify:
        argv.append("--no-buggify")
    return shlex.join(argv)


class StepClock:
    """The QJM simulator's clock (a ``conf.clock.Clock``): it moves one microsecond at each
    reading. The times a run reads then follow from its seed alone, and code that waits for a
    deadline still sees it pass."""

    TICK = 1e-6
    WALL_BASE = 1_700_000_000.0

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        self.now += self.TICK
        return self.now

    def time(self) -> float:
        return self.WALL_BASE + self.monotonic()

    def time_ns(self) -> int:
        return int(self.time() * 1e9)


@contextlib.contextmanager
def quiet_protocol_logs() -> Iterator[None]:
    """Drop the protocol's structlog output below CRITICAL for the duration, then restore the
    previous configuration: structlog's configuration is global, and a simulation logs far
    more than anyone reads (its own trace says what happened)."""
    was_configured = structlog.is_configured()
    saved = structlog.get_config()
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL),
        cache_logger_on_first_use=False,
    )
    try:
        yield
    finally:
        if was_configured:
            structlog.configure(**saved)
        else:
            structlog.reset_defaults()


class WriterState(enum.Enum):
    NEW = "new"
    """Created; its next action is to take over."""
    ACTIVE = "active"
    """Took over and has an open segment; it believes it is the writer."""
    DEAD = "dead"
    """Aborted (a quorum call failed) or crashed; sends nothing more."""


class SimQuorumJournalManager(QuorumJournalManager):
    """A real QuorumJournalManager that tells the simulator when it obtained an epoch."""

    def __init__(
        self,
        loggers: AsyncLoggerSet,
        *,
        on_new_epoch: Callable[[SimQuorumJournalManager, list[str]], None],
    ) -> None:
        super().__init__(loggers, JOURNAL_ID, NAMESPACE)
        self._on_new_epoch = on_new_epoch

    async def acreate_new_unique_epoch(self) -> dict[AsyncLogger, int | None]:
        responses = await super().acreate_new_unique_epoch()
        self._on_new_epoch(self, sorted(lg.address for lg in responses))
        return responses


@dataclass(eq=False)
class SimWriter:
    """One NameNode's writer: a client identity, its QuorumJournalManager, its open stream."""

    client: Client
    qjm: SimQuorumJournalManager
    state: WriterState = WriterState.NEW
    stream: QuorumOutputStream | None = None

    @property
    def name(self) -> str:
        return self.client.name

    @property
    def label(self) -> str:
        return f"{self.name}(e{self.qjm.epoch})"


def make_qjm_loggers(net: SimNetwork, client: Client) -> AsyncLoggerSet:
    """An AsyncLoggerSet whose loggers run every call at once on SimJournalChannels."""
    return AsyncLoggerSet(
        AsyncLogger(channel, JOURNAL_ID, NAMESPACE, executor=DirectExecutor())
        for channel in net.channels(client)
    )


def make_op(epoch: int, txid: int, *, segment_start: bool = False) -> edits_pb2.EditOp:
    """The simulator's transaction: a NoOp whose payload is unique per (writer epoch, txid),
    so two writers' versions of a txid never look alike; with ``segment_start`` the segment's
    first transaction, which is the same for every writer (HDFS's OP_START_LOG_SEGMENT)."""
    if segment_start:
        return edits_pb2.EditOp(txid=txid, start_log_segment=edits_pb2.StartLogSegmentOp())
    return edits_pb2.EditOp(txid=txid, noop=edits_pb2.NoOp(payload=b"e%d:t%d" % (epoch, txid)))


class Simulation:
    """One seeded run. ``run()`` returns its ``SimResult``."""

    def __init__(
        self,
        seed: int,
        steps: int,
        *,
        n_journalnodes: int = 3,
        mutants: tuple[str, ...] = (),
        unique_first_txn: bool = False,
        plan: FaultPlan = DEFAULT_FAULT_PLAN,
        buggify: bool = True,
        echo: Callable[[str], None] | None = None,
    ) -> None:
        if n_journalnodes < 1:
            raise ValueError(f"need at least one JournalNode, got {n_journalnodes}")
        self.seed = seed
        self.steps = steps
        self.n_journalnodes = n_journalnodes
        # Planted by run_simulation around the run; recorded for the trace and the replay.
        self.mutants = tuple(sorted(mutants))
        self.unique_first_txn = unique_first_txn
        self.rng = random.Random(seed)
        self.trace = Trace(echo=echo)
        # Drawn first, from the run's RNG: the seed alone says which choices are on.
        self.use_buggify = buggify
        self.buggify = Buggify.draw(self.rng) if buggify else Buggify()
        self.plan = plan = self.buggify.apply(plan)
        self.faults = FaultInjector(self.rng, plan)
        self.net = SimNetwork(n_journalnodes, JOURNAL_ID, NAMESPACE, self.faults, self.trace)
        self.net.interleave = self._maybe_interleave
        self.net.on_unexpected = lambda what: self._violate(
            InvariantViolation(NO_UNEXPECTED_ERROR, what)
        )
        self.history = History()
        self.writers: list[SimWriter] = []
        self._alive: list[SimWriter] = []
        """The writers not DEAD, in creation order (``writers`` grows to hundreds)."""
        self.violation: InvariantViolation | None = None
        self.depth = 0
        self.failovers = 0
        self.interleavings = 0
        self._took_over = False
        self._reader_next = 0
        self._pusher = _PushReader(self.net)
        self._oracle = QuorumJournalManager(
            make_qjm_loggers(self.net, Client("oracle", is_writer=False, oracle=True)),
            JOURNAL_ID,
            NAMESPACE,
        )
        self._reader = QuorumJournalManager(
            make_qjm_loggers(self.net, Client("reader", is_writer=False)), JOURNAL_ID, NAMESPACE
        )

    # ------------------------------------------------------------------ the run

    def run(self) -> SimResult:
        started = time.perf_counter()
        self.trace(
            f"seed={self.seed} steps={self.steps} journalnodes={self.n_journalnodes} "
            f"mutants={','.join(self.mutants) or '-'} "
            f"unique_first_txn={self.unique_first_txn} "
            f"buggify={','.join(self.buggify.names) or '-'}"
        )
        self._format()
        for step in range(self.steps):
            self.trace(f"-- step {step}")
            self._between_steps()
            if self.violation is None:
                self._scheduled_action()
            self._check(lambda: self.history.check_disks(self.net.nodes))
            if self.violation is not None:
                break
        if self.violation is None:
            self._final_recovery()
        return self._result(time.perf_counter() - started)

    def _result(self, wall: float) -> SimResult:
        v = self.violation
        return SimResult(
            seed=self.seed,
            steps=self.steps,
            verdict="ok" if v is None else "violation",
            failovers=self.failovers,
            txns_acknowledged=len(self.history.acked),
            faults_injected=self.faults.total,
            violated_invariant=None if v is None else v.invariant,
            message=None if v is None else v.message,
            refused=v is not None and v.refused,
            wall_seconds=wall,
            replay_command=replay_command(
                self.seed,
                self.steps,
                self.n_journalnodes,
                self.mutants,
                self.unique_first_txn,
                self.use_buggify,
            ),
            trace_digest=self.trace.digest,
            fault_counts=tuple((k.value, self.faults.counts[k]) for k in FaultKind),
            writers=len(self.writers),
            interleavings=self.interleavings,
            trace_tail=() if v is None else self.trace.tail(),
            buggify=self.buggify.names,
        )

    def _format(self) -> None:
        self.faults.enabled = False
        admin = QuorumJournalManager(
            make_qjm_loggers(self.net, Client("admin", is_writer=False)), JOURNAL_ID, NAMESPACE
        )
        admin.format()
        self.faults.enabled = True

    def _violate(self, violation: InvariantViolation) -> None:
        if self.violation is None:
            self.violation = violation
            self.trace(f"!! {violation}")

    def _check(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except InvariantViolation as v:
            self._violate(v)

    # ------------------------------------------------------------------ between steps

    def _between_steps(self) -> None:
        for node in self.net.nodes:
            if not node.up:
                self._count_down(node)
            elif self.faults.chance(self.plan.jn_restart_between_steps):
                self.faults.count(FaultKind.JN_RESTART)
                self.net.crash_node(node, "restart between steps")
                if node.down_steps == 0:
                    node.restart()
                    self.trace(f"{node.address} restarted (incarnation {node.incarnation})")
        self._partitions()
        if self.faults.chance(self.plan.reader):
            self._read()

    def _count_down(self, node: SimJournalNode) -> None:
        """One step of a down JournalNode's downtime: restart it when the time is up."""
        if node.down_steps == 0:
            node.restart()
            self.trace(f"{node.address} restarted (incarnation {node.incarnation})")
        else:
            node.down_steps -= 1

    def _heal(self) -> None:
        """One step of every partition: heal those whose time is up."""
        cut = self.net.partitioned
        healed = False
        for address in sorted(cut):
            cut[address] -= 1
            if cut[address] <= 0:
                del cut[address]
                healed = True
                self.trace(f"{address} reachable again")
        if healed and self.faults.chance(self.plan.read_on_heal):
            self.trace("  >> reader reads as the partition heals")
            self._read()

    def _wait_for_a_quorum(self) -> None:
        """With no live writer and fewer than a majority of JournalNodes reachable, a new
        writer could only fail getJournalState, which changes nothing: let downtimes and
        partitions run out instead, as a NameNode retries until a quorum answers, so that the
        run's steps go to take-overs and writes (without this, over half of them went to
        writers that died at once)."""
        need = majority(len(self.net.nodes))
        while True:
            reachable = [
                n for n in self.net.nodes if n.up and n.address not in self.net.partitioned
            ]
            if len(reachable) >= need or self.violation is not None:
                return
            self.trace("  no quorum reachable: time passes")
            for node in self.net.nodes:
                if not node.up:
                    self._count_down(node)
            self._heal()

    def _partitions(self) -> None:
        """Heal partitions whose time is up; maybe cut one JournalNode off (one at a time)."""
        self._heal()
        cut = self.net.partitioned
        if not cut and self.faults.chance(self.plan.partition):
            node = self.rng.choice(self.net.nodes)
            steps = self.rng.choice(self.plan.partition_steps)
            cut[node.address] = steps
            self.faults.count(FaultKind.PARTITION)
            self.trace(f"{node.address} PARTITIONED for {steps} step(s)")

    def _isolate_longest_copy(self, writer: SimWriter) -> None:
        """Buggify ``stale_journalnode``: before ``writer`` takes over, cut off the one
        JournalNode that holds the highest txid (an abandoned writer's tail that reached it
        alone), so that the take-over recovers from the others and that node comes back
        stale."""
        if self.net.partitioned or not self.faults.chance(self.plan.isolate_longest):
            return
        ends = {node.address: node.storage.last_txid() for node in self.net.nodes if node.up}
        if not ends:
            return
        top = max(ends.values())
        holders = [address for address, end in ends.items() if end == top]
        if len(holders) != 1:
            return
        steps = self.rng.choice(self.plan.partition_steps)
        self.net.partitioned[holders[0]] = steps
        self.faults.count(FaultKind.PARTITION)
        self.trace(
            f"{holders[0]} PARTITIONED for {steps} step(s): it alone holds txid {top} as "
            f"{writer.name} takes over"
        )

    def _late_answer(self, writer: SimWriter) -> None:
        """Maybe the JournalNode that alone holds the newest segment finalized (a finalize
        reached it alone) answers ``writer``'s prepareRecovery after the others, which make a
        majority: the recovery decides without the finalized copy."""
        late = self._finalized_alone()
        if late is None or not self.faults.chance(self.plan.late_answer):
            return
        self.net.late[writer.name] = late.address
        self.trace(f"{late.address} will answer {writer.name}'s prepareRecovery late")

    def _finalized_alone(self) -> SimJournalNode | None:
        """The reachable JournalNode that alone holds the newest segment finalized while a
        majority of the others are reachable and hold it in progress."""
        reachable = [n for n in self.net.nodes if n.up and n.address not in self.net.partitioned]
        newest = max((max(n.storage.segments, default=0) for n in reachable), default=0)
        holders = [n for n in reachable if newest in n.storage.segments]
        finalized = [n for n in holders if n.storage.segments[newest][1] is not None]
        in_progress = [n for n in holders if n not in finalized]
        if len(finalized) == 1 and in_progress:
            return finalized[0]
        return None

    def _live(self) -> list[SimWriter]:
        return list(self._alive)

    def _scheduled_action(self) -> None:
        if not self._live():
            self._wait_for_a_quorum()
        if not self._live() or self.faults.chance(self.plan.failover):
            self._new_writer()
        writer = self.rng.choice(self._live())
        self._act(writer)

    def _new_writer(self) -> SimWriter:
        client = Client(f"w{len(self.writers)}")
        qjm = SimQuorumJournalManager(
            make_qjm_loggers(self.net, client),
            on_new_epoch=self._epoch_obtained,
        )
        writer = SimWriter(client, qjm)
        self.writers.append(writer)
        self._alive.append(writer)
        alive = [w.name for w in self._live() if w is not writer]
        self.trace(f"{writer.name} created (alive: {','.join(alive) or '-'})")
        return writer

    def _maybe_interleave(self, caller: Client) -> None:
        """Before one of ``caller``'s deliveries: maybe a reader reads (when ``caller`` is
        taking over), then maybe one action of another writer runs."""
        if self.violation is not None:
            return
        if caller.taking_over and self.faults.chance(self.plan.reader_in_recovery):
            self.trace(f"  >> reader reads inside {caller.name}'s take-over")
            self._read()
        if self.depth > 0:
            return
        if not self.faults.chance(self.plan.interleave):
            return
        others = [w for w in self._live() if w.client is not caller]
        if not others or self.faults.chance(self.plan.interleave_new_writer):
            other = self._new_writer()
        else:
            other = self.rng.choice(others)
        self.interleavings += 1
        self.trace(f"  >> {other.name} acts inside {caller.name}'s call")
        self.depth += 1
        try:
            self._act(other)
        finally:
            self.depth -= 1
            self.trace(f"  << back to {caller.name}")

    # ------------------------------------------------------------------ writer actions

    def _act(self, writer: SimWriter) -> None:
        try:
            if writer.state is WriterState.NEW:
                self._take_over(writer)
                return
            r = self.rng.random()
            if r < self.plan.roll:
                self._roll(writer)
            elif r < self.plan.roll + self.plan.purge:
                self._purge(writer)
            else:
                self._write(writer)
        except InvariantViolation as v:
            self._violate(v)
        except _PROTOCOL_ERRORS as exc:
            self._die(writer, short(exc))
        except Exception as exc:
            self._violate(
                InvariantViolation(NO_UNEXPECTED_ERROR, f"{writer.label} raised {short(exc, 400)}")
            )
            self._die(writer, short(exc))

    def _die(self, writer: SimWriter, why: str) -> None:
        writer.state = WriterState.DEAD
        if writer in self._alive:
            self._alive.remove(writer)
        # A dead NameNode sends nothing more.
        writer.client.crashed = True
        self.trace(f"{writer.label} DEAD: {why}")

    def _epoch_obtained(self, qjm: SimQuorumJournalManager, promised_by: list[str]) -> None:
        writer = next(w for w in self.writers if w.qjm is qjm)
        answers = self.net.answers.get((writer.name, new_epoch_key(qjm.epoch)), {})
        completed = CompletedEpoch(
            writer.name, qjm.epoch, {a: answers[a] for a in promised_by if a in answers}
        )
        self.trace(f"{writer.name} obtained epoch {qjm.epoch} from {','.join(promised_by)}")
        self.history.epoch_completed(completed)

    def _take_over(self, writer: SimWriter) -> None:
        self.trace(f"{writer.name} takes over")
        self._isolate_longest_copy(writer)
        self._late_answer(writer)
        writer.client.taking_over = True
        try:
            end = writer.qjm.recover_unfinalized_segments()
        except RecoveryError as exc:
            raise self._classify_refused_recovery(writer, exc) from None
        finally:
            writer.client.taking_over = False
            self.net.late.pop(writer.name, None)
        recovered_end = end or 0
        self.trace(f"{writer.label} recovered the log up to txid {recovered_end}")
        self._check_recovered(writer, recovered_end)
        # A failover: a writer takes over from an earlier one (the final check's is not one).
        if self._took_over and self.faults.enabled:
            self.failovers += 1
        self._took_over = True
        if writer.client.crashed:
            self._die(writer, "crashed during take-over")
            return
        writer.stream = writer.qjm.start_log_segment(recovered_end + 1)
        writer.state = WriterState.ACTIVE
        # HDFS writes OP_START_LOG_SEGMENT alone as the segment's first batch; the Journal
        # relies on it (a segment holding one txn may be restarted, HDFS-3077 §2.10.5-§2.10.6).
        self._flush(writer, 1, segment_start=True)
        # A standby tails just as the new writer's segment begins, while a JournalNode that
        # missed the take-over may still cache an abandoned writer's edits of the same txids.
        if self.faults.chance(self.plan.reader_in_recovery):
            self.trace(f"  >> reader reads right after {writer.label} took over")
            self._read()

    def _classify_refused_recovery(
        self, writer: SimWriter, exc: RecoveryError
    ) -> InvariantViolation:
        """The QJM refused its own recovery decision (a RecoveryError, Hadoop's
        AssertionError). Redo the decision from the prepareRecovery answers the writer got: if
        it would have dropped an acknowledged txid, the violated invariant is acked-durable
        (the sanity check only stopped the loss from being written); otherwise the check
        fired for another reason, and recovery-sane is what broke."""
        answers = self.net.prepared.get(writer.name, {})
        candidates = [RecoveryCandidate(a, answers[a]) for a in sorted(answers)]
        try:
            chosen = choose_recovery_source(candidates)
        except RecoveryError:
            chosen = None
        segment = chosen.segment if chosen is not None else None
        if segment is not None:
            dropped = self.history.acked_after(segment.end_txid, before_epoch=writer.qjm.epoch)
            if dropped is not None:
                txid, ack = dropped
                return InvariantViolation(
                    ACKED_DURABLE,
                    f"{writer.label} decided to recover segment {segment} from "
                    f"{chosen.logger if chosen else '?'}, dropping txid {txid} acknowledged to "
                    f"{ack.writer} (epoch {ack.epoch}); its sanity check then refused: {exc}",
                    refused=True,
                )
        return InvariantViolation(
            RECOVERY_SANE, f"{writer.label} refused its own recovery decision: {exc}", refused=True
        )

    def _check_recovered(self, writer: SimWriter, recovered_end: int) -> None:
        since = self.history.unverified_since(writer.qjm.epoch)
        log = {} if since is None else self._read_log(self._oracle, since, writer.label)
        self.history.check_recovered_log(writer.label, writer.qjm.epoch, recovered_end, log)

    def _read_log(self, qjm: QuorumJournalManager, since: int, who: str) -> dict[int, bytes]:
        """Every finalized txid from ``since`` on, through select_input_streams."""
        try:
            streams = qjm.select_input_streams(since)
            return {op.txid: op.SerializeToString() for stream in streams for op in stream}
        except EditLogReadError as exc:
            if qjm is not self._oracle:
                raise
            invariant = FINALIZED_IDENTICAL if "disagree" in str(exc) else ACKED_DURABLE
            raise InvariantViolation(
                invariant, f"the log recovered by {who} is unreadable: {exc}"
            ) from None

    def _write(self, writer: SimWriter) -> None:
        self._flush(writer, self.rng.randint(1, self.plan.max_batch))

    def _flush(self, writer: SimWriter, count: int, *, segment_start: bool = False) -> None:
        stream = writer.stream
        assert stream is not None
        epoch = writer.qjm.epoch
        first = stream.last_txid + 1
        canonical = segment_start and not (
            self.unique_first_txn
            or self.buggify.unique_first_txns
            or self.buggify.flaky_downloads
        )
        ops = [make_op(epoch, t, segment_start=canonical) for t in range(first, first + count)]
        payloads = [op.SerializeToString() for op in ops]
        for op in ops:
            stream.write(op)
        self.trace(f"{writer.label} writes {first}-{first + count - 1}")
        stream.flush()
        ackers = self.net.answers.get((writer.name, batch_key(first)), {})
        self.trace(
            f"{writer.label} acked {first}-{first + count - 1} by {','.join(sorted(ackers))}"
        )
        self.history.batch_acked(writer.label, epoch, first, payloads, ackers)
        if writer.client.crashed:
            self._die(writer, "crashed after its batch reached a quorum")

    def _roll(self, writer: SimWriter) -> None:
        stream = writer.stream
        assert stream is not None
        if stream.last_txid < stream.segment_txid:
            self._write(writer)
            return
        start, end = stream.segment_txid, stream.last_txid
        self.trace(f"{writer.label} rolls: finalize {start}-{end}")
        writer.qjm.finalize_log_segment(start, end)
        writer.stream = writer.qjm.start_log_segment(end + 1)
        self._flush(writer, 1, segment_start=True)

    def _purge(self, writer: SimWriter) -> None:
        # Like a NameNode after a checkpoint: everything below the writer's open segment is
        # finalized on a quorum; keep the newest PURGE_KEEP txns of it anyway.
        stream = writer.stream
        assert stream is not None
        floor = max(self.history.purge_floor, 1)
        if stream.segment_txid - PURGE_KEEP <= floor:
            self._write(writer)
            return
        keep_from = self.rng.randint(floor, stream.segment_txid - PURGE_KEEP)
        self.history.purge_floor = max(self.history.purge_floor, keep_from)
        self.trace(f"{writer.label} purges below {keep_from}")
        writer.qjm.purge_logs_older_than(keep_from)
        if writer.client.crashed:
            self._die(writer, "crashed while purging")

    # ------------------------------------------------------------------ readers, the end

    def _read(self) -> None:
        self._read_polled()
        self._read_pushed()

    def _read_polled(self) -> None:
        # Like a standby, from where the last read of finalized segments ended.
        start = max(self.history.purge_floor, self._reader_next)
        self.trace(f"reader reads from {start}")
        try:
            log = self._read_log(self._reader, start, "reader")
        except _PROTOCOL_ERRORS as exc:
            self.trace(f"reader failed: {short(exc)}")
            return
        self.trace(f"reader read {len(log)} txns")
        self._check(lambda: self.history.check_read("reader", log))
        if log:
            self._reader_next = max(log) + 1
        # Then the open segment, as a standby with dfs.ha.tail-edits.in-progress does.
        since = max(start, self._reader_next, 1)
        self.net.journaled.pop("reader", None)
        try:
            ops = self._reader.read_journaled_edits(since, MAX_TAILED)
        except _PROTOCOL_ERRORS as exc:
            self.trace(f"reader failed to read in-progress edits: {short(exc)}")
            return
        tailed = {op.txid: op.SerializeToString() for op in ops}
        if not tailed:
            return
        # The writer epoch the majority held these edits in: the reader's own choice, redone
        # over the answers it got (the QJM returns the edits alone).
        answers = self.net.journaled.get("reader", {})
        choice = journaled_edits_quorum(answers, cluster_size=len(self.net.nodes))
        epoch = answers[choice[0]].epoch if choice is not None else 0
        self.trace(f"reader read in-progress {min(tailed)}-{max(tailed)} (epoch {epoch})")
        self._check(lambda: self.history.check_tailed("reader", epoch, tailed))

    def _read_pushed(self) -> None:
        """A standby with pushed edits: what the JournalNodes pushed since the last read,
        applied by the same rule (qjm.subscriber), and held to the same invariants."""
        since = max(self.history.purge_floor, self._reader_next, self._pusher.next_txid, 1)
        try:
            pushed = self._pusher.read(since)
        except EditLogReadError as exc:
            self.trace(f"pusher failed: {short(exc)}")
            return
        if pushed is None:
            return
        epoch, ops = pushed
        tailed = {op.txid: op.SerializeToString() for op in ops}
        self.trace(f"pusher applied {min(tailed)}-{max(tailed)} (epoch {epoch})")
        self._check(lambda: self.history.check_tailed("pusher", epoch, tailed))

    def _final_recovery(self) -> None:
        """With every JournalNode up and no faults, a new writer must recover every ack."""
        self.trace("-- final fault-free recovery")
        self.faults.enabled = False
        self.net.interleave = None
        self.net.partitioned.clear()
        for node in self.net.nodes:
            if not node.up:
                node.restart()
                self.trace(f"{node.address} restarted (incarnation {node.incarnation})")
        writer = self._new_writer()
        self._act(writer)
        if self.violation is None and writer.state is WriterState.DEAD:
            self._violate(
                InvariantViolation(
                    RECOVERABLE,
                    f"{writer.name} could not take over with every JournalNode up and no faults",
                )
            )
        self._check(lambda: self.history.check_disks(self.net.nodes))
        stream = writer.stream
        if self.violation is None and stream is not None and self.history.tailed:

            def tailed_kept() -> None:
                end = stream.segment_txid - 1
                since = max(self.history.purge_floor, min(self.history.tailed), 1)
                log = self._read_log(self._oracle, since, writer.label) if since <= end else {}
                self.history.check_tailed_kept(writer.label, end, log)

            self._check(tailed_kept)


def run_simulation(
    seed: int,
    steps: int = 200,
    *,
    n_journalnodes: int = 3,
    mutants: tuple[str, ...] = (),
    unique_first_txn: bool = False,
    buggify: bool = True,
    quiet: bool = True,
    echo: Callable[[str], None] | None = None,
) -> SimResult:
    """Run one deterministic simulation; same arguments, same trace (``trace_digest``).

    ``mutants`` (switch names of ``conf.mutants.Mutant``) are planted for the run, to prove
    the simulator finds them. ``unique_first_txn`` gives each segment's first transaction
    a unique payload instead of the canonical OP_START_LOG_SEGMENT every writer writes (see
    ``make_op``): it exposes that a JournalNode finalizes a stale copy of the same length.
    ``buggify`` draws the run's ``Buggify`` choices from the seed (off: the plain fault
    plan). ``quiet`` silences the protocol's structlog output for the
    run (restored afterwards); ``echo`` receives every trace line (``--verbose``).
    """
    # Inside the quiet block: a Journal binds its logger when it is built.
    with (
        quiet_protocol_logs() if quiet else contextlib.nullcontext(),
        planted(*mutants) as now,
        use_clock(StepClock()),
    ):
        sim = Simulation(
            seed,
            steps,
            n_journalnodes=n_journalnodes,
            mutants=tuple(m.switch for m in now),
            unique_first_txn=unique_first_txn,
            buggify=buggify,
            echo=echo,
        )
        return sim.run()


def _run_seed(seed: int, steps: int, mutants: tuple[str, ...]) -> SimResult:
    return run_simulation(seed, steps, mutants=mutants)


def run_simulations(
    seeds: Iterable[int], steps: int = 200, *, mutants: tuple[str, ...] = (), jobs: int = 1
) -> list[SimResult]:
    """``run_simulation`` of each seed, in seed order; ``jobs`` worker processes (1: in this
    process)."""
    return map_seeds(_run_seed, seeds, steps, mutants, jobs)


def map_seeds(
    run_seed: Callable[[int, int, tuple[str, ...]], R],
    seeds: Iterable[int],
    steps: int,
    mutants: tuple[str, ...],
    jobs: int,
) -> list[R]:
    """``run_seed(seed, steps, mutants)`` of each seed, in seed order, in ``jobs`` worker
    processes (1: in this process); ``run_seed`` must be a module-level function. The
    workers are spawned, not forked: the caller may hold gRPC threads (a test run does), and
    a fork would copy them half-stopped."""
    seeds = list(seeds)
    if jobs <= 1 or len(seeds) < 2:
        return [run_seed(seed, steps, mutants) for seed in seeds]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        chunk = max(1, len(seeds) // (4 * jobs))
        return list(
            pool.map(
                run_seed, seeds, [steps] * len(seeds), [mutants] * len(seeds), chunksize=chunk
            )
        )
