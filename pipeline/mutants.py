"""``hapipe soak --mutants``: the simulator's mutation score as a Spark job.

``python -m qjm.sim mutants`` plants each bug of the catalogue (``qjm.sim.mutants.SIMULATED``,
switches of ``conf.mutants``) alone and counts the seeds that catch it, on one machine. Here
the same runs, (mutant or the clean code) x seed, are Spark tasks of ``seeds_per_task`` runs
each; every executor plants its mutant in its own process (``run_simulation(mutants=...)``).
The driver gets one small row per run, writes them (``runs.parquet``) and the mutation-score
table (``mutation_score.parquet``: mutant, seeds, caught, caught_fraction, first_seed,
invariants), prints the table with the clean run's line and the JSON line of
``qjm.sim.mutants.format_report``, and with ``charts`` draws ``mutation_score.png``::

    summary = run_mutation_soak(spark, MutationSoakConfig(seeds=10000), out_dir)
    print(format_mutation_summary(summary))
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
from pyspark import RDD
from pyspark.sql import SparkSession
from pyspark.sql.types import (
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from pipeline.errors import PipelineError
from pipeline.report import format_duration
from pipeline.soak import SoakProgress, collect_with_progress, prepare_out

log = structlog.get_logger(__name__)

RUNS_DIR = "runs.parquet"
SCORE_DIR = "mutation_score.parquet"
SCORE_CHART = "mutation_score.png"
SUMMARY_TEXT = "mutation_summary.txt"

RUN_COLUMNS = ("mutant", "seed", "steps", "verdict", "violated_invariant", "wall_seconds")
SCORE_COLUMNS = ("mutant", "seeds", "caught", "caught_fraction", "first_seed", "invariants")


def _default_mutants() -> tuple[str, ...]:
    from qjm.sim.mutants import SIMULATED

    return tuple(m.switch for m in SIMULATED)


@dataclass(frozen=True)
class MutationSoakConfig:
    """``seeds`` seeds from ``first_seed`` for each of ``mutants`` (switch names; default the
    simulator's whole catalogue) and for the clean code, ``steps`` steps each."""

    first_seed: int = 0
    seeds: int = 200
    steps: int = 200
    n_journalnodes: int = 3
    mutants: tuple[str, ...] = field(default_factory=_default_mutants)
    seeds_per_task: int = 10

    def __post_init__(self) -> None:
        if self.seeds < 1 or self.first_seed < 0 or self.seeds_per_task < 1:
            raise PipelineError(
                f"need seeds >= 1, first seed >= 0 and seeds per task >= 1, got seeds="
                f"{self.seeds} first_seed={self.first_seed} seeds_per_task={self.seeds_per_task}"
            )
        from qjm.sim.mutants import SIMULATED

        known = {m.switch for m in SIMULATED}
        unknown = [m for m in self.mutants if m not in known]
        if unknown or not self.mutants:
            raise PipelineError(
                f"mutants the simulator does not run: {', '.join(unknown) or '(none given)'}; "
                f"it runs {', '.join(sorted(known))}"
            )

    @property
    def runs(self) -> int:
        return (len(self.mutants) + 1) * self.seeds

    def describe(self) -> str:
        last = self.first_seed + self.seeds - 1
        return (
            f"{len(self.mutants)} mutants and the clean code, seeds {self.first_seed}..{last}, "
            f"{self.steps} steps, {self.n_journalnodes} JournalNodes ({self.runs:,} runs)"
        )


MASKED = "masked"
"""The verdict of a masked mutant's run that failed where its masks alone fail too
(``qjm.sim.mutants.run_planted``): not this mutant's doing, so not caught."""


def simulate_run(
    mutant_and_seed: tuple[str, int], *, steps: int, n_journalnodes: int
) -> tuple[Any, ...]:
    """One run on an executor: a ``RUN_COLUMNS`` row. ``mutant`` is a switch or "clean",
    planted with its masks (``qjm.sim.mutants.MASKED_BY``). A simulator that raises is a
    caught mutant too (verdict "error"), never a failed task."""
    from qjm.sim.mutants import run_planted
    from qjm.sim.runner import run_simulation

    mutant, seed = mutant_and_seed
    started = time.perf_counter()
    try:
        r, caught = run_planted(
            mutant,
            lambda planted: run_simulation(
                seed, steps, n_journalnodes=n_journalnodes, mutants=planted
            ),
        )
    except Exception as exc:
        return (mutant, seed, steps, "error", f"raised {type(exc).__name__}", 0.0)
    wall = time.perf_counter() - started
    verdict = r.verdict if caught or r.ok else MASKED
    return (mutant, seed, steps, verdict, r.violated_invariant, wall)


def mutation_rdd(spark: SparkSession, config: MutationSoakConfig) -> RDD[tuple[Any, ...]]:
    """Every (mutant, seed) run as an RDD of ``RUN_COLUMNS`` rows; lazy."""
    from qjm.sim.mutants import CLEAN

    work = [(m, s) for m in (*config.mutants, CLEAN) for s in _seeds(config)]
    tasks = max(1, -(-len(work) // config.seeds_per_task))
    run = functools.partial(simulate_run, steps=config.steps, n_journalnodes=config.n_journalnodes)
    return spark.sparkContext.parallelize(work, numSlices=tasks).map(run)


def _seeds(config: MutationSoakConfig) -> range:
    return range(config.first_seed, config.first_seed + config.seeds)


@dataclass(frozen=True)
class MutationSoakSummary:
    config: MutationSoakConfig
    table: str
    """The printed table: ``qjm.sim.mutants.format_report`` (JSON line last)."""
    summary_json: str
    min_caught_fraction: float
    clean_violations: int
    errors: int
    elapsed_seconds: float
    out: str
    chart: str | None
    chart_note: str | None

    @property
    def passed(self) -> bool:
        """The clean code is clean and every mutant was caught at least once."""
        return self.clean_violations == 0 and self.min_caught_fraction > 0


def run_mutation_soak(
    spark: SparkSession,
    config: MutationSoakConfig,
    out: Path,
    *,
    progress: Callable[[SoakProgress], None] | None = None,
    poll_seconds: float = 0.5,
    charts: bool = False,
) -> MutationSoakSummary:
    """Run the catalogue, write ``runs.parquet``, ``mutation_score.parquet`` (and the chart),
    return the summary."""
    from qjm.sim.mutants import format_report

    prepare_out(out)  # creates it; refuses one that holds a soak's results
    runs_path = Path(out) / RUNS_DIR
    for path in (runs_path, Path(out) / SCORE_DIR):
        if path.exists():
            raise PipelineError(f"{path} already exists; give another --out directory")
    log.info("mutation soak starting", runs=config.runs, out=str(out))
    started = time.monotonic()
    rows = collect_with_progress(
        spark,
        mutation_rdd(spark, config),
        f"hapipe soak --mutants: {config.describe()}",
        config.runs,
        progress,
        poll_seconds,
        seeds_per_task=config.seeds_per_task,
        verdict_column=RUN_COLUMNS.index("verdict"),
    )
    elapsed = time.monotonic() - started
    report = report_from_rows(rows, config)
    spark.createDataFrame(rows, run_schema()).coalesce(1).write.parquet(str(runs_path))
    scores = score_rows(report)
    spark.createDataFrame(scores, score_schema()).coalesce(1).write.parquet(
        str(Path(out) / SCORE_DIR)
    )
    chart, note = (None, None)
    if charts:
        chart, note = write_score_chart(scores, Path(out) / SCORE_CHART)
    table = format_report(report)
    summary = MutationSoakSummary(
        config=config,
        table=table,
        summary_json=report.summary_json(),
        min_caught_fraction=report.min_caught_fraction,
        clean_violations=len(report.clean.caught),
        errors=sum(1 for r in rows if r[3] == "error"),
        elapsed_seconds=elapsed,
        out=str(out),
        chart=chart,
        chart_note=note,
    )
    (Path(out) / SUMMARY_TEXT).write_text(format_mutation_summary(summary) + "\n")
    log.info("mutation soak finished", runs=len(rows), clean=summary.clean_violations)
    return summary


def report_from_rows(rows: Sequence[Sequence[Any]], config: MutationSoakConfig) -> Any:
    """The ``qjm.sim.mutants.MutationReport`` of a mutation soak's rows (pure)."""
    from qjm.sim.mutants import CLEAN, MutantScore, MutationReport

    caught: dict[str, list[tuple[int, str]]] = {m: [] for m in (*config.mutants, CLEAN)}
    for mutant, seed, _, verdict, invariant, _ in rows:
        if verdict not in ("ok", MASKED):
            caught[mutant].append((seed, invariant or verdict))

    def row(name: str) -> MutantScore:
        return MutantScore(name, config.seeds, config.first_seed, tuple(sorted(caught[name])))

    return MutationReport(config.steps, tuple(row(m) for m in config.mutants), row(CLEAN))


def score_rows(report: Any) -> list[tuple[Any, ...]]:
    """One ``SCORE_COLUMNS`` row per mutant, then the clean code's."""
    return [
        (
            m.name,
            m.seeds,
            len(m.caught),
            m.caught_fraction,
            m.first_caught,
            ",".join(sorted({inv for _, inv in m.caught})),
        )
        for m in (*report.mutants, report.clean)
    ]


def run_schema() -> StructType:
    types = {
        "mutant": StringType(),
        "seed": LongType(),
        "steps": IntegerType(),
        "verdict": StringType(),
        "violated_invariant": StringType(),
        "wall_seconds": DoubleType(),
    }
    return StructType([StructField(c, types[c], c == "violated_invariant") for c in RUN_COLUMNS])


def score_schema() -> StructType:
    types = {
        "mutant": StringType(),
        "seeds": LongType(),
        "caught": LongType(),
        "caught_fraction": DoubleType(),
        "first_seed": LongType(),
        "invariants": StringType(),
    }
    return StructType([StructField(c, types[c], c == "first_seed") for c in SCORE_COLUMNS])


def write_score_chart(
    scores: Sequence[Sequence[Any]], path: Path
) -> tuple[str | None, str | None]:
    """A horizontal bar per mutant, its caught fraction: (the PNG's path, None), or (None,
    why not)."""
    if importlib.util.find_spec("matplotlib") is None:
        return None, "chart skipped: matplotlib is not installed (pip install matplotlib)"
    matplotlib: Any = importlib.import_module("matplotlib")
    matplotlib.use("Agg")  # files only, never a window
    plt: Any = importlib.import_module("matplotlib.pyplot")
    names = [str(r[0]) for r in scores]
    fractions = [float(r[3]) for r in scores]
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(names) + 1.2))
    try:
        ax.barh(names, fractions)
        ax.invert_yaxis()
        ax.set_xlim(0, 1)
        ax.set_xlabel("share of seeds that catch it")
        ax.set_title("simulator mutation score")
        fig.tight_layout()
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)
    return str(path), None


def format_mutation_summary(summary: MutationSoakSummary) -> str:
    s = summary
    per_min = 60.0 * s.config.runs / s.elapsed_seconds if s.elapsed_seconds > 0 else 0.0
    lines = [
        f"soak --mutants: {s.config.describe()}",
        f"  time: {format_duration(s.elapsed_seconds)} ({per_min:.0f} runs/min)",
        f"  results: {Path(s.out) / SCORE_DIR}, {Path(s.out) / RUNS_DIR}",
    ]
    if s.errors:
        lines.append(f"  {s.errors} runs raised (counted as caught, verdict error)")
    if s.chart:
        lines.append(f"  chart: {s.chart}")
    if s.chart_note:
        lines.append(f"  {s.chart_note}")
    verdict = "PASSED" if s.passed else "FAILED: the clean code broke or a mutant was never caught"
    lines.append(verdict)
    lines.append(s.table)  # its last line is the JSON object
    return "\n".join(lines)

