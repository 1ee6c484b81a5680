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

A long soak (10,000 seeds of the catalogue is about 140,000 runs: hours on two cores) runs in
blocks of ``chunk_seeds`` seeds. Each finished block's rows are kept under ``<out>/chunks``
and recorded in ``<out>/mutation_soak_state.json`` with the time it took, so a soak that was
stopped (Ctrl-C, a machine restart) goes on where it was with ``resume=True`` (``hapipe soak
--mutants --resume``), and loses at most the block it was in. A resumed soak must be the same
soak: the same configuration and the same simulator code (a fingerprint of its sources); it
refuses to mix runs of another. Its time is the sum of its blocks' times.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
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
from pipeline.soak import SoakProgress, collect_with_progress, prepare_out, simulator

log = structlog.get_logger(__name__)

RUNS_DIR = "runs.parquet"
SCORE_DIR = "mutation_score.parquet"
SCORE_CHART = "mutation_score.png"
SUMMARY_TEXT = "mutation_summary.txt"
CHUNKS_DIR = "chunks"
STATE_FILE = "mutation_soak_state.json"
DEFAULT_CHUNK_SEEDS = 200
"""Seeds per checkpointed block: with the 13 QJM mutants and the clean code, 2,800 runs, about
ten minutes on two cores."""

RUN_COLUMNS = ("mutant", "seed", "steps", "verdict", "violated_invariant", "wall_seconds")
SCORE_COLUMNS = ("mutant", "seeds", "caught", "caught_fraction", "first_seed", "invariants")


def catalogue(namenodes: bool = False) -> tuple[str, ...]:
    """The switches of the QJM simulator's catalogue (``SIMULATED``), or with ``namenodes``
    the NameNode layer's (``NAMENODE``, run on ``nnsim``)."""
    from qjm.sim.mutants import NAMENODE, SIMULATED

    return tuple(m.switch for m in (NAMENODE if namenodes else SIMULATED))


@dataclass(frozen=True)
class MutationSoakConfig:
    """``seeds`` seeds from ``first_seed`` for each of ``mutants`` (switch names; empty: the
    whole catalogue of the simulator run) and for the clean code, ``steps`` steps each; with
    ``namenodes``, on the NameNode layer's simulation (``nnsim``) and its catalogue."""

    first_seed: int = 0
    seeds: int = 200
    steps: int = 200
    n_journalnodes: int = 3
    mutants: tuple[str, ...] = ()
    seeds_per_task: int = 10
    namenodes: bool = False

    def __post_init__(self) -> None:
        if self.seeds < 1 or self.first_seed < 0 or self.seeds_per_task < 1:
            raise PipelineError(
                f"need seeds >= 1, first seed >= 0 and seeds per task >= 1, got seeds="
                f"{self.seeds} first_seed={self.first_seed} seeds_per_task={self.seeds_per_task}"
            )
        known = catalogue(self.namenodes)
        if not self.mutants:
            object.__setattr__(self, "mutants", known)
        unknown = [m for m in self.mutants if m not in known]
        if unknown:
            where = (
                "the NameNode layer's simulation runs" if self.namenodes
                else "it runs (NameNode-layer mutants need --namenodes)"
            )
            raise PipelineError(
                f"mutants the simulator does not run: {', '.join(unknown)}; {where} "
                f"{', '.join(sorted(known))}"
            )

    @property
    def runs(self) -> int:
        return self.runs_over(self.seeds)

    def runs_over(self, seeds: int) -> int:
        """The runs of ``seeds`` seeds: one per mutant and one clean, each."""
        return (len(self.mutants) + 1) * seeds

    def describe(self) -> str:
        last = self.first_seed + self.seeds - 1
        layer = ", the NameNode layer (nnsim)" if self.namenodes else ""
        return (
            f"{len(self.mutants)} mutants and the clean code, seeds {self.first_seed}..{last}, "
            f"{self.steps} steps, {self.n_journalnodes} JournalNodes{layer} ({self.runs:,} runs)"
        )


MASKED = "masked"
"""The verdict of a masked mutant's run that failed, but no worse than its masks alone on the
same seed (``qjm.sim.mutants.run_planted``): not this mutant's doing, so not caught."""


def simulate_run(
    mutant_and_seed: tuple[str, int], *, steps: int, n_journalnodes: int, namenodes: bool = False
) -> tuple[Any, ...]:
    """One run on an executor: a ``RUN_COLUMNS`` row. ``mutant`` is a switch or "clean",
    planted with its masks (``qjm.sim.mutants.MASKED_BY``), on the QJM simulator or with
    ``namenodes`` on the NameNode layer's. A simulator that raises is a caught mutant too
    (verdict "error"), never a failed task."""
    from qjm.sim.mutants import run_planted

    simulate = simulator(namenodes)[0]
    mutant, seed = mutant_and_seed
    started = time.perf_counter()
    try:
        r, caught = run_planted(
            mutant,
            lambda planted: simulate(
                seed, steps, n_journalnodes=n_journalnodes, mutants=planted
            ),
        )
    except Exception as exc:
        return (mutant, seed, steps, "error", f"raised {type(exc).__name__}", 0.0)
    wall = time.perf_counter() - started
    verdict = r.verdict if caught or r.ok else MASKED
    return (mutant, seed, steps, verdict, r.violated_invariant, wall)


def mutation_rdd(
    spark: SparkSession, config: MutationSoakConfig, seeds: range | None = None
) -> RDD[tuple[Any, ...]]:
    """Every (mutant, seed) run over ``seeds`` (default the config's) as an RDD of
    ``RUN_COLUMNS`` rows; lazy."""
    from qjm.sim.mutants import CLEAN

    seeds = _seeds(config) if seeds is None else seeds
    work = [(m, s) for m in (*config.mutants, CLEAN) for s in seeds]
    tasks = max(1, -(-len(work) // config.seeds_per_task))
    run = functools.partial(
        simulate_run,
        steps=config.steps,
        n_journalnodes=config.n_journalnodes,
        namenodes=config.namenodes,
    )
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
    starts: int = 1
    """How many times the soak was started (1, or more when it was resumed)."""
    verdict: str = ""
    """``mutation_verdict``: PASSED, or FAILED naming what failed."""

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
    resume: bool = False,
    chunk_seeds: int = DEFAULT_CHUNK_SEEDS,
) -> MutationSoakSummary:
    """Run the catalogue block by block (``chunk_seeds`` seeds each, kept as they finish),
    then write ``runs.parquet``, ``mutation_score.parquet`` (and the chart) and return the
    summary. With ``resume``, ``out`` may hold the blocks of an unfinished run of this same
    soak, which are not run again; without it, such a directory is refused."""
    from qjm.sim.mutants import format_report

    out = Path(out)
    prepare_out(out)  # creates it; refuses one that holds a soak's results
    for path in (out / RUNS_DIR, out / SCORE_DIR):
        if path.exists():
            raise PipelineError(f"{path} already exists; give another --out directory")
    state = SoakCheckpoint.open(out, config, chunk_seeds, resume=resume)
    log.info(
        "mutation soak starting",
        runs=config.runs,
        out=str(out),
        blocks=len(state.blocks),
        blocks_done=len(state.done),
        start=state.starts,
    )
    for block in state.blocks:
        if state.is_done(block):
            continue
        started = time.monotonic()
        rows = collect_with_progress(
            spark,
            mutation_rdd(spark, config, block),
            f"hapipe soak --mutants: {config.describe()}, seeds {block.start}..{block.stop - 1}",
            config.runs_over(len(block)),
            None if progress is None else state.shifted(progress),
            poll_seconds,
            seeds_per_task=config.seeds_per_task,
            verdict_column=RUN_COLUMNS.index("verdict"),
        )
        state.record(spark, block, rows, time.monotonic() - started)
    rows = state.all_rows(spark)
    report = report_from_rows(rows, config)
    spark.createDataFrame(rows, run_schema()).coalesce(1).write.parquet(str(out / RUNS_DIR))
    scores = score_rows(report)
    spark.createDataFrame(scores, score_schema()).coalesce(1).write.parquet(str(out / SCORE_DIR))
    chart, note = (None, None)
    if charts:
        chart, note = write_score_chart(scores, out / SCORE_CHART, steps=config.steps)
    table = format_report(report)
    summary = MutationSoakSummary(
        config=config,
        table=table,
        summary_json=report.summary_json(),
        min_caught_fraction=report.min_caught_fraction,
        clean_violations=len(report.clean.caught),
        errors=sum(1 for r in rows if r[3] == "error"),
        elapsed_seconds=state.elapsed_seconds,
        out=str(out),
        chart=chart,
        chart_note=note,
        starts=state.starts,
        verdict=mutation_verdict(report),
    )
    (out / SUMMARY_TEXT).write_text(format_mutation_summary(summary) + "\n")
    log.info("mutation soak finished", runs=len(rows), clean=summary.clean_violations)
    return summary


def _imported_by_a_run(namenodes: bool) -> str:
    """A script that prints the files of every module a simulation run imports."""
    modules = "qjm.sim.runner, qjm.sim.mutants" + (", nnsim.runner" if namenodes else "")
    return (
        "import json, sys\n"
        f"import {modules}\n"
        "print(json.dumps(sorted(m.__file__ for m in list(sys.modules.values())"
        " if getattr(m, '__file__', None))))"
    )


def simulator_fingerprint(root: Path | None = None, *, namenodes: bool = False) -> str:
    """A hash of the simulator's code: every module of this project that a simulation run
    imports (``qjm.sim.runner`` and ``qjm.sim.mutants``, and ``nnsim.runner`` with
    ``namenodes``, asked in a fresh interpreter), by path and content. Two runs with the same
    fingerprint ran the same code; a change to a daemon's CLI or server, which no simulation
    imports, leaves it as it was."""
    root = Path(__file__).resolve().parent.parent if root is None else root
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p
        ),
    }
    try:
        listed = subprocess.run(
            [sys.executable, "-c", _imported_by_a_run(namenodes)],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise PipelineError(f"cannot list the simulator's modules: {exc}") from None
    files = sorted(
        path.relative_to(root)
        for path in (Path(f).resolve() for f in json.loads(listed))
        if path.is_relative_to(root) and ".venv" not in path.relative_to(root).parts
    )
    digest = hashlib.sha256()
    for relative in files:
        digest.update(str(relative).encode() + b"\0")
        digest.update((root / relative).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@dataclass
class SoakCheckpoint:
    """The blocks of a mutation soak and those finished (``<out>/mutation_soak_state.json``;
    each finished block's rows in ``<out>/chunks/seeds-A-B.parquet``)."""

    out: Path
    config: MutationSoakConfig
    chunk_seeds: int
    fingerprint: str
    starts: int
    done: dict[str, dict[str, Any]]
    """Finished blocks by name: their runs and seconds."""

    @classmethod
    def open(
        cls, out: Path, config: MutationSoakConfig, chunk_seeds: int, *, resume: bool
    ) -> SoakCheckpoint:
        if chunk_seeds < 1:
            raise PipelineError(f"need at least 1 seed per block, got {chunk_seeds}")
        path = out / STATE_FILE
        fingerprint = simulator_fingerprint(namenodes=config.namenodes)
        wanted = _identity(config, chunk_seeds, fingerprint)
        if not path.exists():
            if (out / CHUNKS_DIR).exists():
                raise PipelineError(
                    f"{out / CHUNKS_DIR} exists without {STATE_FILE}; give another --out directory"
                )
            state = cls(out, config, chunk_seeds, fingerprint, 1, {})
            state._save()
            return state
        if not resume:
            raise PipelineError(
                f"{out} holds an unfinished mutation soak ({STATE_FILE}); pass --resume to go on "
                "with it, or give another --out directory"
            )
        try:
            saved = json.loads(path.read_text())
            kept = {k: saved[k] for k in wanted}
            kept["config"]["mutants"] = tuple(kept["config"]["mutants"])
            done = dict(saved["done"])
            starts = int(saved["starts"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise PipelineError(f"cannot resume from {path}: {exc}") from None
        for key, value in wanted.items():
            if kept[key] != value:
                raise PipelineError(
                    f"cannot resume the soak in {out}: its {key} was {kept[key]!r}, now "
                    f"{value!r} (a resumed soak must run the same seeds on the same code)"
                )
        state = cls(out, config, chunk_seeds, fingerprint, starts + 1, done)
        state._save()
        return state

    @property
    def blocks(self) -> list[range]:
        first, last = self.config.first_seed, self.config.first_seed + self.config.seeds
        return [
            range(a, min(a + self.chunk_seeds, last)) for a in range(first, last, self.chunk_seeds)
        ]

    @staticmethod
    def name(block: range) -> str:
        return f"seeds-{block.start:06d}-{block.stop - 1:06d}"

    def is_done(self, block: range) -> bool:
        return self.name(block) in self.done

    @property
    def elapsed_seconds(self) -> float:
        return sum(float(b["seconds"]) for b in self.done.values())

    @property
    def runs_done(self) -> int:
        return sum(int(b["runs"]) for b in self.done.values())

    @property
    def failing_done(self) -> int:
        return sum(int(b.get("failing", 0)) for b in self.done.values())

    def shifted(self, progress: Callable[[SoakProgress], None]) -> Callable[[SoakProgress], None]:
        """``progress``, told the whole soak's figures while one block runs."""
        runs, seconds, failing = self.runs_done, self.elapsed_seconds, self.failing_done

        def report(p: SoakProgress) -> None:
            progress(
                dataclasses.replace(
                    p,
                    done=min(self.config.runs, runs + p.done),
                    total=self.config.runs,
                    elapsed_seconds=seconds + p.elapsed_seconds,
                    failing_seeds=failing + p.failing_seeds,
                    unit="runs",
                    runs_per_seed=len(self.config.mutants) + 1,
                )
            )

        return report

    def record(
        self, spark: SparkSession, block: range, rows: Sequence[Sequence[Any]], seconds: float
    ) -> None:
        """Keep a finished block's rows, then mark it done (a block written but not marked is
        run again; one marked is complete on disk)."""
        expected = self.config.runs_over(len(block))
        if len(rows) != expected:
            raise PipelineError(f"block {self.name(block)} gave {len(rows)} runs, not {expected}")
        chunks = self.out / CHUNKS_DIR
        chunks.mkdir(exist_ok=True)
        final = chunks / f"{self.name(block)}.parquet"
        partial = chunks / f".{self.name(block)}.parquet.partial"
        for stale in (partial, final):
            if stale.exists():
                shutil.rmtree(stale)
        spark.createDataFrame(list(rows), run_schema()).coalesce(1).write.parquet(str(partial))
        partial.rename(final)
        failing = sum(1 for r in rows if r[3] != "ok")  # as the progress line counts them
        self.done[self.name(block)] = {"runs": len(rows), "seconds": seconds, "failing": failing}
        self._save()
        log.info(
            "mutation soak block done", block=self.name(block), runs=len(rows), seconds=seconds
        )

    def all_rows(self, spark: SparkSession) -> list[tuple[Any, ...]]:
        paths = [str(self.out / CHUNKS_DIR / f"{self.name(b)}.parquet") for b in self.blocks]
        frame = spark.read.schema(run_schema()).parquet(*paths).select(*RUN_COLUMNS)
        rows = [tuple(r) for r in frame.collect()]
        if len(rows) != self.config.runs:
            raise PipelineError(
                f"the blocks in {self.out / CHUNKS_DIR} hold {len(rows)} runs, not "
                f"{self.config.runs}"
            )
        return sorted(rows, key=lambda r: (str(r[0]), int(r[1])))

    def _save(self) -> None:
        path = self.out / STATE_FILE
        state = {
            **_identity(self.config, self.chunk_seeds, self.fingerprint),
            "starts": self.starts,
            "done": self.done,
        }
        partial = path.with_name(path.name + ".partial")
        with open(partial, "w") as out:  # durable before it replaces the last state
            out.write(json.dumps(state, indent=1, sort_keys=True) + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(partial, path)


def _identity(config: MutationSoakConfig, chunk_seeds: int, fingerprint: str) -> dict[str, Any]:
    """What makes two starts the same soak: the keys a resume compares with the state file.
    ``namenodes`` is there only when set, so a QJM soak's state written before it existed
    still resumes."""
    settings = dataclasses.asdict(config)
    if not config.namenodes:
        del settings["namenodes"]
    return {
        "config": settings,
        "chunk_seeds": chunk_seeds,
        "fingerprint": fingerprint,
    }


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


SHOWN_SEEDS = 10
"""Seeds a verdict lists for the clean code's violations (the score table has them all)."""

WEAK_FRACTION = 0.05
"""The line on the chart: a mutant caught by fewer seeds than this is caught, but weakly."""


def mutation_verdict(report: Any) -> str:
    """``PASSED``, or ``FAILED: `` and each thing that failed: the invariants the clean code
    broke, in how many seeds and which (the first ``SHOWN_SEEDS``), and every mutant no seed
    caught (a ``qjm.sim.mutants.MutationReport``; pure)."""
    problems = []
    clean = report.clean
    if clean.caught:
        seeds = ", ".join(str(seed) for seed in clean.caught_seeds[:SHOWN_SEEDS])
        more = len(clean.caught) - SHOWN_SEEDS
        invariants = ", ".join(sorted({inv for _, inv in clean.caught}))
        problems.append(
            f"the clean code broke {invariants} in {len(clean.caught)} of {clean.seeds} seeds "
            f"(seeds {seeds}{f' and {more} more' if more > 0 else ''})"
        )
    uncaught = [m.name for m in report.mutants if not m.caught]
    if uncaught:
        problems.append(
            f"{len(uncaught)} mutant(s) never caught in {clean.seeds} seeds: {', '.join(uncaught)}"
        )
    return "FAILED: " + "; ".join(problems) if problems else "PASSED"


def score_figure(scores: Sequence[Sequence[Any]], *, steps: int | None = None) -> Any:
    """The mutation-score chart as a matplotlib Figure (``score_rows``: the mutants, then the
    clean code): a bar per mutant, its caught fraction, labelled "caught/seeds (percent)";
    a mutant no seed caught drawn as a red "NOT CAUGHT" at 0; the ``WEAK_FRACTION`` line; the
    clean code apart, below a rule, green when no seed found a violation ("clean: 0
    violations, as it should") and red when one did; the seed count in the title."""
    matplotlib: Any = importlib.import_module("matplotlib")
    matplotlib.use("Agg")  # files only, never a window
    plt: Any = importlib.import_module("matplotlib.pyplot")
    rows = [(str(r[0]), int(r[1]), int(r[2]), float(r[3])) for r in scores]
    *mutants, clean = rows
    seeds = clean[1]
    fig, ax = plt.subplots(figsize=(9, 0.4 * len(rows) + 2.2))
    names = [name for name, *_ in mutants] + ["clean code"]
    ys = list(range(len(names)))
    for y, (_, seeds_run, caught, fraction) in zip(ys, mutants, strict=False):
        value = f"{caught}/{seeds_run} ({fraction:.1%})"
        if caught == 0:
            ax.barh(y, 0.004, color="tab:red")
            ax.text(0.01, y, f"NOT CAUGHT: {value}", va="center", color="tab:red",
                    fontweight="bold")
            continue
        weak = fraction < WEAK_FRACTION
        ax.barh(y, fraction, color="tab:orange" if weak else "tab:blue")
        if fraction > 0.75:  # inside the bar's end, where the text fits
            ax.text(fraction - 0.01, y, value, va="center", ha="right", color="white")
        else:
            ax.text(fraction + 0.01, y, value, va="center", color="tab:orange" if weak else "black")
    _, clean_seeds, violations, clean_fraction = clean
    y = ys[-1]
    if violations:
        ax.barh(y, max(clean_fraction, 0.004), color="tab:red", hatch="//")
        label = f"clean: {violations}/{clean_seeds} seeds VIOLATED an invariant"
        ax.text(min(clean_fraction, 0.8) + 0.01, y, label, va="center", color="tab:red",
                fontweight="bold")
    else:
        ax.barh(y, 0.004, color="tab:green")
        ax.text(0.01, y, f"clean: 0 violations in {clean_seeds} seeds, as it should",
                va="center", color="tab:green", fontweight="bold")
    ax.axhline(y - 0.5, color="black", linewidth=0.8)
    ax.axvline(WEAK_FRACTION, color="grey", linestyle="--",
               label=f"{WEAK_FRACTION:.0%} of seeds: below it a mutant is caught only weakly")
    ax.set_yticks(ys, names)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of seeds that catch it (clean code: that report a violation)")
    per_run = f", {steps} steps each" if steps is not None else ""
    ax.set_title(f"simulator mutation score: {seeds} seeds{per_run}")
    # Below the axes: over them it would hide a bar or the clean code's line.
    fig.legend(loc="lower center", fontsize="small", frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


def write_score_chart(
    scores: Sequence[Sequence[Any]], path: Path, *, steps: int | None = None
) -> tuple[str | None, str | None]:
    """``score_figure`` as a PNG: (its path, None), or (None, why not)."""
    if importlib.util.find_spec("matplotlib") is None:
        return None, "chart skipped: matplotlib is not installed (pip install matplotlib)"
    fig = score_figure(scores, steps=steps)
    plt: Any = importlib.import_module("matplotlib.pyplot")
    try:
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)
    return str(path), None


def format_mutation_summary(summary: MutationSoakSummary) -> str:
    s = summary
    per_min = 60.0 * s.config.runs / s.elapsed_seconds if s.elapsed_seconds > 0 else 0.0
    lines = [
        f"soak --mutants: {s.config.describe()}",
        f"  time: {format_duration(s.elapsed_seconds)} ({per_min:.0f} runs/min, "
        f"{per_min / (len(s.config.mutants) + 1):.0f} seeds/min)"
        + (f", over {s.starts} starts (resumed)" if s.starts > 1 else ""),
        f"  results: {Path(s.out) / SCORE_DIR}, {Path(s.out) / RUNS_DIR}",
    ]
    if s.errors:
        lines.append(f"  {s.errors} runs raised (counted as caught, verdict error)")
    if s.chart:
        lines.append(f"  chart: {s.chart}")
    if s.chart_note:
        lines.append(f"  {s.chart_note}")
    lines.append(s.verdict or ("PASSED" if s.passed else "FAILED"))
    lines.append(s.table)  # its last line is the JSON object
    return "\n".join(lines)
