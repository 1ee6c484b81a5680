"""``hapipe soak``: HDFS-3077's randomized fault test (§7.3) as a Spark job, one task per
seed (docs/architecture.md §8.5).

HDFS-3077's authors ran ``TestQJMWithFaults.testRandomized`` as 5,000 map tasks on a
100-node cluster and reported every failing seed. Here each task runs
``qjm.sim.run_simulation`` for one seed: the executor imports the simulator itself and gets
only plain ints and bools (``simulate_seed``), so nothing of the driver is shipped but the
seed range. The results come back to the driver (a few hundred bytes per seed), form a
table (``SOAK_COLUMNS``, ``soak_schema``) written as Parquet, and are summarized for a person:
totals, violations by invariant, the slowest seeds, and every failing seed with the one
command that replays it. While the tasks run, the driver polls Spark's status tracker and
reports how many seeds are done (``SoakProgress``)::

    summary = run_soak(spark, SoakConfig(first_seed=0, seeds=5000, steps=200), out_dir)
    print(format_summary(summary))
    sys.exit(0 if summary.passed else 1)

``<out>/results.parquet`` holds one row per seed, ``<out>/summary.txt`` and
``<out>/summary.json`` the summary.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import structlog
from pyspark import RDD, Accumulator
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
from pipeline.report import format_duration, format_table

__all__ = [
    "RESULTS_DIR",
    "SOAK_COLUMNS",
    "FailingSeed",
    "SoakConfig",
    "SoakProgress",
    "SoakSummary",
    "format_summary",
    "prepare_out",
    "run_soak",
    "simulate_seed",
    "soak_rdd",
    "soak_schema",
    "summarize",
]

log = structlog.get_logger(__name__)

RESULTS_DIR = "results.parquet"
SUMMARY_TEXT = "summary.txt"
SUMMARY_JSON = "summary.json"
SLOWEST = 5
# A failing seed's message in the printed summary; the Parquet table has it whole.
MESSAGE_CHARS = 300

SOAK_COLUMNS = (
    "seed",
    "steps",
    "verdict",
    "failovers",
    "txns_acknowledged",
    "faults_injected",
    "violated_invariant",
    "message",
    "wall_seconds",
    "replay_command",
    "trace_digest",
)
"""The result table's columns, in order: one row per seed (``simulate_seed``'s tuple)."""


def soak_schema() -> StructType:
    types = {
        "seed": LongType(),
        "steps": IntegerType(),
        "verdict": StringType(),
        "failovers": IntegerType(),
        "txns_acknowledged": LongType(),
        "faults_injected": LongType(),
        "violated_invariant": StringType(),
        "message": StringType(),
        "wall_seconds": DoubleType(),
        "replay_command": StringType(),
        "trace_digest": StringType(),
    }
    nullable = {"violated_invariant", "message"}
    return StructType([StructField(c, types[c], c in nullable) for c in SOAK_COLUMNS])


@dataclass(frozen=True)
class SoakConfig:
    """Which seeds to run and how: ``seeds`` seeds from ``first_seed``, each simulation
    ``steps`` steps over ``n_journalnodes`` JournalNodes; ``mutants`` (switch names of
    ``conf.mutants.Mutant``) are planted bugs that the soak must find."""

    first_seed: int = 0
    seeds: int = 100
    steps: int = 200
    n_journalnodes: int = 3
    mutants: tuple[str, ...] = ()
    namenodes: bool = False
    """Simulate the NameNode layer (``nnsim``: NameNodes, a ZooKeeper model and clients over
    the simulated JournalNodes; ``steps`` counts client operations) instead of the QJM alone."""

    def __post_init__(self) -> None:
        if self.seeds < 1:
            raise PipelineError(f"a soak needs at least one seed, got {self.seeds}")
        if self.first_seed < 0:
            raise PipelineError(f"seeds are non-negative, got first seed {self.first_seed}")
        if self.steps < 0 or self.n_journalnodes < 1:
            raise PipelineError(
                f"need steps >= 0 and at least one JournalNode, got steps={self.steps} "
                f"journalnodes={self.n_journalnodes}"
            )

    @property
    def last_seed(self) -> int:
        return self.first_seed + self.seeds - 1

    def describe(self) -> str:
        planted = f" [planted: {', '.join(self.mutants)}]" if self.mutants else ""
        layer = ", the NameNode layer (nnsim)" if self.namenodes else ""
        return (
            f"{self.seeds} seeds ({self.first_seed}..{self.last_seed}), {self.steps} steps each, "
            f"{self.n_journalnodes} JournalNodes{layer}{planted}"
        )


# ---------------------------------------------------------------------------------------------
# The executor side.
# ---------------------------------------------------------------------------------------------


def simulator(namenodes: bool) -> tuple[Callable[..., Any], Callable[..., str]]:
    """The run function of one seed and its replay-command function: the QJM simulator's,
    or the NameNode layer's (nnsim), imported only when asked for, so that a QJM soak's
    executors never load the NameNode."""
    if namenodes:
        from nnsim.runner import nn_replay_command, run_nn_simulation

        return run_nn_simulation, nn_replay_command
    from qjm.sim import replay_command, run_simulation

    return run_simulation, replay_command


def simulate_seed(
    seed: int,
    *,
    steps: int,
    n_journalnodes: int,
    mutants: tuple[str, ...] = (),
    namenodes: bool = False,
) -> tuple[Any, ...]:
    """Run one simulation on an executor and return its row (``SOAK_COLUMNS``): the QJM
    simulator's, or with ``namenodes`` the NameNode layer's (``nnsim``).

    The simulator is imported here, on the executor. A simulator that raises instead of
    returning a verdict is reported as verdict "error" for that seed rather than failing
    the task: one broken seed must not abort a soak of thousands.
    """
    simulate, replay = simulator(namenodes)
    started = time.perf_counter()
    try:
        r = simulate(seed, steps, n_journalnodes=n_journalnodes, mutants=mutants)
    except Exception as exc:
        return (
            seed,
            steps,
            "error",
            0,
            0,
            0,
            None,
            f"the simulator raised {type(exc).__name__}: {exc}",
            time.perf_counter() - started,
            replay(seed, steps, n_journalnodes=n_journalnodes, mutants=mutants),
            "",
        )
    return (
        r.seed,
        r.steps,
        r.verdict,
        r.failovers,
        r.txns_acknowledged,
        r.faults_injected,
        r.violated_invariant,
        r.message,
        r.wall_seconds,
        r.replay_command,
        r.trace_digest,
    )


def soak_rdd(spark: SparkSession, config: SoakConfig) -> RDD[tuple[Any, ...]]:
    """The seeds as an RDD of result rows, one partition (so one task) per seed; lazy."""
    run = functools.partial(
        simulate_seed,
        steps=config.steps,
        n_journalnodes=config.n_journalnodes,
        mutants=config.mutants,
        namenodes=config.namenodes,
    )
    seeds = range(config.first_seed, config.first_seed + config.seeds)
    return spark.sparkContext.parallelize(seeds, numSlices=config.seeds).map(run)


# ---------------------------------------------------------------------------------------------
# The driver side: run with progress, write, summarize.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SoakProgress:
    """Where a running soak is: seeds (tasks) finished out of ``total``."""

    done: int
    total: int
    elapsed_seconds: float
    failed_tasks: int = 0
    failing_seeds: int = 0
    """Finished runs whose verdict is not "ok" so far, from a Spark accumulator, so it moves
    as tasks finish: an operator sees a bad soak long before its summary. (A task Spark runs
    again may count twice there; the summary counts the rows.)"""
    unit: str = "seeds"
    """What ``done`` counts: seeds, or runs (the mutation soak runs each seed once per mutant
    and once clean)."""
    runs_per_seed: int = 1
    """With ``unit`` "runs": the runs of one seed, so that the line also says seeds a minute."""

    @property
    def per_minute(self) -> float:
        """``done`` a minute (seeds, or runs: ``unit``)."""
        return 60.0 * self.done / self.elapsed_seconds if self.elapsed_seconds > 0 else 0.0

    def line(self) -> str:
        """``soak: 1200/5000 seeds (24%), 3m10s, 379 seeds/min, about 10m left`` (for the
        mutation soak, runs in place of seeds, and the seeds a minute after the runs:
        ``563 runs/min (40 seeds/min)``)."""
        pct = 100 * self.done // self.total if self.total else 100
        text = (
            f"soak: {self.done}/{self.total} {self.unit} ({pct}%), "
            f"{format_duration(self.elapsed_seconds)}"
        )
        if self.done:
            rate = self.per_minute
            left = (self.total - self.done) / rate * 60 if rate else 0.0
            text += f", {rate:.0f} {self.unit}/min"
            if self.unit == "runs" and self.runs_per_seed > 1:
                text += f" ({rate / self.runs_per_seed:.0f} seeds/min)"
            text += f", about {format_duration(left)} left"
        if self.failing_seeds:
            text += f", {self.failing_seeds} with a violation"
        if self.failed_tasks:
            text += f", {self.failed_tasks} task attempts failed"
        return text


@dataclass(frozen=True)
class FailingSeed:
    seed: int
    verdict: str
    violated_invariant: str | None
    message: str | None
    replay_command: str


@dataclass(frozen=True)
class SoakSummary:
    """What a person wants to know about a finished soak (``format_summary`` prints it)."""

    config: SoakConfig
    seeds: int
    passed_seeds: int
    failing: tuple[FailingSeed, ...]
    by_invariant: tuple[tuple[str, int], ...]
    failovers: int
    txns_acknowledged: int
    faults_injected: int
    task_seconds: float
    elapsed_seconds: float
    slowest: tuple[tuple[int, float, str], ...]
    results_path: str

    @property
    def passed(self) -> bool:
        return not self.failing and self.passed_seeds == self.seeds


def prepare_out(out: Path) -> Path:
    """Create the output directory; the path of its results table, which must not exist."""
    results_path = Path(out) / RESULTS_DIR
    if results_path.exists():
        raise PipelineError(f"{results_path} already exists; give another --out directory")
    try:
        Path(out).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PipelineError(f"cannot create {out}: {exc.strerror or exc}") from None
    return results_path


def run_soak(
    spark: SparkSession,
    config: SoakConfig,
    out: Path,
    *,
    progress: Callable[[SoakProgress], None] | None = None,
    poll_seconds: float = 0.5,
) -> SoakSummary:
    """Run every seed as a Spark task, write ``<out>/results.parquet`` and the summary files,
    and return the summary. ``progress`` is called every ``poll_seconds`` while the tasks run
    (and once at the end)."""
    results_path = prepare_out(out)
    log.info("soak starting", seeds=config.seeds, first_seed=config.first_seed, out=str(out))
    started = time.monotonic()
    rows = collect_with_progress(
        spark,
        soak_rdd(spark, config),
        f"hapipe soak: {config.describe()}",
        config.seeds,
        progress,
        poll_seconds,
        verdict_column=SOAK_COLUMNS.index("verdict"),
    )
    elapsed = time.monotonic() - started
    # Rows come back in partition order, that is by seed; one file for a person to open.
    frame = spark.createDataFrame(rows, soak_schema()).coalesce(1)
    frame.write.parquet(str(results_path))
    summary = summarize(rows, config, elapsed, results_path)
    (out / SUMMARY_TEXT).write_text(format_summary(summary) + "\n")
    (out / SUMMARY_JSON).write_text(json.dumps(summary_dict(summary), indent=2) + "\n")
    log.info("soak finished", seeds=summary.seeds, failing=len(summary.failing))
    return summary


def collect_with_progress(
    spark: SparkSession,
    rdd: RDD[tuple[Any, ...]],
    description: str,
    total: int,
    progress: Callable[[SoakProgress], None] | None,
    poll_seconds: float,
    *,
    seeds_per_task: int = 1,
    verdict_column: int | None = None,
) -> list[tuple[Any, ...]]:
    """``rdd.collect()`` in a named thread under its own job group, while this thread
    reports the seeds done (finished tasks times ``seeds_per_task``, at most ``total``) and,
    given the rows' ``verdict_column``, how many finished runs are not "ok"; Ctrl-C cancels
    the job group."""
    sc = spark.sparkContext
    group = f"hapipe-soak-{uuid.uuid4().hex[:12]}"
    outcome: dict[str, Any] = {}
    failing = sc.accumulator(0)
    if verdict_column is not None:
        rdd = rdd.map(functools.partial(_count_failing, failing, verdict_column))

    def collect() -> None:
        # Job groups are per thread (PySpark's pinned threads): set it in the thread that runs.
        sc.setJobGroup(group, description, interruptOnCancel=True)
        try:
            outcome["rows"] = rdd.collect()
        except BaseException as exc:  # re-raised in the caller's thread
            outcome["error"] = exc

    started = time.monotonic()
    thread = threading.Thread(target=collect, name="hapipe-soak-collect", daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(poll_seconds)
            if progress is not None:
                elapsed = time.monotonic() - started
                now = _progress(spark, group, total, seeds_per_task, elapsed)
                progress(dataclasses.replace(now, failing_seeds=failing.value))
    except BaseException:
        sc.cancelJobGroup(group)
        thread.join(30.0)
        raise
    if "error" in outcome:
        raise outcome["error"]
    rows: list[tuple[Any, ...]] = outcome["rows"]
    if progress is not None:
        final = sum(1 for row in rows if verdict_column is not None and row[verdict_column] != "ok")
        progress(SoakProgress(total, total, time.monotonic() - started, failing_seeds=final))
    return rows


def _count_failing(
    failing: Accumulator[int], verdict_column: int, row: tuple[Any, ...]
) -> tuple[Any, ...]:
    """Runs in the executor: count ``row`` in ``failing`` when its verdict is not "ok"."""
    if row[verdict_column] != "ok":
        failing.add(1)
    return row


def _progress(
    spark: SparkSession, group: str, total: int, seeds_per_task: int, elapsed: float
) -> SoakProgress:
    tracker = spark.sparkContext.statusTracker()
    done = failed = 0
    for job_id in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(job_id)
        for stage_id in job.stageIds if job is not None else ():
            stage = tracker.getStageInfo(stage_id)
            if stage is not None:
                done += stage.numCompletedTasks
                failed += stage.numFailedTasks
    return SoakProgress(min(done * seeds_per_task, total), total, elapsed, failed)


def summarize(
    rows: Sequence[Sequence[Any]],
    config: SoakConfig,
    elapsed_seconds: float,
    results_path: Path | str,
) -> SoakSummary:
    """The summary of a soak's result rows (``SOAK_COLUMNS`` order). Pure: the rows are on
    the driver anyway, a few bytes per seed, and a Spark job per figure would cost more than
    the arithmetic."""
    table = [dict(zip(SOAK_COLUMNS, row, strict=True)) for row in rows]
    bad = sorted((r for r in table if r["verdict"] != "ok"), key=lambda r: r["seed"])
    failing = tuple(
        FailingSeed(
            r["seed"], r["verdict"], r["violated_invariant"], r["message"], r["replay_command"]
        )
        for r in bad
    )
    counts = Counter(r["violated_invariant"] or r["verdict"] for r in bad)
    by_invariant = tuple(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    slowest = tuple(
        (r["seed"], r["wall_seconds"], r["verdict"])
        for r in sorted(table, key=lambda r: (-r["wall_seconds"], r["seed"]))[:SLOWEST]
    )
    return SoakSummary(
        config=config,
        seeds=len(table),
        passed_seeds=len(table) - len(bad),
        failing=failing,
        by_invariant=by_invariant,
        failovers=sum(r["failovers"] for r in table),
        txns_acknowledged=sum(r["txns_acknowledged"] for r in table),
        faults_injected=sum(r["faults_injected"] for r in table),
        task_seconds=sum(r["wall_seconds"] for r in table),
        elapsed_seconds=elapsed_seconds,
        slowest=slowest,
        results_path=str(results_path),
    )


def format_summary(summary: SoakSummary) -> str:
    """The report a person reads after a soak."""
    s = summary
    per_min = 60.0 * s.seeds / s.elapsed_seconds if s.elapsed_seconds > 0 else 0.0
    lines = [
        f"soak: {s.config.describe()}",
        f"  passed {s.passed_seeds}, failed {len(s.failing)}",
        f"  totals: {s.failovers:,} failovers, {s.txns_acknowledged:,} txns acknowledged, "
        f"{s.faults_injected:,} faults injected",
        f"  time: {format_duration(s.elapsed_seconds)} elapsed, "
        f"{format_duration(s.task_seconds)} in simulations ({per_min:.0f} seeds/min)",
        "  slowest seeds:",
        format_table(["seed", "seconds", "verdict"], list(s.slowest), indent="    "),
    ]
    if s.by_invariant:
        lines.append("  violations by invariant:")
        lines.append(format_table(["invariant", "seeds"], list(s.by_invariant), indent="    "))
    if s.failing:
        lines.append("  failing seeds:")
        for f in s.failing:
            message = f.message or ""
            if len(message) > MESSAGE_CHARS:
                message = message[: MESSAGE_CHARS - 3] + "..."
            lines.append(f"    seed={f.seed} {f.violated_invariant or f.verdict}: {message}")
            lines.append(f"      replay: {f.replay_command}")
    lines.append(f"  results: {s.results_path}")
    lines.append("PASSED" if s.passed else f"FAILED: {len(s.failing)} of {s.seeds} seeds")
    return "\n".join(lines)


def summary_dict(summary: SoakSummary) -> dict[str, Any]:
    """The summary as JSON-ready data (``summary.json``)."""
    data = asdict(summary)
    data["passed"] = summary.passed
    data["failing"] = [asdict(f) for f in summary.failing]
    data["by_invariant"] = dict(summary.by_invariant)
    data["slowest"] = [
        {"seed": seed, "wall_seconds": wall, "verdict": verdict}
        for seed, wall, verdict in summary.slowest
    ]
    return data
