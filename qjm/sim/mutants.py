"""The mutation score of the simulator: which planted bugs (``conf.mutants``) it catches, and
in how many seeds.

A simulator whose invariants never fire proves nothing by its clean runs. Here each mutant of
``SIMULATED`` is planted alone and the simulator runs a range of seeds; a seed *catches* the
mutant when its run reports a violation. The clean code must report none over the same seeds.
``python -m qjm.sim mutants --seeds 200`` prints the table; ``hapipe soak --mutants`` runs the
same catalogue on Spark, and ``tests/sim/test_mutant_sweeps.py`` keeps each mutant caught::

    from qjm.sim.mutants import SIMULATED, score
    report = score(range(0, 200), SIMULATED)
    print(format_report(report))
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Protocol, TypeVar

from conf.mutants import Mutant
from qjm.sim.runner import run_simulation

SIMULATED: tuple[Mutant, ...] = (
    Mutant.IGNORE_WRITER_EPOCH,
    Mutant.NO_COMMITTED_SANITY_CHECK,
    Mutant.ACK_FROM_ONE,
    Mutant.TAIL_SINGLE_JOURNALNODE,
    Mutant.TAIL_ANY_EPOCH,
    Mutant.PROMISE_NOT_PERSISTED,
    Mutant.NEW_EPOCH_EQUAL,
    Mutant.WRITER_EPOCH_NOT_PERSISTED,
    Mutant.ACCEPT_IN_MEMORY_ONLY,
    Mutant.ACCEPT_NO_EPOCH,
    Mutant.START_KEEPS_ACCEPTED,
    Mutant.FINALIZE_WITHOUT_CONTENT_CHECK,
    Mutant.APPEND_WITHOUT_FDATASYNC,
)
"""The planted bugs that live in code the QJM simulator runs (Journal, storage, QJM writer
and reader)."""

NAMENODE: tuple[Mutant, ...] = (
    Mutant.FENCED_HEARTBEAT_REFUSAL_IGNORED,
    Mutant.STEP_DOWN_SERVES_DURING_IO,
    Mutant.ROLL_GATE_IN_TASK,
    Mutant.ANSWER_WITHOUT_DURABILITY,
    Mutant.READ_WITHOUT_QUORUM_CONFIRMATION,
    Mutant.RETRY_ANSWER_BEFORE_DURABLE,
    Mutant.ACK_FROM_ONE,
)
"""The planted bugs the NameNode-layer simulation scores (``nnsim``, ``python -m nnsim
mutants``): the active's answers (issue 11's switches), its edit-log rolls asked
by several followers at once, and, once more through group commit, the writer that counts
one JournalNode as a quorum."""

MASKED_BY: dict[Mutant, tuple[Mutant, ...]] = {
    Mutant.FENCED_HEARTBEAT_REFUSAL_IGNORED: (Mutant.READ_WITHOUT_QUORUM_CONFIRMATION,),
    Mutant.STEP_DOWN_SERVES_DURING_IO: (
        Mutant.ANSWER_WITHOUT_DURABILITY,
        Mutant.READ_WITHOUT_QUORUM_CONFIRMATION,
    ),
    Mutant.NO_COMMITTED_SANITY_CHECK: (Mutant.ACK_FROM_ONE,),
}
"""Mutants that no invariant can see while other fixes hold (defence in depth). In the
NameNode layer (docs/consistency.md §5): a fenced active that ignores its refused heartbeats
still confirms every read with a read-index round, which meets the newer epoch; a step-down
that keeps answering still waits for durability and confirms every read. In the QJM, the
committed-txid check of recovery only refuses a decision that would drop a txid some node
heard was committed, and while a batch counts as committed only once a majority holds it,
recovery never makes one. Such a mutant is scored with its masks switched off too, and a
seed catches it where this bug makes the masks' run worse (``run_planted``): the masks
alone pass and the pair fails, or the masks alone fail only because a check of the
protocol refused the harm (``SimResult.refused``) and the pair's harm goes through."""

R = TypeVar("R", bound="_Verdict")


class _Verdict(Protocol):
    @property
    def ok(self) -> bool: ...

    @property
    def refused(self) -> bool: ...


def harm(result: _Verdict) -> int:
    """How badly a run ended: 0 passed; 1 failed, but the protocol's own check refused the
    harm before anything wrong was written (the cluster stops); 2 the harm went through."""
    if result.ok:
        return 0
    return 1 if result.refused else 2


def masks_of(name: str) -> tuple[str, ...]:
    """The switches ``MASKED_BY`` plants with mutant ``name`` (none for most, and for CLEAN)."""
    return next((tuple(x.switch for x in v) for k, v in MASKED_BY.items() if k.switch == name), ())


def run_planted(name: str, run: Callable[[tuple[str, ...]], R]) -> tuple[R, bool]:
    """Run mutant ``name`` (a switch, or ``CLEAN``) with its masks through ``run(planted)``,
    one seed's run of either simulator; return that run and whether it counts as caught. A
    masked mutant's failing run counts only if it ends worse than the masks alone on the
    same seed (``harm``; the runs are deterministic per seed and switches)."""
    if name == CLEAN:
        result = run(())
        return result, not result.ok
    masks = masks_of(name)
    result = run((name, *masks))
    if result.ok:
        return result, False
    return result, not masks or harm(result) > harm(run(masks))


SeedRunner = Callable[[str, int, int], tuple[str, int, "str | None"]]
"""(mutant switch or ``CLEAN``, seed, steps) -> (name, seed, violated invariant or None)."""

CLEAN = "clean"
"""The row of the unmutated code in a report."""


@dataclass(frozen=True, slots=True)
class MutantScore:
    """One mutant (or ``CLEAN``) over a range of seeds: which seeds reported a violation, and
    the invariant each one broke."""

    name: str
    seeds: int
    first_seed: int
    caught: tuple[tuple[int, str], ...]
    """(seed, violated invariant) of every seed that reported a violation, in seed order."""

    @property
    def caught_seeds(self) -> tuple[int, ...]:
        return tuple(seed for seed, _ in self.caught)

    @property
    def caught_fraction(self) -> float:
        return len(self.caught) / self.seeds if self.seeds else 0.0

    @property
    def first_caught(self) -> int | None:
        return self.caught[0][0] if self.caught else None


@dataclass(frozen=True, slots=True)
class MutationReport:
    """Every mutant's score and the clean run's, over the same seeds and steps."""

    steps: int
    mutants: tuple[MutantScore, ...]
    clean: MutantScore

    @property
    def min_caught_fraction(self) -> float:
        return min((m.caught_fraction for m in self.mutants), default=0.0)

    def summary_json(self) -> str:
        """One JSON object: {mutant: caught_fraction, ..., clean_violations, ...}."""
        row: dict[str, float | int] = {m.name: round(m.caught_fraction, 4) for m in self.mutants}
        row["clean_violations"] = len(self.clean.caught)
        row["min_caught_fraction"] = round(self.min_caught_fraction, 4)
        return json.dumps(row, sort_keys=False)


def run_seed(name: str, seed: int, steps: int) -> tuple[str, int, str | None]:
    """One run: (name, seed, violated invariant or None); ``name`` is a switch or ``CLEAN``,
    planted with its masks (``run_planted``)."""
    result, caught = run_planted(name, lambda planted: run_simulation(seed, steps, mutants=planted))
    return name, seed, result.violated_invariant if caught else None


def score(
    seeds: range,
    mutants: Iterable[Mutant] = SIMULATED,
    *,
    steps: int = 200,
    jobs: int = 1,
    progress: Callable[[int, int], None] | None = None,
    runner: SeedRunner = run_seed,
) -> MutationReport:
    """Run every mutant, and the clean code, over ``seeds``; ``jobs`` worker processes
    (1: in this process). ``progress(done, total)`` is called after each run. ``runner``
    runs one seed (``run_seed``: the QJM simulator; ``nnsim.nn_seed_outcome``: the
    NameNode layer); a worker pool needs it importable by name."""
    names = [m.switch for m in mutants] + [CLEAN]
    work = [(name, seed) for name in names for seed in seeds]
    found: dict[str, list[tuple[int, str]]] = {name: [] for name in names}

    def record(done: int, outcome: tuple[str, int, str | None]) -> None:
        name, seed, invariant = outcome
        if invariant is not None:
            found[name].append((seed, invariant))
        if progress is not None:
            progress(done, len(work))

    if jobs <= 1:
        for i, (name, seed) in enumerate(work, 1):
            record(i, runner(name, seed, steps))
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            outcomes = pool.map(
                runner,
                [n for n, _ in work],
                [s for _, s in work],
                [steps] * len(work),
                chunksize=8,
            )
            for i, outcome in enumerate(outcomes, 1):
                record(i, outcome)
    first = seeds.start if seeds else 0

    def row(name: str) -> MutantScore:
        return MutantScore(name, len(seeds), first, tuple(sorted(found[name])))

    return MutationReport(steps, tuple(row(n) for n in names[:-1]), row(CLEAN))


def format_report(
    report: MutationReport, not_simulated: Sequence[Mutant] = (), where: str = "the QJM simulator"
) -> str:
    """The table for people, then the clean run's line, then the JSON line (last)."""
    lines = [
        f"{'mutant':32} {'seeds':>6} {'caught':>7} {'fraction':>9} {'first':>6}  invariants",
    ]
    for m in report.mutants:
        invariants = sorted({inv for _, inv in m.caught})
        first = "-" if m.first_caught is None else str(m.first_caught)
        lines.append(
            f"{m.name:32} {m.seeds:>6} {len(m.caught):>7} {m.caught_fraction:>9.3f} {first:>6}  "
            f"{','.join(invariants) or '-'}"
        )
    clean = report.clean
    verdict = "ok" if not clean.caught else "VIOLATIONS at seeds " + ",".join(
        str(s) for s in clean.caught_seeds[:20]
    )
    lines.append(
        f"clean code: {clean.seeds} seeds from {clean.first_seed}, {report.steps} steps: "
        f"{len(clean.caught)} violations ({verdict})"
    )
    for m in report.mutants:
        masks = masks_of(m.name)
        if masks:
            lines.append(
                f"{m.name}: scored with {', '.join(masks)} also planted, "
                "caught where the run ends worse than with the masks alone (they hide this bug "
                "otherwise)"
            )
    if not_simulated:
        lines.append(
            f"not run (outside {where}): " + ", ".join(m.switch for m in not_simulated)
        )
    lines.append(report.summary_json())
    return "\n".join(lines)
