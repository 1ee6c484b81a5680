"""The simulator finds HDFS-3845 when it is planted.

The mutant ``ignore-writer-epoch`` (``conf.mutants``) makes recovery compare
``acceptedInEpoch`` alone, as the QJM did before HDFS-3845: a writer's first batch of a new
segment reaches one JournalNode, a recovery accepts that one-transaction segment on it alone
and dies, the next writer writes the segment on the other JournalNodes, and the next recovery
prefers the stale replica and truncates acknowledged edits. Iterating seeds from 0, the
simulator must hit it well within 5,000 seeds; the same seeds without the planted bug must stay
clean.
"""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from qjm.sim import SimResult, run_simulation, run_simulations
from qjm.sim.__main__ import main
from qjm.sim.invariants import ACKED_DURABLE, FINALIZED_IDENTICAL

STEPS = 200
MAX_SEEDS = 5000
MARGIN = 50


@pytest.fixture(scope="module")
def first_violation() -> SimResult:
    for seed in range(MAX_SEEDS):
        result = run_simulation(seed, STEPS, mutants=("ignore-writer-epoch",))
        if not result.ok:
            print(
                f"\nplanted HDFS-3845 found at seed={seed}: {result.violated_invariant}: "
                f"{result.message}\n  replay: {result.replay_command}"
            )
            return result
    pytest.fail(f"the planted HDFS-3845 bug was not found in seeds 0..{MAX_SEEDS - 1}")


def test_planted_bug_is_found_quickly(first_violation: SimResult) -> None:
    assert first_violation.seed < MAX_SEEDS
    assert first_violation.violated_invariant in (ACKED_DURABLE, FINALIZED_IDENTICAL), (
        f"seed={first_violation.seed}: {first_violation.violated_invariant}: "
        f"{first_violation.message}\n  replay: {first_violation.replay_command}"
    )
    assert first_violation.replay_command == (
        f"python -m qjm.sim --seed {first_violation.seed} --steps {STEPS} --journalnodes 3 "
        "--mutant ignore-writer-epoch"
    )
    assert first_violation.trace_tail, "a violation reports the tail of its trace"


def test_without_the_planted_bug_the_same_seeds_are_clean(first_violation: SimResult) -> None:
    seeds = range(first_violation.seed + MARGIN + 1)
    print(f"\nseeds 0..{seeds[-1]}, {STEPS} steps, real protocol")
    bad = [r for r in run_simulations(seeds, STEPS, jobs=min(4, os.cpu_count() or 1)) if not r.ok]
    assert not bad, "\n".join(
        f"seed={r.seed} {r.violated_invariant}: {r.message}\n  replay: {r.replay_command}"
        for r in bad
    )


def test_the_replay_command_replays_the_violation(first_violation: SimResult) -> None:
    argv = first_violation.replay_command.split()[3:]  # drop "python -m qjm.sim"
    out = CliRunner().invoke(main, argv)
    assert out.exit_code == 1, out.output
    assert f"seed={first_violation.seed}\n" in out.output
    assert f"violated invariant: {first_violation.violated_invariant}" in out.output
    assert f"replay: {first_violation.replay_command}" in out.output
    assert f"digest={first_violation.trace_digest[:12]}" in out.output
