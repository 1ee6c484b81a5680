"""The NameNode layer in the simulator (issue 13; nnsim, docs/architecture.md §8.2 and §8.8).

Two real NameNodes (FSNamesystem, FSEditLog group commit, retry cache, HA transitions,
tailer) over the simulated JournalNodes, elected through the seeded ZooKeeper model, with
clients that retry through failovers. The clean code must show no violation over a seed
range; each planted bug of the NAMENODE catalogue that the simulation reaches must be caught
by a short seed range, found with ``python -m nnsim mutants``. If the
simulation changes and a range stops catching its mutant, rerun that command with
``--mutant NAME`` and move the range onto the new first catching seeds.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from conf.mutants import Mutant
from nnsim import NN_INVARIANTS, run_nn_simulation, run_nn_simulations
from nnsim.__main__ import main
from nnsim.runner import nn_seed_outcome
from qjm.sim.__main__ import main as qjm_sim_main
from qjm.sim.mutants import MASKED_BY, NAMENODE

STEPS = 200
CLEAN_SEEDS = range(0, 8)

# mutant -> (first seed, how many seeds) at STEPS client operations: the first seed that
# caught it in ``python -m nnsim mutants`` (docs/architecture.md §8.8).
SWEEPS: dict[Mutant, tuple[int, int]] = {
    Mutant.READ_WITHOUT_QUORUM_CONFIRMATION: (1, 1),
    Mutant.ANSWER_WITHOUT_DURABILITY: (3, 1),
    Mutant.RETRY_ANSWER_BEFORE_DURABLE: (0, 1),
    Mutant.ACK_FROM_ONE: (2, 1),
    Mutant.ROLL_GATE_IN_TASK: (0, 1),
}

# Masked end to end by other fixes (qjm.sim.mutants.MASKED_BY): planted with their masks,
# caught where the pair ends worse than the masks alone on the same seed.
SWEEPS[Mutant.FENCED_HEARTBEAT_REFUSAL_IGNORED] = (16, 1)
SWEEPS[Mutant.STEP_DOWN_SERVES_DURING_IO] = (11, 1)


def test_every_namenode_mutant_has_a_sweep() -> None:
    assert set(SWEEPS) == set(NAMENODE)


def test_a_seed_replays_the_same_run() -> None:
    first = run_nn_simulation(3, 80)
    second = run_nn_simulation(3, 80)
    print(first.summary())
    assert first.ok, f"{first.message}\n  replay: {first.replay_command}"
    assert first.trace_digest == second.trace_digest
    assert first.txns_acknowledged == second.txns_acknowledged > 0
    assert first.failovers > 0, "the run elected an active"
    assert first.replay_command.startswith("python -m nnsim --seed 3")


def test_the_clean_namenode_layer_has_no_violation() -> None:
    results = run_nn_simulations(CLEAN_SEEDS, STEPS, jobs=2)
    failing = [r for r in results if not r.ok]
    for r in results:
        print(r.summary())
    assert not failing, "\n".join(
        f"seed={r.seed} {r.violated_invariant}: {r.message}\n  replay: {r.replay_command}"
        for r in failing
    )
    assert sum(r.failovers for r in results) >= len(results), "too few elections to mean much"


@pytest.mark.parametrize("mutant", list(SWEEPS), ids=[m.switch for m in SWEEPS])
def test_the_sweep_catches_the_planted_bug(mutant: Mutant) -> None:
    first, count = SWEEPS[mutant]
    for seed in range(first, first + count):
        masks = tuple(m.switch for m in MASKED_BY.get(mutant, ()))
        result = run_nn_simulation(seed, STEPS, mutants=(mutant.switch, *masks))
        if not result.ok:
            print(f"caught at seed={seed}: {result.violated_invariant}: {result.message}")
            assert result.violated_invariant in NN_INVARIANTS
            assert f"--mutant {mutant.switch}" in result.replay_command
            assert nn_seed_outcome(mutant.switch, seed, STEPS)[2] == result.violated_invariant
            without = run_nn_simulation(seed, STEPS, mutants=masks)
            assert without.ok, f"seed={seed} fails without the mutant too: {without.message}"
            return
    pytest.fail(
        f"{mutant.switch} ({mutant.description}) was not caught in seeds {first}.."
        f"{first + count - 1} (python -m nnsim mutants --seeds 200 "
        f"--mutant {mutant.switch})"
    )


def test_python_m_nnsim_runs_the_namenode_layer() -> None:
    out = CliRunner().invoke(main, ["--seed", "1", "--steps", "40"])
    assert out.exit_code == 0, out.output
    # The verdict is the first line of stdout; logs go to stderr (an earlier test in the same
    # process may have routed the daemons' logging there at info).
    assert out.stdout.startswith("seed=1 steps=40 verdict=ok"), out.output


def test_the_old_namenodes_flag_names_the_new_command() -> None:
    """Replay commands recorded before nnsim had its own command line began with
    ``python -m qjm.sim --namenodes``: they fail with one line naming ``python -m nnsim``."""
    for argv in (["--namenodes", "--seed", "1"], ["mutants", "--namenodes"]):
        out = CliRunner().invoke(qjm_sim_main, argv)
        assert out.exit_code == 2, out.output
        assert "its own command: python -m nnsim" in out.output, out.output


def test_the_mutants_command_scores_the_namenode_catalogue() -> None:
    mutant = Mutant.RETRY_ANSWER_BEFORE_DURABLE
    first, count = SWEEPS[mutant]
    out = CliRunner().invoke(
        main,
        [
            "mutants",
            "--seeds",
            str(count),
            "--first-seed",
            str(first),
            "--mutant",
            mutant.switch,
        ],
    )
    assert out.exit_code == 0, out.output
    lines = out.stdout.splitlines()
    summary = json.loads(lines[-1])
    assert summary == {
        mutant.switch: 1.0,
        "clean_violations": 0,
        "min_caught_fraction": 1.0,
    }
    assert any("not run (outside the NameNode-layer simulation)" in line for line in lines)
