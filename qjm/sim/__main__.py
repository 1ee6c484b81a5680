"""``python -m qjm.sim``: run the deterministic QJM fault simulation (HDFS-3077 §7.3).

    python -m qjm.sim --seed 7 --steps 200                 # one run, one-line summary
    python -m qjm.sim --seed 7 --steps 200 --verbose       # ... with its whole trace
    python -m qjm.sim --seeds 0:1000 --steps 200           # a range; reports failing seeds
    python -m qjm.sim --seeds 0:1000 --mutant ignore-writer-epoch  # a planted bug (HDFS-3845)
    python -m qjm.sim mutants --seeds 200 [--first-seed 0]  # every planted bug: the score
    python -m qjm.sim --namenodes --seed 7 --steps 120      # the NameNode layer (nnsim)
    python -m qjm.sim mutants --namenodes --seeds 200       # ... and its mutants

On an invariant violation it prints ``seed=N``, the invariant, the tail of the trace and the
one command that replays the run, and exits 1.
"""

from __future__ import annotations

import sys

import click

from conf.mutants import Mutant
from nnsim import nn_seed_outcome, run_nn_simulation
from qjm.sim.mutants import NAMENODE, SIMULATED, format_report, run_seed, score
from qjm.sim.runner import SimResult, run_simulation


def _seed_range(text: str) -> range:
    try:
        first, _, last = text.partition(":")
        seeds = range(int(first), int(last))
    except ValueError:
        raise click.BadParameter(f"expected A:B (seeds A..B-1), got {text!r}") from None
    if not seeds:
        raise click.BadParameter(f"empty seed range {text!r}")
    return seeds


def _report_violation(result: SimResult) -> None:
    click.echo(f"seed={result.seed}")
    click.echo(f"violated invariant: {result.violated_invariant}")
    click.echo(f"  {result.message}")
    click.echo("trace tail:")
    for line in result.trace_tail:
        click.echo(f"  {line}")
    click.echo(f"replay: {result.replay_command}")


@click.group(
    context_settings={"help_option_names": ["-h", "--help"]}, invoke_without_command=True
)
@click.option("--seed", type=int, default=None, help="Run this one seed.")
@click.option("--seeds", "seed_range", default=None, help="Run seeds A..B-1, e.g. 0:1000.")
@click.option("--steps", type=click.IntRange(min=0), default=200, show_default=True)
@click.option(
    "--journalnodes", "n_journalnodes", type=click.IntRange(min=1), default=3, show_default=True
)
@click.option(
    "--mutant",
    "mutant_names",
    multiple=True,
    type=click.Choice([m.switch for m in Mutant]),
    help="Plant this bug (conf.mutants; repeatable), e.g. ignore-writer-epoch (HDFS-3845).",
)
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
@click.option(
    "--namenodes",
    is_flag=True,
    help="Simulate the NameNode layer (nnsim): two NameNodes, a ZooKeeper model and clients "
    "over the simulated JournalNodes; --steps counts client operations.",
)
@click.option("--verbose", "-v", is_flag=True, help="Print every trace line as it happens.")
@click.pass_context
def main(
    ctx: click.Context,
    seed: int | None,
    seed_range: str | None,
    steps: int,
    n_journalnodes: int,
    mutant_names: tuple[str, ...],
    unique_first_txn: bool,
    no_buggify: bool,
    namenodes: bool,
    verbose: bool,
) -> None:
    """Simulate JournalNodes, writers and faults from one seed; check the QJM invariants.

    ``python -m qjm.sim mutants`` scores the planted bugs instead (see its --help)."""
    if ctx.invoked_subcommand is not None:
        return
    if (seed is None) == (seed_range is None):
        raise click.UsageError("give exactly one of --seed N or --seeds A:B")
    seeds = range(seed, seed + 1) if seed is not None else _seed_range(seed_range or "")
    failing: list[SimResult] = []
    echo = click.echo if verbose else None
    for s in seeds:
        if namenodes:
            result = run_nn_simulation(
                s, steps, n_journalnodes=n_journalnodes, mutants=mutant_names, echo=echo
            )
        else:
            result = run_simulation(
                s,
                steps,
                n_journalnodes=n_journalnodes,
                mutants=mutant_names,
                unique_first_txn=unique_first_txn,
                buggify=not no_buggify,
                echo=echo,
            )
        click.echo(result.summary())
        if not result.ok:
            failing.append(result)
            if seed is not None:
                _report_violation(result)
    if seed is None:
        click.echo(f"{len(seeds)} seeds, {len(failing)} failing")
        for result in failing:
            click.echo(
                f"  seed={result.seed} {result.violated_invariant}: {result.message}\n"
                f"    replay: {result.replay_command}"
            )
    sys.exit(1 if failing else 0)


@main.command("mutants")
@click.option("--seeds", type=click.IntRange(min=1), default=200, show_default=True)
@click.option("--first-seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--steps", type=click.IntRange(min=0), default=200, show_default=True)
@click.option(
    "--mutant",
    "only",
    multiple=True,
    type=click.Choice([m.switch for m in (*SIMULATED, *NAMENODE)]),
    help="Score only these mutants (repeatable) [default: the whole catalogue].",
)
@click.option(
    "--namenodes",
    is_flag=True,
    help="Score the NameNode layer's catalogue (NAMENODE) on nnsim instead of the QJM's.",
)
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Worker processes.",
)
def mutants_command(
    seeds: int, first_seed: int, steps: int, only: tuple[str, ...], namenodes: bool, jobs: int
) -> None:
    """Plant each bug of the catalogue alone and count the seeds that catch it; run the clean
    code over the same seeds. Prints a table, the clean run's result and, last, one JSON line
    {mutant: caught_fraction, ..., "clean_violations": n, "min_caught_fraction": f}.
    Exit status 1 if the clean code reports a violation or a mutant is never caught."""
    catalogue = NAMENODE if namenodes else SIMULATED
    chosen = [m for m in catalogue if not only or m.switch in only]
    if not chosen:
        raise click.UsageError(
            f"none of {', '.join(only)} is in the {'NAMENODE' if namenodes else 'SIMULATED'} "
            "catalogue" + ("" if namenodes else " (NameNode-layer mutants need --namenodes)")
        )
    not_simulated = [m for m in Mutant if m not in catalogue]
    seed_range = range(first_seed, first_seed + seeds)
    total = (len(chosen) + 1) * seeds
    step = max(1, total // 20)

    def progress(done: int, total: int) -> None:
        if done % step == 0 or done == total:
            click.echo(f"  {done}/{total} runs", err=True)

    click.echo(
        f"{len(chosen)} mutants and the clean code, seeds {first_seed}..{seed_range[-1]}, "
        f"{steps} steps, {jobs} job(s)",
        err=True,
    )
    report = score(
        seed_range,
        chosen,
        steps=steps,
        jobs=jobs,
        progress=progress,
        runner=nn_seed_outcome if namenodes else run_seed,
    )
    where = "the NameNode-layer simulation" if namenodes else "the QJM simulator"
    click.echo(format_report(report, not_simulated, where))
    missed = [m for m in report.mutants if not m.caught]
    sys.exit(1 if report.clean.caught or missed else 0)


if __name__ == "__main__":
    main()
