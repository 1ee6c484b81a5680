"""The pieces both simulator command lines share: ``python -m qjm.sim`` (the QJM) and
``python -m nnsim`` (the NameNode layer, a tool above this package, docs/architecture.md
§2.1). Each builds its own click group from these, so neither imports the other.

``run_seeds`` runs one seed or a range and exits 1 on a violation; ``mutants_command`` builds
the ``mutants`` subcommand: plant each bug of a catalogue alone over a seed range, run the
clean code too, print the table and the JSON line, exit 1 if the clean code broke or a mutant
was never caught.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import NoReturn, TypeVar

import click

from conf.mutants import Mutant
from qjm.sim.mutants import SeedRunner, format_report, score
from qjm.sim.runner import SimResult

F = TypeVar("F", bound=Callable[..., object])

Echo = Callable[[str], None]
RunOne = Callable[[int, Echo | None], SimResult]
"""Runs one seed (``echo`` prints each trace line with ``--verbose``)."""


def seed_range(text: str) -> range:
    """``A:B`` as the seeds A..B-1; a bad or empty range is a usage error."""
    try:
        first, _, last = text.partition(":")
        seeds = range(int(first), int(last))
    except ValueError:
        raise click.BadParameter(f"expected A:B (seeds A..B-1), got {text!r}") from None
    if not seeds:
        raise click.BadParameter(f"empty seed range {text!r}")
    return seeds


def report_violation(result: SimResult) -> None:
    click.echo(f"seed={result.seed}")
    click.echo(f"violated invariant: {result.violated_invariant}")
    click.echo(f"  {result.message}")
    click.echo("trace tail:")
    for line in result.trace_tail:
        click.echo(f"  {line}")
    click.echo(f"replay: {result.replay_command}")


def run_options(steps_help: str) -> Callable[[F], F]:
    """``--seed``/``--seeds``, ``--steps``, ``--journalnodes``, ``--mutant`` and
    ``--verbose``: the options of one run or a range."""

    def decorate(f: F) -> F:
        for option in reversed(
            (
                click.option("--seed", type=int, default=None, help="Run this one seed."),
                click.option(
                    "--seeds", "seed_range", default=None, help="Run seeds A..B-1, e.g. 0:1000."
                ),
                click.option(
                    "--steps",
                    type=click.IntRange(min=0),
                    default=200,
                    show_default=True,
                    help=steps_help,
                ),
                click.option(
                    "--journalnodes",
                    "n_journalnodes",
                    type=click.IntRange(min=1),
                    default=3,
                    show_default=True,
                ),
                click.option(
                    "--mutant",
                    "mutant_names",
                    multiple=True,
                    type=click.Choice([m.switch for m in Mutant]),
                    help="Plant this bug (conf.mutants; repeatable), e.g. ignore-writer-epoch "
                    "(HDFS-3845).",
                ),
                click.option(
                    "--verbose", "-v", is_flag=True, help="Print every trace line as it happens."
                ),
            )
        ):
            f = option(f)
        return f

    return decorate


def run_seeds(
    seed: int | None, seed_text: str | None, verbose: bool, run_one: RunOne
) -> NoReturn:
    """Run ``--seed N`` (a violation prints its trace tail and replay command) or ``--seeds
    A:B`` (the failing seeds and their replay commands); exit 1 on any violation."""
    if (seed is None) == (seed_text is None):
        raise click.UsageError("give exactly one of --seed N or --seeds A:B")
    seeds = range(seed, seed + 1) if seed is not None else seed_range(seed_text or "")
    failing: list[SimResult] = []
    echo = click.echo if verbose else None
    for s in seeds:
        result = run_one(s, echo)
        click.echo(result.summary())
        if not result.ok:
            failing.append(result)
            if seed is not None:
                report_violation(result)
    if seed is None:
        click.echo(f"{len(seeds)} seeds, {len(failing)} failing")
        for result in failing:
            click.echo(
                f"  seed={result.seed} {result.violated_invariant}: {result.message}\n"
                f"    replay: {result.replay_command}"
            )
    sys.exit(1 if failing else 0)


def mutants_command(
    catalogue: Sequence[Mutant], runner: SeedRunner, where: str, catalogue_name: str
) -> click.Command:
    """The ``mutants`` subcommand scoring ``catalogue`` with ``runner`` (one seed of one
    mutant); ``where`` names the simulation in the report."""

    @click.command(
        "mutants",
        help=f"Plant each bug of {catalogue_name} alone and count the seeds that catch it; "
        "run the clean code over the same seeds. Prints a table, the clean run's result and, "
        'last, one JSON line {mutant: caught_fraction, ..., "clean_violations": n, '
        '"min_caught_fraction": f}. Exit status 1 if the clean code reports a violation or a '
        "mutant is never caught.",
    )
    @click.option("--seeds", type=click.IntRange(min=1), default=200, show_default=True)
    @click.option("--first-seed", type=click.IntRange(min=0), default=0, show_default=True)
    @click.option("--steps", type=click.IntRange(min=0), default=200, show_default=True)
    @click.option(
        "--mutant",
        "only",
        multiple=True,
        type=click.Choice([m.switch for m in catalogue]),
        help="Score only these mutants (repeatable) [default: the whole catalogue].",
    )
    @click.option(
        "--jobs", type=click.IntRange(min=1), default=1, show_default=True, help="Worker processes."
    )
    def command(seeds: int, first_seed: int, steps: int, only: tuple[str, ...], jobs: int) -> None:
        chosen = [m for m in catalogue if not only or m.switch in only]
        not_simulated = [m for m in Mutant if m not in catalogue]
        seed_span = range(first_seed, first_seed + seeds)
        total = (len(chosen) + 1) * seeds
        step = max(1, total // 20)

        def progress(done: int, total: int) -> None:
            if done % step == 0 or done == total:
                click.echo(f"  {done}/{total} runs", err=True)

        click.echo(
            f"{len(chosen)} mutants and the clean code, seeds {first_seed}..{seed_span[-1]}, "
            f"{steps} steps, {jobs} job(s)",
            err=True,
        )
        report = score(
            seed_span, chosen, steps=steps, jobs=jobs, progress=progress, runner=runner
        )
        click.echo(format_report(report, not_simulated, where))
        missed = [m for m in report.mutants if not m.caught]
        sys.exit(1 if report.clean.caught or missed else 0)

    return command
