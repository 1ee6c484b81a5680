"""The NameNode layer in the deterministic simulator (issue 13, docs/architecture.md §8.2).

Two real NameNodes over the QJM simulator's JournalNodes, a seeded ZooKeeper model for their
election, clients that retry through failovers, and a linearizability check of what they
were answered. ``nnsim.loop`` (virtual-time event loops the scheduler steps one by one),
``nnsim.zookeeper`` (sessions, expiry, the election lock), ``nnsim.runner`` (the run)::

    from nnsim import run_nn_simulation
    result = run_nn_simulation(seed=7, steps=120)

or ``python -m nnsim --seed 7``.
"""

from nnsim.runner import NN_INVARIANTS, nn_seed_outcome, run_nn_simulation, run_nn_simulations

__all__ = ["NN_INVARIANTS", "nn_seed_outcome", "run_nn_simulation", "run_nn_simulations"]
