"""``python -m nnsim``: run the NameNode layer in the deterministic simulator (issue 13,
docs/architecture.md §8.2): two NameNodes, the ZooKeeper model and clients over the QJM
simulator's JournalNodes.

    python -m nnsim --seed 7 --steps 120                  # one run, one-line summary
    python -m nnsim --seed 7 --steps 120 --verbose        # ... with its whole trace
    python -m nnsim --seeds 0:200 --mutant ack-from-one   # a range with a planted bug
    python -m nnsim mutants --seeds 200 [--first-seed 0]  # the NAMENODE catalogue's score

On an invariant violation it prints ``seed=N``, the invariant, the tail of the trace and the
one command that replays the run, and exits 1. The options and output are those of
``python -m qjm.sim`` (``qjm.sim.cli``).
"""

from __future__ import annotations

import click

from nnsim.runner import nn_seed_outcome, run_nn_simulation
from qjm.sim.cli import mutants_command, run_options, run_seeds
from qjm.sim.mutants import NAMENODE


@click.group(
    context_settings={"help_option_names": ["-h", "--help"]}, invoke_without_command=True
)
@run_options("Client operations of the run.")
@click.pass_context
def main(
    ctx: click.Context,
    seed: int | None,
    seed_range: str | None,
    steps: int,
    n_journalnodes: int,
    mutant_names: tuple[str, ...],
    verbose: bool,
) -> None:
    """Simulate two NameNodes, their election and clients over simulated JournalNodes from
    one seed; check the NameNode layer's invariants (nnsim.NN_INVARIANTS).

    ``python -m nnsim mutants`` scores the planted bugs instead (see its --help)."""
    if ctx.invoked_subcommand is not None:
        return
    run_seeds(
        seed,
        seed_range,
        verbose,
        lambda s, echo: run_nn_simulation(
            s, steps, n_journalnodes=n_journalnodes, mutants=mutant_names, echo=echo
        ),
    )


main.add_command(
    mutants_command(
        NAMENODE,
        nn_seed_outcome,
        "the NameNode-layer simulation",
        "the NameNode layer's catalogue (NAMENODE)",
    )
)


if __name__ == "__main__":
    main()
