"""``python -m qjm.sim``: run the deterministic QJM fault simulation (HDFS-3077 §7.3).

    python -m qjm.sim --seed 7 --steps 200                 # one run, one-line summary
    python -m qjm.sim --seed 7 --steps 200 --verbose       # ... with its whole trace
    python -m qjm.sim --seeds 0:1000 --steps 200           # a range; reports failing seeds
    python -m qjm.sim --seeds 0:1000 --mutant ignore-writer-epoch  # a planted bug (HDFS-3845)
    python -m qjm.sim mutants --seeds 200 [--first-seed 0]  # every planted bug: the score

On an invariant violation it prints ``seed=N``, the invariant, the tail of the trace and the
one command that replays the run, and exits 1. The NameNode layer over this simulator is its
own command, ``python -m nnsim`` (a tool above ``hanamenode``, docs/architecture.md §2.1).
"""

from __future__ import annotations

import click

from qjm.sim.cli import mutants_command, run_options, run_seeds
from qjm.sim.mutants import SIMULATED, run_seed
from qjm.sim.runner import run_simulation


def _moved_to_nnsim(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    # Replay commands recorded before nnsim had its own command line start this way.
    if value:
        raise click.UsageError(
            "the NameNode layer's simulation is its own command: python -m nnsim "
            "(python -m nnsim mutants for its catalogue)"
        )
    return value


_NAMENODES_MOVED = click.option(
    "--namenodes", is_flag=True, hidden=True, expose_value=False, callback=_moved_to_nnsim
)


@click.group(
    context_settings={"help_option_names": ["-h", "--help"]}, invoke_without_command=True
)
@run_options("Writer steps of the run.")
@click.option(
    "--unique-first-txn",
    is_flag=True,
    help="Give each segment's first txn a unique payload instead of OP_START_LOG_SEGMENT.",
)
@click.option(
    "--no-buggify",
    "no_buggify",
    is_flag=True,
    help="Do not draw the per-seed buggify choices (the plain fault plan).",
)
@_NAMENODES_MOVED
@click.pass_context
def main(
    ctx: click.Context,
    seed: int | None,
    seed_range: str | None,
    steps: int,
    n_journalnodes: int,
    mutant_names: tuple[str, ...],
    verbose: bool,
    unique_first_txn: bool,
    no_buggify: bool,
) -> None:
    """Simulate JournalNodes, writers and faults from one seed; check the QJM invariants.

    ``python -m qjm.sim mutants`` scores the planted bugs instead (see its --help)."""
    if ctx.invoked_subcommand is not None:
        return
    run_seeds(
        seed,
        seed_range,
        verbose,
        lambda s, echo: run_simulation(
            s,
            steps,
            n_journalnodes=n_journalnodes,
            mutants=mutant_names,
            unique_first_txn=unique_first_txn,
            buggify=not no_buggify,
            echo=echo,
        ),
    )


_mutants = mutants_command(
    SIMULATED,
    run_seed,
    "the QJM simulator",
    "the QJM catalogue (SIMULATED; the NameNode layer's: python -m nnsim mutants)",
)
_NAMENODES_MOVED(_mutants)
main.add_command(_mutants)


if __name__ == "__main__":
    main()
