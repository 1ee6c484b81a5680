"""The deterministic fault simulator of the QJM (HDFS-3077 §7.3, docs/architecture.md §8.2).

``TestQJMWithFaults.testRandomized`` in the spirit of FoundationDB's simulation: real
``Journal`` and ``QuorumJournalManager`` code over in-memory JournalNodes, one seeded RNG for
every fault and every interleaving, invariants checked after every step, and a seed that
replays a failure exactly::

    from qjm.sim import run_simulation
    result = run_simulation(seed=7, steps=200)
    if result.verdict == "violation":
        print(result.violated_invariant, result.message, result.replay_command)

or ``python -m qjm.sim --seed 7 --steps 200``. Modules: ``faults`` (what goes wrong, how
often), ``cluster`` (simulated JournalNodes and the fault-injecting in-memory channel),
``invariants`` (what must never happen), ``runner`` (the simulation), ``epochs`` (the
TestEpochsAreUnique race).
"""

from qjm.sim.epochs import EpochRaceResult, run_epoch_race
from qjm.sim.faults import DEFAULT_FAULT_PLAN, FaultKind, FaultPlan
from qjm.sim.invariants import INVARIANTS
from qjm.sim.runner import SimResult, replay_command, run_simulation, run_simulations

__all__ = [
    "DEFAULT_FAULT_PLAN",
    "INVARIANTS",
    "EpochRaceResult",
    "FaultKind",
    "FaultPlan",
    "SimResult",
    "replay_command",
    "run_epoch_race",
    "run_simulation",
    "run_simulations",
]
