"""``hapipe soak --mutants`` on local Spark: the mutation-score table in Parquet, the printed
table whose last line is the JSON object, the chart, progress in seeds; the scores agree with
``python -m qjm.sim mutants`` run in this process over the same seeds."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from pyspark.sql import SparkSession

from pipeline import mutants as mutation_soak
from pipeline.cli import main
from pipeline.errors import PipelineError
from pipeline.mutants import (
    CHUNKS_DIR,
    MASKED,
    RUN_COLUMNS,
    RUNS_DIR,
    SCORE_CHART,
    SCORE_COLUMNS,
    SCORE_DIR,
    STATE_FILE,
    MutationSoakConfig,
    format_mutation_summary,
    report_from_rows,
    run_mutation_soak,
    simulate_run,
)
from pipeline.soak import SoakProgress
from qjm.sim.mutants import SIMULATED, score

pytestmark = pytest.mark.timeout(300)

# promise-not-persisted is caught in most seeds (epochs-unique); three seeds of 80 steps catch
# it at least once (``python -m qjm.sim mutants --seeds 3 --steps 80``).
CAUGHT = "promise-not-persisted"
SEEDS = 3
STEPS = 80


def test_the_mutation_soak_writes_the_score_table_and_agrees_with_the_simulator(
    spark: SparkSession, tmp_path: Path
) -> None:
    config = MutationSoakConfig(
        first_seed=0, seeds=SEEDS, steps=STEPS, mutants=(CAUGHT,), seeds_per_task=2
    )
    seen: list[SoakProgress] = []
    summary = run_mutation_soak(
        spark, config, tmp_path / "m", progress=seen.append, poll_seconds=0.2, charts=True
    )
    assert seen and seen[-1].done == seen[-1].total == config.runs == 2 * SEEDS
    assert [p.done for p in seen] == sorted(p.done for p in seen)

    table = spark.read.parquet(str(tmp_path / "m" / SCORE_DIR))
    assert tuple(table.columns) == SCORE_COLUMNS
    rows = {r["mutant"]: r for r in table.collect()}
    assert set(rows) == {CAUGHT, "clean"}
    assert rows["clean"]["caught"] == 0 and rows["clean"]["first_seed"] is None
    assert rows[CAUGHT]["caught"] >= 1 and rows[CAUGHT]["seeds"] == SEEDS
    runs = spark.read.parquet(str(tmp_path / "m" / RUNS_DIR))
    assert tuple(runs.columns) == RUN_COLUMNS and runs.count() == 2 * SEEDS

    # The same runs on the driver, without Spark: the same seeds catch it.
    local = score(range(SEEDS), [m for m in SIMULATED if m.switch == CAUGHT], steps=STEPS)
    assert rows[CAUGHT]["caught"] == len(local.mutants[0].caught)
    assert rows[CAUGHT]["first_seed"] == local.mutants[0].first_caught
    assert not local.clean.caught

    assert summary.passed and summary.clean_violations == 0
    text = format_mutation_summary(summary)
    last = json.loads(text.splitlines()[-1])
    assert last["clean_violations"] == 0
    assert last[CAUGHT] == pytest.approx(rows[CAUGHT]["caught_fraction"], abs=1e-4)
    assert summary.chart is not None and (tmp_path / "m" / SCORE_CHART).stat().st_size > 1000
    assert (tmp_path / "m" / "mutation_summary.txt").read_text().strip() == text
    # A QJM soak's state has no "namenodes" key, as before it existed: checkpoints written
    # then (docs/soaks/) still resume.
    assert "namenodes" not in json.loads((tmp_path / "m" / STATE_FILE).read_text())["config"]


def test_the_cli_scores_and_refuses_what_it_cannot_run(tmp_path: Path) -> None:
    out = CliRunner().invoke(main, ["soak", "--seeds", "1", "--charts"])
    assert out.exit_code == 2 and "--charts goes with --mutants" in out.output
    with pytest.raises(PipelineError, match="mutants the simulator does not run: nope"):
        MutationSoakConfig(mutants=("nope",))
    result = CliRunner().invoke(
        main,
        [
            "soak",
            "--mutants",
            "--seeds",
            str(SEEDS),
            "--steps",
            str(STEPS),
            "--mutant",
            CAUGHT,
            "--out",
            str(tmp_path / "cli"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout.splitlines()[-1])["clean_violations"] == 0
    assert "PASSED" in result.stdout
    resumed = CliRunner().invoke(main, ["soak", "--mutants", "--seeds", "1", "--resume"])
    assert resumed.exit_code == 2 and "--resume needs the --out directory" in resumed.output


def test_the_namenode_layer_catalogue_is_scored_on_nnsim(
    spark: SparkSession, tmp_path: Path
) -> None:
    """``--namenodes --mutants``: the NameNode layer's catalogue on nnsim, with the same
    verdicts as ``python -m nnsim mutants`` gives here; its fingerprint covers
    nnsim as well, and a QJM mutant is refused by name."""
    from nnsim.runner import nn_seed_outcome
    from qjm.sim.mutants import NAMENODE

    assert MutationSoakConfig(namenodes=True).mutants == tuple(m.switch for m in NAMENODE)
    with pytest.raises(PipelineError, match="the NameNode layer's simulation runs"):
        MutationSoakConfig(namenodes=True, mutants=(CAUGHT,))
    assert mutation_soak.simulator_fingerprint(namenodes=True) != (
        mutation_soak.simulator_fingerprint()
    )
    caught = "retry-answer-before-durable"  # seed 0 catches it (test_nn_simulation.py SWEEPS)
    result = CliRunner().invoke(
        main,
        [
            "soak", "--mutants", "--namenodes", "--seeds", "1", "--steps", "200",
            "--mutant", caught, "--out", str(tmp_path / "nn"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "the NameNode layer (nnsim)" in result.stdout
    summary = json.loads(result.stdout.splitlines()[-1])
    local = score(range(1), [m for m in NAMENODE if m.switch == caught], runner=nn_seed_outcome)
    assert summary[caught] == local.mutants[0].caught_fraction == 1.0
    assert summary["clean_violations"] == 0 and not local.clean.caught
    state = json.loads((tmp_path / "nn" / STATE_FILE).read_text())
    assert state["config"]["namenodes"] is True


class _Stopped(Exception):
    """Stands for the Ctrl-C or the machine restart that stops a long soak."""


def test_a_stopped_soak_goes_on_where_it_was_on_the_same_code_only(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = MutationSoakConfig(
        first_seed=0, seeds=SEEDS, steps=STEPS, mutants=(CAUGHT,), seeds_per_task=1
    )
    out = tmp_path / "long"
    first_block = out / CHUNKS_DIR / "seeds-000000-000000.parquet"

    def stop_in_the_second_block(_: SoakProgress) -> None:
        if first_block.exists():
            raise _Stopped

    with pytest.raises(_Stopped):
        run_mutation_soak(
            spark, config, out, progress=stop_in_the_second_block, poll_seconds=0.05, chunk_seeds=1
        )
    state = json.loads((out / STATE_FILE).read_text())
    assert list(state["done"]) == ["seeds-000000-000000"] and state["starts"] == 1
    kept_at = first_block.stat().st_mtime_ns

    with pytest.raises(PipelineError, match="holds an unfinished mutation soak"):
        run_mutation_soak(spark, config, out, chunk_seeds=1)
    other_seeds = MutationSoakConfig(
        first_seed=0, seeds=SEEDS + 1, steps=STEPS, mutants=(CAUGHT,), seeds_per_task=1
    )
    with pytest.raises(PipelineError, match="its config was"):
        run_mutation_soak(spark, other_seeds, out, resume=True, chunk_seeds=1)
    with pytest.raises(PipelineError, match="its chunk_seeds was 1"):
        run_mutation_soak(spark, config, out, resume=True, chunk_seeds=2)
    with monkeypatch.context() as patched:
        patched.setattr(
            mutation_soak, "simulator_fingerprint", lambda **_: "changed-code"
        )
        with pytest.raises(PipelineError, match="its fingerprint was"):
            run_mutation_soak(spark, config, out, resume=True, chunk_seeds=1)

    seen: list[SoakProgress] = []
    summary = run_mutation_soak(
        spark, config, out, progress=seen.append, poll_seconds=0.05, resume=True, chunk_seeds=1
    )
    assert first_block.stat().st_mtime_ns == kept_at  # the finished block was not run again
    assert seen[0].done >= 2 and seen[-1].done == seen[-1].total == config.runs
    assert seen[-1].line().startswith(f"soak: {config.runs}/{config.runs} runs (100%)")
    # Runs and seeds a minute: each seed is one run per mutant and one clean.
    runs_rate = seen[-1].per_minute
    assert f"{runs_rate:.0f} runs/min ({runs_rate / 2:.0f} seeds/min)" in seen[-1].line()
    assert summary.starts == 2 and "over 2 starts (resumed)" in format_mutation_summary(summary)
    assert " seeds/min)" in format_mutation_summary(summary)
    state = json.loads((out / STATE_FILE).read_text())
    assert len(state["done"]) == SEEDS and state["starts"] == 2
    assert summary.elapsed_seconds == pytest.approx(
        sum(b["seconds"] for b in state["done"].values())
    )
    # Every run is there once, with the verdict the simulator gives it in this process.
    table = spark.read.parquet(str(out / RUNS_DIR)).select("mutant", "seed", "verdict")
    runs = sorted(tuple(r) for r in table.collect())
    expected = []
    for mutant in (CAUGHT, "clean"):
        for seed in range(SEEDS):
            row = simulate_run((mutant, seed), steps=STEPS, n_journalnodes=3)
            expected.append((row[0], row[1], row[3]))
    assert runs == sorted(expected)


def test_a_masked_mutant_counts_only_where_it_makes_the_run_worse() -> None:
    # no-committed-sanity-check is planted with ack-from-one (qjm.sim.mutants.MASKED_BY).
    # Seed 0: ack-from-one alone ends with the check refusing a recovery, and the pair's
    # harm goes through; seed 1: ack-from-one alone loses an acknowledged txid as the pair
    # does, so it is not this mutant's catch; seed 4 passes. (Seeds 0, 2 and 11 until the
    # reader compared finalized copies' md5s, docs/protocol.md §8.7, which moved the runs.)
    mutant = "no-committed-sanity-check"
    rows = [simulate_run((mutant, seed), steps=200, n_journalnodes=3) for seed in (0, 1, 4)]
    assert [r[3] for r in rows] == ["violation", MASKED, "ok"]
    config = MutationSoakConfig(first_seed=0, seeds=3, steps=200, mutants=(mutant,))
    report = report_from_rows(rows, config)
    assert report.mutants[0].caught == ((0, "finalized-identical"),)


def test_the_fingerprint_follows_the_code_a_simulation_imports(tmp_path: Path) -> None:
    """A resumed soak must run the same simulator: the fingerprint changes with a module a
    simulation imports, and not with a daemon's CLI, which none imports."""
    source = Path(mutation_soak.__file__).resolve().parent.parent
    for package in ("qjm", "journalnode", "conf", "proto", "durable"):
        shutil.copytree(
            source / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    before = mutation_soak.simulator_fingerprint(tmp_path)
    assert before == mutation_soak.simulator_fingerprint(tmp_path)
    with open(tmp_path / "journalnode" / "cli.py", "a") as cli:
        cli.write("\n# a daemon's change\n")
    assert mutation_soak.simulator_fingerprint(tmp_path) == before
    with open(tmp_path / "journalnode" / "journal.py", "a") as journal:
        journal.write("\n# a change the simulator runs\n")
    assert mutation_soak.simulator_fingerprint(tmp_path) != before
