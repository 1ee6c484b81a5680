"""Writers racing for epochs: Hadoop's TestEpochsAreUnique in the simulator (HDFS-3077 §7.1).

Many writers call ``create_new_unique_epoch`` (HDFS-3077 §2.5: getJournalState on a quorum,
propose max + 1, newEpoch on a quorum) at once. Without threads, "at once" is the simulator's
interleaving: before any of a writer's deliveries, another writer may run its whole attempt
first, so two writers read the same promises and propose the same epoch. getJournalState and
newEpoch fail before or after the JournalNode acts, and JournalNodes restart, all from one
seeded RNG. The invariant: no two writers ever obtain the same epoch (epochs-unique).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from journalnode.errors import JournalError
from qjm.errors import QJMError
from qjm.journal_manager import QuorumJournalManager
from qjm.sim.cluster import Client, SimNetwork, new_epoch_key
from qjm.sim.faults import FaultInjector, FaultPlan
from qjm.sim.invariants import CompletedEpoch, History, InvariantViolation
from qjm.sim.runner import (
    JOURNAL_ID,
    NAMESPACE,
    SimQuorumJournalManager,
    make_qjm_loggers,
    quiet_protocol_logs,
)
from qjm.sim.trace import Trace, short

EPOCH_RACE_PLAN = FaultPlan(
    fail_before=0.1,
    fail_after=0.1,
    jn_crash=0.03,
    writer_crash_first_batch=0.0,
    writer_crash_batch=0.0,
    writer_crash_recovery=0.0,
    writer_crash_accept=0.0,
    writer_crash_other=0.0,
    interleave=0.25,
)
"""Plain RPC faults only (about one RPC in four fails) and frequent interleavings."""


@dataclass(frozen=True, slots=True)
class EpochRaceResult:
    """The outcome of one race: every epoch obtained, and how contested the race was."""

    seed: int
    attempts: int
    epochs: tuple[tuple[str, int], ...]
    """(writer, epoch) for every successful create_new_unique_epoch, in completion order."""
    contested: int
    """Epochs that at least two writers proposed (only one may obtain each)."""
    faults_injected: int
    violation: str | None
    trace_digest: str

    @property
    def ok(self) -> bool:
        return self.violation is None


def run_epoch_race(
    seed: int,
    n_writers: int = 20,
    *,
    n_journalnodes: int = 3,
    attempts_per_writer: int = 2,
    plan: FaultPlan = EPOCH_RACE_PLAN,
) -> EpochRaceResult:
    """Let ``n_writers`` race for epochs, each trying up to ``attempts_per_writer`` times."""
    # Inside the quiet block: a Journal binds its logger when it is built.
    with quiet_protocol_logs():
        return _race(seed, n_writers, n_journalnodes, attempts_per_writer, plan)


def _race(
    seed: int, n_writers: int, n_journalnodes: int, attempts_per_writer: int, plan: FaultPlan
) -> EpochRaceResult:
    rng = random.Random(seed)
    trace = Trace()
    faults = FaultInjector(rng, plan)
    net = SimNetwork(n_journalnodes, JOURNAL_ID, NAMESPACE, faults, trace)
    history = History()
    violation: list[InvariantViolation] = []
    depth = 0
    attempts = 0

    def obtained(qjm: SimQuorumJournalManager, promised_by: list[str]) -> None:
        name = names[qjm]
        answers = net.answers.get((name, new_epoch_key(qjm.epoch)), {})
        trace(f"{name} obtained epoch {qjm.epoch} from {','.join(promised_by)}")
        history.epoch_completed(
            CompletedEpoch(name, qjm.epoch, {a: answers[a] for a in promised_by if a in answers})
        )

    writers: list[SimQuorumJournalManager] = []
    names: dict[SimQuorumJournalManager, str] = {}
    for i in range(n_writers):
        qjm = SimQuorumJournalManager(
            make_qjm_loggers(net, Client(f"w{i}")), on_new_epoch=obtained
        )
        writers.append(qjm)
        names[qjm] = f"w{i}"
    # Each writer's attempts, in a random order; interleavings pull the next one forward.
    pending = [w for w in writers for _ in range(attempts_per_writer)]
    rng.shuffle(pending)

    def attempt(qjm: SimQuorumJournalManager) -> None:
        nonlocal attempts
        attempts += 1
        trace(f"{names[qjm]} tries for an epoch")
        try:
            qjm.create_new_unique_epoch()
        except InvariantViolation as v:
            if not violation:
                violation.append(v)
        except (QJMError, JournalError) as exc:
            trace(f"{names[qjm]} failed: {short(exc)}")

    def interleave(caller: Client) -> None:
        nonlocal depth
        if depth or violation or not pending or not faults.chance(plan.interleave):
            return
        depth += 1
        try:
            attempt(pending.pop())
        finally:
            depth -= 1

    net.interleave = interleave
    faults.enabled = False
    QuorumJournalManager(
        make_qjm_loggers(net, Client("admin", is_writer=False)), JOURNAL_ID, NAMESPACE
    ).format()
    faults.enabled = True
    while pending and not violation:
        # A JournalNode killed during the previous attempt is back (its promise is durable).
        for node in net.nodes:
            if not node.up:
                node.restart()
        attempt(pending.pop())
    return EpochRaceResult(
        seed=seed,
        attempts=attempts,
        epochs=tuple((c.writer, c.epoch) for c in history.epochs),
        contested=sum(1 for proposers in net.proposals.values() if len(proposers) > 1),
        faults_injected=faults.total,
        violation=str(violation[0]) if violation else None,
        trace_digest=trace.digest,
    )
