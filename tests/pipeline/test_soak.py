"""``hapipe soak`` on local Spark: a clean seed range passes and writes its table; with a
planted bug (newEpoch that does not persist its promise) the soak reports a failing seed, and
that seed's replay command, run as a person would run it, reproduces the violation."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from pyspark.sql import SparkSession

from hadev.daemon import CODE_ROOT, child_environment
from pipeline.cli import main
from pipeline.soak import (
    RESULTS_DIR,
    SOAK_COLUMNS,
    SoakConfig,
    SoakProgress,
    SoakSummary,
    format_summary,
    run_soak,
    summarize,
)
from qjm.sim import INVARIANTS, run_simulation

pytestmark = pytest.mark.timeout(180)

# How far the planted-bug test may look for a failing seed. promise-not-persisted is caught in
# about 9 seeds in 10 (python -m qjm.sim mutants); HDFS-3845's mutant became too rare for a
# Spark test once the simulator's buggify choices spread its faults (tests/sim sweeps it).
PLANTED = "promise-not-persisted"
MAX_SEEDS = 5000
CHUNK = 32


def test_a_clean_seed_range_passes_and_writes_the_table(
    spark: SparkSession, tmp_path: Path
) -> None:
    config = SoakConfig(first_seed=100, seeds=6, steps=120)
    seen: list[SoakProgress] = []
    summary = run_soak(spark, config, tmp_path / "soak", progress=seen.append, poll_seconds=0.2)

    assert summary.passed, format_summary(summary)
    assert (summary.seeds, summary.passed_seeds, summary.failing) == (6, 6, ())
    assert summary.failovers > 0 and summary.txns_acknowledged > 0 and summary.faults_injected > 0
    assert seen and seen[-1].done == seen[-1].total == 6
    assert [p.done for p in seen] == sorted(p.done for p in seen)

    table = spark.read.parquet(str(tmp_path / "soak" / RESULTS_DIR))
    assert tuple(table.columns) == SOAK_COLUMNS
    rows = sorted(table.collect(), key=lambda r: r["seed"])
    assert [r["seed"] for r in rows] == list(range(100, 106))
    assert {r["verdict"] for r in rows} == {"ok"}
    assert all(r["violated_invariant"] is None and r["steps"] == 120 for r in rows)
    # The same seed gives the same run on an executor as here.
    local = run_simulation(102, 120)
    assert rows[2]["trace_digest"] == local.trace_digest
    assert rows[2]["txns_acknowledged"] == local.txns_acknowledged
    assert rows[2]["replay_command"] == local.replay_command

    text = (tmp_path / "soak" / "summary.txt").read_text()
    assert "passed 6, failed 0" in text and text.rstrip().endswith("PASSED")
    assert json.loads((tmp_path / "soak" / "summary.json").read_text())["passed"] is True


def test_the_soak_finds_the_planted_bug_and_its_replay_reproduces_it(
    spark: SparkSession, tmp_path: Path
) -> None:
    summary: SoakSummary | None = None
    seen: list[SoakProgress] = []
    for first in range(0, MAX_SEEDS, CHUNK):
        config = SoakConfig(
            first_seed=first, seeds=CHUNK, steps=200, mutants=(PLANTED,)
        )
        seen = []
        summary = run_soak(
            spark, config, tmp_path / f"from-{first}", progress=seen.append, poll_seconds=0.1
        )
        if summary.failing:
            break
    assert summary is not None and summary.failing, f"no failing seed below {MAX_SEEDS}"
    assert not summary.passed
    # The progress line counted the failing seeds while the tasks ran, not only at the end.
    assert seen[-1].failing_seeds == len(summary.failing)
    live = [p for p in seen[:-1] if p.failing_seeds]
    assert live and "with a violation" in live[-1].line(), [p.line() for p in seen]
    assert all(p.failing_seeds <= p.total for p in seen)
    failing = summary.failing[0]
    assert failing.verdict == "violation"
    assert failing.violated_invariant in INVARIANTS
    assert f"--mutant {PLANTED}" in failing.replay_command
    text = format_summary(summary)
    assert f"seed={failing.seed} {failing.violated_invariant}" in text
    assert f"replay: {failing.replay_command}" in text

    # The replay command, run as printed (with this interpreter for "python").
    argv = shlex.split(failing.replay_command)
    assert argv[0] == "python"
    replay = subprocess.run(
        [sys.executable, *argv[1:]],
        cwd=CODE_ROOT,
        env=child_environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert replay.returncode == 1, replay.stdout + replay.stderr
    assert f"seed={failing.seed}" in replay.stdout
    assert f"violated invariant: {failing.violated_invariant}" in replay.stdout

    # The CLI over just that seed: the same verdict, and exit status 1.
    result = CliRunner().invoke(
        main,
        [
            "soak",
            "--seeds",
            "1",
            "--first-seed",
            str(failing.seed),
            "--mutant",
            PLANTED,
            "--out",
            str(tmp_path / "cli"),
        ],
    )
    assert result.exit_code == 1, result.output
    assert f"seed={failing.seed} {failing.violated_invariant}" in result.stdout
    assert result.stdout.rstrip().endswith("FAILED: 1 of 1 seeds")


def test_summary_counts_verdicts_and_orders_the_slowest() -> None:
    def row(seed: int, verdict: str, wall: float, invariant: str | None = None) -> tuple:
        values = {
            "seed": seed,
            "steps": 10,
            "verdict": verdict,
            "failovers": 2,
            "txns_acknowledged": 30,
            "faults_injected": 5,
            "violated_invariant": invariant,
            "message": None if verdict == "ok" else "broke",
            "wall_seconds": wall,
            "replay_command": f"python -m qjm.sim --seed {seed}",
            "trace_digest": "d",
        }
        return tuple(values[c] for c in SOAK_COLUMNS)

    rows = [
        row(1, "ok", 0.1),
        row(2, "violation", 0.5, "acked-durable"),
        row(3, "error", 0.2),
        row(4, "violation", 0.3, "acked-durable"),
    ]
    s = summarize(rows, SoakConfig(first_seed=1, seeds=4, steps=10), 2.0, "out")
    assert (s.seeds, s.passed_seeds, s.passed) == (4, 1, False)
    assert [f.seed for f in s.failing] == [2, 3, 4]
    assert s.by_invariant == (("acked-durable", 2), ("error", 1))
    assert [seed for seed, _, _ in s.slowest] == [2, 4, 3, 1]
    assert (s.failovers, s.txns_acknowledged, s.faults_injected) == (8, 120, 20)


def test_cli_refusals_are_one_line_with_status_2(tmp_path: Path) -> None:
    (tmp_path / RESULTS_DIR).mkdir()
    result = CliRunner().invoke(main, ["soak", "--seeds", "2", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        f"hapipe: error: {tmp_path / RESULTS_DIR} already exists; give another --out directory"
    ]
    assert CliRunner().invoke(main, ["soak", "--seeds", "0"]).exit_code == 2


def test_a_namenode_layer_soak_runs_nnsim_on_the_executors(
    spark: SparkSession, tmp_path: Path
) -> None:
    """``--namenodes`` soaks the NameNode layer's simulation: the same runs (trace digests)
    as here, replay commands that run nnsim, and the CLI flag reaches the config."""
    from nnsim import run_nn_simulation

    config = SoakConfig(first_seed=3, seeds=2, steps=60, namenodes=True)
    assert "the NameNode layer (nnsim)" in config.describe()
    summary = run_soak(spark, config, tmp_path / "nn", poll_seconds=0.2)
    assert summary.passed, format_summary(summary)
    rows = sorted(spark.read.parquet(str(tmp_path / "nn" / RESULTS_DIR)).collect(),
                  key=lambda r: r["seed"])
    for row in rows:
        here = run_nn_simulation(row["seed"], 60)
        assert row["trace_digest"] == here.trace_digest
        assert row["replay_command"].startswith("python -m nnsim ")
        assert row["txns_acknowledged"] == here.txns_acknowledged > 0

    out = CliRunner().invoke(
        main, ["soak", "--namenodes", "--seeds", "1", "--steps", "40", "--out",
               str(tmp_path / "cli")],
    )
    assert out.exit_code == 0, out.output
    assert "the NameNode layer (nnsim)" in out.stdout
